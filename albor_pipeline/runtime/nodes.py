"""Where a per-shard task finds the data dir: the run's working copy, or its own node's.

On one machine, or on a cluster that mounts the run's working copy, a task reads and
writes the data dir's files in place. A Ray worker on another machine has no such copy
when the data dir is in a bucket, and needs none:
- each input it reads is fetched from the bucket into the node's own content-addressed
  cache (`<its work dir>/.albor-objects/ab/abcd….parquet`), checked against the SHA-256 the
  stage's inputs recorded, so a node downloads a file once, whatever reads it later;
- each shard it writes is uploaded as the object the stage will publish under its
  SHA-256, and the run's process brings it into its staging directory from there.

Which case a task is in is decided where it runs. A node works in its own work dir:
`$ALBOR_WORK_DIR` there, else the run's copy's path. When that is the run's copy (the
same machine, or a mount at the same path), it holds a token file only this run wrote
(`NODE_FILE`), and the node works in place; otherwise the directory is the node's own.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from albor_pipeline.runtime.artifacts import Artifact, sha256_file
from albor_pipeline.runtime.bucket import Bucket
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.shards import Shard

T = TypeVar("T")

Spooled = tuple[str, str, int]
"""A spool file a task sent through the bucket: its data-dir path, SHA-256 and bytes."""

NODE_FILE = ".albor-node"  # in the run's working copy: the run's token
CACHE = ".albor-objects"  # in a node's own work dir: the inputs it fetched, by SHA-256


class NodeError(RuntimeError):
    """A task on a node without the run's working copy needs a file the bucket cannot give it."""


@dataclass(frozen=True)
class Node:
    """The data dir as a task sees it. `root` is the run's working copy (or the local data
    dir), `bucket` the data dir when it is in one, `token` what `root/NODE_FILE` holds for
    this run, and `inputs` the stage's recorded inputs (data-dir path: SHA-256, bytes)."""

    root: str
    bucket: str | None = None
    token: str = ""
    inputs: Mapping[str, tuple[str, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, root: Path, bucket: str | None, token: str, inputs: Mapping[str, list[Artifact]]) -> Node:
        files = {a.path: (a.sha256, a.bytes) for arts in inputs.values() for a in arts}
        return cls(str(root), bucket, token, files)

    def shared(self) -> bool:
        """True where the run's working copy is this node's too (the run's own machine, or a mount)."""
        if self.bucket is None:
            return True
        if self._home() != Path(self.root):
            return False
        try:
            return (Path(self.root) / NODE_FILE).read_text() == self.token
        except OSError:
            return False

    def local(self, path: str | Path) -> Path:
        """Where this node reads the data-dir file `path` (as the run names it)."""
        if self.shared():
            return Path(path)
        rel = self._rel(path)
        if rel not in self.inputs:
            raise NodeError(
                f"{rel}: this node ({self._home()}) does not share the run's working copy, and a task "
                "there can read only its stage's recorded inputs"
            )
        sha, size = self.inputs[rel]
        cached = self._home() / CACHE / sha[:2] / (sha + Path(rel).suffix)  # readers go by the suffix
        if not cached.is_file():
            self._store().download(Artifact(path=rel, sha256=sha, bytes=size), cached)
        return cached

    def directory(self, path: str | Path) -> Path:
        """Where this node writes the files of the run's directory `path` (a staging directory)."""
        if self.shared():
            return Path(path)
        mine = self._home() / self._rel(path)
        mine.mkdir(parents=True, exist_ok=True)
        return mine

    def ship(self, directory: Path, shard: Shard) -> None:
        """A shard this task wrote into `directory`, made reachable by the run: on a node that
        does not share its copy, uploaded as its object (and removed here)."""
        if self.shared():
            return
        written = directory / shard.name
        self._store().upload(written, self._artifact(written, shard))
        written.unlink()

    def spool(self, written: Path) -> Spooled | None:
        """A task's intermediate file (a spool another wave of tasks reads), made reachable by
        them wherever they run: with the data dir in a bucket, uploaded as its object (and
        removed here on a node that does not share the copy); its record goes to the readers'
        node (`with_spools`). None without a bucket: every node shares the copy."""
        if self.bucket is None:
            return None
        shared = self.shared()
        record = self._send(written, Path(self.root) if shared else self._home())
        if not shared:
            written.unlink()
        return record

    def offer(self, path: Path) -> Spooled | None:
        """In the run's process: a file it wrote for the tasks (a plan), sent like a spool."""
        return None if self.bucket is None else self._send(path, Path(self.root))

    def receive(self, spooled: Spooled | None) -> None:
        """In the run's process: a spool file a task sent, brought into the run's copy if absent."""
        if spooled is None:
            return
        rel, sha, size = spooled
        path = Path(self.root) / rel
        if not path.is_file():
            assert self.bucket is not None
            Bucket(self.bucket, Layout(Path(self.root))).download(Artifact(path=rel, sha256=sha, bytes=size), path)

    def _send(self, path: Path, home: Path) -> Spooled:
        art = Artifact(path=path.relative_to(home).as_posix(), sha256=sha256_file(path), bytes=path.stat().st_size)
        self._store().upload(path, art)
        return art.path, art.sha256, art.bytes

    def with_spools(self, spooled: Iterable[Spooled | None]) -> Node:
        """This node, able to read the spool files an earlier wave of tasks sent back."""
        extra = {rel: (sha, size) for rel, sha, size in (s for s in spooled if s is not None)}
        return replace(self, inputs={**self.inputs, **extra}) if extra else self

    def land(self, directory: Path, shard: Shard) -> None:
        """In the run's process: a shard a task wrote into the run's `directory`, fetched from
        the bucket if the task ran on a node that does not share the copy."""
        path = directory / shard.name
        if path.is_file():
            return
        if self.bucket is None:
            raise NodeError(f"{path}: a task wrote it elsewhere, and the data dir is not in a bucket")
        path.parent.mkdir(parents=True, exist_ok=True)
        Bucket(self.bucket, Layout(Path(self.root))).download(self._artifact(path, shard), path)

    def _artifact(self, path: Path, shard: Shard) -> Artifact:
        return Artifact(path=path.name, sha256=shard.sha256, bytes=shard.bytes, rows=shard.rows)

    def _rel(self, path: str | Path) -> str:
        return Path(path).relative_to(self.root).as_posix()

    def _home(self) -> Path:
        """This node's work dir: `$ALBOR_WORK_DIR`, else where the run keeps its copy."""
        where = os.environ.get("ALBOR_WORK_DIR")
        return Path(where).resolve() if where else Path(self.root)

    def _store(self) -> Bucket:
        assert self.bucket is not None
        return Bucket(self.bucket, Layout(self._home()))


IN_PLACE = Node("")
"""Tasks on the run's machine (or with the data dir shared): every file where the run has it."""


def task_node(node: Node | None) -> Node:
    """The node an executor's tasks use: its own (a cluster's), else in place."""
    return node if node is not None else IN_PLACE

"""Reading a directory of a bucket data dir (`s3://bucket/prefix/corpus/train`) from training nodes.

A bucket data dir stores each file once under its SHA-256, and its manifests name which
object is which file (`runtime/bucket.py`). `BucketDir` resolves a directory URI to the
manifest entries under it; `ReadCache` brings an entry's object into a local directory
the first time it is used, hashing it on the way and keeping it only if it matches the
manifest, so a node never reads a file the pipeline did not write. The cache is bounded:
before a download, the least recently used files go until the new one fits. A file held
open while it is evicted stays readable (POSIX unlink) until it is closed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from albor_pipeline.runtime.artifacts import Artifact, atomic_path
from albor_pipeline.runtime.bucket import Bucket
from albor_pipeline.runtime.commit import TEMP_SUFFIX
from albor_pipeline.runtime.layout import Layout

DEFAULT_CACHE_BYTES = 10 << 30


def user_cache(name: str) -> Path:
    """`$XDG_CACHE_HOME/albor/<name>` (`~/.cache/albor/<name>`): what this user's runs share."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "albor" / name


T = TypeVar("T")


def user_cached(name: str, build: Callable[[], bytes], parse: Callable[[bytes], T]) -> T:
    """`parse` of the user's cached file `name` (`user_cache`), else of what `build` makes,
    kept there for the next process (written atomically): for what is slow to derive and
    depends only on the installed software, which `name` must say (a version). A damaged
    file (`parse` raises ValueError) is rebuilt; an unreadable or unwritable cache only costs
    the build."""
    path = user_cache(name)
    try:
        return parse(path.read_bytes())
    except (OSError, ValueError):
        pass
    data = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            tmp.write_bytes(data)
    except OSError:
        pass
    return parse(data)


def default_cache_dir() -> Path:
    """`~/.cache/albor/objects`: objects are shared by every corpus read."""
    return user_cache("objects")


@dataclass(frozen=True)
class BucketDir:
    """The files under `rel` of the bucket data dir at `root`, as its manifests record them."""

    root: str
    rel: str
    files: dict[str, Artifact]  # by name relative to `rel`
    version: str = ""  # the data version of the manifest that records them

    @classmethod
    def locate(cls, uri: str, marker: str) -> BucketDir:
        """The data dir whose manifests hold `<dir>/<marker>` for the directory `uri` names.

        The data dir is the longest prefix of `uri` with manifests that record the marker file,
        so `s3://b/team/run/corpus/train` finds the data dir `s3://b/team/run`.
        """
        scheme, _, rest = uri.rstrip("/").partition("://")
        parts = rest.split("/")
        for cut in range(len(parts) - 1, 0, -1):
            root, rel = f"{scheme}://{'/'.join(parts[:cut])}", "/".join(parts[cut:])
            for manifest in Bucket(root, Layout(Path())).manifests():  # the layout only names `manifests/`
                if any(a.path == f"{rel}/{marker}" for a in manifest.outputs):
                    inside = {a.path[len(rel) + 1 :]: a for a in manifest.outputs if a.path.startswith(f"{rel}/")}
                    return cls(root, rel, inside, manifest.data_version)
        raise FileNotFoundError(f"{uri}: no manifest of a bucket data dir records {marker} under it")

    def artifact(self, name: str) -> Artifact:
        try:
            return self.files[name]
        except KeyError:
            raise FileNotFoundError(f"{self.root}/{self.rel}/{name}: not in the manifest of {self.rel}") from None


@dataclass(frozen=True)
class ReadCache:
    """Objects of the bucket data dir `root` in the local directory `directory`, at most `max_bytes`."""

    root: str
    directory: Path
    max_bytes: int = DEFAULT_CACHE_BYTES

    def path(self, art: Artifact) -> Path:
        """A local file holding `art`'s bytes, downloaded (and hash-checked) if the cache lacks it."""
        local = self.directory / art.sha256
        if local.is_file() and local.stat().st_size == art.bytes:
            os.utime(local)  # recently used
            return local
        if art.bytes > self.max_bytes:
            raise ValueError(
                f"{art.path}: {art.bytes:,} bytes does not fit a read cache of {self.max_bytes:,} bytes; "
                "give a larger cache_bytes"
            )
        self._make_room(art.bytes)
        Bucket(self.root, Layout(self.directory)).download(art, local)
        return local

    def _make_room(self, needed: int) -> None:
        """Evict least recently used objects until `needed` more bytes fit."""
        if not self.directory.is_dir():
            return
        held = []
        for entry in os.scandir(self.directory):
            if entry.name.endswith(TEMP_SUFFIX) or not entry.is_file():
                continue
            try:
                stat = entry.stat()
            except FileNotFoundError:  # another reader evicted it meanwhile
                continue
            held.append((stat.st_mtime_ns, entry.name, stat.st_size))
        total = sum(size for *_, size in held)
        for _, name, size in sorted(held):
            if total + needed <= self.max_bytes:
                break
            (self.directory / name).unlink(missing_ok=True)
            total -= size

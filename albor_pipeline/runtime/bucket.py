"""A data dir in an object store (`s3://bucket/prefix`): immutable objects, manifests last.

An object store has no rename, so a stage's files cannot be swapped in as a set the way
`staged_dir` does on a disk. Instead every output is stored once under its SHA-256
(`objects/ab/abcd…`), which never changes once written, and the stage's manifest (one
PUT, atomic) is written after all of them: it is the commit point. A reader that goes
through the manifests therefore sees a stage's previous outputs or its new ones, never a
mix, whatever happened to the run that was publishing; an unchanged shard is never
uploaded twice.

A key is only a claim about the bytes under it, so an upload asks the server to checksum
them (`ChecksumAlgorithm: SHA256`, through boto3: pyarrow.fs cannot), and a publish skips
an object only when its size and the server's own checksum (`ChecksumMode: ENABLED`) are
those of the bytes it holds. Metadata proves nothing: sync and restore tools copy it onto
other bytes. An object written any other way (a byte flipped by hand, another object
copied over it with its metadata) has no such checksum or another one, and the next run
holding the right bytes replaces it.

The run works in a local working copy of the data dir (`Layout`): stages read and write
files there exactly as on a local data dir, `pull` makes its manifests the bucket's,
`fetch` downloads (and hashes) the inputs a stage needs that the copy lacks, and
`publish` uploads a finished stage. Objects no manifest names any more (older versions)
stay until `collect` removes them (`albor gc`); `verify` counts them.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import cached_property
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from albor_pipeline.runtime.artifacts import Artifact, StageManifest, atomic_path, json_bytes, write_bytes
from albor_pipeline.runtime.files import remote
from albor_pipeline.runtime.layout import Layout

IO_THREADS = 8  # concurrent object transfers: an object store's latency, not its bandwidth, bounds one
CHUNK = 1 << 20
PART_BYTES = 64 << 20
"""An upload of at least this many bytes goes in parts of this size (more for a file of over
10,000 parts, as boto3 adjusts them); a smaller one in one PUT."""


def is_remote(location: str | Path) -> bool:
    """True for an object-store URI (`s3://…`, any scheme pyarrow.fs knows but `file`)."""
    return isinstance(location, str) and "://" in location and not location.startswith("file://")


class BucketError(OSError):
    """An object is missing from the bucket or does not hash to what a manifest recorded."""


def s3_client() -> Any:
    """A boto3 S3 client (credentials, region and AWS_ENDPOINT_URL from the environment), from
    its own session: boto3's default session must not be shared by threads creating clients."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise RuntimeError("a data dir in a bucket needs boto3: pip install 'albor-pipeline[s3]'") from None
    # Each of the IO_THREADS uploads may send IO_THREADS parts at once.
    return boto3.session.Session().client("s3", config=Config(max_pool_connections=IO_THREADS * IO_THREADS))


def _copy_hashing(src: pafs.NativeFile, dst: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open(dst, "wb") as out:
        while chunk := src.read(CHUNK):
            digest.update(chunk)
            out.write(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


@dataclass(frozen=True)
class Bucket:
    """The data dir at `uri`, worked on through the local copy `layout`."""

    uri: str
    layout: Layout

    @property
    def _fs(self) -> pafs.FileSystem:
        return remote(self.uri)[0]

    @property
    def _base(self) -> str:
        return remote(self.uri)[1]

    @cached_property
    def _s3(self) -> Any:
        return s3_client()

    def object_key(self, sha256: str) -> str:
        return f"{self._base}/objects/{sha256[:2]}/{sha256}"

    def object_uri(self, sha256: str) -> str:
        return f"{self.uri.rstrip('/')}/objects/{sha256[:2]}/{sha256}"

    def _manifest_key(self, name: str) -> str:
        return f"{self._base}/{self.layout.manifests_dir.name}/{name}"

    def manifest_uri(self, stage: str) -> str:
        return f"{self.uri.rstrip('/')}/{self.layout.manifests_dir.name}/{self.layout.manifest(stage).name}"

    def _manifest_files(self) -> dict[str, bytes]:
        """Every manifest in the bucket, by file name."""
        fs = self._fs
        found = fs.get_file_info(pafs.FileSelector(self._manifest_key(""), allow_not_found=True))
        out = {}
        for info in sorted(found, key=lambda i: i.path):
            if info.type == pafs.FileType.File and info.base_name.endswith(".json"):
                with fs.open_input_stream(info.path) as fh:
                    out[info.base_name] = bytes(fh.read())
        return out

    def manifests(self) -> list[StageManifest]:
        """The bucket's committed stages, in file-name order."""
        return [StageManifest.model_validate_json(data) for data in self._manifest_files().values()]

    def pull(self) -> list[str]:
        """Make the working copy's manifests exactly the bucket's; returns the file names changed.

        The bucket is the record: a stage this copy committed but never published (its run
        died between the two) is forgotten here, and its files are re-fetched when needed.
        """
        remote_files = self._manifest_files()
        local_dir = self.layout.manifests_dir
        changed = []
        for name, data in remote_files.items():
            path = local_dir / name
            if not path.is_file() or path.read_bytes() != data:
                write_bytes(path, data)
                changed.append(name)
        for path in sorted(local_dir.glob("*.json")) if local_dir.is_dir() else []:
            if path.name not in remote_files:
                path.unlink()
                changed.append(path.name)
        return changed

    def fetch(self, artifacts: Iterable[Artifact]) -> int:
        """Download `artifacts` into the working copy, each checked against its SHA-256; bytes fetched."""
        todo = list(artifacts)
        with ThreadPoolExecutor(IO_THREADS) as pool:
            return sum(pool.map(self._fetch_one, todo))

    def _fetch_one(self, art: Artifact) -> int:
        return self.download(art, self.layout.root / art.path)

    def download(self, art: Artifact, dest: Path) -> int:
        """The object of `art` written to `dest` (atomically), checked against its SHA-256; its bytes."""
        try:
            stream = self._fs.open_input_stream(self.object_key(art.sha256))
        except FileNotFoundError:
            raise BucketError(f"{art.path}: object {self.object_uri(art.sha256)} is missing from the bucket") from None
        with stream, atomic_path(dest) as tmp:
            sha, size = _copy_hashing(stream, tmp)
            if sha != art.sha256:
                raise BucketError(
                    f"{art.path}: object {self.object_uri(art.sha256)} hashes to {sha}, not its name; "
                    "the bucket was changed outside the pipeline"
                )
        return size

    def publish(self, manifest: StageManifest, still_held: Callable[[], None] | None = None) -> int:
        """Upload the stage's outputs the bucket lacks, then its manifest; bytes uploaded.

        The manifest goes last and alone: until it lands, readers see the previous commit.
        `still_held` raises if this run no longer holds the bucket's lock: then it commits nothing.
        """
        with ThreadPoolExecutor(IO_THREADS) as pool:
            sent = sum(pool.map(self._upload_one, manifest.outputs))
        if still_held is not None:
            still_held()
        name = self.layout.manifest(manifest.stage).name
        with self._fs.open_output_stream(self._manifest_key(name)) as out:
            out.write(json_bytes(manifest.model_dump(mode="json")))  # the bytes `run_stage` wrote locally
        return sent

    def _upload_one(self, art: Artifact) -> int:
        return self.upload(self.layout.root / art.path, art)

    def upload(self, src: Path, art: Artifact) -> int:
        """The file `src` (recorded as `art`) stored as its object unless the bucket holds
        exactly its bytes (`_sealed`); bytes sent. One PUT, or a multipart upload that S3 shows
        only once complete and that boto3 aborts on an error: a failed upload leaves no object."""
        if self._sealed(src, art):
            return 0
        from boto3.s3.transfer import TransferConfig

        bucket, key = self.object_key(art.sha256).split("/", 1)
        config = TransferConfig(
            multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES, max_concurrency=IO_THREADS
        )
        self._s3.upload_file(str(src), bucket, key, ExtraArgs={"ChecksumAlgorithm": "SHA256"}, Config=config)
        return art.bytes

    def _sealed(self, src: Path, art: Artifact) -> bool:
        """The bucket holds `art`'s object with its size and the SHA-256 checksum the server
        computed when it was uploaded from `src` (`server_checksum`).

        One HEAD, and no read unless the object was uploaded in parts. Metadata is never
        trusted: a copy of another object's (as `aws s3 sync` makes) names bytes it does not hold.
        """
        from botocore.exceptions import ClientError

        bucket, key = self.object_key(art.sha256).split("/", 1)
        try:
            head = self._s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        except ClientError as exc:
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                return False
            raise
        found = head.get("ChecksumSHA256")
        if head["ContentLength"] != art.bytes or not found:
            return False
        # A multipart object's checksum ends in `-<parts>` on S3 (not on moto's server).
        return found.split("-")[0] == server_checksum(src, art)

    def read(self, art: Artifact) -> bytes:
        """A small recorded file's bytes, straight from the bucket."""
        with self._fs.open_input_stream(self.object_key(art.sha256)) as fh:
            return bytes(fh.read())

    def hash_object(self, sha256: str) -> str | None:
        """The SHA-256 of the object stored under `sha256`, or None if it is missing."""
        try:
            stream = self._fs.open_input_stream(self.object_key(sha256))
        except FileNotFoundError:
            return None
        digest = hashlib.sha256()
        with stream:
            while chunk := stream.read(CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    def _dir_files(self, name: str) -> list[str]:
        """The paths (relative to it) of every file under the bucket's `name/`."""
        key = f"{self._base}/{name}"
        found = self._fs.get_file_info(pafs.FileSelector(key, recursive=True, allow_not_found=True))
        return sorted(i.path[len(key) + 1 :] for i in found if i.type == pafs.FileType.File)

    def push_files(self, name: str, files: list[Path]) -> int:
        """Upload, in order, the `files` (under the working copy's `name/`) that the bucket's
        `name/` lacks; how many. For files never rewritten once there (a kept corpus
        version's facts; chunks named by their SHA-256): a name present is the file."""
        if not files:
            return 0
        local, there = self.layout.root / name, set(self._dir_files(name))
        todo = [p.relative_to(local).as_posix() for p in files]
        todo = [rel for rel in todo if rel not in there]
        for rel in todo:
            with self._fs.open_output_stream(f"{self._base}/{name}/{rel}") as out:
                out.write((local / rel).read_bytes())
        return len(todo)

    def pull_files(self, name: str, last: str) -> int:
        """Download the files of the bucket's `name/` that the working copy's lacks, those
        named `last` after the rest (a reader takes one as the sign the rest is there); how many."""
        local = self.layout.root / name
        todo = sorted((r for r in self._dir_files(name) if not (local / r).is_file()), key=lambda r: r.endswith(last))
        for rel in todo:
            with self._fs.open_input_stream(f"{self._base}/{name}/{rel}") as src, atomic_path(local / rel) as tmp:
                tmp.write_bytes(bytes(src.read()))
        return len(todo)

    def prune_files(self, name: str, last: str) -> int:
        """Delete the files of the bucket's `name/` that the working copy's no longer holds,
        those named `last` first (the reverse of `pull_files`); how many."""
        local = self.layout.root / name
        gone = [r for r in self._dir_files(name) if not (local / r).is_file()]
        gone.sort(key=lambda r: not r.endswith(last))
        for rel in gone:  # through boto3: pyarrow.fs leaves an empty directory object behind
            bucket, key = f"{self._base}/{name}/{rel}".split("/", 1)
            self._s3.delete_object(Bucket=bucket, Key=key)
        return len(gone)

    def _object_infos(self) -> list[pafs.FileInfo]:
        found = self._fs.get_file_info(pafs.FileSelector(f"{self._base}/objects", recursive=True, allow_not_found=True))
        return sorted((i for i in found if i.type == pafs.FileType.File), key=lambda i: i.base_name)

    def objects(self) -> list[str]:
        """The SHA-256 names of every object in the bucket."""
        return [i.base_name for i in self._object_infos()]

    def collect(self, older_than: timedelta) -> Collected:
        """Delete the objects no manifest names (as an output or an input) that were written
        more than `older_than` ago. The age guards a run still publishing: its objects go up
        before its manifest, so for a while nothing names them."""
        named = {a.sha256 for m in self.manifests() for a in (*m.outputs, *m.inputs)}
        cutoff = datetime.now(timezone.utc) - older_than
        done = Collected()
        for info in self._object_infos():
            if info.base_name in named:
                continue
            written = info.mtime if info.mtime is None or info.mtime.tzinfo else info.mtime.replace(tzinfo=timezone.utc)
            if written is not None and written > cutoff:
                done.recent += 1
                continue
            self._fs.delete_file(info.path)
            done.deleted += 1
            done.bytes += info.size
        return done


def server_checksum(path: Path, art: Artifact) -> str:
    """What S3 reports as `ChecksumSHA256` (base64) for `path` (recorded as `art`) uploaded by
    `Bucket.upload`: the file's SHA-256 for one PUT; for parts, the SHA-256 of its parts'."""
    if art.bytes < PART_BYTES:
        return base64.b64encode(bytes.fromhex(art.sha256)).decode()
    from s3transfer.utils import ChunksizeAdjuster

    part = ChunksizeAdjuster().adjust_chunksize(PART_BYTES, art.bytes)
    parts = hashlib.sha256()
    with open(path, "rb") as fh:
        for _ in range(0, art.bytes, part):
            digest, left = hashlib.sha256(), part
            while left and (chunk := fh.read(min(CHUNK, left))):
                digest.update(chunk)
                left -= len(chunk)
            parts.update(digest.digest())
    return base64.b64encode(parts.digest()).decode()


@dataclass
class Collected:
    """What `Bucket.collect` did: objects deleted and their bytes, unnamed ones kept as too recent."""

    deleted: int = 0
    bytes: int = 0
    recent: int = 0

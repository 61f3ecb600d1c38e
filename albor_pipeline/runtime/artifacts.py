"""The one way artifacts reach disk: temp file, fsync, rename, then a full SHA-256.

A crash mid-write leaves only a hidden `.name.*.tmp` file, never a half-written file
under the final name. Each stage also records a manifest of what it wrote and read,
which the provenance stage and `albor verify` use.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from albor_pipeline.runtime.commit import TEMP_SUFFIX, fsync_dir, put_in_place
from albor_pipeline.runtime.layout import Layout

T = TypeVar("T")
PARQUET_OPTIONS: dict[str, Any] = {"compression": "zstd", "write_statistics": True}


class Artifact(BaseModel):
    """One output file: path relative to the data dir, full SHA-256, size, rows."""

    path: str
    sha256: str
    bytes: int
    rows: int | None = None


class StageManifest(BaseModel):
    """What one stage wrote, what it read and with which settings."""

    stage: str
    outputs: list[Artifact]
    inputs: list[Artifact] = []
    config: dict[str, Any] = {}
    summary: dict[str, Any] = {}

    @property
    def data_version(self) -> str:
        """SHA-256 over the outputs' hashes: changes iff some output's bytes change."""
        digest = hashlib.sha256()
        for art in sorted(self.outputs, key=lambda a: a.path):
            digest.update(f"{art.path}\0{art.sha256}\n".encode())
        return digest.hexdigest()


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def sha256_file(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


RACY_NS = 100_000_000
"""A file changed this recently (10 of the kernel's coarsest clock ticks) may change again
within its file system's tick and keep its times: it is hashed afresh each time (git's
"racily clean" entries). A digest taken later stands until the file's times move."""
COARSE_RACY_NS = 3_000_000_000
"""The same on a file system that keeps whole seconds or coarser (FAT's 2 s, some network
mounts): a time with no fraction of a second is taken to be one."""


# (device, inode, size, mtime, ctime) -> (a path it had, its SHA-256): by inode, so the hard
# links of a file (the task store's entries) share its digest.
_DIGESTS: dict[tuple[int, int, int, int, int], tuple[str, str]] = {}
_KNOWN_DIGESTS = 1 << 18  # past this many, the cache starts afresh: memory stays bounded
_COMMITTED: set[tuple[int, int, int, int, int]] = set()  # `remember_digests`': trusted while racy too


def file_sha256(path: Path | str) -> str:
    """A file's SHA-256, hashed once while its size, times and inode stay what they were
    (what git's index trusts): a run's stages re-verify the files they share (an upstream's
    outputs, read by several stages, provenance and the checks) at the cost of a stat, and a
    run that loaded a data dir's digests (`load_digests`) those of earlier runs."""
    st = os.stat(path)
    newest = max(st.st_mtime_ns, st.st_ctime_ns)
    racy = time.time_ns() - newest < (RACY_NS if newest % 1_000_000_000 else COARSE_RACY_NS)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if (known := _DIGESTS.get(key)) is not None and (not racy or key in _COMMITTED):
        return known[1]
    if racy:
        return sha256_file(Path(path))
    if len(_DIGESTS) >= _KNOWN_DIGESTS:
        _DIGESTS.clear()
        _COMMITTED.clear()
    digest = sha256_file(Path(path))
    _DIGESTS[key] = (os.path.abspath(path), digest)
    return digest


def remember_digests(root: Path, artifacts: Iterable[Artifact]) -> None:
    """The recorded SHA-256s of files a stage just committed (hashed by whoever wrote them,
    from the bytes they wrote), known to this process as if it had hashed them: the checks
    and the stages after it verify them at the cost of a stat. Unlike `file_sha256`, a file
    changed in the last `RACY_NS` is remembered too (they all are, at commit): only a writer
    outside the run, in the same clock tick as the commit, could slip past its stat, and the
    data dir holds one run at a time. A file whose size is not the recorded one is hashed
    when verified."""
    for art in artifacts:
        path = os.path.abspath(root / art.path)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if st.st_size == art.bytes and len(_DIGESTS) < _KNOWN_DIGESTS:
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            _DIGESTS[key] = (path, art.sha256)
            _COMMITTED.add(key)


_LOADED: set[str] = set()  # the records this process loaded


def load_digests(record: Path, once: bool = False) -> None:
    """The digests a data dir's earlier runs took (`save_digests`), known to this process:
    a rebuild verifies the files no one changed at the cost of a stat. A missing or unreadable
    record is no error (the files are hashed). `once`: not again in this process (a pool
    worker's task identities and restores)."""
    if once and str(record) in _LOADED:
        return
    _LOADED.add(str(record))
    try:
        for path, device, inode, size, mtime, ctime, digest in json.loads(record.read_bytes()):
            _DIGESTS[(int(device), int(inode), int(size), int(mtime), int(ctime))] = (str(path), str(digest))
    except (OSError, ValueError, TypeError):
        return


def save_digests(record: Path, root: Path) -> None:
    """This process's digests of the files under `root` that still have the size, times and
    inode they were hashed at, into `record` (whole or not at all)."""
    under, rows = os.path.abspath(root) + os.sep, []
    for stat, (path, digest) in list(_DIGESTS.items()):  # a snapshot: a thread may still be hashing
        if path.startswith(under):
            try:
                st = os.stat(path)
            except OSError:
                continue
            if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == stat:
                rows.append([path, *stat, digest])
    write_json(record, sorted(rows), compact=True)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# Every temp file or directory this package creates is hidden (leading dot) and ends in
# TEMP_SUFFIX (`.tmp`), beside its final name: `remove_temps` finds what a killed run left behind.

# Errors that mean "the disk cannot take this write": named with the file being written.
NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


class ArtifactWriteError(OSError):
    """A write that could not complete; the message names the file. Nothing was committed."""


@contextmanager
def naming_write_errors(final: Path) -> Iterator[None]:
    try:
        yield
    except ArtifactWriteError:
        raise
    except OSError as err:
        if err.errno not in NO_ROOM:
            raise
        raise ArtifactWriteError(err.errno, f"cannot write {final}: {err.strerror or err}") from err


@contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """Yield a temp path beside `final`; if the block succeeds, fsync it and rename it into place.

    If anything fails (the block, the fsync, the rename) the temp file is removed and
    `final` keeps its previous bytes. Inside a stage, the rename goes through the stage's
    journal (`runtime/commit.py`), so it commits with the stage's manifest.
    """
    with naming_write_errors(final):
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=TEMP_SUFFIX, dir=final.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; artifacts are shared files
            yield tmp
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        put_in_place(tmp, final)  # on failure the temp may hold the old bytes: recovery decides


@contextmanager
def staged_dir(final: Path) -> Iterator[Path]:
    """Yield an empty temp directory beside `final`; on success it replaces `final` whole.

    For stages that write several files (documents, tokenizer, corpus shards): a failed
    run leaves the previous set untouched instead of a mix of old and new files, and a
    reader of `final` sees the whole old set or the whole new set (`runtime/commit.py`).
    """
    with naming_write_errors(final):
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=f".staging{TEMP_SUFFIX}", dir=final.parent))
        try:
            os.chmod(tmp, 0o777 & ~_UMASK)  # mkdtemp creates 0700; artifact directories are shared
            yield tmp
            fsync_dir(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        put_in_place(tmp, final)  # on failure the temp may hold the old set: recovery decides


@contextmanager
def reserved_write(final: Path, size: int) -> Iterator[list[bytes]]:
    """Take `size` bytes of disk for `final` now; at the end of the block, write (atomically)
    the bytes the block appended to the yielded list.

    For a small record written after a big write (a stage's manifest after its outputs):
    a disk the big write just filled cannot then leave the outputs committed but unrecorded.
    """
    with atomic_path(final) as tmp:
        with open(tmp, "r+b") as fh:
            os.posix_fallocate(fh.fileno(), 0, size)
        content: list[bytes] = []
        yield content
        data = b"".join(content)
        with open(tmp, "r+b") as fh:
            fh.write(data)
            fh.truncate(len(data))


def remove_temps(root: Path) -> list[Path]:
    """Remove every temp file and directory under `root` (those of runs that died).

    Only safe while holding the data dir's lock: then no other writer is alive.
    """
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            if name.startswith(".") and name.endswith(TEMP_SUFFIX):
                path = Path(dirpath) / name
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
                removed.append(path)
        dirnames[:] = [d for d in dirnames if not (d.startswith(".") and d.endswith(TEMP_SUFFIX))]
    return removed


def record(path: Path, root: Path, rows: int | None = None) -> Artifact:
    """Hash a finished file into an `Artifact` with a path relative to `root`."""
    return Artifact(
        path=path.relative_to(root).as_posix(),
        sha256=sha256_file(path),
        bytes=path.stat().st_size,
        rows=rows,
    )


class StaleInputError(RuntimeError):
    """An input file no longer matches what the stage that wrote it recorded."""


def _problem(root: Path, art: Artifact) -> str | None:
    path = root / art.path
    if not path.is_file():
        return "is missing"
    if path.stat().st_size != art.bytes or file_sha256(path) != art.sha256:
        return "was changed"
    return None


def recorded_intact(root: Path, artifacts: list[Artifact]) -> bool:
    """Whether every file under `root` still has its recorded size and SHA-256."""
    return not any(_problem(root, art) for art in artifacts)


def check_recorded(
    root: Path, artifacts: list[Artifact], fetch: Callable[[list[Artifact]], object] | None = None
) -> list[Artifact]:
    """`artifacts` if every file under `root` still has its recorded size and SHA-256.

    A stage checks its inputs before reading them, so it never builds on (and records as
    its lineage) a file that was edited, truncated or replaced after its producer ran.
    `fetch`, given for a data dir in a bucket, downloads (and hashes) the files that are
    missing or changed in the working copy instead.
    """
    bad = [(art, problem) for art in artifacts if (problem := _problem(root, art))]
    if bad and fetch is not None:
        fetch([art for art, _ in bad])
    elif bad:
        art, problem = bad[0]
        raise StaleInputError(
            f"input {art.path} {problem} since it was materialized (recorded sha256 {art.sha256}); "
            "re-materialize the stage that writes it"
        )
    return artifacts


def write_array(path: Path, array: np.ndarray, npy: bool = False) -> None:
    """`array`'s bytes at `path`, raw or with `npy` as `np.save` writes them, through Python's
    file writes: numpy's own (`tofile`, which `np.save` uses too) report a full disk as
    `354661 requested and 262144 written`, without its errno; this says `cannot write <path>:
    No space left on device`."""
    data = np.require(array, requirements="C")
    with naming_write_errors(path), open(path, "wb") as fh:
        if npy:
            np.lib.format.write_array_header_1_0(fh, np.lib.format.header_data_from_array_1_0(data))
        fh.write(data.reshape(-1).view(np.uint8).data)


def write_bytes(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def json_bytes(obj: Any, compact: bool = False) -> bytes:
    """Deterministic JSON: sorted keys, trailing newline; indented for people, or `compact` for
    a cache only this package reads (Python's C encoder: 10x faster on 20k entries)."""
    layout: dict[str, Any] = {"separators": (",", ":")} if compact else {"indent": 2}
    return (json.dumps(obj, sort_keys=True, ensure_ascii=False, **layout) + "\n").encode()


def write_json(path: Path, obj: Any, compact: bool = False) -> None:
    write_bytes(path, json_bytes(obj, compact))


class ParquetSink:
    """Streams record batches into one Parquet file, atomically, counting rows.

    Rows are regrouped into row groups of exactly `row_group_size` (the last one
    shorter), so the file's bytes do not depend on how callers batched their writes.
    """

    def __init__(self, path: Path, schema: pa.Schema, row_group_size: int = 256, **options: Any) -> None:
        self.path = path
        self._options = {**PARQUET_OPTIONS, **options}
        self.schema = schema
        self.rows = 0
        self._row_group_size = row_group_size
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._ctx = atomic_path(path)
        self._writer: pq.ParquetWriter | None = None

    def __enter__(self) -> ParquetSink:
        tmp = self._ctx.__enter__()
        self._writer = pq.ParquetWriter(tmp, self.schema, **self._options)
        return self

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        if not batch.num_rows:
            return
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        self._pending.append(table.cast(self.schema))
        self._pending_rows += table.num_rows
        self.rows += table.num_rows
        if self._pending_rows >= self._row_group_size:
            self._flush(final=False)

    def _flush(self, final: bool) -> None:
        assert self._writer is not None
        if not self._pending:
            return
        table = pa.concat_tables(self._pending)
        size = self._row_group_size
        full = (table.num_rows // size) * size
        for start in range(0, full, size):
            self._writer.write_table(table.slice(start, size).combine_chunks(), row_group_size=size)
        rest = table.slice(full)
        if final and rest.num_rows:
            self._writer.write_table(rest.combine_chunks(), row_group_size=size)
            rest = rest.slice(0, 0)
        self._pending = [rest] if rest.num_rows else []
        self._pending_rows = rest.num_rows

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """Commit the file only if every write, the last flush and the close succeeded."""
        assert self._writer is not None
        failure: BaseException | None = exc
        try:
            if failure is None:
                self._flush(final=True)
            self._writer.close()
        except BaseException as err:
            failure = failure or err
            with suppress(Exception):
                self._writer.close()
            raise
        finally:
            self._ctx.__exit__(type(failure) if failure else None, failure, failure.__traceback__ if failure else None)


def read_manifest(layout: Layout, stage: str) -> StageManifest:
    """The manifest an upstream stage wrote; a clear error if it has not run."""
    path = layout.manifest(stage)
    if not path.exists():
        raise FileNotFoundError(f"stage {stage!r} has not been materialized under {layout.root} (no {path})")
    return StageManifest.model_validate_json(path.read_text(encoding="utf-8"))


def iter_manifests(layout: Layout) -> Iterator[StageManifest]:
    """Every stage manifest under the data dir, in file-name order."""
    for path in sorted(layout.manifests_dir.glob("*.json")):
        yield StageManifest.model_validate_json(path.read_text(encoding="utf-8"))

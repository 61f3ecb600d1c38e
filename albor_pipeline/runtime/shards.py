"""Shard sets: a stage's output as a directory of Parquet shards of bounded size.

Shard `part-TTTTT-KKKK.parquet` is the K-th file that task T wrote. Task boundaries are
fixed by the input and the spec's `shard_mb` alone, so the names, and with them the set's
order and bytes, never depend on the workers or the backend that ran the tasks. A task
writes its shards straight into the stage's staging directory (memory bounded by a batch,
and no shard passes through the run's process); the set becomes visible only as a whole,
when the stage commits the directory (`staged_dir`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from albor_pipeline.runtime.artifacts import Artifact, ParquetSink, sha256_file

MB = 1_000_000


def shard_name(task: int, part: int = 0) -> str:
    return f"part-{task:05d}-{part:04d}.parquet"


def is_shard(path: Path) -> bool:
    """A file of a shard set (its set is named by the directory, not by the file)."""
    return path.name.startswith("part-") and path.suffix == ".parquet"


@dataclass(frozen=True)
class Shard:
    """One written shard: its file name in the set, full SHA-256, size and rows."""

    name: str
    sha256: str
    bytes: int
    rows: int

    @classmethod
    def of(cls, path: Path, rows: int, directory: Path | None = None) -> Shard:
        """The shard at `path`, named by its file name, or by its path under `directory` (a
        set of subsets, e.g. one per split: `train/part-….parquet`)."""
        name = path.relative_to(directory).as_posix() if directory is not None else path.name
        return cls(name, sha256_file(path), path.stat().st_size, rows)

    def artifact(self, directory: Path, root: Path) -> Artifact:
        """As an artifact of the committed set `directory` (path relative to the data dir)."""
        path = (directory / self.name).relative_to(root).as_posix()
        return Artifact(path=path, sha256=self.sha256, bytes=self.bytes, rows=self.rows)


class ShardWriter:
    """One task's batches as shards of at most about `max_bytes` each: a new shard starts once
    the current one holds `max_bytes` (as the caller measures a batch, by default its Arrow
    size). Each shard file is committed atomically when it is full or the task ends well; a
    failing task leaves no file under a shard's name. `shards` lists what was written."""

    def __init__(self, directory: Path, task: int, schema: pa.Schema, max_bytes: int) -> None:
        self.directory, self.task, self.schema, self.max_bytes = directory, task, schema, max_bytes
        self.shards: list[Shard] = []
        self._sink: ParquetSink | None = None
        self._held = 0

    def __enter__(self) -> ShardWriter:
        return self

    def write(self, batch: pa.RecordBatch, size: int | None = None) -> None:
        if not batch.num_rows:
            return
        if self._sink is None:
            self._sink = ParquetSink(self.directory / shard_name(self.task, len(self.shards)), self.schema)
            self._sink.__enter__()
        self._sink.write(batch)
        self._held += batch.nbytes if size is None else size
        if self._held >= self.max_bytes:
            self._close(None)

    def _close(self, exc: BaseException | None) -> None:
        sink, self._sink, self._held = self._sink, None, 0
        if sink is None:
            return
        sink.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
        if exc is None:
            self.shards.append(Shard.of(sink.path, sink.rows))

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._close(exc)


def shard_files(directory: Path) -> list[Path]:
    """The shards of a committed set, in order; a clear error when it is missing."""
    if not directory.is_dir():
        raise FileNotFoundError(f"shard set {directory} does not exist; materialize the stage that writes it")
    return sorted(directory.glob("part-*.parquet"))


def parquet_files(path: Path) -> list[Path]:
    """A Parquet input's files: a shard set's shards in order, or the one file."""
    return shard_files(path) if path.is_dir() or not path.suffix else [path]


def first_rows(files: list[Path]) -> list[int]:
    """The set-wide index of each file's first row, from the Parquet footers."""
    starts, total = [], 0
    for file in files:
        starts.append(total)
        total += pq.ParquetFile(file).metadata.num_rows
    return starts


RowGroup = tuple[str, int]
"""(Parquet file, row group index): an item of a per-row-group task."""


@dataclass(frozen=True)
class SpoolItem:
    """Row group `group`, the `task`-th of a stage's per-row-group wave: what it writes goes to
    the wave's spool under that number (the corpus's ids, the tokenizer's training text)."""

    group: RowGroup
    task: int


def row_groups(path: Path) -> list[RowGroup]:
    """(file, row group) of every row group of a Parquet file or shard set, in order: the
    items of a per-row-group task."""
    return [(str(f), g) for f in parquet_files(path) for g in range(pq.ParquetFile(f).num_row_groups)]


def row_group_sha256(path: str | Path, index: int) -> str:
    """SHA-256 of row group `index` of a Parquet file: its row count and the bytes of its
    column chunks (pages, dictionaries), which hold all of its values. What a task reading
    that row group alone depends on: it stays the same when another row group of the file
    changes, where the file's SHA-256 would not."""
    group = pq.ParquetFile(path).metadata.row_group(index)
    starts, ends = [], []
    for c in range(group.num_columns):
        chunk = group.column(c)
        start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
        starts.append(start)
        ends.append(start + chunk.total_compressed_size)
    digest = hashlib.sha256(f"{group.num_rows} rows\n".encode())
    with open(path, "rb") as fh:
        fh.seek(min(starts))
        digest.update(fh.read(max(ends) - min(starts)))
    return digest.hexdigest()


def iter_batches(path: Path, columns: list[str] | None = None, batch_size: int = 2048) -> Iterator[pa.RecordBatch]:
    """Every record batch of a Parquet file or shard set, in order: memory bounded by a batch."""
    for file in parquet_files(path):
        yield from pq.ParquetFile(file).iter_batches(batch_size=batch_size, columns=columns)


def read_shards(path: Path, columns: list[str] | None = None) -> pa.Table:
    """A whole (small) Parquet file or shard set as one table: for inputs a stage needs whole."""
    files = parquet_files(path)
    if not files:
        raise FileNotFoundError(f"shard set {path} has no shards")
    return read_files(files, columns)


def read_files(files: list[Path], columns: list[str] | None = None) -> pa.Table:
    """Whole Parquet files, in order, as one table, read file by file: not through
    `pyarrow.dataset` (`pq.read_table`), whose import pulls pandas in, 0.7 s of a command's
    start."""
    return pa.concat_tables([pq.ParquetFile(f).read(columns=columns) for f in files])

"""The document schema every text stage reads and writes, views of documents, and SHA-256 keys.

A shard of documents holds their text (`DOC_SCHEMA`). Hygiene writes a view instead
(`VIEW_SCHEMA`): the kept documents' source, file and SHA-256, and their `row` in the shard
of texts beside it (`_text/<the view's name>`), which holds every ingested document after
redaction. A rule's change then rewrites only the views, never the text. `read_documents`
and `iter_documents` read either kind as documents, so a reader never tells them apart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from albor_pipeline.runtime.shards import shard_files
from albor_pipeline.text.ledger import TEXTS

DOC_SCHEMA = pa.schema([("text", pa.string()), ("source", pa.string()), ("file", pa.string()), ("sha256", pa.string())])
VIEW_SCHEMA = pa.schema([("source", pa.string()), ("file", pa.string()), ("sha256", pa.string()), ("row", pa.int64())])
BATCH_ROWS = 2048
Local = Callable[[Path], Path]  # where a task reads a data-dir file (`TaskIO.local`); here: the path itself


def texts_of(view: Path) -> Path:
    """The shard of texts a view's rows point into: `_text/<its name>` beside it."""
    return view.parent / TEXTS / view.name


def read_documents(
    path: str | Path,
    columns: Sequence[str],
    *,
    group: int | None = None,
    rows: np.ndarray | None = None,
    local: Local = Path,
) -> pa.Table:
    """`columns` of a shard's documents (of its row group `group`, at `rows` of it or of the
    shard), a view's text read from its shard of texts: the row groups from its first row to
    its last (a view's row group, whose rows are ascending, spans a few)."""
    file = pq.ParquetFile(local(Path(path)))
    joined = "text" in columns and "text" not in file.schema_arrow.names
    wanted = [c for c in columns if c != "text" or not joined] + (["row"] if joined else [])
    table = file.read(columns=wanted) if group is None else file.read_row_group(group, columns=wanted)
    if rows is not None:
        table = table.take(pa.array(rows, pa.int64()))
    if joined:
        texts = Rows(local(texts_of(Path(path)))).take(table.column("row").to_numpy(), ["text"])
        table = table.append_column("text", texts.column(0))
    return table.select(list(columns))


def read_document_set(directory: Path, columns: Sequence[str] = DOC_SCHEMA.names) -> pa.Table:
    """Every document of a (small) shard set, in order, as one table (a view's with its text)."""
    files = shard_files(directory)
    return pa.concat_tables([read_documents(f, columns) for f in files]) if files else DOC_SCHEMA.empty_table()


def iter_documents(path: str | Path, columns: Sequence[str], local: Local = Path) -> Iterator[pa.RecordBatch]:
    """Every document of a shard in order, a batch per row group (a view's joined to its texts)."""
    for group in range(pq.ParquetFile(local(Path(path))).num_row_groups):
        yield from read_documents(path, columns, group=group, local=local).combine_chunks().to_batches()


class Rows:
    """A shard read by row numbers: its footer read once, then only the row groups from the
    first to the last row asked for."""

    def __init__(self, path: Path) -> None:
        self.file = pq.ParquetFile(path)
        self.ends = np.cumsum([self.file.metadata.row_group(g).num_rows for g in range(self.file.num_row_groups)])

    def take(self, rows: np.ndarray, columns: Sequence[str]) -> pa.Table:
        """`columns` at `rows` (in any order)."""
        if not len(rows):
            return self.file.schema_arrow.empty_table().select(list(columns))
        first, last = (int(np.searchsorted(self.ends, r, side="right")) for r in (rows.min(), rows.max()))
        base = int(self.ends[first - 1]) if first else 0
        table = self.file.read_row_groups(list(range(first, last + 1)), columns=list(columns), use_threads=False)
        return table.take(pa.array(rows - base))


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_HEX = np.full(256, 255, dtype=np.uint8)
_HEX[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16, dtype=np.uint8)
_HEX[np.frombuffer(b"ABCDEF", dtype=np.uint8)] = np.arange(10, 16, dtype=np.uint8)


def sha_keys(column: pa.Array) -> np.ndarray:
    """The first 128 bits of each hex SHA-256 in `column`, as void16 keys, decoded without a
    Python loop (a 2**-64 chance of a false duplicate among 10**9 documents)."""
    hexes = pc.utf8_slice_codeunits(column, 0, 32).cast(pa.binary())
    n = len(hexes)
    offsets = np.frombuffer(hexes.buffers()[1], dtype=np.int32)[hexes.offset : hexes.offset + n + 1]
    if hexes.null_count or (np.diff(offsets) != 32).any():
        raise ValueError("documents: a sha256 value is not 64 hex digits")
    data = np.frombuffer(hexes.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]] if n else np.zeros(0, np.uint8)
    nibbles = _HEX[data].reshape(-1, 32)
    if (nibbles == 255).any():
        raise ValueError("documents: a sha256 value is not 64 hex digits")
    packed = (nibbles[:, 0::2] << 4) | nibbles[:, 1::2]
    return np.ascontiguousarray(packed).view(np.dtype((np.void, 16))).ravel()

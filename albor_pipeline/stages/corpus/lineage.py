"""The corpus's ledger: every document piece of every sequence, and the FIM row it came from.

The plan already knows where each document lands (`plan.Segments`); this writes it down as
one small Parquet table per corpus, `_ledger/pieces.parquet`, sorted by sequence, so
`albor trace` answers "which documents make sequence N" by reading one row group and "where
did this document go" by one column scan, without re-encoding anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from albor_pipeline.runtime.artifacts import PARQUET_OPTIONS, ParquetSink, atomic_path
from albor_pipeline.runtime.shardmap import Step, TaskIO
from albor_pipeline.runtime.shards import Shard
from albor_pipeline.runtime.taskstore import InputFile
from albor_pipeline.stages.corpus.plan import Segments, concat_segments
from albor_pipeline.text.ledger import LEDGER

PIECES = f"{LEDGER}/pieces.parquet"
PIECES_SCHEMA = pa.schema(
    [
        ("sequence", pa.int64()),  # the corpus's sequence (Parquet row, in set order)
        ("offset", pa.int32()),  # the piece's first token in the sequence
        ("length", pa.int32()),  # its tokens (a document's last piece ends with its EOS)
        ("row", pa.int64()),  # the document's row in the FIM split (its set order)
        ("doc_offset", pa.int64()),  # the piece's first token in the document's tokens
    ]
)
PIECE_ROW_GROUP = 65536
PIECE_ENCODING = {
    "use_dictionary": False,
    "column_encoding": {name: "DELTA_BINARY_PACKED" for name in PIECES_SCHEMA.names},
}
"""Sorted, small and mostly repeating integers: delta encoding keeps the table at 0.57 of its
dictionary-encoded size (every version kept after a rebuild holds a copy, `versions.py`)."""
DOCUMENTS = f"{LEDGER}/documents.parquet"
DOCUMENT_SCHEMA = pa.schema(
    [
        ("row", pa.int64()),  # the document's row in the FIM split: the pieces table's `row`
        ("source", pa.string()),
        ("file", pa.string()),
        ("sha256", pa.string()),  # the document as it left dedup (`documents`)
    ]
)
"""Who each FIM row is: with the pieces table, a corpus version's whole lineage, kept after
the FIM split is rebuilt (`albor exposure` on an old checkpoint's data)."""
FATES = f"{LEDGER}/fates.parquet"
FATE_SCHEMA = pa.schema(
    [
        ("stage", pa.string()),  # ingested/<source>, filtered/<source> or documents
        ("source", pa.string()),
        ("file", pa.string()),
        ("sha256", pa.string()),
        ("fate", pa.string()),  # the ledger's (`text/ledger.py`), never a removed document's text
        ("detail", pa.string()),
        ("sha256_out", pa.string()),
    ]
)
"""What the stages upstream of the corpus did to the documents they did not pass on unchanged,
as their ledgers (and ingestion's tombstones: a removal request) stood when the corpus was
built: why a document is missing from, or changed in, an old version (`albor diff` of two
versions)."""
REMOVED_FATE, REQUEST = "removed", "removal request"


def write_fates(path: Path, ledgers: list[tuple[str, Path]], tombstones: list[tuple[str, Path]]) -> int:
    """Write the fates table of the ledger shards `ledgers` and the tombstone files
    `tombstones` (removal requests at ingestion: (stage, file) pairs) at `path`, sorted, so
    its bytes depend on the rows alone; returns its rows. Both are small (a row per document
    a stage dropped or changed): they are read whole, without text or shingles."""
    tables = [_stage_rows(stage, pq.ParquetFile(shard).read(columns=FATE_SCHEMA.names[1:])) for stage, shard in ledgers]
    for stage, stones in tombstones:
        found = pq.ParquetFile(stones).read(columns=["source", "file", "sha256"])
        rows = found.num_rows
        fate = {"fate": pa.repeat(pa.scalar(REMOVED_FATE), rows), "detail": pa.repeat(pa.scalar(REQUEST), rows)}
        tables.append(_stage_rows(stage, pa.table({**dict(zip(found.column_names, found.columns)), **fate})))
    table = pa.concat_tables(tables) if tables else FATE_SCHEMA.empty_table()
    table = table.sort_by([(name, "ascending") for name in FATE_SCHEMA.names])
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, row_group_size=PIECE_ROW_GROUP, **PARQUET_OPTIONS)
    return table.num_rows


@dataclass(frozen=True)
class FatesTable:
    """The fates table a task wrote at `FATES`: the task store keeps it, so one table, written
    once, serves every split's corpus (their upstream ledgers are the same)."""

    rows: int
    shards: tuple[Shard, ...]


StagedFiles = tuple[tuple[str, InputFile], ...]  # (stage, file) pairs, by content


def _fates_table(_: None, io: TaskIO, item: tuple[StagedFiles, StagedFiles]) -> FatesTable:
    """`write_fates` of (ledgers, tombstones) in a worker: a run's process never holds the
    table (a row per document a stage dropped), and a split whose upstream ledgers another
    split's corpus already tabled reuses its table."""
    ledgers, tombstones = item
    path = io.directory / FATES
    rows = write_fates(path, [(s, io.local(f)) for s, f in ledgers], [(s, io.local(f)) for s, f in tombstones])
    shard = Shard.of(path, rows, io.directory)
    io.spool(path)  # on a node without the run's working copy: uploaded
    return FatesTable(rows, (shard,))


WRITE_FATES = Step(_fates_table, inline_below=1)


def _stage_rows(stage: str, rows: pa.Table) -> pa.Table:
    """`rows` (the fates table's columns but `stage`; a missing `sha256_out` is null) of `stage`."""
    columns = [pa.repeat(pa.scalar(stage, pa.string()), rows.num_rows)]
    for field in list(FATE_SCHEMA)[1:]:
        there = field.name in rows.column_names
        columns.append(rows.column(field.name) if there else pa.nulls(rows.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=FATE_SCHEMA)


def concat_pieces(lengths: np.ndarray, sequences: int, seq_len: int, limit: int | None) -> Segments:
    """`concat`'s segments of the packed stream: its sequences cut every `seq_len` tokens, up to
    the last packed token (a dropped remainder or a budget's cut leaves the rest out)."""
    ends = np.cumsum(lengths, dtype=np.int64)
    stream = int(ends[-1]) if len(ends) else 0
    return concat_segments(ends, 0, min(sequences * seq_len, limit if limit is not None else stream), seq_len)


def write_pieces(path: Path, segments: Segments, lengths: np.ndarray, rows: np.ndarray, chunk: int = 1 << 14) -> int:
    """Write `segments` (stream positions of documents of `lengths`, in order; document k is
    FIM row `rows[k]`) as the pieces table at `path`, `chunk` sequences at a time (memory
    bounded by a chunk's pieces, beside the documents' starts); returns its rows. The row
    groups are `PIECE_ROW_GROUP` rows whatever the chunk, so the bytes are a whole write's."""
    doc_starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    firsts = np.concatenate([[0], np.cumsum(segments.counts, dtype=np.int64)])
    path.parent.mkdir(parents=True, exist_ok=True)
    if not np.any(segments.lens > 0):  # no piece: the empty table, as a whole write makes it
        with atomic_path(path) as tmp:
            empty = _pieces(segments, firsts, 0, len(segments.counts), doc_starts, rows)
            pq.write_table(empty, tmp, row_group_size=PIECE_ROW_GROUP, **PIECE_ENCODING, **PARQUET_OPTIONS)
        return 0
    with ParquetSink(path, PIECES_SCHEMA, PIECE_ROW_GROUP, **PIECE_ENCODING) as sink:
        for s0 in range(0, len(segments.counts), chunk):
            s1 = min(s0 + chunk, len(segments.counts))
            sink.write(_pieces(segments, firsts, s0, s1, doc_starts, rows))
    return sink.rows


def _pieces(
    segments: Segments, firsts: np.ndarray, s0: int, s1: int, doc_starts: np.ndarray, rows: np.ndarray
) -> pa.Table:
    """The pieces of sequences `s0` to `s1` (whole sequences: each piece's offset in its own)."""
    lo, hi = int(firsts[s0]), int(firsts[s1])
    starts, lens, counts = segments.starts[lo:hi], segments.lens[lo:hi], segments.counts[s0:s1]
    before = np.cumsum(lens) - lens
    first = np.cumsum(counts) - counts
    sequence = np.repeat(np.arange(s0, s1, dtype=np.int64), counts)
    offset = before - np.repeat(before[first], counts)
    real = lens > 0  # an empty stream's plan has one empty segment: no piece
    starts, lens, sequence, offset = starts[real], lens[real], sequence[real], offset[real]
    doc = np.searchsorted(doc_starts, starts, side="right") - 1
    columns = [sequence, offset.astype(np.int32), lens.astype(np.int32), rows[doc], starts - doc_starts[doc]]
    return pa.table(
        [np.asarray(c).astype(f.type.to_pandas_dtype()) for c, f in zip(columns, PIECES_SCHEMA)], schema=PIECES_SCHEMA
    )


def write_documents(path: Path, fim: list[Path]) -> int:
    """Write the documents table of the FIM split's shards `fim` (in set order) at `path`,
    reading one row group at a time (no text); its row groups are `PIECE_ROW_GROUP` rows
    whatever the split's grouping, so its bytes depend on the rows alone. Returns its rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows, held = 0, []
    with atomic_path(path) as tmp, pq.ParquetWriter(tmp, DOCUMENT_SCHEMA, **PARQUET_OPTIONS) as writer:
        for shard in fim:
            reader = pq.ParquetFile(shard)
            for group in range(reader.num_row_groups):
                batch = reader.read_row_group(group, columns=["source", "file", "sha256"])
                number = pa.array(np.arange(rows, rows + batch.num_rows, dtype=np.int64))
                held.append(pa.Table.from_arrays([number, *batch.columns], schema=DOCUMENT_SCHEMA))
                rows += batch.num_rows
                if sum(t.num_rows for t in held) >= PIECE_ROW_GROUP:
                    whole = pa.concat_tables(held)
                    cut = whole.num_rows // PIECE_ROW_GROUP * PIECE_ROW_GROUP
                    writer.write_table(whole.slice(0, cut), row_group_size=PIECE_ROW_GROUP)
                    held = [whole.slice(cut)]
        writer.write_table(pa.concat_tables(held) if held else DOCUMENT_SCHEMA.empty_table())
    return rows

"""Encoding one row group of a FIM Parquet file: the corpus stage's first per-shard task.

`encode_row_group` is a pure function of (file, tokenizer, encoder, row group): it writes
the row group's ids to its own file of the stage's token spool and returns only what the
stage's plan needs (each document's length, source and key), so no token crosses a process
boundary. The corpus stage runs it inline or on any executor (`runtime/executor.py`) and gets
the same bytes. An executor's worker process builds the encoder once and reuses it for
every row group it is given.
"""

from __future__ import annotations

import copy
from array import array
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from albor_pipeline.runtime.artifacts import write_array
from albor_pipeline.runtime.shardmap import Step, TaskIO, shared_task
from albor_pipeline.runtime.shards import RowGroup, Shard, SpoolItem, row_group_sha256
from albor_pipeline.runtime.taskstore import InputFile
from albor_pipeline.text.documents import sha_keys
from albor_pipeline.text.encode import Encoder, make_encoder
from albor_pipeline.text.vocab import BOS, EOS, FIM_MIDDLE, FIM_PREFIX, FIM_SENTINEL_CHARS, FIM_SUFFIX, load_tokenizer

READ_COLUMNS = ["text", "fim_format", "fim_prefix", "fim_middle", "fim_suffix"]


def encode_rows(
    rows: dict[str, list[Any]], encoder: Encoder, ids: dict[str, int], bos: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(flat uint32 ids with EOS after each document, each document's length incl. EOS),
    with `<s>` before each document when `bos`.

    Plain rows encode as one text, FIM rows as three segments in output order (PSM: prefix,
    suffix, middle; SPM: suffix, prefix, middle); all in one encoder batch. The sentinels,
    BOS and EOS are then inserted into the flat ids in one `np.insert`: no list per document.
    """
    p_id, s_id, m_id, eos = ids[FIM_PREFIX], ids[FIM_SUFFIX], ids[FIM_MIDDLE], ids[EOS]
    before = {None: ((),), "psm": ((p_id,), (s_id,), (m_id,)), "spm": ((s_id,), (p_id,), (m_id,))}
    first = (ids[BOS],) if bos else ()
    pieces: list[str] = []
    for i, fmt in enumerate(rows["fim_format"]):
        if fmt is None:
            pieces.append(rows["text"][i])
        elif fmt == "psm":
            pieces += (rows["fim_prefix"][i], rows["fim_suffix"][i], rows["fim_middle"][i])
        else:
            pieces += (rows["fim_suffix"][i], rows["fim_prefix"][i], rows["fim_middle"][i])
    flat, offsets = encoder.encode_flat(pieces)
    starts = offsets.tolist()
    where: list[int] = []
    values: list[int] = []
    lengths = array("q")
    k = 0
    for fmt in rows["fim_format"]:
        added = len(values)
        doc_start = starts[k]
        for j, literals in enumerate(before[fmt]):
            for v in (first + literals) if j == 0 else literals:
                where.append(starts[k])
                values.append(v)
            k += 1
        where.append(starts[k])
        values.append(eos)
        lengths.append(starts[k] - doc_start + len(values) - added)
    out = np.insert(flat, np.array(where, dtype=np.int64), np.array(values, dtype=np.uint32))
    return out.astype(np.uint32, copy=False), np.frombuffer(lengths, dtype=np.int64)


@dataclass(frozen=True)
class GroupTokens:
    """A row group's encoded documents, less their ids (spooled by the task): the stage's plan
    and per-source accounting need only these, about 30 bytes a document."""

    lengths: np.ndarray  # int64 tokens of each kept document (EOS, and BOS if on, included)
    sources: list[str]  # the distinct sources of the row group
    codes: np.ndarray  # int32: each kept document's index into `sources`
    keys: np.ndarray  # each kept document's SHA-256 key (`documents.sha_keys`)
    text_bytes: int
    rows: np.ndarray | None = None  # int32: each kept document's row in the row group (None: every row)
    shards: tuple[Shard, ...] = ()  # its token file, as the task store keeps it


class RowGroupEncoder:
    """Encodes row groups of FIM Parquet files (in a worker process, or in-process)."""

    def __init__(self, tok: Tokenizer, encoder: Encoder, bos: bool = False, min_chars: int = 0) -> None:
        self.encoder, self.bos, self.min_chars = encoder, bos, min_chars
        ids = {t: tok.token_to_id(t) for t in (BOS, EOS, FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)}
        missing = [t for t, i in ids.items() if i is None]
        if missing:
            raise ValueError(f"tokenizer has no id for {missing}")
        self.ids: dict[str, int] = {t: i for t, i in ids.items() if i is not None}

    def with_min_chars(self, min_chars: int) -> RowGroupEncoder:
        self.min_chars = min_chars
        return self

    @classmethod
    def load(cls, tokenizer_path: str, encoder_name: str, bos: bool, min_chars: int) -> RowGroupEncoder:
        """A single-threaded encoder of `encoder_name`, as a worker process builds it."""
        tok = load_tokenizer(tokenizer_path)
        return cls(tok, make_encoder(tok, encoder_name, threads=1), bos, min_chars)

    def encode(self, group: RowGroup) -> tuple[np.ndarray, GroupTokens]:
        """(flat ids with EOS after each document, the rest) of one row group's documents of at
        least `min_chars` characters."""
        table = read_group(group)
        rows = long_rows(table, self.min_chars)
        if rows is not None:
            table = table.take(rows)
        flat, lengths = encode_rows(table.select(READ_COLUMNS).to_pydict(), self.encoder, self.ids, self.bos)
        return flat, group_tokens(table, lengths, rows)


def read_group(group: RowGroup) -> pa.Table:
    """What encoding a row group reads of it."""
    path, index = group
    return pq.ParquetFile(path).read_row_group(index, columns=[*READ_COLUMNS, "source", "sha256"])


def long_rows(table: pa.Table, min_chars: int) -> np.ndarray | None:
    """The rows of documents of at least `min_chars` characters before FIM (None: every row,
    no minimum); a FIM'd text carries the three sentinels on top."""
    if not min_chars:
        return None
    fim = pc.if_else(pc.is_null(table.column("fim_format")), 0, FIM_SENTINEL_CHARS)
    chars = pc.subtract(pc.utf8_length(table.column("text")), fim)
    long = pc.greater_equal(chars, min_chars).to_numpy(zero_copy_only=False)
    return np.flatnonzero(long).astype(np.int32)


def group_tokens(table: pa.Table, lengths: np.ndarray, rows: np.ndarray | None) -> GroupTokens:
    """The encoded documents' facts: `table` holds just them, `rows` says which rows they were."""
    sources = pc.dictionary_encode(table.column("source").combine_chunks())
    return GroupTokens(
        lengths=lengths,
        sources=sources.dictionary.to_pylist(),
        codes=sources.indices.to_numpy(zero_copy_only=False).astype(np.int32),
        keys=sha_keys(table.column("sha256").combine_chunks()),
        text_bytes=pc.sum(pc.binary_length(table.column("text"))).as_py() or 0,
        rows=rows,
    )


@dataclass(frozen=True)
class EncodeJob:
    """What every row group of one corpus build is encoded with, and where its ids go."""

    tokenizer_path: str
    encoder: str  # `make_encoder`'s name: the one the stage picked
    bos: bool
    min_chars: int
    spool: str  # the build's token spool: `spool_tokens(spool, task)` per row group
    dtype: str  # the spooled ids' dtype: the exports' (`corpus.token_dtype`)
    own: RowGroupEncoder | None = None  # the stage's own encoder (all cores), for an inline map only


def spool_tokens(spool: str | Path, task: int) -> Path:
    """Row group task `task`'s ids: raw, in the exports' dtype, so the Megatron and nanoGPT
    streams are these files end to end."""
    return Path(spool) / f"tokens-{task:06d}.bin"


@lru_cache(maxsize=1)  # a worker lives as long as the run: one encoder (~60 MB and its cache) at a time
def _worker_encoder(tokenizer_path: str, encoder: str, bos: bool) -> RowGroupEncoder:
    return RowGroupEncoder.load(tokenizer_path, encoder, bos, 0)


def _row_group_encoder(tokenizer_path: str, encoder: str, bos: bool, min_chars: int) -> RowGroupEncoder:
    """This worker's encoder of the tokenizer, with the build's `min_chars` (the corpus and its
    long subset share one)."""
    return copy.copy(_worker_encoder(tokenizer_path, encoder, bos)).with_min_chars(min_chars)


def encode_row_group(job: EncodeJob, io: TaskIO, item: SpoolItem) -> GroupTokens:
    """Encode one row group and spool its ids, with the stage's own encoder when inline, else
    one cached per worker process. A long subset's row group, when the run keeps tasks, is cut
    from the whole row group's encoding (`_long_of_whole`)."""
    node = io.node
    path, index = item.group
    group = (str(node.local(path)), index)
    if job.min_chars and io.store is not None:
        flat, tokens = _long_of_whole(job, io, item, group)
    else:
        tokenizer = str(node.local(job.tokenizer_path))
        encoder = job.own or _row_group_encoder(tokenizer, job.encoder, job.bos, job.min_chars)
        flat, tokens = encoder.encode(group)
    spooled = spool_tokens(io.directory, item.task)
    write_array(spooled, flat.astype(job.dtype, copy=False))
    shard = Shard.of(spooled, len(tokens.lengths), io.directory)
    io.spool(spooled)  # on a node without the run's copy: uploaded, and gone from here
    return replace(tokens, shards=(shard,))


def _long_of_whole(job: EncodeJob, io: TaskIO, item: SpoolItem, group: RowGroup) -> tuple[np.ndarray, GroupTokens]:
    """The long documents of a row group, cut from the whole row group's ids: that encoding is
    the split corpus's task of the row group (`shared_task`), run here or reused, so a split's
    documents are encoded once for its corpus and its long subset. A document's ids do not
    depend on the others of its batch, so the bytes are those of encoding the subset alone."""
    own = copy.copy(job.own).with_min_chars(0) if job.own is not None else None
    whole_job = replace(job, min_chars=0, own=own)
    scratch = io.directory / f"whole-{item.task:06d}"
    scratch.mkdir(exist_ok=True)
    whole = shared_task(ENCODE_ROW_GROUP, whole_job, replace(io, staging=str(scratch)), item)
    ids_file = spool_tokens(scratch, item.task)
    ids = np.fromfile(ids_file, dtype=job.dtype)
    ids_file.unlink()  # read here once; the store keeps its own link
    table = read_group(group)
    rows = cast(np.ndarray, long_rows(table, job.min_chars))
    mask = np.zeros(len(whole.lengths), dtype=bool)
    mask[rows] = True
    flat = ids[np.repeat(mask, whole.lengths)]
    return flat, group_tokens(table.take(rows), whole.lengths[rows], rows)


def encode_reads(job: EncodeJob, io: TaskIO, item: SpoolItem) -> dict[str, object]:
    """What an encoding task encodes (its identity): the tokenizer by content, the encoding's
    settings, and its row group's bytes, not its file's, so a rebuild encodes again only the
    row groups holding an edited document."""
    path, index = item.group
    return {
        "tokenizer": InputFile(job.tokenizer_path),
        "settings": (job.encoder, job.bos, job.min_chars, job.dtype),
        "row_group": row_group_sha256(io.node.local(path), index),
        "task": item.task,
    }


ENCODE_ROW_GROUP = Step(encode_row_group, encode_reads, inline_below=4)

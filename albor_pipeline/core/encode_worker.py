"""Encoding one row group of a FIM Parquet file: the corpus stage's per-shard task.

`encode_row_group` is a pure function of (file, tokenizer, encoder, row group), so the
corpus stage runs it inline or on any executor (`core/executor.py`) and gets the same
ids. An executor's worker process builds the encoder once and reuses it for every row
group it is given.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from albor_pipeline.core.encode import Encoder, make_encoder
from albor_pipeline.core.vocab import BOS, EOS, FIM_MIDDLE, FIM_PREFIX, FIM_SENTINEL_CHARS, FIM_SUFFIX

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


RowGroup = tuple[str, int]
"""(Parquet file, row group index): an item of a per-row-group task (`shards.row_groups`)."""


class RowGroupEncoder:
    """Encodes row groups of FIM Parquet files (in a worker process, or in-process)."""

    def __init__(self, tok: Tokenizer, encoder: Encoder, bos: bool = False, min_chars: int = 0) -> None:
        self.encoder, self.bos, self.min_chars = encoder, bos, min_chars
        ids = {t: tok.token_to_id(t) for t in (BOS, EOS, FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)}
        missing = [t for t, i in ids.items() if i is None]
        if missing:
            raise ValueError(f"tokenizer has no id for {missing}")
        self.ids: dict[str, int] = {t: i for t, i in ids.items() if i is not None}

    @classmethod
    def load(cls, tokenizer_path: str, encoder_name: str, bos: bool, min_chars: int) -> RowGroupEncoder:
        """A single-threaded encoder of `encoder_name`, as a worker process builds it."""
        tok = Tokenizer.from_file(tokenizer_path)
        return cls(tok, make_encoder(tok, encoder_name, threads=1), bos, min_chars)

    def encode(self, group: RowGroup) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(flat ids with EOS after each document, per-document lengths, the documents' rows in
        the row group, text bytes) of one row group's documents of at least `min_chars` characters."""
        path, index = group
        table = pq.ParquetFile(path).read_row_group(index, columns=READ_COLUMNS)
        rows = np.arange(table.num_rows, dtype=np.int64)
        if self.min_chars:
            # Characters before FIM: a FIM'd text carries the three sentinels on top.
            fim = pc.if_else(pc.is_null(table.column("fim_format")), 0, FIM_SENTINEL_CHARS)
            chars = pc.subtract(pc.utf8_length(table.column("text")), fim)
            keep = pc.greater_equal(chars, self.min_chars)
            rows = rows[keep.to_numpy(zero_copy_only=False)]
            table = table.filter(keep)
        flat, lengths = encode_rows(table.to_pydict(), self.encoder, self.ids, self.bos)
        text_bytes = pc.sum(pc.binary_length(table.column("text"))).as_py() or 0
        return flat, lengths, rows, text_bytes


@dataclass(frozen=True)
class EncodeJob:
    """What every row group of one corpus build is encoded with."""

    tokenizer_path: str
    encoder: str  # `make_encoder`'s name: the one the stage picked
    bos: bool
    min_chars: int


@lru_cache(maxsize=2)
def _row_group_encoder(job: EncodeJob) -> RowGroupEncoder:
    return RowGroupEncoder.load(job.tokenizer_path, job.encoder, job.bos, job.min_chars)


def encode_row_group(job: EncodeJob, group: RowGroup) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """`RowGroupEncoder.encode` of one row group, with the encoder cached per process."""
    return _row_group_encoder(job).encode(group)

"""Document-level, character-level Fill-in-the-Middle.

Every random draw for row r is a counter-based hash of (seed, r, stream), so the
output does not depend on batch boundaries. Segments are stored as columns as well
as joined into `text`, so tokenization never has to parse sentinels out of text.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from albor_pipeline.core.artifacts import Artifact, ParquetSink, record
from albor_pipeline.core.executor import INLINE, Executor, remote_only
from albor_pipeline.core.ingest import BATCH_ROWS, DOC_SCHEMA
from albor_pipeline.core.stage import Progress
from albor_pipeline.core.vocab import FIM_MIDDLE, FIM_PREFIX, FIM_SENTINEL_CHARS, FIM_SUFFIX
from albor_pipeline.spec import FimFormat, FimSpec

FIM_SCHEMA = pa.schema(
    [
        *DOC_SCHEMA,
        ("fim_format", pa.string()),
        ("fim_prefix", pa.string()),
        ("fim_middle", pa.string()),
        ("fim_suffix", pa.string()),
    ]
)

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def uniforms(seed: int, rows: np.ndarray, stream: int) -> np.ndarray:
    """Uniform [0, 1) per row from splitmix64(seed, row, stream): batch-independent."""
    with np.errstate(over="ignore"):
        x = np.uint64(seed & 0xFFFFFFFFFFFFFFFF) * _GOLDEN + rows.astype(np.uint64) * _M2 + np.uint64(stream) * _M1
        for _ in range(2):
            x = x + _GOLDEN
            x = (x ^ (x >> np.uint64(30))) * _M1
            x = (x ^ (x >> np.uint64(27))) * _M2
            x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)


def join_fim(fmt: str, prefix: str, middle: str, suffix: str) -> str:
    if fmt == "psm":
        return f"{FIM_PREFIX}{prefix}{FIM_SUFFIX}{suffix}{FIM_MIDDLE}{middle}"
    return f"{FIM_SUFFIX}{suffix}{FIM_PREFIX}{prefix}{FIM_MIDDLE}{middle}"


@dataclass
class FimResult:
    artifact: Artifact
    rows: int
    transformed: int
    spm: int
    text_bytes: int


def fim_batch(texts: list[str], first_row: int, fim: FimSpec) -> dict[str, list[str | None]]:
    """FIM columns for rows first_row.. of a split; untouched rows get null segments."""
    rows = np.arange(first_row, first_row + len(texts), dtype=np.uint64)
    apply = uniforms(fim.seed, rows, 0) < fim.rate
    if fim.format is FimFormat.mixed:
        spm = uniforms(fim.seed, rows, 1) < fim.spm_rate
    else:
        spm = np.full(len(texts), fim.format is FimFormat.spm)
    u_a, u_b = uniforms(fim.seed, rows, 2), uniforms(fim.seed, rows, 3)
    out: dict[str, list[str | None]] = {k: [] for k in ("text", "fim_format", "fim_prefix", "fim_middle", "fim_suffix")}
    for i, text in enumerate(texts):
        n = len(text)
        if not apply[i] or n < fim.min_chars:
            out["text"].append(text)
            for key in ("fim_format", "fim_prefix", "fim_middle", "fim_suffix"):
                out[key].append(None)
            continue
        a, b = sorted((int(u_a[i] * (n + 1)), int(u_b[i] * (n + 1))))
        fmt = "spm" if spm[i] else "psm"
        prefix, middle, suffix = text[:a], text[a:b], text[b:]
        out["text"].append(join_fim(fmt, prefix, middle, suffix))
        out["fim_format"].append(fmt)
        out["fim_prefix"].append(prefix)
        out["fim_middle"].append(middle)
        out["fim_suffix"].append(suffix)
    return out


def _fim_row_group(src: str, fim: FimSpec, enabled: bool, group: tuple[int, int]) -> pa.RecordBatch:
    """FIM of row group `index` of `src`, whose first row is row `first_row` of the split: a
    pure function of the group (every draw depends only on the seed and the row)."""
    index, first_row = group
    table = pq.ParquetFile(src).read_row_group(index, columns=DOC_SCHEMA.names)
    texts = table.column("text").to_pylist()
    if enabled:
        cols = fim_batch(texts, first_row, fim)
    else:
        cols = {"text": texts, **{k: [None] * len(texts) for k in FIM_SCHEMA.names[4:]}}
    arrays = {n: table.column(n).combine_chunks() for n in ("source", "file", "sha256")}
    return pa.RecordBatch.from_pydict(
        {"text": cols["text"], **arrays, **{k: cols[k] for k in FIM_SCHEMA.names[4:]}}, schema=FIM_SCHEMA
    )


def apply_fim(
    src: Path,
    fim: FimSpec,
    out: Path,
    data_root: Path,
    enabled: bool = True,
    progress: Progress | None = None,
    executor: Executor = INLINE,
) -> FimResult:
    """Write `src` with FIM applied (or only the FIM columns added, when not `enabled`).

    Row groups run on `executor` when it is a cluster (`remote_only`) and are written in
    order: the same bytes wherever they ran."""
    meta = pq.ParquetFile(src).metadata
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    groups = list(zip(range(len(sizes)), np.cumsum([0, *sizes[:-1]]).tolist()))
    transformed = spm = text_bytes = 0
    task = partial(_fim_row_group, str(src), fim, enabled)
    with ParquetSink(out, FIM_SCHEMA) as sink:
        for batch in remote_only(executor).map(task, groups):
            formats = batch.column("fim_format")
            fimmed = len(formats) - formats.null_count
            transformed += fimmed
            spm += pc.sum(pc.equal(formats, "spm")).as_py() or 0
            sink.write(batch)
            out_bytes = pc.sum(pc.binary_length(batch.column("text"))).as_py() or 0
            text_bytes += out_bytes - fimmed * FIM_SENTINEL_CHARS  # the documents' own bytes
            if progress and sink.rows % (BATCH_ROWS * 8) < batch.num_rows:
                progress(f"fim: {sink.rows:,} rows, {text_bytes / 1e6:.1f} MB")
        rows = sink.rows
    return FimResult(record(out, data_root, rows=rows), rows, transformed, spm, text_bytes)

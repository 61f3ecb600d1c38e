"""Document-level, character-level Fill-in-the-Middle.

Every random draw for row r is a counter-based hash of (seed, r, stream), so the
output does not depend on batch boundaries. Segments are stored as columns as well
as joined into `text`, so tokenization never has to parse sentinels out of text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from albor_pipeline.runtime.artifacts import Artifact, ParquetSink
from albor_pipeline.runtime.shardmap import StageIO, Step, TaskIO, map_shards
from albor_pipeline.runtime.shards import Shard, first_rows, parquet_files, shard_name
from albor_pipeline.runtime.taskstore import InputFile
from albor_pipeline.spec import FimFormat, FimSpec
from albor_pipeline.summaries.fim import FimSummary
from albor_pipeline.text.documents import DOC_SCHEMA
from albor_pipeline.text.vocab import FIM_MIDDLE, FIM_PREFIX, FIM_SENTINEL_CHARS, FIM_SUFFIX

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
    artifacts: list[Artifact]
    summary: FimSummary
    text_bytes: int  # the log's and the asset metadata's (not a recorded fact)


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


def _fim_table(table: pa.Table, first_row: int, fim: FimSpec, enabled: bool) -> pa.RecordBatch:
    """FIM of documents whose first is row `first_row` of the split: a pure function of the
    rows (every draw depends only on the seed and the row)."""
    texts = table.column("text").to_pylist()
    if enabled:
        cols = fim_batch(texts, first_row, fim)
    else:
        cols = {"text": texts, **{k: [None] * len(texts) for k in FIM_SCHEMA.names[4:]}}
    arrays = {n: table.column(n).combine_chunks() for n in ("source", "file", "sha256")}
    return pa.RecordBatch.from_pydict(
        {"text": cols["text"], **arrays, **{k: cols[k] for k in FIM_SCHEMA.names[4:]}}, schema=FIM_SCHEMA
    )


@dataclass(frozen=True)
class _FimJob:
    fim: FimSpec
    enabled: bool


@dataclass(frozen=True)
class _FimShard:
    shard: Shard
    transformed: int
    spm: int
    text_bytes: int  # the documents' own bytes (sentinels not counted)

    @property
    def shards(self) -> list[Shard]:
        return [self.shard]


def _fim_shard(job: _FimJob, io: TaskIO, item: tuple[int, InputFile, int]) -> _FimShard:
    """FIM of the i-th mixed shard, whose first row is row `first_row` of the split, written
    as the i-th FIM shard."""
    i, src, first_row = item
    pfile = pq.ParquetFile(io.local(src))
    transformed = spm = text_bytes = 0
    with ParquetSink(io.directory / shard_name(i), FIM_SCHEMA) as sink:
        for index in range(pfile.num_row_groups):
            table = pfile.read_row_group(index, columns=DOC_SCHEMA.names)
            batch = _fim_table(table, first_row + sink.rows, job.fim, job.enabled)
            formats = batch.column("fim_format")
            fimmed = len(formats) - formats.null_count
            transformed += fimmed
            spm += pc.sum(pc.equal(formats, "spm")).as_py() or 0
            text_bytes += (pc.sum(pc.binary_length(batch.column("text"))).as_py() or 0) - fimmed * FIM_SENTINEL_CHARS
            sink.write(batch)
    return _FimShard(Shard.of(sink.path, sink.rows), transformed, spm, text_bytes)


FIM_SHARD = Step(_fim_shard, inline_below=4)


def apply_fim(
    src: Path,
    fim: FimSpec,
    out: Path,
    io: StageIO,
    *,
    enabled: bool = True,
) -> FimResult:
    """Write the shard set (or file) `src` with FIM applied (or only the FIM columns added,
    when not `enabled`) as the shard set `out`, a task per shard on `io.executor`. Draws depend
    on the row's index in the split alone, so the rows are the same for any shard boundaries."""
    files = parquet_files(src)
    items = list(zip(range(len(files)), [InputFile(str(f)) for f in files], first_rows(files)))

    def fimmed(done: list[_FimShard]) -> str:
        mb = sum(d.text_bytes for d in done) / 1e6
        return f"fim: {len(done)}/{len(items)} shards, {sum(d.shard.rows for d in done):,} rows, {mb:.1f} MB"

    done = map_shards(FIM_SHARD, _FimJob(fim, enabled), items, out, io, fimmed)
    rows, transformed = sum(d.shard.rows for d in done), sum(d.transformed for d in done)
    summary = FimSummary(
        rows=rows,
        transformed=transformed,
        spm=sum(d.spm for d in done),
        observed_rate=round(transformed / rows, 6) if rows else 0.0,
    )
    return FimResult([d.shard.artifact(out, io.root) for d in done], summary, sum(d.text_bytes for d in done))

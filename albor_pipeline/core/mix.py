"""Weighted mix per split, counting like `alimentar mix`.

Source i gets floor(N * w_i / sum(w)) rows (N = `rows` or the total input rows), or
round(count_i * repeat_i) with a `repeat` multiplier. Downsampling draws without
replacement; upsampling takes whole copies plus a random remainder, so each document
appears floor or ceil(multiplier) times. The result is shuffled with the split's seed; the
shuffle is an external one, so memory stays bounded by a batch, not the split.
"""

from __future__ import annotations

import math
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from albor_pipeline.core.artifacts import TEMP_SUFFIX, Artifact, ParquetSink, record
from albor_pipeline.core.ingest import DOC_SCHEMA
from albor_pipeline.core.shards import iter_batches, parquet_files
from albor_pipeline.core.stage import Progress
from albor_pipeline.spec import MixUnit, SplitMixSpec

GATHER_ROWS = 2048  # rows per shuffle bucket (one bucket is in memory at a time)
READ_ROWS = 256


class MixError(ValueError):
    """A mix that cannot be drawn (e.g. every weighted source is empty in this split)."""


@dataclass
class SourcePlan:
    source: str
    input_rows: int
    output_rows: int
    rule: str  # "weight 0.4" or "repeat 10x"

    @property
    def multiplier(self) -> float:
        return self.output_rows / self.input_rows if self.input_rows else 0.0


@dataclass
class MixResult:
    artifact: Artifact
    plan: list[SourcePlan]
    warnings: list[str] = field(default_factory=list)


def plan_counts(
    counts: dict[str, int], mix: SplitMixSpec, order: list[str], chars: dict[str, int] | None = None
) -> tuple[list[SourcePlan], list[str]]:
    """Rows per source for one split (pure arithmetic, no data).

    With `unit: chars` (needs each source's characters in `chars`), the target is N rows
    at the split's mean length, and source i gets the rows that carry w_i/sum(w) of those
    characters at its own mean length.
    """
    warnings: list[str] = []
    repeat = dict(mix.repeat)
    if mix.weights:  # the spec guarantees every source has a weight or a repeat
        weights = dict(mix.weights)
    elif repeat:
        weights = {}
        repeat.update({s: 1.0 for s in order if s not in repeat})
    else:
        weights = {s: 1.0 for s in order}
    weighted = [s for s in order if s in weights and s not in repeat]
    for s in weighted:
        if counts.get(s, 0) == 0:
            warnings.append(f"{s}: weight {weights[s]} but no rows in this split; left out")
    weighted = [s for s in weighted if counts.get(s, 0) > 0]
    total_w = sum(weights[s] for s in weighted)
    n_target = mix.rows if mix.rows is not None else sum(counts.get(s, 0) for s in weighted)
    by_chars = mix.unit == MixUnit.chars
    chars_of, target_chars = chars or {}, 0.0
    if by_chars:
        if chars is None:
            raise MixError("unit: chars needs the characters of each source")
        weighted_rows = sum(counts[s] for s in weighted)
        target_chars = n_target * sum(chars_of[s] for s in weighted) / weighted_rows if weighted_rows else 0
    plans = []
    for s in order:
        count = counts.get(s, 0)
        if s in repeat:
            n, rule = round(count * repeat[s]), f"repeat {repeat[s]:g}x"
        elif s in weighted and by_chars:
            mean = chars_of[s] / count
            n, rule = math.floor(target_chars * weights[s] / total_w / mean), f"weight {weights[s]:g} of chars"
        elif s in weighted:
            n, rule = math.floor(n_target * weights[s] / total_w), f"weight {weights[s]:g}"
        else:
            continue
        if n > count and not mix.upsample:
            warnings.append(f"{s}: wanted {n} rows but only {count} available and upsampling is off; capped")
            n = count
        plans.append(SourcePlan(s, count, n, rule))
    if sum(p.output_rows for p in plans) == 0:
        raise MixError(f"mix draws 0 rows (input rows per source: {counts})")
    return plans, warnings


def draw_indices(n_in: int, n_out: int, rng: np.random.Generator) -> np.ndarray:
    """Indices into [0, n_in): whole copies plus a without-replacement remainder."""
    copies, rest = divmod(n_out, n_in)
    parts = [np.tile(np.arange(n_in, dtype=np.int64), copies)]
    if rest:
        parts.append(np.sort(rng.choice(n_in, size=rest, replace=False)))
    return np.concatenate(parts)


def gather(src: Path, order_idx: np.ndarray, sink: ParquetSink, bucket_rows: int = GATHER_ROWS) -> None:
    """Write rows `order_idx[0], order_idx[1], ...` of `src` (a Parquet file or shard set, rows
    numbered across its shards) to `sink`, in bounded memory.

    A two-pass external shuffle: stream `src`'s shards once, sending each row (with its output
    positions) to the temp bucket that holds those positions; then read the buckets
    in order, each sorted by position. Memory is one batch plus one bucket, never the
    split; disk is one extra copy of the output.
    """
    by_input = np.argsort(order_idx, kind="stable")  # output positions, ordered by input row
    inputs = order_idx[by_input]
    buckets = -(-len(order_idx) // bucket_rows)
    schema = DOC_SCHEMA.append(pa.field("_pos", pa.int64()))
    with (
        tempfile.TemporaryDirectory(prefix=".mix-", suffix=TEMP_SUFFIX, dir=sink.path.parent) as tmp,
        ExitStack() as stack,
    ):
        writers: dict[int, ipc.RecordBatchStreamWriter] = {}
        offset = ptr = 0
        for batch in iter_batches(src, DOC_SCHEMA.names, READ_ROWS):
            end = int(np.searchsorted(inputs, offset + batch.num_rows, side="left"))
            pos = by_input[ptr:end]
            taken = batch.take(pa.array(inputs[ptr:end] - offset)).append_column("_pos", pa.array(pos))
            bucket_of = pos // bucket_rows
            for b in np.unique(bucket_of):
                if b not in writers:
                    writers[b] = stack.enter_context(ipc.new_stream(f"{tmp}/{b}.arrow", schema))
                writers[b].write_batch(taken.filter(pa.array(bucket_of == b)))
            offset, ptr = offset + batch.num_rows, end
        stack.close()
        for b in range(buckets):
            with ipc.open_stream(f"{tmp}/{b}.arrow") as reader:
                table = reader.read_all()
            sink.write(table.sort_by("_pos").drop_columns(["_pos"]))


def mix_documents(
    split_path: Path,
    mix: SplitMixSpec,
    order: list[str],
    out: Path,
    data_root: Path,
    progress: Progress | None = None,
) -> MixResult:
    """Write the weighted, shuffled mix of one split's documents (a shard set) to `out`: a plan
    from the rows per source, then one external shuffle over the shards."""
    grouped = (
        pl.read_parquet(parquet_files(split_path), columns=["source"])
        .with_row_index("i")
        .group_by("source", maintain_order=True)
        .agg(pl.col("i"))
    )
    positions = {
        name: idx.to_numpy().astype(np.int64)
        for name, idx in zip(grouped.get_column("source"), grouped.get_column("i"))
    }
    counts = {name: len(pos) for name, pos in positions.items()}
    chars = None
    if mix.unit == MixUnit.chars:  # one int per row, read batch by batch (no text held)
        lengths = np.concatenate(
            [
                pc.utf8_length(batch.column(0)).to_numpy(zero_copy_only=False)
                for batch in iter_batches(split_path, ["text"], GATHER_ROWS)
            ]
            or [np.zeros(0, dtype=np.int64)]
        )
        chars = {name: int(lengths[pos].sum()) for name, pos in positions.items()}
    plans, warnings = plan_counts(counts, mix, order, chars)
    rng = np.random.default_rng(mix.seed)
    picked = [positions[p.source][draw_indices(p.input_rows, p.output_rows, rng)] for p in plans if p.output_rows]
    order_idx = np.concatenate(picked)[rng.permutation(sum(len(p) for p in picked))]
    with ParquetSink(out, DOC_SCHEMA) as sink:
        gather(split_path, order_idx, sink)
        if progress:
            progress(f"mix: wrote {sink.rows:,} rows to {out.name}")
        rows = sink.rows
    return MixResult(artifact=record(out, data_root, rows=rows), plan=plans, warnings=warnings)

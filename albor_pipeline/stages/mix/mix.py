"""Weighted mix per split, counting like `alimentar mix`.

Source i gets floor(N * w_i / sum(w)) rows (N = `rows` or the total input rows), or
round(count_i * repeat_i) with a `repeat` multiplier. Downsampling draws without
replacement; upsampling takes whole copies plus a random remainder, so each document
appears floor or ceil(multiplier) times. The result is shuffled with the split's seed; the
shuffle is an external one in per-shard tasks, so memory stays bounded by a shard, not the split.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from albor_pipeline.runtime.artifacts import TEMP_SUFFIX, Artifact, ParquetSink
from albor_pipeline.runtime.executor import INLINE, Executor
from albor_pipeline.runtime.nodes import Spooled
from albor_pipeline.runtime.shardmap import StageIO, TaskIO, map_shards, map_tasks, shards_of
from albor_pipeline.runtime.shards import MB, Shard, first_rows, parquet_files, shard_name
from albor_pipeline.spec import MixUnit, SplitMixSpec
from albor_pipeline.stages.mix.report import MixSummary, PlanRow
from albor_pipeline.text.documents import DOC_SCHEMA


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
    artifacts: list[Artifact]
    summary: MixSummary


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


@dataclass(frozen=True)
class _ShuffleJob:
    tmp: str  # the scatter files
    bounds: tuple[int, ...]  # output shard k holds output positions bounds[k] .. bounds[k+1]-1
    inputs: int  # input shards (= scatter files)

    @property
    def shards(self) -> int:
        return len(self.bounds) - 1


@dataclass(frozen=True)
class _Gathered:
    shard: Shard

    @property
    def shards(self) -> list[Shard]:
        return [self.shard]


def _scatter(job: _ShuffleJob, io: TaskIO, item: tuple[int, str, np.ndarray, np.ndarray]) -> Spooled | None:
    """Send the picked rows of input shard i (`rows`, bound for output positions `pos`) to
    the output shards holding those positions: one Arrow file, a record batch per output shard."""
    i, src, rows, pos = item
    order = np.argsort(pos, kind="stable")
    pos = pos[order]
    table = pq.read_table(io.local(src), columns=DOC_SCHEMA.names).take(pa.array(rows[order]))
    table = table.append_column("_pos", pa.array(pos, pa.int64())).combine_chunks()
    bounds = np.searchsorted(pos, job.bounds)
    spool = io.directory / f"{i:05d}.arrow"
    with ipc.new_file(str(spool), _SCATTER_SCHEMA) as writer:
        for k in range(job.shards):
            part = table.slice(int(bounds[k]), int(bounds[k + 1] - bounds[k]))
            writer.write_batch(
                pa.RecordBatch.from_arrays(
                    [part.column(n).combine_chunks() for n in _SCATTER_SCHEMA.names], schema=_SCATTER_SCHEMA
                )
            )
    return io.node.spool(spool)


def _gather(job: _ShuffleJob, io: TaskIO, k: int) -> _Gathered:
    """Output shard k: its rows from every scatter file, in output order."""
    parts = []
    for i in range(job.inputs):
        with pa.OSFile(str(io.local(f"{job.tmp}/{i:05d}.arrow"))) as fh:  # read, not mapped: the file goes away
            parts.append(ipc.open_file(fh).get_batch(k))
    table = pa.Table.from_batches(parts, _SCATTER_SCHEMA).sort_by("_pos").drop_columns(["_pos"])
    with ParquetSink(io.directory / shard_name(k), DOC_SCHEMA) as sink:
        sink.write(table)
    return _Gathered(Shard.of(sink.path, sink.rows))


_SCATTER_SCHEMA = DOC_SCHEMA.append(pa.field("_pos", pa.int64()))
CHEAP = 4  # the mix's waves cost about a second a shard: a pool pays off from 4 (`inline_below`)


def shuffle(
    src: Path,
    order_idx: np.ndarray,
    out: Path,
    bounds: np.ndarray,
    executor: Executor = INLINE,
) -> list[Shard]:
    """Write rows `order_idx[0], order_idx[1], ...` of `src` (a Parquet file or shard set, rows
    numbered across its shards) as the shard set `out`, output shard k holding positions
    `bounds[k]` up to `bounds[k+1]`.

    An external shuffle in two task waves: a scatter task per input shard sends each picked
    row to the output shard that holds its position, then a gather task per output shard
    sorts its rows into place and writes it. A task holds one input or one output shard,
    never the split; disk holds one extra copy of the output meanwhile. On a cluster, the
    scatter files go from node to node through the data dir's bucket (`executor.node`).
    """
    files = parquet_files(src)
    starts = first_rows(files)
    starts.append(starts[-1] + pq.ParquetFile(files[-1]).metadata.num_rows)
    by_input = np.argsort(order_idx, kind="stable")  # output positions, ordered by input row
    inputs = order_idx[by_input]
    cuts = np.searchsorted(inputs, starts)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".mix-", suffix=TEMP_SUFFIX, dir=out.parent) as tmp:
        scatter = [
            (i, str(f), inputs[cuts[i] : cuts[i + 1]] - starts[i], by_input[cuts[i] : cuts[i + 1]])
            for i, f in enumerate(files)
        ]
        job = _ShuffleJob(tmp, tuple(int(b) for b in bounds), len(files))
        spooled = map_tasks(_scatter, job, scatter, Path(tmp), executor, inline_below=CHEAP)
        gathered = map_shards(_gather, job, range(job.shards), out, executor, spools=spooled, inline_below=CHEAP)
        return list(shards_of(gathered))


def shard_bounds(sizes: np.ndarray, max_bytes: int) -> np.ndarray:
    """Output shard boundaries for rows of `sizes` bytes, in output order: a row goes to the
    shard its first byte falls in (cumulative bytes // `max_bytes`), so a shard holds about
    `max_bytes` and the cut depends on the rows alone, not on the input's shards."""
    ids = (np.cumsum(sizes) - sizes) // max_bytes
    return np.concatenate([[0], np.flatnonzero(np.diff(ids)) + 1, [len(sizes)]]).astype(np.int64)


def _text_sizes(_: None, io: TaskIO, path: str) -> tuple[np.ndarray, np.ndarray]:
    """(UTF-8 bytes, characters) of every document of one shard."""
    text = pq.read_table(io.local(path), columns=["text"]).column(0)
    nbytes = pc.binary_length(text).to_numpy(zero_copy_only=False)
    chars = pc.utf8_length(text).to_numpy(zero_copy_only=False)
    return nbytes.astype(np.int64), chars.astype(np.int64)


def mix_documents(
    split_path: Path,
    mix: SplitMixSpec,
    order: list[str],
    out: Path,
    io: StageIO,
    *,
    shard_mb: float = 32,
) -> MixResult:
    """Write the weighted, shuffled mix of one split's documents (a shard set) as the shard
    set `out` (shards of about `shard_mb` of text): a plan from the rows per source, then one
    external shuffle over the shards. Every per-shard step runs on `io.executor`."""
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
    files = parquet_files(split_path)
    sizes = map_tasks(_text_sizes, None, [str(f) for f in files], out.parent, io.executor, inline_below=CHEAP)
    nbytes = np.concatenate([b for b, _ in sizes])
    chars = None
    if mix.unit == MixUnit.chars:
        lengths = np.concatenate([c for _, c in sizes])
        chars = {name: int(lengths[pos].sum()) for name, pos in positions.items()}
    plans, warnings = plan_counts(counts, mix, order, chars)
    rng = np.random.default_rng(mix.seed)
    picked = [positions[p.source][draw_indices(p.input_rows, p.output_rows, rng)] for p in plans if p.output_rows]
    order_idx = np.concatenate(picked)[rng.permutation(sum(len(p) for p in picked))]
    bounds = shard_bounds(nbytes[order_idx], int(shard_mb * MB))
    shards = shuffle(split_path, order_idx, out, bounds, io.executor)
    if io.progress:
        io.progress(f"mix: wrote {sum(s.rows for s in shards):,} rows in {len(shards)} shard(s) to {out.name}/")
    summary = MixSummary(plan=[PlanRow.of(p) for p in plans], warnings=warnings)
    return MixResult([s.artifact(out, io.root) for s in shards], summary)

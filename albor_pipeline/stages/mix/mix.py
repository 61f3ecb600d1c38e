"""Weighted mix per split, counting like `alimentar mix`.

Source i gets floor(N * w_i / sum(w)) rows (N = `rows` or the total input rows), or
round(count_i * repeat_i) with a `repeat` multiplier. Downsampling draws without
replacement; upsampling takes whole copies plus a random remainder, so each document
appears floor or ceil(multiplier) times. The result is shuffled with the split's seed; the
shuffle is an external one in per-shard tasks, so memory stays bounded by a shard, not the split.
"""

from __future__ import annotations

import hashlib
import math
import tempfile
from dataclasses import dataclass, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from albor_pipeline.runtime.artifacts import TEMP_SUFFIX, Artifact, ParquetSink
from albor_pipeline.runtime.shardmap import (
    StageIO,
    Step,
    TaskIO,
    Written,
    held,
    map_shards,
    map_tasks,
    shards_of,
)
from albor_pipeline.runtime.shards import MB, Shard, first_rows, parquet_files, shard_name
from albor_pipeline.runtime.taskstore import InputFile, NotReusable
from albor_pipeline.spec import MixUnit, SplitMixSpec, repeat_warnings
from albor_pipeline.summaries.mix import MixBudget, MixSummary, PlanRow
from albor_pipeline.text.documents import DOC_SCHEMA


class MixError(ValueError):
    """A mix that cannot be drawn (e.g. every weighted source is empty in this split)."""


@dataclass
class SourcePlan:
    source: str
    input_rows: int
    output_rows: int  # a budget's: an estimate until `draw_chars` draws it
    rule: str  # "weight 0.4", "weight 0.4 of chars" or "repeat 10x"
    input_chars: int | None = None
    target_chars: int | None = None  # a budget's share, drawn by characters (`draw_chars`)
    output_chars: int | None = None  # once drawn

    @property
    def multiplier(self) -> float:
        return self.output_rows / self.input_rows if self.input_rows else 0.0


@dataclass
class MixResult:
    artifacts: list[Artifact]
    summary: MixSummary


def _rules(mix: SplitMixSpec, order: list[str]) -> tuple[dict[str, float], dict[str, float]]:
    """(weights, repeats) per source: equal weights when neither is given; with only
    repeats, every other source once."""
    repeat = dict(mix.repeat)
    if mix.weights:  # the spec guarantees every source has a weight or a repeat
        return dict(mix.weights), repeat
    if repeat:
        return {}, {**{s: 1.0 for s in order if s not in repeat}, **repeat}
    return {s: 1.0 for s in order}, repeat


def plan_counts(
    counts: dict[str, int], mix: SplitMixSpec, order: list[str], chars: dict[str, int] | None = None
) -> tuple[list[SourcePlan], list[str]]:
    """Rows per source for one split (pure arithmetic, no data).

    With `unit: chars` (needs each source's characters in `chars`), the target is N rows
    at the split's mean length, and source i gets the rows that carry w_i/sum(w) of those
    characters at its own mean length. With a budget (`chars`, or `tokens` at
    `chars_per_token`), source i gets w_i/sum(w) of the budget's characters less what the
    `repeat` sources hold, drawn by characters (`draw_chars`).
    """
    weights, repeat = _rules(mix, order)
    warnings = [
        f"{s}: weight {weights[s]} but no rows in this split; left out"
        for s in order
        if s in weights and s not in repeat and counts.get(s, 0) == 0
    ]
    weighted = [s for s in order if s in weights and s not in repeat and counts.get(s, 0) > 0]
    total_w = sum(weights[s] for s in weighted)
    budget = mix.budget_chars
    if chars is None and (budget is not None or mix.unit == MixUnit.chars):
        raise MixError("a mix by characters (unit: chars, or a chars/tokens size) needs the characters of each source")
    chars_of = chars or {}
    plans = [
        SourcePlan(s, counts.get(s, 0), round(counts.get(s, 0) * repeat[s]), f"repeat {repeat[s]:g}x")
        for s in order
        if s in repeat
    ]
    if budget is not None:
        held = sum(p.output_rows * _mean(chars_of, counts, p.source) for p in plans)
        if held > budget:
            warnings.append(f"the repeat sources alone hold about {held:,.0f} characters, past the budget's {budget:,}")
        share = max(budget - held, 0.0)
        for s in weighted:
            target = math.floor(share * weights[s] / total_w)
            estimate = round(target / _mean(chars_of, counts, s))
            plans.append(
                SourcePlan(s, counts[s], estimate, f"weight {weights[s]:g} of the budget", target_chars=target)
            )
    else:
        plans += _row_plans(counts, mix, weighted, weights, chars_of)
    plans.sort(key=lambda p: order.index(p.source))
    for p in plans:
        p.input_chars = chars_of.get(p.source, 0) if chars is not None else None
        warnings += _cap(p, mix.upsample)
    if sum(p.output_rows for p in plans) == 0:
        raise MixError(_why_no_rows(counts))
    return plans, warnings


def _why_no_rows(counts: dict[str, int]) -> str:
    """Why a mix draws nothing, and which spec fields change that."""
    if not any(counts.values()):
        return (
            "mix draws 0 rows: no documents reached this split. A held-out split gets about "
            "holdout.val_fraction (val) or holdout.test_fraction (test) of the documents, by a hash "
            "of each text, so a small fraction of few documents can leave it empty: raise that "
            "fraction or add documents (for train, see what ingestion and filtering left out)"
        )
    return (
        f"mix draws 0 rows from input rows per source {counts}: the split's mix.<split>.weights "
        "or repeat name only sources with no rows here, or its rows size is too small to "
        "give any source a row; weight a source that has rows, or raise mix.<split>.rows"
    )


def _mean(chars: dict[str, int], counts: dict[str, int], source: str) -> float:
    return chars.get(source, 0) / counts[source] if counts.get(source) else 0.0


def _row_plans(
    counts: dict[str, int], mix: SplitMixSpec, weighted: list[str], weights: dict[str, float], chars: dict[str, int]
) -> list[SourcePlan]:
    """The weighted sources' rows for a `rows` size (or every input row), by rows or characters."""
    total_w = sum(weights[s] for s in weighted)
    n_target = mix.rows if mix.rows is not None else sum(counts[s] for s in weighted)
    if mix.unit != MixUnit.chars:
        return [
            SourcePlan(s, counts[s], math.floor(n_target * weights[s] / total_w), f"weight {weights[s]:g}")
            for s in weighted
        ]
    weighted_rows = sum(counts[s] for s in weighted)
    target_chars = n_target * sum(chars[s] for s in weighted) / weighted_rows if weighted_rows else 0
    return [
        SourcePlan(
            s,
            counts[s],
            math.floor(target_chars * weights[s] / total_w / _mean(chars, counts, s)),
            f"weight {weights[s]:g} of chars",
        )
        for s in weighted
    ]


def _cap(plan: SourcePlan, upsample: bool) -> list[str]:
    """Without upsampling, a source gives at most its rows (characters, for a budget)."""
    if upsample:
        return []
    if plan.target_chars is not None and plan.input_chars is not None and plan.target_chars > plan.input_chars:
        wanted, plan.target_chars, plan.output_rows = plan.target_chars, plan.input_chars, plan.input_rows
        return [
            f"{plan.source}: wanted {wanted} chars but only {plan.input_chars} available and upsampling is off; capped"
        ]
    if plan.output_rows > plan.input_rows:
        wanted, plan.output_rows = plan.output_rows, plan.input_rows
        return [
            f"{plan.source}: wanted {wanted} rows but only {plan.input_rows} available and upsampling is off; capped"
        ]
    return []


def draw_indices(n_in: int, n_out: int, rng: np.random.Generator) -> np.ndarray:
    """Indices into [0, n_in): whole copies plus a without-replacement remainder."""
    copies, rest = divmod(n_out, n_in)
    parts = [np.tile(np.arange(n_in, dtype=np.int64), copies)]
    if rest:
        parts.append(np.sort(rng.choice(n_in, size=rest, replace=False)))
    return np.concatenate(parts)


def draw_chars(lengths: np.ndarray, target: int, rng: np.random.Generator) -> np.ndarray:
    """Indices into `lengths` (characters per document) holding about `target` characters:
    whole copies, then a without-replacement remainder: in a random order, every document
    that still fits the rest (first fit). A source falls short of its share by less than
    any document it left out, so a budget lands on its characters whatever their sizes."""
    total = int(lengths.sum())
    copies, rest = divmod(target, total) if total else (0, 0)
    parts = [np.tile(np.arange(len(lengths), dtype=np.int64), copies)]
    if rest:
        order = rng.permutation(len(lengths))
        ends = np.cumsum(lengths[order])
        k = int(np.searchsorted(ends, rest, side="right"))  # the prefix that fits whole
        rest -= int(ends[k - 1]) if k else 0
        shortest, taken = int(lengths.min()), list(order[:k])
        for i in order[k:].tolist():
            if rest < shortest:
                break
            if lengths[i] <= rest:
                taken.append(i)
                rest -= int(lengths[i])
        parts.append(np.sort(np.array(taken, dtype=np.int64)))
    return np.concatenate(parts)


@dataclass(frozen=True)
class _ShuffleJob:
    tmp: str  # the scatter files
    bounds: tuple[int, ...]  # output shard k holds output positions bounds[k] .. bounds[k+1]-1
    inputs: int  # input shards (= scatter files)
    wanted: frozenset[int]  # the output shards to gather (the task store holds the others)

    @property
    def shards(self) -> int:
        return len(self.bounds) - 1


def _scatter(job: _ShuffleJob, io: TaskIO, item: tuple[int, str, np.ndarray, np.ndarray]) -> None:
    """Send the picked rows of input shard i (`rows`, bound for output positions `pos`) to
    the output shards holding those positions: one Arrow file, a record batch per output shard.
    The picks of one output shard at a time are copied out of the input shard: a source drawn
    many times over (its weight past its size) repeats its rows, and all its copies at once
    would grow with the other sources (1.2 GB for one stdlib shard of a 1.5 GB corpus)."""
    i, src, rows, pos = item
    order = np.argsort(pos, kind="stable")
    if len(job.wanted) < job.shards:  # only the rows of the shards to gather
        shard_of = np.searchsorted(np.asarray(job.bounds), pos[order], side="right") - 1
        order = order[np.isin(shard_of, list(job.wanted))]
    pos, picked = pos[order], rows[order]
    table = pq.read_table(io.local(src), columns=DOC_SCHEMA.names).combine_chunks()
    bounds = np.searchsorted(pos, job.bounds).tolist()
    spool = io.directory / f"{i:05d}.arrow"
    with ipc.new_file(str(spool), _SCATTER_SCHEMA) as writer:
        for a, b in pairwise(bounds):
            part = table.take(pa.array(picked[a:b])).append_column("_pos", pa.array(pos[a:b], pa.int64()))
            writer.write_batch(
                pa.RecordBatch.from_arrays([c.combine_chunks() for c in part.columns], schema=_SCATTER_SCHEMA)
            )
    io.spool(spool)


def _gather(job: _ShuffleJob, io: TaskIO, item: tuple[int, str | None]) -> Written:
    """Output shard k: its rows from every scatter file, in output order. `item`: (k, the
    digest of its rows, None when unknown)."""
    k = item[0]
    if k not in job.wanted:  # held by the store when the scatter began, gone since
        raise RuntimeError(
            f"the task store's entry of mix output shard {k} went away during the run "
            "(the store trimmed or edited by another process?): run again"
        )
    parts = []
    for i in range(job.inputs):
        with pa.OSFile(str(io.local(f"{job.tmp}/{i:05d}.arrow"))) as fh:  # read, not mapped: the file goes away
            parts.append(ipc.open_file(fh).get_batch(k))
    table = pa.Table.from_batches(parts, _SCATTER_SCHEMA).sort_by("_pos").drop_columns(["_pos"])
    with ParquetSink(io.directory / shard_name(k), DOC_SCHEMA) as sink:
        sink.write(table)
    return Written((Shard.of(sink.path, sink.rows),))


def _gather_reads(job: _ShuffleJob, io: TaskIO, item: tuple[int, str | None]) -> dict[str, Any]:
    """A gather task's identity: its output shard and its rows by content (each row's
    SHA-256, source and file, in order), wherever they sit in the inputs."""
    k, rows = item
    if rows is None:
        raise NotReusable("the mix's rows have no digests")
    return {"shard": k, "rows": rows}


_SCATTER_SCHEMA = DOC_SCHEMA.append(pa.field("_pos", pa.int64()))
CHEAP = 4  # the mix's waves cost about a second a shard: a pool pays off from 4 (`inline_below`)
SCATTER = Step(_scatter, kept=False, inline_below=CHEAP)
GATHER = Step(_gather, _gather_reads, inline_below=CHEAP)


def shuffle(
    src: Path,
    order_idx: np.ndarray,
    out: Path,
    bounds: np.ndarray,
    io: StageIO,
    row_keys: np.ndarray | None = None,
) -> list[Shard]:
    """Write rows `order_idx[0], order_idx[1], ...` of `src` (a Parquet file or shard set, rows
    numbered across its shards) as the shard set `out`, output shard k holding positions
    `bounds[k]` up to `bounds[k+1]`. `row_keys` (a digest per output position, `_row_keys`):
    an output shard whose rows the task store holds is reused, and not scattered or gathered.

    An external shuffle in two task waves: a scatter task per input shard sends each picked
    row to the output shard that holds its position, then a gather task per output shard
    sorts its rows into place and writes it. A task holds one input or one output shard,
    never the split; disk holds one extra copy of the output meanwhile. On a cluster, the
    scatter files go from node to node through the data dir's bucket (`TaskIO.spool`).
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
        gathers = [
            (k, None if row_keys is None else _digest(row_keys[a:b])) for k, (a, b) in enumerate(pairwise(bounds))
        ]
        job = _ShuffleJob(tmp, tuple(int(b) for b in bounds), len(files), frozenset(range(len(gathers))))
        wanted = frozenset(k for k, held_ in enumerate(held(GATHER, job, gathers, io)) if not held_)
        job = replace(job, wanted=wanted)
        if wanted:
            map_tasks(SCATTER, job, scatter, Path(tmp), io)
        gathered = map_shards(GATHER, job, gathers, out, io)
        return list(shards_of(gathered))


def _digest(keys: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(keys).tobytes()).hexdigest()


def shard_bounds(sizes: np.ndarray, max_bytes: int) -> np.ndarray:
    """Output shard boundaries for rows of `sizes` bytes, in output order: a row goes to the
    shard its first byte falls in (cumulative bytes // `max_bytes`), so a shard holds about
    `max_bytes` and the cut depends on the rows alone, not on the input's shards."""
    ids = (np.cumsum(sizes) - sizes) // max_bytes
    return np.concatenate([[0], np.flatnonzero(np.diff(ids)) + 1, [len(sizes)]]).astype(np.int64)


@dataclass(frozen=True)
class _Sizes:
    """A shard's documents' UTF-8 bytes, characters and row keys; the task writes no file."""

    nbytes: np.ndarray
    chars: np.ndarray
    keys: np.ndarray  # `ROW_KEY` bytes per row
    shards: tuple[Shard, ...] = ()


ROW_KEY = 16  # bytes of a row's digest: 2**-64 odds of a collision among 10**9 rows


def _row_keys(table: pa.Table) -> np.ndarray:
    """A digest of each document row (its text's SHA-256, its source and its file: the row's
    whole content, as the text's hash stands for the text), `ROW_KEY` bytes each."""
    cols = (table.column(n).to_pylist() for n in ("sha256", "source", "file"))
    keys = b"".join(hashlib.sha256(f"{s}\0{src}\0{f}".encode()).digest()[:ROW_KEY] for s, src, f in zip(*cols))
    return np.frombuffer(keys, dtype=np.uint8).reshape(-1, ROW_KEY)


def _text_sizes(_: None, io: TaskIO, path: InputFile) -> _Sizes:
    """(UTF-8 bytes, characters, row keys) of every document of one shard: a task, reused
    while the shard's bytes stay the same."""
    table = pq.read_table(io.local(path), columns=["text", "sha256", "source", "file"])
    text = table.column("text")
    nbytes = pc.binary_length(text).to_numpy(zero_copy_only=False)
    chars = pc.utf8_length(text).to_numpy(zero_copy_only=False)
    return _Sizes(nbytes.astype(np.int64), chars.astype(np.int64), _row_keys(table))


TEXT_SIZES = Step(_text_sizes, inline_below=CHEAP)


def _draw(plans: list[SourcePlan], positions: dict[str, np.ndarray], lengths: np.ndarray, seed: int) -> np.ndarray:
    """The split's row numbers each plan draws (by rows, or by characters for a budget),
    shuffled together; each plan learns its output rows and characters."""
    rng = np.random.default_rng(seed)
    picked = []
    for p in plans:
        pos = positions.get(p.source, np.zeros(0, np.int64))
        if p.target_chars is not None:
            picked.append(pos[draw_chars(lengths[pos], p.target_chars, rng)])
            p.output_rows = len(picked[-1])
        elif p.output_rows:
            picked.append(pos[draw_indices(p.input_rows, p.output_rows, rng)])
        else:
            picked.append(pos[:0])
        p.output_chars = int(lengths[picked[-1]].sum())
    return np.concatenate(picked)[rng.permutation(sum(len(p) for p in picked))]


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
    import polars as pl  # here: importing it costs every process 0.3 s, and only the mix uses it

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
    items = [InputFile(str(f)) for f in files]
    sizes = map_tasks(TEXT_SIZES, None, items, out.parent, io)
    nbytes = np.concatenate([s.nbytes for s in sizes])
    lengths = np.concatenate([s.chars for s in sizes])
    row_keys = np.concatenate([s.keys for s in sizes])
    chars = {name: int(lengths[pos].sum()) for name, pos in positions.items()}
    plans, warnings = plan_counts(counts, mix, order, chars)
    order_idx = _draw(plans, positions, lengths, mix.seed)
    bounds = shard_bounds(nbytes[order_idx], int(shard_mb * MB))
    shards = shuffle(split_path, order_idx, out, bounds, io, row_keys[order_idx])
    if io.progress:
        io.progress(f"mix: wrote {sum(s.rows for s in shards):,} rows in {len(shards)} shard(s) to {out.name}/")
    summary = MixSummary(
        plan=[PlanRow.of(p) for p in plans],
        warnings=warnings + repeat_warnings({p.source: p.multiplier for p in plans}, "copies"),
        budget=MixBudget.of(mix, sum(p.output_chars or 0 for p in plans)) if mix.budget_chars is not None else None,
    )
    return MixResult([s.artifact(out, io.root) for s in shards], summary)

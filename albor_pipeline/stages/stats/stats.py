"""The statistics stage: what the other stages recorded, and the distributions that need data.

Counts come from the stages' own summaries (hygiene's removals and findings, the holdout's
duplicates, FIM's rows, the corpus's packing and its documents' token lengths). Only what no
stage records is computed here, streamed a batch at a time: each document's length in
characters and its FIM share per source (the FIM Parquet, a reusable task per shard on the
stage's workers: a rebuild re-reads only the shards that changed), and each sequence's fill
(the corpus's `doc_lens`). Written as `stats/stats.json` plus PNG charts, committed as one set.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from albor_pipeline.runtime.artifacts import Artifact, record, write_bytes, write_json
from albor_pipeline.runtime.distribution import Distribution, ValueCounts
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.shardmap import StageIO, Step, TaskIO, Written, map_shards, map_tasks
from albor_pipeline.runtime.shards import Shard, iter_batches, parquet_files
from albor_pipeline.runtime.taskstore import InputFile
from albor_pipeline.spec import SPLITS
from albor_pipeline.stages.stats.facts import (
    CHARTS,
    FimFacts,
    Funnel,
    LengthFacts,
    Redactions,
    SequenceFacts,
    SplitLengths,
    Statistics,
    chart_input,
)
from albor_pipeline.summaries.corpus import Corpus
from albor_pipeline.summaries.documents import DocumentsSummary
from albor_pipeline.summaries.fim import FimSplit
from albor_pipeline.summaries.hygiene import HygieneRow
from albor_pipeline.summaries.ingest import IngestSummary
from albor_pipeline.summaries.stats import Chart, SplitFacts, StatsSummary
from albor_pipeline.text.vocab import FIM_SENTINEL_CHARS

BATCH_ROWS = 256  # documents read at once: the Parquet row groups' size
STATS_JSON = "stats.json"


@dataclass(frozen=True)
class Recorded:
    """What the upstream stages recorded, each summary through its stage's own model."""

    document_sources: list[str]  # spec order
    ingested: dict[str, IngestSummary]  # every source with hygiene
    hygiene: list[HygieneRow]  # every source with hygiene (documents and conversations)
    documents: DocumentsSummary
    fim: list[FimSplit]
    corpora: list[Corpus]  # the splits', then the long subsets'


@dataclass
class _Streamed:
    """A source's documents in one split's FIM Parquet: characters before FIM, FIM rows."""

    chars: ValueCounts = field(default_factory=ValueCounts)
    rows: int = 0
    fim: int = 0


def stream_split(fim_path: Path) -> dict[str, _Streamed]:
    """Per source: each document's characters before FIM (the FIM'd text less its sentinels),
    of a FIM shard set or one of its shards."""
    found: dict[str, _Streamed] = {}
    for batch in iter_batches(fim_path, ["text", "source", "fim_format"], batch_size=BATCH_ROWS):
        fimmed = batch.column("fim_format").is_valid().to_numpy(zero_copy_only=False)
        chars = pc.utf8_length(batch.column("text")).to_numpy().astype(np.int64) - FIM_SENTINEL_CHARS * fimmed
        sources = batch.column("source").dictionary_encode()
        codes = sources.indices.to_numpy()
        for code, name in enumerate(sources.dictionary.to_pylist()):
            mine = codes == code
            into = found.setdefault(name, _Streamed())
            into.chars.add(chars[mine])
            into.rows += int(mine.sum())
            into.fim += int(fimmed[mine].sum())
    return found


@dataclass(frozen=True)
class _Measured:
    """A measuring task's result: a FIM shard's documents per source; it writes no file."""

    sources: dict[str, _Streamed]
    shards: tuple[Shard, ...] = ()


def _measure_shard(job: None, io: TaskIO, path: InputFile) -> _Measured:
    """`stream_split` of one FIM shard: a task, reused while the shard's bytes stay the same."""
    return _Measured(stream_split(io.local(path)))


MEASURE_SHARD = Step(_measure_shard)


def measure_splits(fim_dirs: dict[str, Path], directory: Path, io: StageIO) -> dict[str, dict[str, _Streamed]]:
    """`stream_split` of every split's FIM shard set, a task per shard on the stage's workers,
    merged per split and source (exact counts: the same whatever order the shards come in)."""
    items = [(split, str(f)) for split, d in fim_dirs.items() for f in parquet_files(d)]
    measured = map_tasks(MEASURE_SHARD, None, [InputFile(f) for _, f in items], directory, io)
    out: dict[str, dict[str, _Streamed]] = {split: {} for split in fim_dirs}
    for (split, _), shard in zip(items, measured, strict=True):
        for name, s in shard.sources.items():
            into = out[split].setdefault(name, _Streamed())
            into.chars.merge(s.chars)
            into.rows, into.fim = into.rows + s.rows, into.fim + s.fim
    for split, found in out.items():
        if io.progress:
            io.progress(f"stats: {split}: {sum(s.rows for s in found.values()):,} documents measured")
    return out


def sequence_fill(corpus_dir: Path) -> ValueCounts:
    """Each sequence's non-pad tokens: the sum of its `doc_lens`."""
    fill = ValueCounts()
    for batch in iter_batches(corpus_dir, ["doc_lens"]):
        lens = batch.column("doc_lens")
        offsets = lens.offsets.to_numpy()
        sums = np.concatenate([[0], np.cumsum(lens.flatten().to_numpy().astype(np.int64))])
        fill.add(sums[offsets[1:] - offsets[0]] - sums[offsets[:-1] - offsets[0]])
    return fill


def _lengths(streamed: dict[str, _Streamed], corpus: Corpus | None, order: list[str]) -> SplitLengths:
    """A split's length facts per source (in spec order) and for all of them."""
    summary = corpus.summary if corpus is not None else None
    every = _Streamed()
    sources = {}
    for name in (n for n in order if n in streamed):
        s = streamed[name]
        every.chars.merge(s.chars)
        every.rows, every.fim = every.rows + s.rows, every.fim + s.fim
        facts = summary.sources.get(name) if summary is not None else None
        sources[name] = _length_facts(s, facts.token_lengths if facts is not None else None)
    return SplitLengths(all=_length_facts(every, summary.token_lengths if summary else None), sources=sources)


def _length_facts(s: _Streamed, tokens: Distribution | None) -> LengthFacts:
    """The streamed characters with the token lengths the corpus recorded."""
    return LengthFacts(documents=s.rows, fim_documents=s.fim, chars=s.chars.distribution(), tokens=tokens)


def _funnel(recorded: Recorded) -> dict[str, Funnel]:
    """Each document source's documents from ingest to the splits, as the stages counted them."""
    hygiene = {row.source: row.summary for row in recorded.hygiene}
    docs = recorded.documents
    exact = Counter[str]()
    for pair, n in docs.duplicates.items():  # "kept_source <- dropped_source"
        exact[pair.split(" <- ")[1]] += n
    near = docs.near_duplicates.removed if docs.near_duplicates else {}
    decontaminated = docs.decontaminated.dropped if docs.decontaminated else {}
    out = {}
    for name in recorded.document_sources:
        h, ingested = hygiene[name], recorded.ingested[name]
        out[name] = Funnel(
            skipped_at_ingest=ingested.skipped,
            ingested=h.documents_in,
            removed=h.removed,
            kept=h.kept,
            exact_duplicates=exact[name],
            near_duplicates=near.get(name, 0),
            decontaminated=decontaminated.get(name, 0),
            splits={split: docs.rows[split].get(name, 0) for split in SPLITS if split in docs.rows},
        )
    return out


def _fim(recorded: Recorded, streamed: dict[str, dict[str, _Streamed]], order: list[str]) -> dict[str, FimFacts]:
    """Per split: FIM's own counts, and each source's share of FIM rows (from the stream)."""
    out = {}
    for f in recorded.fim:
        per_source = streamed.get(f.split, {})
        out[f.split] = FimFacts(
            enabled=f.enabled,
            rate=f.settings.rate if f.enabled else 0.0,
            rows=f.summary.rows,
            fim_rows=f.summary.transformed,
            share=f.summary.observed_rate,
            sources={n: round(s.fim / s.rows, 6) for n in order if (s := per_source.get(n)) and s.rows},
        )
    return out


def _sequences(recorded: Recorded, layout: Layout) -> dict[str, SequenceFacts]:
    """Per corpus: what packing recorded, and each sequence's fill (its `doc_lens`)."""
    return {
        c.name: SequenceFacts(
            seq_len=c.settings.seq_len,
            sequences=c.summary.sequences,
            tokens=c.summary.tokens,
            dropped_tokens=c.summary.dropped_tokens,
            padded_tokens=c.summary.padded_tokens,
            pad_fraction=c.summary.pad_fraction,
            cut_fraction=c.summary.cut_fraction,
            fill=sequence_fill(layout.corpus_dir(c.name)).distribution(),
        )
        for c in recorded.corpora
    }


def compute_statistics(recorded: Recorded, layout: Layout, directory: Path, io: StageIO) -> Statistics:
    """Every figure of `stats.json`: the recorded counts, and the streamed distributions
    (measured by tasks working in `directory`)."""
    order = recorded.document_sources
    corpora = {c.name: c for c in recorded.corpora}
    streamed = measure_splits({f.split: layout.fim(f.split) for f in recorded.fim}, directory, io)
    docs = recorded.documents
    return Statistics(
        lengths={split: _lengths(s, corpora.get(split), order) for split, s in streamed.items()},
        funnel=_funnel(recorded),
        signals={row.source: row.summary.signals for row in recorded.hygiene if row.summary.signals},
        redactions={
            row.source: Redactions(
                mode=row.redact.value, at_ingest=dict(row.secrets_at_ingest), hygiene=row.summary.findings
            )
            for row in recorded.hygiene
        },
        near_duplicate_clusters=(
            {k: v for k, v in sorted(docs.near_duplicates.cluster_sizes.items(), key=lambda kv: int(kv[0]))}
            if docs.near_duplicates
            else None
        ),
        fim=_fim(recorded, streamed, order),
        sequences=_sequences(recorded, layout),
    )


def headline(stats: Statistics, charts: list[Chart]) -> StatsSummary:
    """The manifest's summary: per split the figures worth plotting across builds, the charts."""
    funnels = stats.funnel.values()
    ingested = sum(f.ingested for f in funnels)
    splits = {}
    for split, lengths in stats.lengths.items():
        every, seqs = lengths.all, stats.sequences.get(split)
        chars = every.chars.quantiles if every.chars else {}
        tokens = every.tokens.quantiles if every.tokens else {}
        splits[split] = SplitFacts(
            documents=every.documents,
            chars_p50=chars.get("p50"),
            chars_p99=chars.get("p99"),
            tokens_p50=tokens.get("p50"),
            tokens_p99=tokens.get("p99"),
            fim_share=stats.fim[split].share if split in stats.fim else 0.0,
            pad_fraction=seqs.pad_fraction if seqs else 0.0,
        )
    return StatsSummary(
        splits=splits,
        hygiene_kept=round(sum(f.kept for f in funnels) / ingested, 6) if ingested else 1.0,
        redactions=sum(sum(r.at_ingest.values()) + sum(r.hygiene.values()) for r in stats.redactions.values()),
        near_duplicate_clusters=sum((stats.near_duplicate_clusters or {}).values()),
        charts=charts,
    )


@dataclass
class StatsResult:
    artifacts: list[Artifact]
    summary: StatsSummary
    statistics: Statistics


def _draw_chart(job: None, io: TaskIO, item: tuple[str, str]) -> Written:
    """One chart's PNG: a task on the stage's workers, reused while the figures it draws
    (`chart_input`, as JSON: its keys' order is the charts' order too) stay the same;
    matplotlib is imported only where a chart is drawn."""
    from albor_pipeline.stages.stats.charts import render

    name, figures = item
    path = io.directory / name
    write_bytes(path, render(name, Statistics.model_validate_json(figures)))
    return Written((Shard.of(path, 0),))


DRAW_CHART = Step(_draw_chart)


def build_stats(recorded: Recorded, layout: Layout, out_dir: Path, io: StageIO) -> StatsResult:
    """`stats.json` and the charts into `out_dir`, committed as one set (a rerun: the same bytes)."""
    stats = compute_statistics(recorded, layout, out_dir.parent, io)
    items = [(chart.name, chart_input(stats, chart).model_dump_json()) for chart in CHARTS]
    map_shards(
        DRAW_CHART,
        None,
        items,
        out_dir,
        io,
        finish=lambda staging, _: write_json(staging / STATS_JSON, stats.to_json()),
    )
    root = io.root
    artifacts = [record(out_dir / STATS_JSON, root), *(record(out_dir / c.name, root) for c in CHARTS)]
    listed = [Chart(path=(out_dir / c.name).relative_to(root).as_posix(), title=c.title) for c in CHARTS]
    return StatsResult(artifacts, headline(stats, listed), stats)

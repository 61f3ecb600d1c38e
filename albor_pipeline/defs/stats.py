"""Statistics with pictures: length distributions, the filter funnel, redactions, near-duplicate
clusters, FIM share and sequence fill, from what the stages recorded (`stages/stats`)."""

from __future__ import annotations

import base64
from functools import partial
from pathlib import Path

import dagster as dg

from albor_pipeline.defs.stage import NoConfig, Stage, StageContext
from albor_pipeline.runtime.layout import (
    DOCUMENTS,
    STATS,
    TOKENIZER,
    Layout,
    corpus_names,
    corpus_stage,
    filtered_stage,
    fim_stage,
    ingested_stage,
    mixed_stage,
)
from albor_pipeline.runtime.markdown import markdown_table
from albor_pipeline.runtime.stagerun import StageOutput
from albor_pipeline.spec import DOCUMENT_KINDS, SPLITS, PipelineSpec
from albor_pipeline.stages.hygiene.hygiene import HYGIENE_KINDS
from albor_pipeline.stages.stats.facts import funnel_table
from albor_pipeline.stages.stats.stats import Recorded, build_stats
from albor_pipeline.summaries.corpus import corpora
from albor_pipeline.summaries.documents import DocumentsSummary
from albor_pipeline.summaries.fim import fim_splits
from albor_pipeline.summaries.hygiene import hygiene_rows
from albor_pipeline.summaries.ingest import ingested
from albor_pipeline.summaries.provenance import Built
from albor_pipeline.summaries.stats import Chart
from albor_pipeline.summaries.stats import provenance_section as provenance_section  # its PROVENANCE.md section


def _corpora(spec: PipelineSpec) -> list[str]:
    return corpus_names(SPLITS) if spec.corpus.long is not None else list(SPLITS)


def recorded(spec: PipelineSpec, layout: Layout) -> Recorded:
    """The upstream stages' summaries and settings, read as provenance reads them."""
    hygiene = [stage(s.name) for s in spec.sources_of(*HYGIENE_KINDS) for stage in (ingested_stage, filtered_stage)]
    fim = [fim_stage(split) for split in SPLITS]
    stages = [*hygiene, DOCUMENTS, *fim, *map(corpus_stage, _corpora(spec))]
    built = Built.recorded(layout, stages, spec.model_dump(mode="json"))
    documents = built.summary(DOCUMENTS, DocumentsSummary)
    assert documents is not None  # every stage named was read from its manifest
    sources = [s.name for s in spec.sources_of(*DOCUMENT_KINDS)]
    return Recorded(sources, ingested(built), hygiene_rows(built), documents, fim_splits(built), corpora(built))


def stats(spec: PipelineSpec, ctx: StageContext, config: NoConfig) -> StageOutput:
    layout = ctx.layout
    result = build_stats(recorded(spec, layout), layout, layout.stage_dir(STATS), ctx.io)
    summary = result.summary
    figures = summary.headline()
    return StageOutput(
        artifacts=result.artifacts,
        config={},
        summary=summary,
        row_count=sum(f.documents for f in summary.splits.values()),
        metadata={
            **{Path(c.path).name: chart_markdown(layout.root, c) for c in summary.charts},
            # Documents in, kept and removed by reason, per stage and source: `albor trace` names each one.
            "funnel": dg.MetadataValue.md(markdown_table(funnel_table(result.statistics))),
            # Numbers, so the asset's Plots tab follows each across builds.
            **{
                k: dg.MetadataValue.int(v) if isinstance(v, int) else dg.MetadataValue.float(v)
                for k, v in figures.items()
            },
        },
    )


def chart_markdown(root: Path, chart: Chart) -> dg.MetadataValue:
    """A chart as the asset page shows a picture: markdown with the PNG itself embedded (a
    path would show no picture), its title above it and its file below. The table of the
    asset's metadata opens it in a dialog (`[Show Markdown]`)."""
    png = base64.b64encode((root / chart.path).read_bytes()).decode("ascii")
    return dg.MetadataValue.md(f"**{chart.title}**\n\n![{chart.title}](data:image/png;base64,{png})\n\n`{chart.path}`")


def stages(spec: PipelineSpec) -> list[Stage[NoConfig]]:
    hygiene = [stage(s.name) for s in spec.sources_of(*HYGIENE_KINDS) for stage in (ingested_stage, filtered_stage)]
    mixed = [mixed_stage(split) for split in SPLITS]
    return [
        Stage(
            name=STATS,
            group="stats",
            description="Statistics with pictures: per split and source, document length in characters and "
            "tokens (log histograms, p10/p50/p90/p99), the filter funnel by reason, secrets and PII by type, "
            "near-duplicate cluster sizes, FIM share, sequence fill and padding; `stats/stats.json` and PNG "
            "charts, linked from the dataset card and PROVENANCE.md. The headline figures are numeric metadata "
            "(the Plots tab).",
            config=NoConfig,
            defaults=NoConfig(),
            work=partial(stats, spec),
            # Files it reads: the FIM'd splits and the corpora. Manifests it reads: every stage from
            # hygiene on; the mixes and the tokenizer too, so that with every stage as a parent a
            # rebuild cascade reaches stats once, at its end (automation waits only while a direct
            # parent is about to run). Manifests only: never re-hashed or fetched from a bucket.
            deps=(*map(fim_stage, SPLITS), *map(corpus_stage, _corpora(spec))),
            reads=(*hygiene, DOCUMENTS, *mixed, TOKENIZER),
            kinds=("json", "matplotlib"),
        )
    ]

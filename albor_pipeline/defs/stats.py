"""Statistics with pictures: length distributions, the filter funnel, redactions, near-duplicate
clusters, FIM share and sequence fill, from what the stages recorded (`stages/stats`)."""

from __future__ import annotations

from functools import partial

import dagster as dg

from albor_pipeline.defs.stage import NoConfig, Stage, StageContext
from albor_pipeline.runtime.artifacts import read_manifest
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
from albor_pipeline.runtime.stage import StageOutput
from albor_pipeline.spec import DOCUMENT_KINDS, SPLITS, CorpusSpec, FimSpec, HygieneSpec, M, PipelineSpec
from albor_pipeline.stages.corpus.report import Corpus, CorpusSummary
from albor_pipeline.stages.dedup.report import DocumentsSummary
from albor_pipeline.stages.fim.report import FimSplit, FimSummary
from albor_pipeline.stages.hygiene.hygiene import HYGIENE_KINDS
from albor_pipeline.stages.hygiene.report import HygieneRow, HygieneSummary
from albor_pipeline.stages.ingest.report import IngestSummary
from albor_pipeline.stages.stats.stats import Recorded, build_stats


def _settings(layout: Layout, stage: str, model: type[M]) -> M:
    """The stage's recorded settings as the spec section `model` (keys it does not know left out)."""
    config = read_manifest(layout, stage).config
    return model.model_validate({k: v for k, v in config.items() if k in model.model_fields})


def _corpora(spec: PipelineSpec) -> list[str]:
    return corpus_names(SPLITS) if spec.corpus.long is not None else list(SPLITS)


def recorded(spec: PipelineSpec, layout: Layout) -> Recorded:
    """The upstream stages' summaries and settings, as their manifests hold them."""

    def summary(stage: str, model: type[M]) -> M:
        return model.model_validate(read_manifest(layout, stage).summary)

    ingested = {s.name: summary(ingested_stage(s.name), IngestSummary) for s in spec.sources_of(*HYGIENE_KINDS)}
    hygiene = [
        HygieneRow(
            s.name,
            _settings(layout, filtered_stage(s.name), HygieneSpec).redact,
            summary(filtered_stage(s.name), HygieneSummary),
            ingested[s.name].secrets,
        )
        for s in spec.sources_of(*HYGIENE_KINDS)
    ]
    fim = [
        FimSplit(
            split,
            read_manifest(layout, fim_stage(split)).config["enabled"],
            _settings(layout, fim_stage(split), FimSpec),
            summary(fim_stage(split), FimSummary),
        )
        for split in SPLITS
    ]
    corpora = [
        Corpus(name, _settings(layout, corpus_stage(name), CorpusSpec), summary(corpus_stage(name), CorpusSummary))
        for name in _corpora(spec)
    ]
    documents = [s.name for s in spec.sources_of(*DOCUMENT_KINDS)]
    return Recorded(documents, ingested, hygiene, summary(DOCUMENTS, DocumentsSummary), fim, corpora)


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
        # Numbers, so the asset's Plots tab follows each across builds.
        metadata={
            **{
                k: dg.MetadataValue.int(v) if isinstance(v, int) else dg.MetadataValue.float(v)
                for k, v in figures.items()
            },
            "charts": dg.MetadataValue.md(markdown_table([c.model_dump() for c in summary.charts])),
        },
    )


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

"""Exact dedup across sources + content-hash holdout (one Parquet per split)."""

from __future__ import annotations

from functools import partial

import dagster as dg

from albor_pipeline.core.artifacts import StageManifest
from albor_pipeline.core.checks import CheckOutcome, check_no_leak
from albor_pipeline.core.documents import build_documents
from albor_pipeline.core.ingest import DOC_SCHEMA
from albor_pipeline.core.layout import DOCUMENTS, Layout, ingested_stage
from albor_pipeline.core.markdown import markdown_table
from albor_pipeline.core.stage import StageOutput
from albor_pipeline.defs.stage import Check, Stage, StageContext, resolve, schema_check, spec_defaults
from albor_pipeline.spec import SPLITS, PipelineSpec


class HoldoutConfig(dg.Config):
    """Run overrides of the spec's `holdout`; a field left unset keeps the spec's value."""

    val_fraction: float | None = None
    test_fraction: float | None = None
    seed: int | None = None


def documents(spec: PipelineSpec, ctx: StageContext, config: HoldoutConfig) -> StageOutput:
    holdout = resolve(spec.holdout, config, f"{DOCUMENTS} run config")
    names = [s.name for s in spec.sources]
    layout = ctx.layout
    sources = [(n, layout.ingested(n)) for n in names]
    result = build_documents(sources, holdout, layout.documents_dir, layout.root, progress=ctx.log.info)
    table = [{"source": n, **{s: result.rows[s].get(n, 0) for s in SPLITS}} for n in names]
    return StageOutput(
        artifacts=[result.artifacts[s] for s in SPLITS],
        config=holdout.model_dump(mode="json"),
        summary={"rows": result.rows, "duplicates": result.duplicates},
        metadata={
            "rows_per_split": dg.MetadataValue.md(markdown_table(table)),
            "duplicates_dropped": sum(result.duplicates.values()),
            "duplicates": dg.MetadataValue.json(result.duplicates),
            **{f"{s}_rows": result.artifacts[s].rows for s in SPLITS},
        },
    )


def _no_train_leak(layout: Layout, manifest: StageManifest) -> CheckOutcome:
    return check_no_leak(*(layout.documents(s) for s in SPLITS))


def stages(spec: PipelineSpec) -> list[Stage[HoldoutConfig]]:
    return [
        Stage(
            name=DOCUMENTS,
            group="mix",
            description="Exact duplicates (same `sha256`) kept once, first source in spec order wins; each "
            "document assigned to train/val/test by a hash of its content, so splits are disjoint "
            "and stable as sources grow.",
            config=HoldoutConfig,
            defaults=spec_defaults(HoldoutConfig, spec.holdout),
            work=partial(documents, spec),
            deps=tuple(ingested_stage(s.name) for s in spec.sources),
            checks=(
                schema_check(DOC_SCHEMA),
                Check("no_train_leak", "val and test share no document (sha256) with train.", _no_train_leak, True),
            ),
        )
    ]

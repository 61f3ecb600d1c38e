"""Exact dedup across sources + content-hash holdout (one Parquet per split)."""

import dagster as dg

from albor_pipeline.core.documents import build_documents
from albor_pipeline.core.markdown import markdown_table
from albor_pipeline.defs.config import config_class, to_spec
from albor_pipeline.defs.ingestion import ingested_key
from albor_pipeline.defs.resources import ArtifactStore
from albor_pipeline.defs.stage import finish_stage, stage_asset, upstream_outputs
from albor_pipeline.spec import SPLITS, PipelineSpec

DOCUMENTS = dg.AssetKey("documents")


def documents_asset(spec: PipelineSpec) -> dg.AssetsDefinition:
    Config = config_class("DocumentsConfig", spec.holdout)
    names = [s.name for s in spec.sources]

    @stage_asset(
        DOCUMENTS,
        [ingested_key(n) for n in names],
        "mix",
        "Exact duplicates (same sha256) kept once, first source in spec order wins; each "
        "document assigned to train/val/test by a hash of its content, so splits are disjoint "
        "and stable as sources grow.",
    )
    def documents(context: dg.AssetExecutionContext, config: Config, store: ArtifactStore) -> dg.MaterializeResult:  # type: ignore[valid-type]
        holdout = to_spec(config, spec.holdout)
        inputs = upstream_outputs(store.root, *(f"ingested/{n}" for n in names))
        sources = [(n, store.path("ingested", f"{n}.parquet")) for n in names]
        result = build_documents(sources, holdout, store.path("documents"), store.root, progress=context.log.info)
        table = [{"source": n, **{s: result.rows[s].get(n, 0) for s in SPLITS}} for n in names]
        return finish_stage(
            context,
            store.root,
            [result.artifacts[s] for s in SPLITS],
            inputs,
            holdout.model_dump(mode="json"),
            {"rows": result.rows, "duplicates": result.duplicates},
            extra={
                "rows_per_split": dg.MetadataValue.md(markdown_table(table)),
                "duplicates_dropped": sum(result.duplicates.values()),
                "duplicates": dg.MetadataValue.json(result.duplicates),
                **{f"{s}_rows": result.artifacts[s].rows for s in SPLITS},
            },
        )

    return documents

"""Exact dedup across sources + content-hash holdout (one Parquet per split)."""

import dagster as dg

from albor_pipeline.core.documents import build_documents
from albor_pipeline.defs.automation import on_upstream_change
from albor_pipeline.defs.config import config_class, to_spec
from albor_pipeline.defs.ingestion import ingested_key
from albor_pipeline.defs.metadata import finish_stage, markdown_table, upstream_outputs
from albor_pipeline.defs.resources import ArtifactStore
from albor_pipeline.spec import SPLITS, PipelineSpec

DOCUMENTS = dg.AssetKey("documents")


def documents_asset(spec: PipelineSpec) -> dg.AssetsDefinition:
    Config = config_class("DocumentsConfig", spec.holdout)
    names = [s.name for s in spec.sources]

    @dg.asset(
        key=DOCUMENTS,
        deps=[ingested_key(n) for n in names],
        group_name="mix",
        code_version="1",
        kinds={"parquet"},
        automation_condition=on_upstream_change(),
        description="Exact duplicates (same sha256) kept once, first source in spec order wins; each "
        "document assigned to train/val/test by a hash of its content, so splits are disjoint "
        "and stable as sources grow.",
    )
    def documents(context: dg.AssetExecutionContext, config: Config, store: ArtifactStore) -> dg.MaterializeResult:  # type: ignore[valid-type]
        holdout = to_spec(config, spec.holdout)
        inputs = [(n, store.path("ingested", f"{n}.parquet")) for n in names]
        result = build_documents(inputs, holdout, store.path("documents"), store.root, progress=context.log.info)
        table = [{"source": n, **{s: result.rows[s].get(n, 0) for s in SPLITS}} for n in names]
        return finish_stage(
            context,
            store.root,
            [result.artifacts[s] for s in SPLITS],
            upstream_outputs(store.root, *(f"ingested/{n}" for n in names)),
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

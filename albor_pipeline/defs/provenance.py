"""PROVENANCE.md + provenance.json over every artifact of the graph."""

import dagster as dg

from albor_pipeline.core.artifacts import record, write_bytes, write_json
from albor_pipeline.core.provenance import PROVENANCE_JSON, PROVENANCE_MD, build_provenance, render_markdown
from albor_pipeline.defs.resources import ArtifactStore
from albor_pipeline.defs.stage import library_versions, stage_asset, stage_name
from albor_pipeline.spec import PipelineSpec

PROVENANCE = dg.AssetKey("provenance")


def provenance_asset(spec: PipelineSpec, upstream: list[dg.AssetKey]) -> dg.AssetsDefinition:
    @stage_asset(
        PROVENANCE,
        upstream,
        "provenance",
        "PROVENANCE.md and provenance.json: every artifact with its full SHA-256, the spec, "
        "seeds, per-source counts, mix multipliers, tokenizer facts and corpus token counts.",
        kinds=("json",),
    )
    def provenance(context: dg.AssetExecutionContext, store: ArtifactStore) -> dg.MaterializeResult:
        prov = build_provenance(
            store.root, [stage_name(k) for k in upstream], spec.model_dump(mode="json"), library_versions()
        )
        write_json(store.path(PROVENANCE_JSON), prov)
        write_bytes(store.path(PROVENANCE_MD), render_markdown(prov).encode())
        outputs = [record(store.path(PROVENANCE_JSON), store.root), record(store.path(PROVENANCE_MD), store.root)]
        return dg.MaterializeResult(
            metadata={
                "dagster/row_count": len(prov["artifacts"]),
                "dagster/uri": dg.MetadataValue.path(str(store.path(PROVENANCE_MD))),
                "sha256": outputs[0].sha256,
                "artifacts": len(prov["artifacts"]),
                "provenance.json sha256": outputs[0].sha256,
                "PROVENANCE.md sha256": outputs[1].sha256,
                "preview": dg.MetadataValue.md(render_markdown(prov)[:20000]),
            },
            data_version=dg.DataVersion(outputs[0].sha256),
        )

    return provenance

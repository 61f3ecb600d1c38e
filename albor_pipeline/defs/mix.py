"""Weighted mix per split (alimentar-compatible counting, upsampling, global shuffle)."""

import dagster as dg

from albor_pipeline.core.markdown import markdown_table
from albor_pipeline.core.mix import mix_documents
from albor_pipeline.defs.config import config_class, to_spec
from albor_pipeline.defs.documents import DOCUMENTS
from albor_pipeline.defs.resources import ArtifactStore
from albor_pipeline.defs.stage import finish_stage, stage_asset, upstream_outputs
from albor_pipeline.spec import PipelineSpec


def mixed_key(split: str) -> dg.AssetKey:
    return dg.AssetKey(["mixed", split])


def mix_asset(spec: PipelineSpec, split: str) -> dg.AssetsDefinition:
    defaults = spec.mix.for_split(split)
    Config = config_class(f"Mix{split.title()}Config", defaults)
    order = [s.name for s in spec.sources]

    @stage_asset(
        mixed_key(split),
        [DOCUMENTS],
        "mix",
        f"Weighted mix of the {split} split: floor(N*w/sum(w)) rows per source, whole copies "
        "plus a random remainder when upsampling, shuffled with the split's seed.",
    )
    def _mix(context: dg.AssetExecutionContext, config: Config, store: ArtifactStore) -> dg.MaterializeResult:  # type: ignore[valid-type]
        mix = to_spec(config, defaults)
        inputs = upstream_outputs(store.root, "documents", suffix=f"/{split}.parquet")
        result = mix_documents(
            store.path("documents", f"{split}.parquet"),
            mix,
            order,
            store.path("mixed", f"{split}.parquet"),
            store.root,
            progress=context.log.info,
        )
        for warning in result.warnings:
            context.log.warning(warning)
        rows = [
            {
                "source": p.source,
                "rule": p.rule,
                "input rows": p.input_rows,
                "output rows": p.output_rows,
                "multiplier": f"{p.multiplier:.2f}x",
            }
            for p in result.plan
        ]
        human = ", ".join(f"{p.source} {p.multiplier:.1f}x" for p in result.plan)
        return finish_stage(
            context,
            store.root,
            [result.artifact],
            inputs,
            mix.model_dump(mode="json"),
            {"plan": rows, "warnings": result.warnings},
            extra={
                "sources": dg.MetadataValue.md(markdown_table(rows)),
                "summary": human,
                "warnings": dg.MetadataValue.md("\n".join(f"- {w}" for w in result.warnings) or "none"),
            },
        )

    return _mix

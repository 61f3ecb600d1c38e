"""Weighted mix per split (alimentar-compatible counting, upsampling, global shuffle)."""

from __future__ import annotations

from functools import partial

import dagster as dg

from albor_pipeline.core.ingest import DOC_SCHEMA
from albor_pipeline.core.layout import DOCUMENTS, mixed_stage
from albor_pipeline.core.markdown import markdown_table
from albor_pipeline.core.mix import mix_documents
from albor_pipeline.core.stage import StageOutput
from albor_pipeline.defs.stage import Stage, StageContext, resolve, schema_check, spec_defaults
from albor_pipeline.spec import SPLITS, PipelineSpec


class MixConfig(dg.Config):
    """Run overrides of the spec's `mix.<split>`; a field left unset keeps the spec's value."""

    seed: int | None = None
    rows: int | None = None
    weights: dict[str, float] | None = None
    repeat: dict[str, float] | None = None
    upsample: bool | None = None
    unit: str | None = None


def mix(spec: PipelineSpec, split: str, ctx: StageContext, config: MixConfig) -> StageOutput:
    settings = resolve(spec.mix.for_split(split), config, f"{mixed_stage(split)} run config")
    layout = ctx.layout
    order = [s.name for s in spec.sources]
    result = mix_documents(
        layout.documents(split), settings, order, layout.mixed(split), layout.root, progress=ctx.log.info
    )
    for warning in result.warnings:
        ctx.log.warning(warning)
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
    return StageOutput(
        artifacts=[result.artifact],
        config=settings.model_dump(mode="json"),
        summary={"plan": rows, "warnings": result.warnings},
        metadata={
            "sources": dg.MetadataValue.md(markdown_table(rows)),
            "summary": ", ".join(f"{p.source} {p.multiplier:.1f}x" for p in result.plan),
            "warnings": dg.MetadataValue.md("\n".join(f"- {w}" for w in result.warnings) or "none"),
        },
    )


def stages(spec: PipelineSpec) -> list[Stage[MixConfig]]:
    return [
        Stage(
            name=mixed_stage(split),
            group="mix",
            description=f"Weighted mix of the {split} split: `floor(N*w/sum(w))` rows per source, whole copies "
            "plus a random remainder when upsampling, shuffled with the split's seed.",
            config=MixConfig,
            defaults=spec_defaults(MixConfig, spec.mix.for_split(split)),
            work=partial(mix, spec, split),
            deps=(DOCUMENTS,),
            checks=(schema_check(DOC_SCHEMA),),
        )
        for split in SPLITS
    ]

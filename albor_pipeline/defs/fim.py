"""Fill-in-the-Middle per split (document-level, Unicode code points)."""

from __future__ import annotations

from functools import partial

import dagster as dg

from albor_pipeline.defs.stage import Check, CheckContext, Stage, StageContext, resolve, schema_check, spec_defaults
from albor_pipeline.runtime.checks import CheckOutcome
from albor_pipeline.runtime.layout import fim_stage, mixed_stage
from albor_pipeline.runtime.stagerun import StageOutput
from albor_pipeline.spec import SPLITS, FimFormat, PipelineSpec
from albor_pipeline.stages.fim.checks import check_fim_rate
from albor_pipeline.stages.fim.fim import FIM_SCHEMA, apply_fim
from albor_pipeline.summaries.fim import provenance_section as provenance_section  # its PROVENANCE.md section


class FimConfig(dg.Config):
    """Run overrides of the spec's `fim`; a field left unset keeps the spec's value.
    `enabled` defaults to whether the split is in `fim.splits`."""

    enabled: bool | None = None
    rate: float | None = None
    format: FimFormat | None = None
    spm_rate: float | None = None
    seed: int | None = None
    min_chars: int | None = None


def fim(spec: PipelineSpec, split: str, ctx: StageContext, config: FimConfig) -> StageOutput:
    settings = resolve(spec.fim, config, f"{fim_stage(split)} run config")
    enabled = split in spec.fim.splits if config.enabled is None else config.enabled
    layout = ctx.layout

    result = apply_fim(layout.mixed(split), settings, layout.fim(split), ctx.io, enabled=enabled)
    summary = result.summary
    return StageOutput(
        artifacts=result.artifacts,
        config={**settings.model_dump(mode="json"), "enabled": enabled},
        summary=summary,
        metadata={
            "fim_rows": summary.transformed,
            "spm_rows": summary.spm,
            "observed_rate": summary.observed_rate,
            "text_mb": round(result.text_bytes / 1e6, 3),
        },
    )


def _rate_within_bounds(ctx: CheckContext) -> CheckOutcome:
    rate = ctx.manifest.config["rate"] if ctx.manifest.config["enabled"] else 0.0
    return check_fim_rate(ctx.parquet_outputs, rate)


def stages(spec: PipelineSpec) -> list[Stage[FimConfig]]:
    return [
        Stage(
            name=fim_stage(split),
            group="fim",
            description=f"Fill-in-the-Middle on the {split} mix: PSM/SPM at `rate`, segments stored as "
            "columns so tokenization never parses sentinel strings out of text.",
            config=FimConfig,
            defaults=spec_defaults(FimConfig, spec.fim, enabled=split in spec.fim.splits),
            work=partial(fim, spec, split),
            deps=(mixed_stage(split),),
            checks=(
                schema_check(FIM_SCHEMA),
                Check("fim_rate", "Observed FIM share within 5 sigma of `rate`.", _rate_within_bounds),
            ),
        )
        for split in SPLITS
    ]

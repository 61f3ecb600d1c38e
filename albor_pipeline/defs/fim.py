"""Fill-in-the-Middle per split (document-level, Unicode code points)."""

import dagster as dg

from albor_pipeline.core.fim import apply_fim
from albor_pipeline.defs.config import config_class, to_spec
from albor_pipeline.defs.mix import mixed_key
from albor_pipeline.defs.resources import ArtifactStore
from albor_pipeline.defs.stage import finish_stage, stage_asset, upstream_outputs
from albor_pipeline.spec import PipelineSpec


def fim_key(split: str) -> dg.AssetKey:
    return dg.AssetKey(["fim", split])


def fim_asset(spec: PipelineSpec, split: str) -> dg.AssetsDefinition:
    Config = config_class(
        f"Fim{split.title()}Config", spec.fim, exclude=("splits",), enabled=(bool, split in spec.fim.splits)
    )

    @stage_asset(
        fim_key(split),
        [mixed_key(split)],
        "fim",
        f"Fill-in-the-Middle on the {split} mix: PSM/SPM at `rate`, segments stored as "
        "columns so tokenization never parses sentinel strings out of text.",
    )
    def _fim(context: dg.AssetExecutionContext, config: Config, store: ArtifactStore) -> dg.MaterializeResult:  # type: ignore[valid-type]
        fim = to_spec(config, spec.fim)
        inputs = upstream_outputs(store.root, f"mixed/{split}")
        enabled = bool(config.enabled)  # type: ignore[attr-defined]
        result = apply_fim(
            store.path("mixed", f"{split}.parquet"),
            fim,
            store.path("fim", f"{split}.parquet"),
            store.root,
            enabled=enabled,
            progress=context.log.info,
        )
        observed = result.transformed / result.rows if result.rows else 0.0
        summary = {
            "rows": result.rows,
            "transformed": result.transformed,
            "spm": result.spm,
            "observed_rate": round(observed, 6),
        }
        return finish_stage(
            context,
            store.root,
            [result.artifact],
            inputs,
            {**fim.model_dump(mode="json"), "enabled": enabled},
            summary,
            extra={
                "fim_rows": result.transformed,
                "spm_rows": result.spm,
                "observed_rate": observed,
                "text_mb": round(result.text_bytes / 1e6, 3),
            },
        )

    return _fim

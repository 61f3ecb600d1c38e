"""ByteLevel BPE tokenizer trained on the train split's pre-FIM text."""

import dagster as dg

from albor_pipeline.core.markdown import markdown_table
from albor_pipeline.core.tokenizer import build_tokenizer
from albor_pipeline.defs.config import config_class, to_spec
from albor_pipeline.defs.mix import mixed_key
from albor_pipeline.defs.resources import ArtifactStore
from albor_pipeline.defs.stage import finish_stage, stage_asset, upstream_outputs
from albor_pipeline.spec import PipelineSpec, RetrainPolicy

TOKENIZER = dg.AssetKey("tokenizer")


def report_markdown(report: dict) -> str:
    rows = [
        {"fact": "vocab size (with FIM sentinels)", "value": report["vocab_size"]},
        {"fact": "merges", "value": report["merges"]},
        {"fact": "val round-trip", "value": f"{report['roundtrip_ok']}/{report['val_documents']}"},
        {"fact": "keywords single-token", "value": f"{report['keywords_single_token']}/8"},
        {"fact": "bytes/token (val)", "value": report["bytes_per_token"]},
        {"fact": "training seconds", "value": report["train_seconds"]},
        {"fact": "training MB/s", "value": report["train_mb_per_s"]},
    ]
    rows += [{"fact": f"baseline bytes/token: {k}", "value": v} for k, v in report["baselines_bytes_per_token"].items()]
    return markdown_table(rows)


def tokenizer_asset(spec: PipelineSpec) -> dg.AssetsDefinition:
    Config = config_class("TokenizerConfig", spec.tokenizer, exclude=("retrain", "baselines"))
    manual = spec.tokenizer.retrain is RetrainPolicy.manual

    @stage_asset(
        TOKENIZER,
        [mixed_key("train"), mixed_key("val")],
        "tokenizer",
        "ByteLevel BPE (specials <unk> <s> </s> <pad> at 0-3, FIM sentinels appended), trained "
        "on the train mix before FIM; reports val round-trip, keyword coverage and bytes/token.",
        kinds=("tokenizers",),
        automated=not manual,
    )
    def tokenizer(context: dg.AssetExecutionContext, config: Config, store: ArtifactStore) -> dg.MaterializeResult:  # type: ignore[valid-type]
        tok_spec = to_spec(config, spec.tokenizer)
        inputs = upstream_outputs(store.root, "mixed/train", "mixed/val")
        result = build_tokenizer(
            store.path("mixed", "train.parquet"),
            store.path("mixed", "val.parquet"),
            tok_spec,
            store.path("tokenizer"),
            store.root,
            progress=context.log.info,
        )
        report = result.report
        stable = {k: v for k, v in report.items() if k not in ("train_seconds", "train_mb_per_s")}
        return finish_stage(
            context,
            store.root,
            result.artifacts,
            inputs,
            tok_spec.model_dump(mode="json", exclude={"retrain"}),
            stable,
            row_count=report["vocab_size"],
            extra={
                "report": dg.MetadataValue.md(report_markdown(report)),
                "roundtrip_ok": report["roundtrip_ok"],
                "val_documents": report["val_documents"],
                "bytes_per_token": report["bytes_per_token"],
                "train_seconds": report["train_seconds"],
            },
        )

    return tokenizer

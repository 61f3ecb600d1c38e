"""ByteLevel BPE tokenizer trained on the train split's pre-FIM text."""

from __future__ import annotations

from functools import partial

import dagster as dg

from albor_pipeline.defs.stage import Check, CheckContext, Stage, StageContext, resolve, spec_defaults
from albor_pipeline.runtime.checks import CheckOutcome
from albor_pipeline.runtime.layout import TOKENIZER, mixed_stage
from albor_pipeline.runtime.markdown import markdown_table
from albor_pipeline.runtime.stagerun import StageOutput
from albor_pipeline.spec import PipelineSpec, RetrainPolicy
from albor_pipeline.stages.tokenizer.checks import check_roundtrip, check_tiktoken_ids
from albor_pipeline.stages.tokenizer.tokenizer import build_tokenizer
from albor_pipeline.summaries.tokenizer import comparison_table, report_rows
from albor_pipeline.summaries.tokenizer import provenance_section as provenance_section  # its PROVENANCE.md section
from albor_pipeline.text.vocab import FIM_TOKENS


class TokenizerConfig(dg.Config):
    """Run overrides of the spec's `tokenizer`; a field left unset keeps the spec's value."""

    vocab_size: int | None = None
    min_frequency: int | None = None
    max_chars: int | None = None
    doc_cap: int | None = None


def tokenizer(spec: PipelineSpec, ctx: StageContext, config: TokenizerConfig) -> StageOutput:
    settings = resolve(spec.tokenizer, config, f"{TOKENIZER} run config")
    layout = ctx.layout
    chat_tokens = tuple(spec.chat.tokens.model_dump().values())
    result = build_tokenizer(
        layout.mixed("train"),
        layout.mixed("val"),
        settings,
        layout.tokenizer_dir,
        ctx.io,
        appended=(*FIM_TOKENS, *chat_tokens),
        model_max_length=spec.corpus.seq_len,
    )
    summary = result.summary  # the timings vary run to run: metadata only
    return StageOutput(
        artifacts=result.artifacts,
        config={
            **settings.model_dump(mode="json", exclude={"retrain"}),
            "chat_tokens": list(chat_tokens),
            "model_max_length": spec.corpus.seq_len,
        },
        summary=summary,
        row_count=summary.vocab_size,
        metadata={
            "report": dg.MetadataValue.md(markdown_table(report_rows({**summary.to_json(), **result.timings}))),
            "comparison": dg.MetadataValue.md(comparison_table(summary.comparison) or "no val text"),
            "vocab_size": summary.vocab_size,
            "roundtrip_ok": summary.roundtrip_ok,
            "tiktoken_ids_equal": summary.tiktoken_ids_equal,
            "json_ids_equal": summary.json_ids_equal,
            "val_documents": summary.val_documents,
            "bytes_per_token": summary.bytes_per_token,
            "train_seconds": result.timings["train_seconds"],
        },
    )


def _val_roundtrip(ctx: CheckContext) -> CheckOutcome:
    return check_roundtrip(ctx.layout.tokenizer_report)


def _nanochat_ids(ctx: CheckContext) -> CheckOutcome:
    return check_tiktoken_ids(ctx.layout.tokenizer_report)


def stages(spec: PipelineSpec) -> list[Stage[TokenizerConfig]]:
    return [
        Stage(
            name=TOKENIZER,
            group="tokenizer",
            description="ByteLevel BPE (specials `<unk> <s> </s> <pad>` at ids 0-3, FIM sentinels then chat "
            "tokens appended), "
            "trained on the train mix before FIM; reports val round-trip, keyword coverage and bytes/token. "
            "Also nanochat's tokenizer.pkl (tiktoken) and token_bytes.pt.",
            config=TokenizerConfig,
            defaults=spec_defaults(TokenizerConfig, spec.tokenizer),
            work=partial(tokenizer, spec),
            deps=(mixed_stage("train"), mixed_stage("val")),
            checks=(
                Check("val_roundtrip", "Every val document decodes back to its exact text.", _val_roundtrip, True),
                Check(
                    "nanochat_ids",
                    "tokenizer.json, loaded as a user loads it (`Tokenizer.from_file`, `encode_special_tokens`), "
                    "and tokenizer.pkl (nanochat's tiktoken) encode every val document to the corpus's ids.",
                    _nanochat_ids,
                ),
            ),
            kinds=("tokenizers",),
            automated=spec.tokenizer.retrain is not RetrainPolicy.manual,
        )
    ]

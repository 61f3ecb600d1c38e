"""SFT data (conversations -> ids + loss mask, nanochat semantics) and chat-eval sets."""

from __future__ import annotations

from functools import partial

import dagster as dg

from albor_pipeline.defs.documents import removal_check
from albor_pipeline.defs.stage import Check, CheckContext, Stage, StageContext, resolve, schema_check, spec_defaults
from albor_pipeline.runtime.artifacts import StageManifest
from albor_pipeline.runtime.checks import CheckOutcome
from albor_pipeline.runtime.layout import TOKENIZER, chat_mixed_stage, eval_stage, ingested_stage, sft_stage
from albor_pipeline.runtime.markdown import markdown_table
from albor_pipeline.runtime.stagerun import StageOutput
from albor_pipeline.spec import (
    CHAT_KINDS,
    EVAL_KINDS,
    ChatSpec,
    Overlong,
    PipelineSpec,
    SftFormat,
    SftPacking,
    SourceKind,
    SourceSpec,
)
from albor_pipeline.stages.chat.base_eval import build_base_eval, check_continuations
from albor_pipeline.stages.chat.checks import (
    check_choice_ids,
    check_max_tokens,
    check_packed_rows,
    check_sft_mask,
    check_sft_structure,
)
from albor_pipeline.stages.chat.sft import build_eval, build_sft
from albor_pipeline.summaries.chat import provenance_section as provenance_section  # its PROVENANCE.md section
from albor_pipeline.text.base_eval import BASE_EVAL_SCHEMA, BaseTask
from albor_pipeline.text.chat import EVAL_SCHEMA, SFT_SCHEMA
from albor_pipeline.text.sequences import PACKED_SCHEMA

GROUP = "chat"


class SftConfig(dg.Config):
    """Run overrides of the spec's `chat`; a field left unset keeps the spec's value."""

    max_tokens: int | None = None
    overlong: Overlong | None = None
    formats: list[SftFormat] | None = None
    shard_tokens: int | None = None


def sft(spec: PipelineSpec, split: str, ctx: StageContext, config: SftConfig) -> StageOutput:
    settings = resolve(spec.chat, config, f"{sft_stage(split)} run config")
    layout = ctx.layout
    result = build_sft(
        layout.chat_mixed(split),
        layout.tokenizer_json,
        settings,
        spec.corpus.encoder,
        layout.sft_dir(split),
        ctx.io,
    )
    summary = result.summary
    return StageOutput(
        artifacts=result.artifacts,
        config=settings.model_dump(mode="json"),
        summary=summary,
        row_count=summary.conversations,
        metadata={
            **summary.model_dump(exclude={"sources", "packed"}),
            **({"packed": dg.MetadataValue.json(summary.packed.to_json())} if summary.packed else {}),
            "sources": dg.MetadataValue.md(
                markdown_table([{"source": k, **v} for k, v in summary.to_json()["sources"].items()])
            ),
            "encoder": result.encoder,
        },
    )


class EvalConfig(dg.Config):
    """Eval sets have no settings of their own: the chat tokens and the encoder come from the spec."""


def eval_set(spec: PipelineSpec, name: str, ctx: StageContext, config: EvalConfig) -> StageOutput:
    layout = ctx.layout
    result = build_eval(
        layout.ingested(name),
        layout.tokenizer_json,
        spec.chat.tokens,
        spec.corpus.encoder,
        layout.eval_set(name),
        ctx.io,
        max_tokens=spec.chat.max_tokens,
    )
    summary = result.summary
    return StageOutput(
        artifacts=[result.artifact],
        config={
            "tokens": spec.chat.tokens.model_dump(),
            "encoder": spec.corpus.encoder,
            "max_tokens": spec.chat.max_tokens,
        },
        summary=summary,
        metadata={
            "items": summary.items,
            "tokens": summary.tokens,
            "truncated": summary.truncated,
            "choices": dg.MetadataValue.json(summary.choices),
        },
    )


def base_eval_set(spec: PipelineSpec, name: str, ctx: StageContext, config: EvalConfig) -> StageOutput:
    src = spec.source(name)
    task = src.task_type or BaseTask.multiple_choice  # the spec requires it for this kind
    result = build_base_eval(
        ctx.layout.ingested(name),
        ctx.layout.tokenizer_json,
        task,
        src.num_fewshot,
        src.continuation_delimiter,
        spec.corpus.encoder,
        ctx.layout.eval_set(name),
        ctx.io,
    )
    summary = result.summary
    return StageOutput(
        artifacts=[result.artifact],
        config={
            "task_type": task.value,
            "num_fewshot": src.num_fewshot,
            "continuation_delimiter": src.continuation_delimiter,
            "encoder": spec.corpus.encoder,
        },
        summary=summary,
        metadata=summary.model_dump(),
    )


def _continuations(ctx: CheckContext) -> CheckOutcome:
    config = ctx.manifest.config
    return check_continuations(
        ctx.parquet_outputs[0],
        ctx.layout.tokenizer_json,
        BaseTask(config["task_type"]),
        config["continuation_delimiter"],
    )


def _max_tokens(manifest: StageManifest) -> int:
    return ChatSpec.model_validate(manifest.config).max_tokens


def _mask(ctx: CheckContext) -> CheckOutcome:
    settings = ChatSpec.model_validate(ctx.manifest.config)
    return check_sft_mask(ctx.parquet_outputs, ctx.layout.tokenizer_json, settings.tokens, settings.max_tokens)


def _structure(ctx: CheckContext) -> CheckOutcome:
    settings = ChatSpec.model_validate(ctx.manifest.config)
    return check_sft_structure(ctx.parquet_outputs, ctx.layout.tokenizer_json, settings.tokens, settings.max_tokens)


def _length(ctx: CheckContext) -> CheckOutcome:
    return check_max_tokens(ctx.parquet_outputs, _max_tokens(ctx.manifest))


def _packed(ctx: CheckContext) -> CheckOutcome:
    row_tokens = ChatSpec.model_validate(ctx.manifest.config).row_tokens
    return check_packed_rows(ctx.parquet_outputs, ctx.layout.tokenizer_json, row_tokens)


def _choices(ctx: CheckContext) -> CheckOutcome:
    return check_choice_ids(ctx.parquet_outputs[0])


PACKED_ROWS = Check(
    "packed_rows",
    "Every packed row is `max_tokens` long (+1 with `pack_plus_one`), each conversation starts with BOS, "
    "the padding is BOS "
    "with mask 0, and the row has a trained token.",
    _packed,
    blocking=True,
)


def _sft_stage(spec: PipelineSpec, split: str) -> Stage[SftConfig]:
    packed = spec.chat.packing is SftPacking.best_fit
    rows = "rows of whole conversations packed best-fit, BOS-padded," if packed else "one row per conversation,"
    return Stage(
        name=sft_stage(split),
        group=GROUP,
        description=f"The {split} conversations rendered as nanochat does: `input_ids` and `loss_mask` "
        f"(1 on the assistant's text, python calls and `<|assistant_end|>`), {rows} "
        "plus flat `.bin` / `_mask.bin` shards.",
        config=SftConfig,
        defaults=spec_defaults(SftConfig, spec.chat),
        work=partial(sft, spec, split),
        deps=(chat_mixed_stage(split), TOKENIZER),
        checks=(
            schema_check(PACKED_SCHEMA if packed else SFT_SCHEMA),
            *((PACKED_ROWS,) if packed else ()),
            Check(
                "loss_mask",
                "Decoding the mask-1 tokens (specials removed) gives exactly the assistant's text and code.",
                _mask,
                blocking=True,
            ),
            Check(
                "special_positions",
                "Chat special ids appear only where the render puts them.",
                _structure,
                blocking=True,
            ),
            Check("max_tokens", "No conversation is longer than `chat.max_tokens`.", _length),
            *((removal_check(spec, CHAT_KINDS),) if spec.remove else ()),
        ),
    )


def _eval_stage(spec: PipelineSpec, src: SourceSpec) -> Stage[EvalConfig]:
    """`eval/<name>` of an mc source (chat eval) or a base_eval source (CORE-style)."""
    if src.kind is SourceKind.mc:
        description = (
            f"`{src.name}` multiple-choice items rendered for completion (the user turn holds the question and "
            "lettered choices; it ends after `<|assistant_start|>`), with each letter's id."
        )
        work = partial(eval_set, spec, src.name)
        checks = (
            schema_check(EVAL_SCHEMA),
            Check("choice_ids", "Every item's answer-letter ids are distinct.", _choices),
        )
    else:
        description = (
            f"`{src.name}` base-model eval items ({src.task_type.value if src.task_type else ''}, "
            f"{src.num_fewshot}-shot) rendered as nanochat's CORE renders them: a token sequence per choice or "
            "context, BOS first, with the continuation span a model is scored on."
        )
        work = partial(base_eval_set, spec, src.name)
        checks = (
            schema_check(BASE_EVAL_SCHEMA),
            Check(
                "continuations",
                "Every sequence is BOS then exactly its few-shot prompt, and its span is the item's answer.",
                _continuations,
                blocking=True,
            ),
        )
    return Stage(
        name=eval_stage(src.name),
        group=GROUP,
        description=description,
        config=EvalConfig,
        defaults=EvalConfig(),
        work=work,
        deps=(ingested_stage(src.name), TOKENIZER),
        checks=checks,
    )


def stages(spec: PipelineSpec) -> list[Stage[SftConfig] | Stage[EvalConfig]]:
    sft_stages = [_sft_stage(spec, split) for split in spec.chat.splits] if spec.sources_of(*CHAT_KINDS) else []
    return [*sft_stages, *(_eval_stage(spec, src) for src in spec.sources_of(*EVAL_KINDS))]

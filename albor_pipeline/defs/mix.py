"""Weighted mix per split (alimentar-compatible counting, upsampling, global shuffle)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import dagster as dg

from albor_pipeline.defs.documents import removal_check
from albor_pipeline.defs.stage import Stage, StageContext, resolve, schema_check, spec_defaults
from albor_pipeline.runtime.layout import CONVERSATIONS, DOCUMENTS, Layout, chat_mixed_stage, mixed_stage
from albor_pipeline.runtime.markdown import markdown_table
from albor_pipeline.runtime.stagerun import StageOutput
from albor_pipeline.spec import (
    CHAT_KINDS,
    DOCUMENT_KINDS,
    MIX_SIZES,
    SPLITS,
    MixUnit,
    PipelineSpec,
    SourceKind,
    SplitMixSpec,
)
from albor_pipeline.stages.mix.mix import mix_documents
from albor_pipeline.summaries.mix import provenance_section as provenance_section  # its PROVENANCE.md section
from albor_pipeline.text.documents import DOC_SCHEMA


class MixConfig(dg.Config):
    """Run overrides of the spec's `mix.<split>`; a field left unset keeps the spec's value."""

    seed: int | None = None
    rows: int | None = None
    chars: int | None = None
    tokens: int | None = None
    chars_per_token: float | None = None
    weights: dict[str, float] | None = None
    repeat: dict[str, float] | None = None
    upsample: bool | None = None
    unit: MixUnit | None = None


@dataclass(frozen=True)
class Pool:
    """What a mix draws from: documents (pretraining) or conversations (SFT); the spec's
    `mix.<split>` weights cover both, each pool normalizing over its own sources."""

    stage: Callable[[str], str]
    source: Callable[[Layout, str], Path]
    out: Callable[[Layout, str], Path]
    upstream: str
    kinds: tuple[SourceKind, ...]
    group: str
    what: str


DOCUMENT_POOL = Pool(mixed_stage, Layout.documents, Layout.mixed, DOCUMENTS, DOCUMENT_KINDS, "mix", "documents")
CHAT_POOL = Pool(
    chat_mixed_stage, Layout.conversations, Layout.chat_mixed, CONVERSATIONS, CHAT_KINDS, "chat", "conversations"
)


def mix_settings(spec: PipelineSpec, pool: Pool, split: str, config: MixConfig) -> SplitMixSpec:
    """The split's mix with the run's overrides: a size the run gives replaces the spec's
    (rows, chars or tokens). A budget sizes the documents' mix only: the corpus stage cuts
    at it; a chat mix keeps its rows."""
    section = spec.mix.for_split(split)
    given = [k for k in MIX_SIZES if getattr(config, k) is not None]
    if given:
        section = section.model_copy(update={k: None for k in MIX_SIZES if k not in given})
    settings = resolve(section, config, f"{pool.stage(split)} run config")
    if pool is DOCUMENT_POOL:
        return settings
    return settings.model_copy(update={"chars": None, "tokens": None})


def mix(spec: PipelineSpec, pool: Pool, split: str, ctx: StageContext, config: MixConfig) -> StageOutput:
    settings = mix_settings(spec, pool, split, config)
    layout = ctx.layout
    order = [s.name for s in spec.sources_of(*pool.kinds)]
    result = mix_documents(
        pool.source(layout, split),
        settings,
        order,
        pool.out(layout, split),
        ctx.io,
        shard_mb=spec.shard_mb,
    )
    summary = result.summary
    for warning in summary.warnings:
        ctx.log.warning(warning)
    return StageOutput(
        artifacts=result.artifacts,
        config={**settings.model_dump(mode="json"), "shard_mb": spec.shard_mb},
        summary=summary,
        metadata={
            "sources": dg.MetadataValue.md(markdown_table(summary.to_json()["plan"])),
            "summary": ", ".join(f"{p.source} {p.multiplier}" for p in summary.plan),
            "budget": summary.budget.estimate if summary.budget else "none (a rows size)",
            "warnings": dg.MetadataValue.md("\n".join(f"- {w}" for w in summary.warnings) or "none"),
        },
    )


def _stages(spec: PipelineSpec, pool: Pool, splits: tuple[str, ...]) -> list[Stage[MixConfig]]:
    return [
        Stage(
            name=pool.stage(split),
            group=pool.group,
            description=f"Weighted mix of the {split} split's {pool.what}: `floor(N*w/sum(w))` rows per source "
            "(or its share of a `chars`/`tokens` budget's characters), "
            "whole copies plus a random remainder when upsampling, shuffled with the split's seed.",
            config=MixConfig,
            defaults=spec_defaults(MixConfig, spec.mix.for_split(split)),
            work=partial(mix, spec, pool, split),
            deps=(pool.upstream,),
            checks=(schema_check(DOC_SCHEMA), *((removal_check(spec, pool.kinds),) if spec.remove else ())),
        )
        for split in splits
    ]


def stages(spec: PipelineSpec) -> list[Stage[MixConfig]]:
    chat = _stages(spec, CHAT_POOL, spec.chat.splits) if spec.sources_of(*CHAT_KINDS) else []
    return [*_stages(spec, DOCUMENT_POOL, SPLITS), *chat]

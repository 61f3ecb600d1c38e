"""What SFT and eval sets record (their manifests' `summary`), and the `## Chat` section of
PROVENANCE.md."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from albor_pipeline.runtime.layout import eval_stage, sft_stage
from albor_pipeline.runtime.report import Report, table
from albor_pipeline.spec import CHAT_KINDS, SPLITS, SourceKind
from albor_pipeline.summaries.ingest import chat_cleanup, ingested
from albor_pipeline.summaries.provenance import Built


class SftSourceFacts(Report):
    conversations: int
    turns: int
    tokens: int
    trained_tokens: int  # under the loss mask
    trained_fraction: float

    @classmethod
    def of(cls, counts: Mapping[str, int]) -> SftSourceFacts:
        """From a source's counts (conversations, turns, tokens, trained_tokens)."""
        tokens = counts["tokens"]
        return cls(**counts, trained_fraction=round(counts["trained_tokens"] / tokens, 4) if tokens else 0.0)


class PackedFacts(Report):
    """How full `packing: best_fit` made its rows."""

    rows: int
    row_tokens: int
    padding_tokens: int
    fill: float  # conversation tokens / row tokens


class SftSummary(Report):
    conversations: int
    tokens: int
    trained_tokens: int
    trained_fraction: float
    skipped_overlong: int  # over max_tokens, with `overlong: skip`
    truncated: int  # cut to max_tokens, with `overlong: truncate`
    sources: dict[str, SftSourceFacts]
    untrained: int = 0  # packed: left with no trained token after a cut, dropped
    packed: PackedFacts | None = None


class EvalSummary(Report):
    items: int
    tokens: int
    choices: dict[str, int]  # number of choices -> items
    truncated: int = 0  # prompts cut at `chat.max_tokens` (nanochat's render_for_completion)


def _packed(summary: SftSummary) -> str:
    """`packing: best_fit`'s rows and fill, or "no" (one row per conversation)."""
    p = summary.packed
    if p is None:
        return "no"
    dropped = f", {summary.untrained} with no trained token left dropped" if summary.untrained else ""
    return f"{p.rows:,} rows of {p.row_tokens:,} tokens, {p.fill:.1%} full{dropped}"


class BaseEvalSummary(Report):
    task_type: str
    num_fewshot: int
    continuation_delimiter: str
    items: int
    sequences: int
    tokens: int
    longest: int  # tokens of the longest sequence: what a model's context must hold


SOURCE_FACTS = ("conversations", "turns", "tokens", "trained_fraction")


def provenance_section(built: Built) -> list[str]:
    """`## Chat`, from the chat sources' ingestion and the SFT and eval sets' summaries."""
    cleanup = chat_cleanup(built.names(*CHAT_KINDS), ingested(built))
    sft = [(split, s) for split in SPLITS if (s := built.summary(sft_stage(split), SftSummary))]
    evals = [(name, e) for name in built.names(SourceKind.mc) if (e := built.summary(eval_stage(name), EvalSummary))]
    base = [
        (name, b)
        for name in built.names(SourceKind.base_eval)
        if (b := built.summary(eval_stage(name), BaseEvalSummary))
    ]
    return _section(cleanup, sft, evals, base)


def _section(
    cleanup: Sequence[Sequence[Any]],
    sft: Sequence[tuple[str, SftSummary]],
    evals: Sequence[tuple[str, EvalSummary]],
    base: Sequence[tuple[str, BaseEvalSummary]],
) -> list[str]:
    """`## Chat`: the chat sources with their cleanup (`cleanup`: per chat source, conversations
    kept and what cleanup changed and skipped, from ingestion), the SFT splits per source, the
    eval sets. Nothing without chat sources or eval sets."""
    if not (cleanup or evals or base):
        return []
    lines = ["## Chat", ""]
    if cleanup:
        lines += table(["source", "conversations kept", "cleanup and skips"], cleanup)
    if sft:
        lines += table(
            [
                "split",
                "conversations",
                "tokens",
                "trained fraction",
                "skipped (over max_tokens)",
                "truncated",
                "packed",
            ],
            [
                [split, s.conversations, s.tokens, s.trained_fraction, s.skipped_overlong, s.truncated, _packed(s)]
                for split, s in sft
            ],
        )
        lines += table(
            ["split", "source", *SOURCE_FACTS],
            [
                [split, name, f.conversations, f.turns, f.tokens, f.trained_fraction]
                for split, s in sft
                for name, f in s.sources.items()
            ],
        )
    if evals:
        lines += table(
            ["eval set", "items", "tokens", "cut at max_tokens", "choices per item"],
            [
                [name, s.items, s.tokens, s.truncated, ", ".join(f"{k}: {v}" for k, v in s.choices.items())]
                for name, s in evals
            ],
        )
    if base:
        lines += table(
            ["base-model eval set", "task", "shots", "delimiter", "items", "sequences", "tokens", "longest"],
            [
                [
                    name,
                    s.task_type,
                    s.num_fewshot,
                    repr(s.continuation_delimiter),
                    s.items,
                    s.sequences,
                    s.tokens,
                    s.longest,
                ]
                for name, s in base
            ],
        )
    return lines

"""What a mix records (its manifest's `summary`): the plan per source and its warnings; and
the `## Mix` section of PROVENANCE.md."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from albor_pipeline.runtime.layout import mixed_stage
from albor_pipeline.runtime.report import Report, table
from albor_pipeline.spec import BUDGET_MARGIN, SPLITS, SplitMixSpec
from albor_pipeline.summaries.provenance import Built

if TYPE_CHECKING:
    from albor_pipeline.stages.mix.mix import SourcePlan


class PlanRow(Report):
    """One source's share of a split: the rule it was mixed by, the rows and characters in
    and out (characters: None in a summary written before they were recorded)."""

    source: str
    rule: str  # "weight 0.4", "weight 0.4 of the budget" or "repeat 10x"
    input_rows: int = Field(alias="input rows")
    output_rows: int = Field(alias="output rows")
    multiplier: str  # "2.50x": copies of the source's documents in the split (its epochs)
    input_chars: int | None = Field(None, alias="input chars")
    output_chars: int | None = Field(None, alias="output chars")

    @classmethod
    def of(cls, plan: SourcePlan) -> PlanRow:
        return cls(
            source=plan.source,
            rule=plan.rule,
            input_rows=plan.input_rows,
            output_rows=plan.output_rows,
            multiplier=f"{plan.multiplier:.2f}x",
            input_chars=plan.input_chars,
            output_chars=plan.output_chars,
        )


class MixBudget(Report):
    """A split sized by a budget: what it asked for, the characters planned and held."""

    tokens: int | None  # a `tokens` budget, else None (a `chars` one)
    chars_per_token: float | None  # the estimate a `tokens` budget is planned at
    margin: float  # on top of a `tokens` budget's estimate, so the corpus can cut at it
    planned_chars: int
    chars: int  # the characters the mix holds
    estimate: str  # how the budget became characters, in words

    @classmethod
    def of(cls, mix: SplitMixSpec, held: int) -> MixBudget:
        planned = mix.budget_chars or 0
        if mix.tokens is None:
            return cls(
                tokens=None,
                chars_per_token=None,
                margin=0.0,
                planned_chars=planned,
                chars=held,
                estimate=f"{planned:,} characters",
            )
        return cls(
            tokens=mix.tokens,
            chars_per_token=mix.chars_per_token,
            margin=BUDGET_MARGIN,
            planned_chars=planned,
            chars=held,
            estimate=f"{mix.tokens:,} tokens estimated at {mix.chars_per_token:g} chars/token "
            f"+ {BUDGET_MARGIN:.0%} margin = {planned:,} characters (the corpus counts the tokens)",
        )


class MixSummary(Report):
    plan: list[PlanRow]
    warnings: list[str]
    budget: MixBudget | None = None  # a `chars` or `tokens` size

    def pool_rows(self) -> dict[str, int]:
        """Each source's documents in the split the mix drew from (its pool)."""
        return {p.source: p.input_rows for p in self.plan}


def provenance_section(built: Built) -> list[str]:
    """`## Mix`: per split (with its seed), every source's rule, rows and characters, and how a
    budget was planned."""
    splits = [
        (split, built.settings(stage, SplitMixSpec).seed, s)
        for split in SPLITS
        if (s := built.summary(stage := mixed_stage(split), MixSummary))
    ]
    rows = [
        [split, seed, p.source, p.rule, p.input_rows, p.output_rows, p.multiplier, p.input_chars, p.output_chars]
        for split, seed, summary in splits
        for p in summary.plan
    ]
    if not rows:
        return []
    header = [
        "split",
        "seed",
        "source",
        "rule",
        "input rows",
        "output rows",
        "multiplier",
        "input chars",
        "output chars",
    ]
    budgets = [
        f"- {split}: {s.budget.estimate}; the mix holds {s.budget.chars:,}" for split, _, s in splits if s.budget
    ]
    return ["## Mix", "", *table(header, rows), *([*budgets, ""] if budgets else [])]

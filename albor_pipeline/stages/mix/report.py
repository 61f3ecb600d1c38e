"""What a mix records (its manifest's `summary`): the plan per source and its warnings; and
the `## Mix` section of PROVENANCE.md."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import Field

from albor_pipeline.runtime.report import Report, table

if TYPE_CHECKING:
    from albor_pipeline.stages.mix.mix import SourcePlan


class PlanRow(Report):
    """One source's share of a split: the rule it was mixed by and the rows in and out."""

    source: str
    rule: str  # "weight 0.4" or "repeat 10x"
    input_rows: int = Field(alias="input rows")
    output_rows: int = Field(alias="output rows")
    multiplier: str  # "2.50x"

    @classmethod
    def of(cls, plan: SourcePlan) -> PlanRow:
        return cls(
            source=plan.source,
            rule=plan.rule,
            input_rows=plan.input_rows,
            output_rows=plan.output_rows,
            multiplier=f"{plan.multiplier:.2f}x",
        )


class MixSummary(Report):
    plan: list[PlanRow]
    warnings: list[str]


def provenance_section(splits: Sequence[tuple[str, int, MixSummary]]) -> list[str]:
    """`## Mix`: per (split, its seed, its summary), every source's rule and rows."""
    rows = [
        [split, seed, p.source, p.rule, p.input_rows, p.output_rows, p.multiplier]
        for split, seed, summary in splits
        for p in summary.plan
    ]
    if not rows:
        return []
    return ["## Mix", "", *table(["split", "seed", "source", "rule", "input rows", "output rows", "multiplier"], rows)]

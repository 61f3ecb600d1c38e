"""What FIM records of a split (its manifest's `summary`), and the `## Fill-in-the-Middle`
section of PROVENANCE.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from albor_pipeline.runtime.report import Report, table
from albor_pipeline.spec import FimSpec


class FimSummary(Report):
    rows: int
    transformed: int  # rows rewritten as FIM
    spm: int  # of those, in SPM order
    observed_rate: float


@dataclass(frozen=True)
class FimSplit:
    split: str
    enabled: bool
    settings: FimSpec
    summary: FimSummary


def provenance_section(splits: Sequence[FimSplit]) -> list[str]:
    if not splits:
        return []
    rows = [
        [
            s.split,
            s.enabled,
            s.settings.rate,
            s.settings.format.value,
            s.settings.seed,
            s.summary.transformed,
            s.summary.rows,
        ]
        for s in splits
    ]
    return [
        "## Fill-in-the-Middle",
        "",
        *table(["split", "enabled", "rate", "format", "seed", "FIM rows", "rows"], rows),
    ]

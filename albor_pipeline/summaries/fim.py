"""What FIM records of a split (its manifest's `summary`), and the `## Fill-in-the-Middle`
section of PROVENANCE.md."""

from __future__ import annotations

from dataclasses import dataclass

from albor_pipeline.runtime.layout import fim_stage
from albor_pipeline.runtime.report import Report, table
from albor_pipeline.spec import SPLITS, FimSpec
from albor_pipeline.summaries.provenance import Built


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


def fim_splits(built: Built) -> list[FimSplit]:
    """Each split FIM ran on, with its settings and summary."""
    return [
        FimSplit(split, built.config(stage)["enabled"], built.settings(stage, FimSpec), s)
        for split in SPLITS
        if (s := built.summary(stage := fim_stage(split), FimSummary))
    ]


def provenance_section(built: Built) -> list[str]:
    """`## Fill-in-the-Middle`: per split, its settings and the rows it rewrote."""
    splits = fim_splits(built)
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

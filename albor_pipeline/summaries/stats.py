"""What the statistics stage records (its manifest's `summary`: the headline figures and the
charts), its `## Statistics` section of PROVENANCE.md and its lines in the dataset card."""

from __future__ import annotations

from albor_pipeline.runtime.layout import STATS
from albor_pipeline.runtime.report import Report, table
from albor_pipeline.spec import SPLITS
from albor_pipeline.summaries.provenance import Built


class SplitFacts(Report):
    """A split's headline figures (every source together)."""

    documents: int
    chars_p50: float | None  # None: no document
    chars_p99: float | None
    tokens_p50: float | None  # None: no document, or the corpus recorded no token lengths
    tokens_p99: float | None
    fim_share: float  # documents rewritten as FIM
    pad_fraction: float  # of the split corpus's sequence slots


class Chart(Report):
    path: str  # relative to the data dir
    title: str  # what it shows: the line under it in the card


class StatsSummary(Report):
    splits: dict[str, SplitFacts]
    hygiene_kept: float  # share of the document sources' documents the quality filters kept
    redactions: int  # secrets and PII replaced, at ingest and by hygiene, every source
    near_duplicate_clusters: int
    charts: list[Chart]

    def headline(self) -> dict[str, int | float]:
        """The figures worth plotting across builds, by flat name (`train_tokens_p50`)."""
        figures: dict[str, int | float] = {
            "hygiene_kept": self.hygiene_kept,
            "redactions": self.redactions,
            "near_duplicate_clusters": self.near_duplicate_clusters,
        }
        for split, facts in self.splits.items():
            figures.update({f"{split}_{k}": v for k, v in facts.model_dump().items() if v is not None})
        return figures


FACTS = ("documents", "chars p50", "chars p99", "tokens p50", "tokens p99", "FIM share", "pad fraction")


def provenance_section(built: Built) -> list[str]:
    """`## Statistics`: the headline figures per split, then a link to each chart."""
    summary = built.summary(STATS, StatsSummary)
    if summary is None:
        return []
    splits = sorted(summary.splits.items(), key=lambda kv: SPLITS.index(kv[0]))  # the manifest sorts keys
    rows = [[split, *(v if v is not None else "" for v in f.model_dump().values())] for split, f in splits]
    return [
        "## Statistics",
        "",
        f"Documents kept by the quality filters: {summary.hygiene_kept:.2%}; redactions: {summary.redactions}; "
        f"near-duplicate clusters: {summary.near_duplicate_clusters}. Distributions, funnel and per-source "
        "figures in `stats/stats.json`.",
        "",
        *table(["split", *FACTS], rows),
        *(f"- [{c.title}]({c.path})" for c in summary.charts),
        "",
    ]


def card_charts(summary: StatsSummary | None) -> list[str]:
    """The card's `Statistics` lines: each chart, shown, with its title."""
    if summary is None:
        return ["No statistics built yet."]
    return [line for c in summary.charts for line in ("", f"![{c.title}]({c.path})")][1:]

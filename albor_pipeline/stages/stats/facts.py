"""`stats/stats.json`: every figure the statistics stage computes, typed (the charts draw these)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from albor_pipeline.runtime.distribution import Distribution
from albor_pipeline.runtime.report import Report
from albor_pipeline.summaries.hygiene import SignalHistogram


class LengthFacts(Report):
    """Documents of a split's mix (a repeated document counts each time), before FIM."""

    documents: int
    fim_documents: int
    chars: Distribution | None  # characters (Unicode code points) of the original text; None: no document
    tokens: Distribution | None  # tokens as packed (EOS, BOS and FIM sentinels included); None: not recorded


class SplitLengths(Report):
    all: LengthFacts
    sources: dict[str, LengthFacts]


class Funnel(Report):
    """A document source from ingest to the splits: each step's documents, removals by reason."""

    skipped_at_ingest: dict[str, int]  # files (code) or rows (data files), by reason
    ingested: int
    removed: dict[str, int]  # by the quality filters (or for secrets, `redact: drop`), by reason
    kept: int
    exact_duplicates: int  # dropped as a copy of an earlier document (first source in spec order wins)
    near_duplicates: int
    decontaminated: int
    splits: dict[str, int]


class Redactions(Report):
    """Secrets and PII found in a source, by type: redacted, dropped or only counted, per `mode`."""

    mode: str
    at_ingest: dict[str, int]
    hygiene: dict[str, int]


class FimFacts(Report):
    enabled: bool
    rate: float  # the configured rate (0 when disabled)
    rows: int
    fim_rows: int
    share: float
    sources: dict[str, float]  # each source's share of FIM rows


class SequenceFacts(Report):
    """A packed corpus: its sequences' fill, what packing padded, dropped and cut."""

    seq_len: int
    sequences: int
    tokens: int
    dropped_tokens: int
    padded_tokens: int
    pad_fraction: float
    cut_fraction: float
    fill: Distribution | None  # non-pad tokens per sequence; None without Parquet sequences


class Statistics(Report):
    lengths: dict[str, SplitLengths]
    funnel: dict[str, Funnel]
    redactions: dict[str, Redactions]
    near_duplicate_clusters: dict[str, int] | None  # members -> clusters of that size; None: near dedup off
    fim: dict[str, FimFacts]
    sequences: dict[str, SequenceFacts]
    signals: dict[str, list[SignalHistogram]] = {}  # source -> each numeric rule's signal (hygiene's)


def funnel_rows(stats: Statistics) -> list[tuple[str, str, Callable[[str], int]]]:
    """(label, kind, count of a source) of every funnel step any source has, in order."""
    reasons_ingest = sorted({r for f in stats.funnel.values() for r in f.skipped_at_ingest})
    reasons = sorted({r for f in stats.funnel.values() for r in f.removed})
    splits = list(next(iter(stats.funnel.values())).splits) if stats.funnel else []
    F = stats.funnel
    return [
        *(
            (f"skipped at ingest: {r}", "removed", lambda n, r=r: F[n].skipped_at_ingest.get(r, 0))
            for r in reasons_ingest
        ),
        ("ingested", "kept", lambda n: F[n].ingested),
        *((f"filtered: {r}", "removed", lambda n, r=r: F[n].removed.get(r, 0)) for r in reasons),
        ("kept by the filters", "kept", lambda n: F[n].kept),
        ("exact duplicates", "removed", lambda n: F[n].exact_duplicates),
        ("near duplicates", "removed", lambda n: F[n].near_duplicates),
        ("decontaminated", "removed", lambda n: F[n].decontaminated),
        *((f"→ {s}", "split", lambda n, s=s: F[n].splits.get(s, 0)) for s in splits),
    ]


def funnel_table(stats: Statistics) -> list[dict[str, str | int]]:
    """The funnel as a table, a row per step and a column per source (the asset's metadata)."""
    return [{"step": label, **{n: count(n) for n in stats.funnel}} for label, _, count in funnel_rows(stats)]


class ChartSpec(NamedTuple):
    """A chart of the card: its file in the stats dir, its title (the card's line), and the
    fields of `Statistics` it draws from."""

    name: str
    title: str
    draws: tuple[str, ...]


COLOURS = ("funnel", "redactions")  # the sources' names, whose order gives each its colour
CHARTS = (
    ChartSpec("lengths_chars.png", "Document length in characters per split and source", ("lengths", *COLOURS)),
    ChartSpec("lengths_tokens.png", "Document length in tokens per split and source", ("lengths", *COLOURS)),
    ChartSpec("funnel.png", "Filter funnel per document source, removals by reason", ("funnel",)),
    ChartSpec("redactions.png", "Secrets and PII found, by source and type", COLOURS),
    ChartSpec("signals.png", "Quality signals per source, each rule's threshold drawn", ("signals",)),
    ChartSpec("near_duplicates.png", "Near-duplicate clusters by size", ("near_duplicate_clusters",)),
    ChartSpec("fim.png", "Fill-in-the-Middle share per split and source", ("fim", *COLOURS)),
    ChartSpec("sequences.png", "Sequence fill and padding per corpus", ("sequences",)),
)
"""Every chart, in the card's order (`stats/charts.py` draws each by its name)."""


def chart_input(stats: Statistics, chart: ChartSpec) -> Statistics:
    """What `chart` draws: `stats` with every field it does not draw emptied, so the task that
    draws it is reused while its own figures stay the same."""
    unread: dict[str, Any] = {
        f: None if f == "near_duplicate_clusters" else {} for f in Statistics.model_fields if f not in chart.draws
    }
    return stats.model_copy(update=unread)

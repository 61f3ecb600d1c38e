"""`stats/stats.json`: every figure the statistics stage computes, typed (the charts draw these)."""

from __future__ import annotations

from collections.abc import Callable

from albor_pipeline.runtime.distribution import Distribution
from albor_pipeline.runtime.report import Report


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

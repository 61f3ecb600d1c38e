"""What hygiene records of a source (its manifest's `summary`), and its PROVENANCE.md section."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from albor_pipeline.runtime.layout import filtered_stage
from albor_pipeline.runtime.report import Report, counts, table
from albor_pipeline.spec import HygieneSpec, RedactMode
from albor_pipeline.summaries.ingest import ingested
from albor_pipeline.summaries.provenance import Built


class SignalHistogram(Report):
    """A thresholded signal's distribution over a source's documents, and its rule."""

    signal: str
    rule: str  # the reason its rule gives (`gopher_repetition.dup_line_frac`)
    op: str  # a document is dropped where `signal op threshold` holds
    threshold: float
    log: bool  # bins on a log scale (of the value + 1): lengths and counts with a long tail
    edges: list[float]
    counts: list[int]
    dropped: int  # documents this rule dropped (the first rule to hold)


class HygieneSummary(Report):
    documents_in: int
    kept: int
    scanned: int = 0  # documents whose text hygiene scored or redacted in this build (the rest: reused)
    removed: dict[str, int]  # reason -> documents
    findings: dict[str, int]  # finding type -> count
    redacted_documents: int
    examples: dict[str, list[str]]  # reason -> a few file paths
    signals: list[SignalHistogram] = []  # each numeric rule's signal, with its threshold


@dataclass(frozen=True)
class HygieneRow:
    """One source's hygiene, with the secrets its ingestion already redacted (counts only)."""

    source: str
    redact: RedactMode
    summary: HygieneSummary
    secrets_at_ingest: Mapping[str, int]


def hygiene_rows(built: Built) -> list[HygieneRow]:
    """Each filtered source's hygiene, with the secrets its ingestion already redacted."""
    summaries, rows = ingested(built), []
    for name in built.names():
        stage = filtered_stage(name)
        if summary := built.summary(stage, HygieneSummary):
            secrets = summaries[name].secrets if name in summaries else {}
            rows.append(HygieneRow(name, built.settings(stage, HygieneSpec).redact, summary, secrets))
    return rows


def provenance_section(built: Built) -> list[str]:
    """`## Hygiene`: per document source, input = kept + removed by reason; the secrets ingestion
    redacted and hygiene's findings, by type (counts only). Nothing when no source had hygiene."""
    rows = hygiene_rows(built)
    if not rows:
        return []
    header = [
        "source",
        "redact",
        "documents in",
        "kept",
        "removed",
        "secrets (at ingest)",
        "findings",
        "redacted documents",
    ]
    body = [
        [
            r.source,
            r.redact.value,
            r.summary.documents_in,
            r.summary.kept,
            counts(r.summary.removed),
            counts(r.secrets_at_ingest),
            counts(r.summary.findings),
            r.summary.redacted_documents,
        ]
        for r in rows
    ]
    return ["## Hygiene", "", *table(header, body)]

"""What ingestion records of a source (its manifest's `summary`), and how PROVENANCE.md and
the dataset card show it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field

from albor_pipeline.runtime.layout import ingested_stage
from albor_pipeline.runtime.report import Report, counts, table
from albor_pipeline.summaries.provenance import Built


class Removed(Report):
    """A source's removal requests as applied: the list's SHA-256 and how many documents it
    left out (never which)."""

    rules_sha256: str  # canonical JSON of the source's `remove:` entry, its sha256_file by its bytes' SHA-256
    removed: int


class IngestSummary(Report):
    files: int
    documents: int
    shards: int
    text_bytes: int
    skipped: dict[str, int]  # reason -> files (or rows)
    cleanup: dict[str, int]  # chat: what cleaning changed, by action
    secrets: dict[str, int]  # redacted (or dropped) at ingest, by type (an eval set's PII too): counts, never values
    licences: dict[str, int]  # licence -> packages (or 1 for a root LICENSE file)
    removal: Removed | None = Field(None, exclude_if=lambda v: v is None)  # with a `remove:` entry

    @property
    def licence(self) -> str:
        """The one licence, or `N packages: a (n), b (m)` by frequency; `unknown` if none was found."""
        licences = self.licences or {"unknown": 1}
        if len(licences) == 1:
            return next(iter(licences))
        top = sorted(licences.items(), key=lambda kv: -kv[1])
        return f"{sum(licences.values())} packages: " + ", ".join(f"{k} ({v})" for k, v in top)


Sources = Sequence[Mapping[str, Any]]
"""The spec's `sources` entries (as JSON: name, kind, path)."""


def ingested(built: Built) -> dict[str, IngestSummary]:
    """Each ingested source's summary, in spec order."""
    return {n: s for n in built.names() if (s := built.summary(ingested_stage(n), IngestSummary))}


def provenance_section(built: Built) -> list[str]:
    """`## Sources`: every spec source, with what its ingestion counted (blank if not built)."""
    summaries, rows = ingested(built), []
    for src in built.sources:
        s = summaries.get(src["name"])
        facts = [s.files, s.documents, s.text_bytes, counts(s.skipped)] if s else ["", "", "", "none"]
        rows.append([src["name"], src["kind"], f"`{src['path']}`", *facts])
    header = ["source", "kind", "path", "files", "documents", "text bytes", "skipped"]
    return ["## Sources", "", *table(header, rows)]


def chat_cleanup(names: Sequence[str], summaries: Mapping[str, IngestSummary]) -> list[list[Any]]:
    """Per chat source: conversations kept, and what cleanup changed and skipped (for the chat section)."""
    rows: list[list[Any]] = []
    for name in names:
        s = summaries.get(name)
        rows.append([name, s.documents, counts({**s.cleanup, **s.skipped})] if s else [name, "", "none"])
    return rows


def card_sources(sources: Sources, summaries: Mapping[str, IngestSummary]) -> list[dict[str, Any]]:
    """The card's `Sources and licences` rows."""
    return [
        {
            "source": src["name"],
            "kind": src["kind"],
            "path": f"`{src['path']}`",
            "documents": s.documents if (s := summaries.get(src["name"])) else "",
            "licence": s.licence if s else "unknown",
        }
        for src in sources
    ]

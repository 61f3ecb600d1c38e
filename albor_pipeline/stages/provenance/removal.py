"""Removal requests in PROVENANCE.md and the dataset card: that they were applied, the request
list's SHA-256 and the counts, from the ingestion and `documents` summaries; never what was
removed (no content, no path, no document's SHA-256)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from albor_pipeline.runtime.report import table
from albor_pipeline.summaries.documents import DocumentsSummary, Removals
from albor_pipeline.summaries.ingest import IngestSummary, Removed
from albor_pipeline.text.removal import canonical_sha256


@dataclass(frozen=True)
class AppliedRemovals:
    """What the build removed on request: per source as ingestion recorded it, and `documents`' copies."""

    sources: dict[str, Removed]
    documents: Removals | None
    threshold: float | None  # near dedup's Jaccard threshold, when it ran

    @classmethod
    def of(
        cls, ingested: Mapping[str, IngestSummary], documents: DocumentsSummary | None, near: dict[str, Any] | None
    ) -> AppliedRemovals | None:
        """From the sources' ingestion summaries, the `documents` summary and its recorded
        `near_dedup` settings; None when no source had removal requests."""
        sources = {name: s.removal for name, s in ingested.items() if s.removal is not None}
        if not sources:
            return None
        threshold = near["threshold"] if documents and near and near.get("enabled") else None
        return cls(sources, documents.removal if documents else None, threshold)

    @property
    def list_sha256(self) -> str:
        """SHA-256 of the request list: canonical JSON of each source's request SHA-256."""
        return canonical_sha256({name: r.rules_sha256 for name, r in self.sources.items()})

    @property
    def at_ingest(self) -> int:
        return sum(r.removed for r in self.sources.values())

    def copies(self) -> tuple[int, int]:
        """(exact copies, near-duplicates) removed by `documents` from every source."""
        d = self.documents
        return (sum(d.exact.values()), sum(d.near.values())) if d else (0, 0)

    def sentence(self) -> str:
        exact, near = self.copies()
        rule = f"verified Jaccard >= {self.threshold}" if self.threshold is not None else "near dedup off: exact only"
        return (
            f"Removal requests (`remove:` in the spec) were applied: request list SHA-256 `{self.list_sha256}`. "
            f"{self.at_ingest} document(s) removed at ingestion; {exact} exact copies and {near} near-duplicates "
            f"({rule}) removed from the sources by `documents`. Neither this card nor PROVENANCE.md names a "
            "removed document."
        )


def provenance_section(applied: AppliedRemovals | None, names: Sequence[str]) -> list[str]:
    """`## Removal requests`, per source (`names`, in spec order): its requests' SHA-256 and
    what each step removed; nothing without requests."""
    if applied is None:
        return []
    d = applied.documents
    rows = [
        [
            name,
            f"`{applied.sources[name].rules_sha256}`" if name in applied.sources else "",
            applied.sources[name].removed if name in applied.sources else "",
            d.exact.get(name, 0) if d else "",
            d.near.get(name, 0) if d else "",
        ]
        for name in names
        if name in applied.sources or (d and (name in d.exact or name in d.near))
    ]
    header = ["source", "requests SHA-256", "removed at ingestion", "exact copies removed", "near-duplicates removed"]
    return ["## Removal requests", "", applied.sentence(), "", *table(header, rows)]

"""What `documents` (and `conversations`) record (the manifest's `summary`): rows per split,
exact and near duplicates, decontamination; and its sections of PROVENANCE.md, `## Splits` and
`## Removal requests`.

Removal requests are shown, here and in the dataset card, as applied: the request list's
SHA-256 and the counts, from the ingestion and `documents` summaries; never what was removed
(no content, no path, no document's SHA-256)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field, field_serializer, field_validator

from albor_pipeline.runtime.layout import DOCUMENTS
from albor_pipeline.runtime.report import Report, counts, table
from albor_pipeline.spec import HoldoutSpec, NearDedupSpec
from albor_pipeline.summaries.ingest import IngestSummary, Removed, ingested
from albor_pipeline.summaries.provenance import Built
from albor_pipeline.text.removal import canonical_sha256


class NearDuplicates(Report):
    """MinHash LSH near-dedup: removed per source, the clusters, a few verified pairs."""

    removed: dict[str, int]  # source -> documents removed (none with `remove: false`)
    clusters: int
    cluster_sizes: dict[str, int]  # members -> clusters of that size
    candidate_pairs: int  # LSH candidates
    verified_pairs: int  # at or above the Jaccard threshold
    examples: list[tuple[str, str, float]]  # (file, file, Jaccard)


class BenchmarkFacts(Report):
    items: int
    ngrams: int
    too_short: int  # items with no n-gram of the length
    train_dropped: int


class Decontaminated(Report):
    ngram: int
    benchmarks: dict[str, BenchmarkFacts]
    dropped: dict[str, int]  # source -> train documents dropped
    examples: list[tuple[str, str]]  # (file, benchmarks)


class Removals(Report):
    """Removal requests in `documents`: copies and near-duplicates of the documents removed at
    ingestion, removed from every source (counts; examples name the removed document by its
    SHA-256 only)."""

    tombstones: int  # documents removed at ingestion, over the sources read
    exact: dict[str, int]  # source -> exact copies removed
    near: dict[str, int]  # source -> near-duplicates removed (verified Jaccard >= threshold)
    examples: list[tuple[str, str]]  # (file, SHA-256 of the removed document it copies)


class Redaction(Report):
    """A chat source's redaction, shown with the conversations (counts only)."""

    secrets: dict[str, int]  # at ingest
    findings: dict[str, int]  # by hygiene
    redacted_conversations: int


class DocumentsSummary(Report):
    rows: dict[str, dict[str, int]]  # split -> source -> rows
    duplicates: dict[str, int]  # "kept_source <- dropped_source" -> documents
    near_duplicates: NearDuplicates | None = None  # written `{}` when near dedup is off
    decontaminated: Decontaminated | None = None  # written `{}` without benchmarks
    redaction: dict[str, Redaction] = Field(default_factory=dict, exclude_if=lambda v: not v)  # chat sources
    removal: Removals | None = Field(None, exclude_if=lambda v: v is None)  # with removal requests

    @field_validator("near_duplicates", "decontaminated", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == {} else value

    @field_serializer("near_duplicates", "decontaminated")
    def _none_is_empty(self, value: Report | None) -> dict[str, Any]:
        return value.to_json() if value is not None else {}


def provenance_section(built: Built) -> list[str]:
    """`## Splits` when `documents` was built, then `## Removal requests` when the spec had any."""
    return _splits(built) + _removals(applied_removals(built), built.names())


def _splits(built: Built) -> list[str]:
    """`## Splits`: the holdout, duplicates, near duplicates, decontamination and rows per split
    of the `documents` stage (near duplicates when it ran near dedup)."""
    summary = built.summary(DOCUMENTS, DocumentsSummary)
    if summary is None:
        return []
    holdout, sources = built.settings(DOCUMENTS, HoldoutSpec), built.names()
    near = NearDedupSpec.model_validate(n) if (n := built.config(DOCUMENTS).get("near_dedup")) else None
    lines = [
        "## Splits",
        "",
        f"Holdout by content hash: val {holdout.val_fraction}, test {holdout.test_fraction}, seed "
        f"{holdout.seed}. Duplicates dropped: {sum(summary.duplicates.values())}.",
        "",
    ]
    if summary.near_duplicates and near:
        found = summary.near_duplicates
        sizes = ", ".join(f"{k}: {v}" for k, v in found.cluster_sizes.items()) or "none"
        lines += [
            f"Near duplicates (MinHash LSH, verified Jaccard >= {near.threshold}): {found.clusters} clusters "
            f"(sizes {sizes}); removed {counts(found.removed)}; {found.candidate_pairs} LSH candidates, "
            f"{found.verified_pairs} verified.",
            "",
        ]
    if decon := summary.decontaminated:
        lines += [
            f"Decontamination: train documents sharing a {decon.ngram}-word n-gram with a benchmark item"
            f" are dropped. Per source: {counts(decon.dropped)}.",
            "",
            *table(
                ["benchmark", "items", "too short", "n-grams", "train documents dropped"],
                [[name, b.items, b.too_short, b.ngrams, b.train_dropped] for name, b in decon.benchmarks.items()],
            ),
        ]
    rows = [[split, *(per_source.get(name, 0) for name in sources)] for split, per_source in summary.rows.items()]
    return lines + table(["split", *sources], rows)


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


def applied_removals(built: Built) -> AppliedRemovals | None:
    """The removal requests the build applied (None: the spec had none)."""
    documents = built.summary(DOCUMENTS, DocumentsSummary)
    return AppliedRemovals.of(
        ingested(built), documents, built.config(DOCUMENTS).get("near_dedup") if documents else None
    )


def _removals(applied: AppliedRemovals | None, names: Sequence[str]) -> list[str]:
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

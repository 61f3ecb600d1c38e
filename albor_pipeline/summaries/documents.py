"""What `documents` (and `conversations`) record (the manifest's `summary`): rows per split,
exact and near duplicates, decontamination; and the `## Splits` section of PROVENANCE.md."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field, field_serializer, field_validator

from albor_pipeline.runtime.report import Report, counts, table
from albor_pipeline.spec import HoldoutSpec, NearDedupSpec


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


def provenance_section(
    holdout: HoldoutSpec, near: NearDedupSpec | None, summary: DocumentsSummary, sources: Sequence[str]
) -> list[str]:
    """`## Splits`: the holdout, duplicates, near duplicates, decontamination and rows per split
    of the `documents` stage (`near`: its near-dedup settings, when it ran them)."""
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

"""The quality classifier's summary: what it trained on and how well it does held out."""

from __future__ import annotations

from albor_pipeline.runtime.layout import QUALITY_CLASSIFIER
from albor_pipeline.runtime.markdown import markdown_table
from albor_pipeline.runtime.report import Report
from albor_pipeline.summaries.provenance import Built


class ClassifierSummary(Report):
    documents: dict[str, int]  # class -> documents used (train and held out)
    held_out: int
    precision: float | None  # at a score of 0.5, on the held-out documents
    recall: float | None
    auc: float | None  # None when the held-out documents are of one class
    features: int
    ngrams: int


def metric_rows(summary: ClassifierSummary) -> list[dict[str, object]]:
    """The held-out figures, as the card and Dagster's metadata show them."""
    return [
        {
            "documents (positive / negative)": f"{summary.documents.get('positive', 0):,} / "
            f"{summary.documents.get('negative', 0):,}",
            "held out": summary.held_out,
            "precision": _shown(summary.precision),
            "recall": _shown(summary.recall),
            "AUC": _shown(summary.auc),
        }
    ]


def _shown(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def provenance_section(built: Built) -> list[str]:
    """PROVENANCE.md's quality classifier: its training documents and held-out figures."""
    summary = built.summary(QUALITY_CLASSIFIER, ClassifierSummary)
    if summary is None:
        return []
    return ["## Quality classifier", "", markdown_table(metric_rows(summary)), ""]

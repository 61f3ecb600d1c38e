"""What a packed corpus records (its manifest's `summary`), its PROVENANCE.md sections and its
rows in the dataset card."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from albor_pipeline.runtime.distribution import Distribution
from albor_pipeline.runtime.report import Report, table
from albor_pipeline.spec import CorpusSpec


class SourceFacts(Report):
    """A source's share of a corpus (`SourceAccounting`)."""

    documents: int
    unique_documents: int
    max_repeat: int
    mean_repeat: float
    tokens: int
    token_share: float
    epochs: float  # the source's tokens over the tokens of its unique documents
    token_lengths: Distribution | None = None  # its documents' tokens (EOS, BOS and FIM sentinels included)


class CorpusSummary(Report):
    documents: int
    sequences: int
    tokens: int
    dropped_tokens: int
    padded_tokens: int
    # Boundary-aware training cares how often packing splits a document and pads.
    cut_documents: int
    cut_fraction: float
    pad_fraction: float
    sources: dict[str, SourceFacts]
    token_lengths: Distribution | None = None  # every document's tokens, as `SourceFacts.token_lengths`


@dataclass(frozen=True)
class Corpus:
    """A built corpus: `train` or `long_train`, its settings and its summary."""

    name: str
    settings: CorpusSpec
    summary: CorpusSummary


SOURCE_FACTS = ("documents", "unique", "max repeat", "mean repeat", "tokens", "token share", "epochs")


def provenance_section(corpora: Sequence[Corpus]) -> list[str]:
    """`## Corpora` and `## Corpora by source`."""
    if not corpora:
        return []
    header = ["split", "seq_len", "documents", "sequences", "tokens", "dropped", "padded", "docs cut", "pad fraction"]
    lines = ["## Corpora", "", *table(header, [_row(c.name, c.settings.seq_len, c.summary) for c in corpora])]
    by_source = [
        [c.name, name, f.documents, f.unique_documents, f.max_repeat, f.mean_repeat, f.tokens, f.token_share, f.epochs]
        for c in corpora
        for name, f in c.summary.sources.items()
    ]
    if by_source:
        lines += [
            "## Corpora by source",
            "",
            "Epochs: a source's tokens over the tokens of its unique documents.",
            "",
            *table(["split", "source", *SOURCE_FACTS], by_source),
        ]
    return lines


def _row(name: str, seq_len: int, s: CorpusSummary) -> list[Any]:
    facts = (s.documents, s.sequences, s.tokens, s.dropped_tokens, s.padded_tokens, s.cut_fraction, s.pad_fraction)
    return [name, seq_len, *facts]


HF_SPLIT = {"train": "train", "val": "validation", "test": "test"}


def hf_split(name: str) -> str:
    """The Hugging Face split of corpus `name` (`long_val` -> `validation`)."""
    return HF_SPLIT[name.removeprefix("long_")]


def card_corpora(corpora: Sequence[Corpus]) -> list[dict[str, Any]]:
    """The card's `Configs` rows."""
    return [
        {
            "config": "corpus_long" if c.name.startswith("long_") else "corpus",
            "split": hf_split(c.name),
            "seq_len": c.settings.seq_len,
            "sequences": c.summary.sequences,
            "tokens": c.summary.tokens,
            "documents": c.summary.documents,
        }
        for c in corpora
    ]

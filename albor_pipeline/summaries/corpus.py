"""What a packed corpus records (its manifest's `summary`), its PROVENANCE.md sections and its
rows in the dataset card."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from albor_pipeline.runtime.distribution import Distribution
from albor_pipeline.runtime.layout import corpus_names, corpus_stage
from albor_pipeline.runtime.markdown import markdown_table
from albor_pipeline.runtime.report import Report, table
from albor_pipeline.spec import MAX_EPOCHS, SPLITS, CorpusSpec
from albor_pipeline.summaries.provenance import Built


class SourceFacts(Report):
    """A source's share of a corpus (`SourceAccounting`)."""

    documents: int
    unique_documents: int
    max_repeat: int
    mean_repeat: float
    tokens: int
    token_share: float
    # The source's documents in the split's pool (the mix's input rows) and its epochs: the
    # documents here over those, the copies of its unique data the corpus holds. None for a
    # long subset (its pool is not counted) and in a summary written before they were.
    pool_documents: int | None = None
    epochs: float | None = None
    token_lengths: Distribution | None = None  # its documents' tokens (EOS, BOS and FIM sentinels included)


class CorpusBudget(Report):
    """A split sized by `mix.<split>.tokens`: the budget, what was packed, and the mix's
    characters-per-token estimate next to what the trained tokenizer gave."""

    tokens: int
    packed_tokens: int  # non-pad tokens in the Parquet sequences
    deviation: float  # packed_tokens / tokens - 1
    mix_tokens: int  # what the whole mix encodes to, before the cut
    estimated_chars_per_token: float  # the mix's plan
    measured_chars_per_token: float  # the mix's characters over mix_tokens (EOS, FIM sentinels in)


class CheckpointRemovals(Report):
    """What one registered checkpoint (`audit.checkpoints`) saw of the documents removal
    requests name, in the corpus version it read: counts only."""

    state: str
    step: int
    version: str
    requested: int  # documents of its version the requests name
    seen: int  # of them, served before the checkpoint
    note: str = ""  # why it could not be answered (its version's facts are not kept)


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
    budget: CorpusBudget | None = None
    warnings: list[str] = []
    token_lengths: Distribution | None = None  # every document's tokens, as `SourceFacts.token_lengths`
    # With removal requests and registered checkpoints: which checkpoints saw what they remove.
    checkpoints: list[CheckpointRemovals] = Field(default_factory=list, exclude_if=lambda v: not v)


@dataclass(frozen=True)
class Corpus:
    """A built corpus: `train` or `long_train`, its settings and its summary."""

    name: str
    settings: CorpusSpec
    summary: CorpusSummary


SOURCE_FACTS = (
    "documents",
    "unique",
    "max repeat",
    "mean repeat",
    "tokens",
    "token share",
    "pool documents",
    "epochs",
)
EPOCHS_TEXT = (
    "Epochs: a source's documents in the corpus over its documents in the split's pool (the mix's input "
    f"rows), the copies of its unique data the corpus holds; past {MAX_EPOCHS}, repeated data is worth much "
    "less than new data (Muennighoff et al., 2023)."
)


def _blank(value: Any) -> Any:
    return "" if value is None else value


def corpora(built: Built) -> list[Corpus]:
    """The built corpora (`train`, ..., `long_train`, ...)."""
    return [
        Corpus(name, built.settings(corpus_stage(name), CorpusSpec), s)
        for name in corpus_names(SPLITS)
        if (s := built.summary(corpus_stage(name), CorpusSummary))
    ]


def provenance_section(built: Built) -> list[str]:
    """`## Corpora`, each budget and warning, and `## Corpora by source`."""
    found = corpora(built)
    if not found:
        return []
    header = ["split", "seq_len", "documents", "sequences", "tokens", "dropped", "padded", "docs cut", "pad fraction"]
    lines = ["## Corpora", "", *table(header, [_row(c.name, c.settings.seq_len, c.summary) for c in found])]
    notes = [f"- {c.name}: {line}" for c in found for line in _budget_lines(c.summary) + c.summary.warnings]
    lines += [*notes, ""] if notes else []
    by_source = [[c.name, name, *_facts(f)] for c in found for name, f in c.summary.sources.items()]
    if by_source:
        lines += ["## Corpora by source", "", EPOCHS_TEXT, "", *table(["split", "source", *SOURCE_FACTS], by_source)]
    return lines + _checkpoints(found)


def _checkpoints(found: list[Corpus]) -> list[str]:
    """`## Checkpoints that saw removed documents`: per registered checkpoint, counts only."""
    rows = [
        [c.name, f"`{r.state}`", r.step, r.version, r.requested, r.seen, r.note]
        for c in found
        for r in c.summary.checkpoints
    ]
    if not rows:
        return []
    header = ["split", "checkpoint", "step", "version", "documents requested", "seen by it", "note"]
    return [
        "## Checkpoints that saw removed documents",
        "",
        "The registered checkpoints (`audit.checkpoints`) that trained on the corpus versions before the "
        "removal requests applied: how many of the documents the requests name each was served. "
        "`albor exposure remove --state <checkpoint>` names them.",
        "",
        *table(header, rows),
    ]


def _facts(f: SourceFacts) -> list[Any]:
    facts = (f.documents, f.unique_documents, f.max_repeat, f.mean_repeat, f.tokens, f.token_share)
    return [*facts, _blank(f.pool_documents), _blank(f.epochs)]


def _budget_lines(s: CorpusSummary) -> list[str]:
    """The budget in words: asked, packed, and the mix's estimate against the measurement."""
    b = s.budget
    if b is None:
        return []
    return [
        f"budget {b.tokens:,} tokens, packed {b.packed_tokens:,} ({b.deviation:+.3%}), counted with the trained "
        f"tokenizer; the mix was planned at {b.estimated_chars_per_token:g} chars/token and encodes at "
        f"{b.measured_chars_per_token:g} ({b.mix_tokens:,} tokens before the cut)"
    ]


def _row(name: str, seq_len: int, s: CorpusSummary) -> list[Any]:
    facts = (s.documents, s.sequences, s.tokens, s.dropped_tokens, s.padded_tokens, s.cut_fraction, s.pad_fraction)
    return [name, seq_len, *facts]


HF_SPLIT = {"train": "train", "val": "validation", "test": "test"}


def hf_split(name: str) -> str:
    """The Hugging Face split of corpus `name` (`long_val` -> `validation`)."""
    return HF_SPLIT[name.removeprefix("long_")]


TOKENS_PER_PARAMETER = 20  # Chinchilla's compute-optimal ratio (Hoffmann et al., 2022)


def card_size(corpora: Sequence[Corpus]) -> list[str]:
    """The card's `Size and epochs`: the model the train corpus supports at 20 tokens per
    parameter, its budget, each source's tokens and epochs, and the warnings."""
    train = next((c.summary for c in corpora if c.name == "train"), None)
    if train is None:
        return []
    packed = train.tokens - train.dropped_tokens
    lines = [
        f"The train corpus packs {packed:,} tokens: at {TOKENS_PER_PARAMETER} tokens per parameter (Chinchilla, "
        f"Hoffmann et al., 2022) it supports a model of about {_count(packed / TOKENS_PER_PARAMETER)} parameters.",
        "",
        *(f"- {line}" for line in _budget_lines(train) + train.warnings),
    ]
    rows = [
        {"source": name, "tokens": f.tokens, "token share": f.token_share, "epochs": _blank(f.epochs)}
        for name, f in train.sources.items()
    ]
    return [*lines, "", EPOCHS_TEXT, "", markdown_table(rows)] if rows else lines


def _count(n: float) -> str:
    """1.2M, 350K, 2.3B: a parameter count as people say it."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"


CONFIG_TOKENS = (
    "`tokens`: the non-pad ids a config's Parquet rows hold (a remainder `drop` left out, so "
    "`sequences` x `seq_len` when nothing is padded); the Megatron and nanoGPT streams hold all "
    "of the split's `stream tokens`."
)


def card_corpora(corpora: Sequence[Corpus]) -> list[dict[str, Any]]:
    """The card's `Configs` rows: what each config's files hold."""
    return [
        {
            "config": "corpus_long" if c.name.startswith("long_") else "corpus",
            "split": hf_split(c.name),
            "seq_len": c.settings.seq_len,
            "sequences": c.summary.sequences,
            "tokens": c.summary.tokens - c.summary.dropped_tokens if c.summary.sequences else 0,
            "stream tokens": c.summary.tokens,
            "documents": c.summary.documents,
        }
        for c in corpora
    ]


def card_bos(corpora: Sequence[Corpus], renders: bool) -> str:
    """The BOS convention in words: whether every corpus document starts with `<s>`, against the
    SFT and eval sequences (`renders`: the build made some), which always do."""
    bos = {c.settings.bos for c in corpora}
    if bos == {True}:
        rest = ", as every SFT and eval sequence does" if renders else ""
        return f"Every corpus document starts with `<s>` (`corpus.bos`) and ends with `</s>`{rest}."
    where = "no" if bos == {False} else "not every"
    line = f"{where.capitalize()} corpus document starts with `<s>` (`corpus.bos: false`); each ends with `</s>`."
    if renders:
        line += (
            " SFT and eval sequences start with `<s>`: a model pretrained on this corpus meets an untrained "
            "embedding at their first position."
        )
    return line

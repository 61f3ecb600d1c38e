"""The document ledger: what a stage did to the documents it did not pass on unchanged.

A stage's outputs already say which documents it kept (their rows carry source, file and
SHA-256), so the ledger records only the rest, in the tasks that touch each document: a
file ingest skipped and why, a document a filter removed (the rule), a redacted document
(counts by type, and its new SHA-256), an exact or near duplicate (of what), a document
decontamination dropped (which benchmark). Each stage writes its rows as ledger shards of
its own output set (`_ledger/<the shard whose documents it accounts for>`: Arrow and the
shard readers skip a `_` directory, so reading the set never reads its ledger), so they
commit, are hashed, reused and shipped with it; `albor trace` joins them with the outputs.
With `audit.keep_removed` a removed document's text (after redaction: never a secret)
rides along for a reviewer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

LEDGER = "_ledger"  # the subdirectory of a stage's output set holding its ledger shards
SIGNALS = "_signals"  # hygiene's: each document's quality signals (stages/hygiene/families.py)
PAGES = "_pages"  # a web source's ingestion: each kept page's URL, record and date (stages/ingest/web.py)
TEXTS = "_text"  # hygiene's: every ingested document after redaction, which its output's views point into
LEDGER_SCHEMA = pa.schema(
    [
        ("source", pa.string()),
        ("file", pa.string()),
        ("sha256", pa.string()),  # the document as the stage read it (null: a file never read)
        ("fate", pa.string()),  # skipped | filtered | redacted | duplicate | near_duplicate | decontaminated | removed
        ("detail", pa.string()),  # the rule, reason, counts or what it duplicates
        ("sha256_out", pa.string()),  # the document as the stage wrote it, when it changed it
        ("text", pa.string()),  # a removed document's text, with `audit.keep_removed` (else null)
    ]
)
KEPT = "kept"


@dataclass
class LedgerRows:
    """A task's ledger rows, column by column (what it writes as one ledger shard)."""

    cols: dict[str, list[str | None]] = field(default_factory=lambda: {n: [] for n in LEDGER_SCHEMA.names})

    def add(
        self,
        source: str,
        file: str,
        sha256: str | None,
        fate: str,
        detail: str = "",
        sha256_out: str | None = None,
        text: str | None = None,
    ) -> None:
        for name, value in zip(LEDGER_SCHEMA.names, (source, file, sha256, fate, detail, sha256_out, text)):
            self.cols[name].append(value)

    def extend(self, other: LedgerRows) -> None:
        for name, values in other.cols.items():
            self.cols[name] += values

    def __len__(self) -> int:
        return len(self.cols["fate"])

    def batch(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict(self.cols, schema=LEDGER_SCHEMA)


def ledger_name(shard: str | Path) -> str:
    """The ledger shard accounting for shard `shard`'s documents: `_ledger/<its file name>`."""
    return f"{LEDGER}/{Path(shard).name}"


def is_ledger(path: str | Path) -> bool:
    """Whether a recorded file is a ledger shard (not a shard of documents or sequences)."""
    return LEDGER in Path(path).parts


def is_side(path: str | Path) -> bool:
    """Whether a recorded file sits beside a set's documents or sequences (its ledger,
    hygiene's signals and texts, a web source's pages), not among them."""
    return not {LEDGER, SIGNALS, TEXTS, PAGES}.isdisjoint(Path(path).parts)

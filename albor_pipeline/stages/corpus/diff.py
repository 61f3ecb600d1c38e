"""What changed between two versions of a corpus: documents, sequences, tokens per source,
and what each upstream stage did differently.

Both sides are corpus versions' facts (`versions.py`): the manifest, the pieces, documents
and fates tables, so an old version kept after a rebuild compares as well as a current
one. A document is its (source, file); it is added, removed, or changed (another SHA-256).
A sequence changed when the document pieces it holds differ (another document, offset or
length), or when the tokenizer that encoded it changed (every sequence then differs). A
stage's changes are those of its ledger rows (the fates table): a document it now drops is
removed there, one it no longer drops is added, one it drops or redacts otherwise is
changed. No token is read.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from albor_pipeline.runtime.shards import read_files
from albor_pipeline.stages.corpus.exposure import documents_of, fact
from albor_pipeline.stages.corpus.lineage import PIECES
from albor_pipeline.stages.corpus.versions import SHORT, Version
from albor_pipeline.summaries.corpus import CorpusSummary

REDACTED = "redacted"  # the ledger's fate of a document a stage changed and passed on
EXAMPLES = 20  # documents named per source and kind of change
SEQUENCES_LISTED = 1000  # changed sequences listed (all are counted)


class DocumentChange(BaseModel):
    file: str
    change: str  # added | removed | changed
    sha256_a: str | None
    sha256_b: str | None
    reason: str = ""  # why B left it out or changed it, where B's ledger says


class SourceChanges(BaseModel):
    """One source's documents in one stage, A against B."""

    source: str
    added: int
    removed: int
    changed: int
    examples: list[DocumentChange]  # up to EXAMPLES of each kind, by file


class StageChanges(BaseModel):
    stage: str
    sources: list[SourceChanges]


class CorpusChanges(BaseModel):
    corpus: str
    version_a: str
    version_b: str
    tokenizer_changed: bool
    sequences_a: int
    sequences_b: int
    sequences_changed: int  # of the sequences both have, plus those only one has
    changed_sequences: list[int]  # the first SEQUENCES_LISTED of them
    tokens: dict[str, tuple[int, int]]  # source -> (tokens in A, in B)
    documents: list[SourceChanges]


def document_changes(
    a: pa.Table, b: pa.Table, reasons: dict[tuple[str, str], str] | None = None
) -> list[SourceChanges]:
    """Per source, the documents (`source, file, sha256` rows; a repeated one counts once)
    added, removed and changed from `a` to `b`, each with B's ledger reason (`reasons`). An
    Arrow join: only the documents that differ become Python objects."""
    reasons = reasons or {}
    joined = _by_file(a).join(
        _by_file(b), keys=["source", "file"], join_type="full outer", left_suffix="_a", right_suffix="_b"
    )
    same = pc.fill_null(pc.equal(joined.column("sha256_a"), joined.column("sha256_b")), False)
    differ = joined.filter(pc.invert(same)).sort_by([("source", "ascending"), ("file", "ascending")])
    by_source: dict[str, list[DocumentChange]] = {}
    for row in differ.to_pylist():
        was, now = row["sha256_a"], row["sha256_b"]
        kind = "added" if was is None else "removed" if now is None else "changed"
        reason = reasons.get((row["source"], row["file"]), "")
        change = DocumentChange(file=row["file"], change=kind, sha256_a=was, sha256_b=now, reason=reason)
        by_source.setdefault(row["source"], []).append(change)
    return _counted(by_source)


def _counted(by_source: dict[str, list[DocumentChange]]) -> list[SourceChanges]:
    """Each source's changes counted by kind, with up to EXAMPLES of each kind."""
    out = []
    for source, changes in by_source.items():
        count = {k: sum(c.change == k for c in changes) for k in ("added", "removed", "changed")}
        examples = [c for k in count for c in [x for x in changes if x.change == k][:EXAMPLES]]
        out.append(SourceChanges(source=source, **count, examples=examples))
    return out


def _by_file(table: pa.Table) -> pa.Table:
    """One row per (source, file): a document the mix repeats is one document."""
    grouped = table.group_by(["source", "file"]).aggregate([("sha256", "max")])
    return pa.table({"source": grouped["source"], "file": grouped["file"], "sha256": grouped["sha256_max"]})


def corpus_changes(a: Version, b: Version) -> CorpusChanges:
    """`a` against `b`, two versions of one corpus (or of two data dirs' same corpus)."""
    tokenizer_changed = _tokenizer_sha(a) != _tokenizer_sha(b)
    seq_a, seq_b = _sequence_keys(a), _sequence_keys(b)
    both = min(len(seq_a), len(seq_b))
    differ = np.arange(both) if tokenizer_changed else np.flatnonzero(seq_a[:both] != seq_b[:both])
    changed = np.concatenate([differ, np.arange(both, max(len(seq_a), len(seq_b)))])
    sums_a, sums_b = (CorpusSummary.model_validate(v.manifest.summary).sources for v in (a, b))
    tokens = {
        s: (sums_a[s].tokens if s in sums_a else 0, sums_b[s].tokens if s in sums_b else 0) for s in sums_a | sums_b
    }
    return CorpusChanges(
        corpus=b.stage,
        version_a=a.id[:SHORT],
        version_b=b.id[:SHORT],
        tokenizer_changed=tokenizer_changed,
        sequences_a=len(seq_a),
        sequences_b=len(seq_b),
        sequences_changed=len(changed),
        changed_sequences=changed[:SEQUENCES_LISTED].tolist(),
        tokens=dict(sorted(tokens.items())),
        documents=document_changes(documents_of(a), documents_of(b), _reasons(a.fates(), b.fates())),
    )


def fate_changes(a: pa.Table | None, b: pa.Table | None) -> list[StageChanges]:
    """Per upstream stage and source, the documents whose ledger row differs between the
    fates tables `a` and `b` (`lineage.FATES`); none when either side kept no fates."""
    if a is None or b is None:
        return []
    joined = _fates_by_file(a).join(
        _fates_by_file(b), keys=["stage", "source", "file"], join_type="full outer", left_suffix="_a", right_suffix="_b"
    )
    same = pc.fill_null(pc.equal(joined.column("fate_a"), joined.column("fate_b")), False)
    differ = joined.filter(pc.invert(same)).sort_by([(k, "ascending") for k in ("stage", "source", "file")])
    by_stage: dict[str, dict[str, list[DocumentChange]]] = {}
    for row in differ.to_pylist():
        was, now = row["fate_a"], row["fate_b"]
        redacted = (was or "").startswith(REDACTED) or (now or "").startswith(REDACTED)
        kind = "changed" if redacted or (was and now) else "removed" if now else "added"
        shas = {"sha256_a": row["sha256_a"], "sha256_b": row["sha256_b"]}
        change = DocumentChange(file=row["file"], change=kind, **shas, reason=now or f"was {was}")
        by_stage.setdefault(row["stage"], {}).setdefault(row["source"], []).append(change)
    return [StageChanges(stage=stage, sources=_counted(sources)) for stage, sources in by_stage.items()]


def _fates_by_file(fates: pa.Table) -> pa.Table:
    """One row per (stage, source, file): its fate as `fate: detail`, and the SHA-256 it had."""
    detail = pc.fill_null(fates.column("detail"), "")
    fate = pc.binary_join_element_wise(fates.column("fate"), pc.if_else(pc.equal(detail, ""), "", ": "), detail, "")
    table = pa.table({k: fates.column(k) for k in ("stage", "source", "file", "sha256")} | {"fate": fate})
    grouped = table.group_by(["stage", "source", "file"]).aggregate([("fate", "max"), ("sha256", "max")])
    return grouped.rename_columns([c.removesuffix("_max") for c in grouped.column_names])


def _reasons(a: pa.Table | None, b: pa.Table | None) -> dict[tuple[str, str], str]:
    """(source, file) -> why B lacks it (`<stage> fate: detail`), or for a document only A's
    ledger drops, why A lacked it (`was ...`)."""
    found: dict[tuple[str, str], str] = {}
    for prefix, table in (("was ", a), ("", b)):
        for row in _fates_by_file(table).to_pylist() if table is not None else []:
            if not row["fate"].startswith(REDACTED):  # a redacted document went on
                found[(row["source"], row["file"])] = f"{prefix}{row['stage']} {row['fate']}"
    return found


def _tokenizer_sha(version: Version) -> str | None:
    """The SHA-256 of the tokenizer the version was encoded with (its manifest's input)."""
    return next((i.sha256 for i in version.manifest.inputs if i.path.endswith("tokenizer.json")), None)


def _sequence_keys(version: Version) -> np.ndarray:
    """A 64-bit key per sequence over the pieces it holds, in order: each piece's document
    (its SHA-256), offset, length and offset in the document."""
    pieces = read_files([fact(version, PIECES)])
    docs = documents_of(version, ["row", "sha256"])
    doc_key = np.zeros(docs.num_rows, dtype=np.uint64)
    doc_key[docs.column("row").to_numpy()] = [int(s[:16], 16) for s in docs.column("sha256").to_pylist()]
    seq = pieces.column("sequence").to_numpy()
    n = int(seq.max()) + 1 if len(seq) else 0
    mixed = doc_key[pieces.column("row").to_numpy()]
    for k, name in enumerate(("offset", "length", "doc_offset")):
        mixed = mixed ^ (pieces.column(name).to_numpy().astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15 + 2 * k))
    mixed = mixed * np.uint64(0xBF58476D1CE4E5B9) ^ (mixed >> np.uint64(31))
    keys = np.zeros(n, dtype=np.uint64)
    np.add.at(keys, seq, mixed)  # a sequence's pieces differ in offset, so their sum keeps their order
    return keys

"""`albor diff A B`: what changed between two builds, or two versions of a corpus.

A and B are two data dirs (every stage's documents per source, each corpus, the tokenizer),
or two corpus versions of the current data dir (their kept facts: the corpus's documents,
sequences and tokens, and what the upstream stages' ledgers said; `stages/corpus/versions.py`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from pydantic import BaseModel

from albor_pipeline.runtime.artifacts import iter_manifests
from albor_pipeline.runtime.layout import DOCUMENTS, Layout, corpus_names, corpus_stage
from albor_pipeline.runtime.shards import read_files
from albor_pipeline.spec import SPLITS
from albor_pipeline.stages.corpus.diff import (
    CorpusChanges,
    StageChanges,
    corpus_changes,
    document_changes,
    fate_changes,
)
from albor_pipeline.stages.corpus.versions import Version, find_version, versions
from albor_pipeline.text.ledger import is_ledger, is_side


class TokenizerChanges(BaseModel):
    changed: bool
    merges_added: int
    merges_removed: int
    vocab_changed_share: float  # ids whose token differs, of the larger vocabulary


class DataDiff(BaseModel):
    a: str
    b: str
    stages: list[StageChanges]  # ingested, filtered, documents: their outputs (data dirs) or ledgers (versions)
    corpora: list[CorpusChanges]
    tokenizer: TokenizerChanges | None  # data dirs only


class DiffError(ValueError):
    """Operands `albor diff` cannot compare; the message says why."""


def diff_data_dirs(a: Path, b: Path) -> DataDiff:
    """Every stage's documents, every corpus both built, and the tokenizer, A against B."""
    la, lb = Layout(a), Layout(b)
    stages = sorted({m.stage for m in iter_manifests(la)} & {m.stage for m in iter_manifests(lb)})
    documents = [s for s in stages if s.startswith(("ingested/", "filtered/")) or s == DOCUMENTS]
    changes = [
        StageChanges(stage=s, sources=document_changes(_documents(la, s), _documents(lb, s), _reasons(lb, s)))
        for s in documents
    ]
    corpora = []
    for name in corpus_names(SPLITS):
        stage = corpus_stage(name)
        if stage in stages:
            corpora.append(corpus_changes(find_version(la, stage, ""), find_version(lb, stage, "")))
    return DataDiff(a=str(a), b=str(b), stages=changes, corpora=corpora, tokenizer=_tokenizer_changes(la, lb))


def diff_versions(layout: Layout, a: str, b: str) -> DataDiff:
    """Two versions (id prefixes) of one corpus in the data dir `layout`: the corpus, and the
    upstream stages by the ledgers each version kept (its fates)."""
    va, vb = _version(layout, a), _version(layout, b)
    if va.stage != vb.stage:
        raise DiffError(f"{a} is a version of {va.stage}, {b} of {vb.stage}: compare versions of one corpus")
    stages = fate_changes(va.fates(), vb.fates())
    return DataDiff(a=va.id, b=vb.id, stages=stages, corpora=[corpus_changes(va, vb)], tokenizer=None)


def _version(layout: Layout, prefix: str) -> Version:
    stages = [corpus_stage(n) for n in corpus_names(SPLITS)]
    found = [v for s in stages for v in versions(layout, s) if v.id.startswith(prefix)]
    if len(found) != 1:
        what = "matches more than one version" if found else "is no corpus version kept in this data dir"
        raise DiffError(f"{prefix}: {what} (albor diff takes two data dirs, or two version ids)")
    return found[0]


def _documents(layout: Layout, stage: str) -> pa.Table:
    """(source, file, sha256) of the stage's documents: its recorded shards, not its ledger."""
    manifest = next(m for m in iter_manifests(layout) if m.stage == stage)
    files = [layout.root / a.path for a in manifest.outputs if a.path.endswith(".parquet") and not is_side(a.path)]
    if not files:
        return pa.table(
            {
                "source": pa.array([], pa.string()),
                "file": pa.array([], pa.string()),
                "sha256": pa.array([], pa.string()),
            }
        )
    return read_files(files, ["source", "file", "sha256"])


def _reasons(layout: Layout, stage: str) -> dict[tuple[str, str], str]:
    """(source, file) -> `fate: detail` of the stage's ledger rows."""
    manifest = next(m for m in iter_manifests(layout) if m.stage == stage)
    files = [layout.root / a.path for a in manifest.outputs if a.path.endswith(".parquet") and is_ledger(a.path)]
    if not files:
        return {}
    rows = read_files(files, ["source", "file", "fate", "detail"]).to_pylist()
    return {(r["source"], r["file"]): f"{r['fate']}: {r['detail']}" if r["detail"] else r["fate"] for r in rows}


def _tokenizer_changes(a: Layout, b: Layout) -> TokenizerChanges | None:
    """Merges added and removed, and the share of ids whose token differs."""
    if not (a.tokenizer_json.is_file() and b.tokenizer_json.is_file()):
        return None
    ta, tb = (json.loads(layout.tokenizer_json.read_text()) for layout in (a, b))
    ma, mb = (set(map(_merge, t["model"].get("merges", []))) for t in (ta, tb))
    va, vb = ({i: t for t, i in tok["model"]["vocab"].items()} for tok in (ta, tb))
    size = max(len(va), len(vb))
    differ = sum(va.get(i) != vb.get(i) for i in range(size))
    return TokenizerChanges(
        changed=ta != tb,
        merges_added=len(mb - ma),
        merges_removed=len(ma - mb),
        vocab_changed_share=round(differ / size, 6) if size else 0.0,
    )


def _merge(merge: str | list[str]) -> str:
    """A merge as `a b` (tokenizers writes "a b" or, from 0.20, ["a", "b"])."""
    return merge if isinstance(merge, str) else " ".join(merge)


def diff_lines(diff: DataDiff) -> list[str]:
    """`albor diff`'s readable answer."""
    lines = [f"albor diff {diff.a} {diff.b}"]
    for stage in diff.stages:
        for s in stage.sources:
            lines.append(f"{stage.stage} {s.source}: +{s.added} added, -{s.removed} removed, ~{s.changed} changed")
    if diff.tokenizer is not None:
        t = diff.tokenizer
        what = f"{t.merges_added} merges added, {t.merges_removed} removed, {t.vocab_changed_share:.1%} of ids changed"
        lines.append(f"tokenizer: {what if t.changed else 'unchanged'}")
    for c in diff.corpora:
        lines.append(
            f"{c.corpus} {c.version_a} -> {c.version_b}: {c.sequences_changed:,} sequences changed (A has "
            f"{c.sequences_a:,}, B {c.sequences_b:,}){'; the tokenizer changed' if c.tokenizer_changed else ''}"
        )
        listed = ", ".join(map(str, c.changed_sequences[:12])) + (", ..." if c.sequences_changed > 12 else "")
        if listed:
            lines.append(f"  sequences: {listed}")
        for source, (ta, tb) in c.tokens.items():
            if ta != tb:
                lines.append(f"  tokens {source}: {ta:,} -> {tb:,} ({tb - ta:+,})")
        for s in c.documents:
            for d in s.examples:
                lines.append(f"  {d.change} {s.source}:{d.file}" + (f" ({d.reason})" if d.reason else ""))
    for stage in diff.stages:
        for s in stage.sources:
            lines += [f"  {stage.stage}: {d.change} {s.source}:{d.file} ({d.reason})" for d in s.examples if d.reason]
    return lines

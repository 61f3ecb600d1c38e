from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from albor_pipeline.runtime.executor import INLINE
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import HoldoutSpec, SourceSpec
from albor_pipeline.stages.documents.documents import build_documents, exact_dedup, split_of
from albor_pipeline.stages.ingest.ingest import ingest_source
from albor_pipeline_tests.support import STDLIB


def _ingest_stdlib(tmp_path: Path, name: str, package: str) -> Path:
    """The one shard of a stdlib package, ingested."""
    src = SourceSpec(name=name, kind="code", path=STDLIB / package)
    out = tmp_path / "ingested" / name
    [shard] = ingest_source(src, out, StageIO(tmp_path)).artifacts
    return tmp_path / shard.path


def test_documents_dedup_first_source_wins_and_splits_are_disjoint(tmp_path):
    a = _ingest_stdlib(tmp_path, "a", "email")
    b = _ingest_stdlib(tmp_path, "b", "email")  # the same files again: all duplicates
    c = _ingest_stdlib(tmp_path, "c", "json")
    holdout = HoldoutSpec(val_fraction=0.2, test_fraction=0.1, seed=7)
    result = build_documents([("a", a), ("b", b), ("c", c)], holdout, tmp_path / "documents", StageIO(tmp_path))
    n_a = pq.read_metadata(a).num_rows
    assert result.summary.duplicates == {"a <- b": n_a}
    tables = {s: pq.read_table(tmp_path / "documents" / s) for s in ("train", "val", "test")}
    hashes = {s: set(t.column("sha256").to_pylist()) for s, t in tables.items()}
    assert (
        not (hashes["train"] & hashes["val"])
        and not (hashes["train"] & hashes["test"])
        and not (hashes["val"] & hashes["test"])
    )
    assert sum(len(h) for h in hashes.values()) == n_a + pq.read_metadata(c).num_rows
    assert all(set(t.column("source").to_pylist()) <= {"a", "c"} for t in tables.values())
    for split, hs in hashes.items():
        assert all(split_of(h, holdout) == split for h in hs)
    assert len(hashes["val"]) > 0 and len(hashes["test"]) > 0


@pytest.mark.parametrize("partition_bytes", [None, 24 * 8])
def test_hash_partitioned_exact_dedup_equals_a_dict_of_every_hash(tmp_path, monkeypatch, partition_bytes, local2):
    """`exact_dedup` (128-bit keys hash-partitioned over tasks) against the obvious dict loop,
    on real files ingested twice and a third package, in two orders; with one partition
    inline, and with partitions of 8 keys on two processes."""
    from albor_pipeline.runtime import hashpart
    from albor_pipeline.stages.documents.documents import DROPPED, SPLIT_CODES

    executor = INLINE
    if partition_bytes:
        monkeypatch.setattr(hashpart, "PARTITION_BYTES", partition_bytes)
        executor = local2
    holdout = HoldoutSpec(val_fraction=0.2, test_fraction=0.1)
    shards = [_ingest_stdlib(tmp_path, n, p) for n, p in (("a", "email"), ("b", "json"), ("c", "email"))]
    for paths in (shards, shards[::-1]):
        exact = exact_dedup(paths, holdout, tmp_path, StageIO(tmp_path, executor))
        seen: dict[str, int] = {}  # SHA-256 -> the input of its first document
        want_codes, want_repeats, doc = [], [], 0
        for i, path in enumerate(paths):
            codes = []
            for row, sha in enumerate(pq.read_table(path, columns=["sha256"]).column(0).to_pylist()):
                if sha in seen:
                    want_repeats.append((i, row, seen[sha]))
                codes.append(DROPPED if sha in seen else SPLIT_CODES[split_of(sha, holdout)])
                seen.setdefault(sha, i)
                doc += 1
            want_codes.append(codes)
        assert [c.tolist() for c in exact.codes] == want_codes
        found = sorted(tuple(r) for part in exact.repeats for r in part.tolist())
        assert found == want_repeats and 0 < len(want_repeats) < doc
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # key spool removed
    if partition_bytes:
        assert hashpart.partition_count(doc, 24) > 4


def test_document_keeps_its_split_when_sources_grow(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    for p in sorted((STDLIB / "json").glob("*.py")):
        (root / p.name).write_text(p.read_text(encoding="utf-8"), encoding="utf-8")
    holdout = HoldoutSpec(val_fraction=0.3, test_fraction=0.2)
    src = SourceSpec(name="r", kind="code", path=root)

    def splits(run: str) -> dict[str, str]:
        out = tmp_path / run
        [shard] = ingest_source(src, out / "ingested" / "r", StageIO(out)).artifacts
        build_documents([("r", out / shard.path)], holdout, out / "documents", StageIO(out))
        return {
            row["file"]: s
            for s in ("train", "val", "test")
            for row in pq.read_table(out / "documents" / s, columns=["file"]).to_pylist()
        }

    before = splits("before")
    for p in sorted((STDLIB / "email").glob("*.py")):
        (root / f"email_{p.name}").write_text(p.read_text(encoding="utf-8"), encoding="utf-8")
    (root / "__init__.py").unlink()
    after = splits("after")
    assert len(after) > len(before)
    assert all(after[f] == s for f, s in before.items() if f != "__init__.py")

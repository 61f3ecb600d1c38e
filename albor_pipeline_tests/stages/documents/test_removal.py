"""Removal requests (`remove:`): a file removed at ingestion takes its near-duplicate in
another source with it; neither reaches any split or mix, the blocking check proves it, and
the same check fails on a build of the same sources without the request."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.shards import parquet_files
from albor_pipeline.spec import SPLITS, HoldoutSpec, NearDedupSpec, SpecError, parse_spec
from albor_pipeline.stages.documents.documents import build_documents
from albor_pipeline.stages.documents.removal import check_no_removed
from albor_pipeline.text.documents import text_sha256
from albor_pipeline.text.removal import REMOVED, Tombstone, read_tombstones
from albor_pipeline.trace import Tracer
from albor_pipeline_tests.support import STDLIB, Build, build, materialize_all, recorded_outputs, tiny_spec, write_docs

REMOVED_FILE = "json/decoder.py"  # F: removed from source a on request


def _sources(tmp: Path) -> tuple[Path, Path, str]:
    """Two sources of real stdlib files, a near-duplicate of F (a few lines edited) planted in b;
    returns their roots and the near-duplicate's text."""
    a, b = tmp / "a", tmp / "b"
    for rel in [*(f"json/{p.name}" for p in sorted((STDLIB / "json").glob("*.py"))), "email/utils.py"]:
        (a / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(STDLIB / rel, a / rel)
    for path in sorted((STDLIB / "email").glob("*.py"))[:12]:
        if path.name != "utils.py":
            (b / "email").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, b / "email" / path.name)
    lines = (STDLIB / REMOVED_FILE).read_text(encoding="utf-8").splitlines(keepends=True)
    lines[20:23] = ["# vendored from the json package, lightly edited\n", "VENDORED = True\n"]
    near = "".join(lines)
    (b / "vendored").mkdir()
    (b / "vendored" / "jsondecode.py").write_text(near, encoding="utf-8")
    return a, b, near


def _build(tmp: Path, a: Path, b: Path, **extra: Any) -> Build:
    """A whole build of sources a and b into tmp/out (a small corpus)."""
    raw = tiny_spec(**extra)
    raw["sources"] = [{"name": "a", "kind": "code", "path": str(a)}, {"name": "b", "kind": "code", "path": str(b)}]
    raw["corpus"] = {"seq_len": 256}
    raw["holdout"] = {"val_fraction": 0.3, "test_fraction": 0.2, "seed": 0}  # every split gets documents
    tmp.mkdir()
    return build(tmp, raw)


def _hashes(paths: list[Path]) -> set[str]:
    return {sha for p in paths for f in parquet_files(p) for sha in pq.read_table(f, columns=["sha256"])[0].to_pylist()}


def _summary(out: Path, stage: str) -> dict[str, Any]:
    return json.loads(Layout(out).manifest(stage).read_text())["summary"]


@pytest.mark.graph
def test_a_removed_file_and_its_near_duplicate_are_gone_and_the_check_proves_it(tmp_path: Path) -> None:
    a, b, near_text = _sources(tmp_path / "src")
    removed_sha, near_sha = text_sha256((a / REMOVED_FILE).read_text(encoding="utf-8")), text_sha256(near_text)
    done = _build(tmp_path / "with", a, b, remove={"a": {"paths": [REMOVED_FILE]}})
    layout = Layout(done.out)
    ingested = _summary(done.out, "ingested/a")
    assert ingested["skipped"]["removed"] == 1 and ingested["removal"]["removed"] == 1
    removal = _summary(done.out, "documents")["removal"]
    assert (removal["tombstones"], removal["near"], removal["exact"]) == (1, {"b": 1}, {})
    assert removal["examples"] == [["b:vendored/jsondecode.py", removed_sha]]
    outputs = [layout.documents(s) for s in SPLITS] + [layout.mixed(s) for s in SPLITS]
    found = _hashes(outputs)
    assert found and removed_sha not in found and near_sha not in found
    tombstones = read_tombstones([layout.filtered("a") / REMOVED])
    assert [t.sha256 for t in tombstones] == [removed_sha]
    assert "text" not in pq.read_schema(layout.filtered("a") / REMOVED).names
    documents = {s: layout.documents(s) for s in SPLITS}
    assert check_no_removed(tombstones, documents, NearDedupSpec()).passed
    provenance, card = layout.provenance_md.read_text(), layout.dataset_card.read_text()
    assert "## Removal requests" in provenance and "## Removal requests" in card
    assert "1 document(s) removed at ingestion; 0 exact copies and 1 near-duplicates" in card
    for text in (provenance, card):
        assert "decoder.py" not in text and removed_sha not in text and near_sha not in text
    assert "remove" not in json.loads(layout.provenance_json.read_text())["spec"]  # the request's paths
    # `albor trace` tells a removal from "not in the pipeline", and names why the copy left.
    tracer = Tracer(done.spec, layout)
    assert tracer.documents(f"a:{REMOVED_FILE}") == []
    assert "removed at ingested/a by a removal request" in tracer.missing(f"a:{REMOVED_FILE}")
    (copy,) = tracer.documents("b:vendored/jsondecode.py")
    assert (
        copy.fates[-1].fate == "removed"
        and f"near copy of a document removed by request (sha256 {removed_sha})" in copy.fates[-1].detail
    )
    # A rebuild reusing every task (the tombstones come back with the ingestion tasks' results)
    # gives the same bytes.
    before = recorded_outputs(done.out)
    materialize_all(done.spec, done.out)
    assert recorded_outputs(done.out) == before and "ingested/a/removed.parquet" in before

    # The same sources without the request: F is in the splits (its near-duplicate is b's, removed
    # by near dedup as F's), and the check, with the first build's tombstones, fails.
    plain = _build(tmp_path / "without", a, b)
    plain_layout = Layout(plain.out)
    assert removed_sha in _hashes([plain_layout.documents(s) for s in SPLITS])
    failed = check_no_removed(tombstones, {s: plain_layout.documents(s) for s in SPLITS}, NearDedupSpec())
    assert not failed.passed and failed.metadata["found"] == {"exact": 1}, failed.description
    mixed = check_no_removed(tombstones, {s: plain_layout.mixed(s) for s in SPLITS})
    assert not mixed.passed
    # Near-duplicates only: a tombstone of the near-duplicate's twin finds b's copy by the near rule.
    twin = check_no_removed(tombstones, {"b": plain_layout.filtered("b")}, NearDedupSpec())
    assert not twin.passed and twin.metadata["found"] == {"near": 1}


def test_removal_requests_are_checked_when_the_spec_loads(tmp_path: Path) -> None:
    base = {"sources": [{"name": "a", "kind": "code", "path": str(STDLIB / "json")}]}
    with pytest.raises(SpecError, match=r"remove\.b: unknown source"):
        parse_spec({**base, "remove": {"b": {"paths": ["x.py"]}}}, tmp_path)
    with pytest.raises(SpecError, match=r"remove\.a\.sha256: \[0\]: not a SHA-256"):
        parse_spec({**base, "remove": {"a": {"sha256": ["abc"]}}}, tmp_path)
    (tmp_path / "takedowns.txt").write_text(f"# requests\n{'A' * 64}  # one\n\nnot-a-digest\n")
    with pytest.raises(SpecError, match=r"takedowns\.txt:4: not a SHA-256"):
        parse_spec({**base, "remove": {"a": {"sha256_file": "takedowns.txt"}}}, tmp_path)
    (tmp_path / "takedowns.txt").write_text(f"# requests\n{'A' * 64}  # one\n")
    spec = parse_spec({**base, "remove": {"a": {"sha256_file": "takedowns.txt"}}}, tmp_path)
    assert spec.remove["a"].sha256_file == tmp_path / "takedowns.txt"  # relative to the spec


def test_with_near_dedup_off_only_exact_copies_of_a_removed_document_go(tmp_path: Path) -> None:
    """Without near dedup, `documents` removes the exact copies of a removed document in every
    source and keeps its near-duplicates; the check then holds it to exact copies only."""
    texts = [p.read_text(encoding="utf-8") for p in sorted((STDLIB / "json").glob("*.py"))]
    removed = Tombstone.of("a", "json/decoder.py", texts[1], 5)
    near = texts[1].replace("def ", "def  ", 2) + "\n# vendored\n"
    inputs = [("a", write_docs(tmp_path / "a.parquet", texts)), ("b", write_docs(tmp_path / "b.parquet", [near]))]
    holdout = HoldoutSpec(val_fraction=0.3, test_fraction=0.2)
    off = NearDedupSpec(enabled=False)
    result = build_documents(inputs, holdout, tmp_path / "d", StageIO(tmp_path), near=off, tombstones=[removed])
    facts = result.summary.removal
    assert facts is not None and (facts.exact, facts.near) == ({"a": 1}, {})
    splits = {s: tmp_path / "d" / s for s in SPLITS}
    found = _hashes(list(splits.values()))
    assert removed.sha256 not in found and text_sha256(near) in found
    assert check_no_removed([removed], splits).passed
    assert not check_no_removed([removed], splits, NearDedupSpec()).passed  # the near rule sees b's copy

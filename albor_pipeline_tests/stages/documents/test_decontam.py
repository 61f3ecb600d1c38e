"""Decontamination: train documents sharing a 13-word n-gram with a benchmark item are dropped."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from albor_pipeline.runtime.artifacts import sha256_file
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import (
    MAX_CHARS,
    REPO_ROOT,
    BenchmarkSpec,
    DecontaminateSpec,
    HoldoutSpec,
    SpecError,
    parse_spec,
)
from albor_pipeline.stages.documents.checks import check_no_contamination
from albor_pipeline.stages.documents.decontam import Decontaminator, load_benchmark
from albor_pipeline.stages.documents.documents import build_documents
from albor_pipeline.text.datafiles import IngestError
from albor_pipeline.text.shingles import word_hashes
from albor_pipeline_tests.support import STDLIB, write_docs

BENCH = REPO_ROOT / "data" / "samples" / "python_bench.jsonl"
SPEC = DecontaminateSpec(benchmarks=(BenchmarkSpec(name="python_bench", path=BENCH),))
ALL_TRAIN = HoldoutSpec(val_fraction=0, test_fraction=0)


def _item(entry_point: str) -> dict:
    rows = [json.loads(line) for line in BENCH.read_text(encoding="utf-8").splitlines()]
    return next(r for r in rows if r["entry_point"] == entry_point)


def test_shipped_benchmark_items_all_have_ngrams():
    bench = load_benchmark(SPEC.benchmarks[0], 13)
    assert bench.items == 16 and bench.too_short == 0 and len(bench.ngrams) > 16 * 10


def test_hits_survive_reformatting_but_not_a_shorter_overlap():
    decon = Decontaminator(SPEC)
    solution = _item("merge_intervals")["canonical_solution"]
    host = (STDLIB / "json" / "decoder.py").read_text(encoding="utf-8")
    assert decon.hits(word_hashes(host)) == []
    # Re-indented, upper-cased and re-spaced: the same normalized words.
    disguised = solution.upper().replace("    ", "\t").replace(", ", " ,  ")
    assert decon.hits(word_hashes(host + "\n" + disguised)) == ["python_bench"]
    # A 12-word run of the solution is below the 13-gram and does not count.
    twelve = " ".join(re.findall(r"[a-z0-9_]+", solution.lower())[:12])
    assert len(word_hashes(twelve)) == 12 and decon.hits(word_hashes(host + "\n" + twelve)) == []
    thirteen = " ".join(re.findall(r"[a-z0-9_]+", solution.lower())[:13])
    assert decon.hits(word_hashes(host + "\n" + thirteen)) == ["python_bench"]
    # The standard library really contains the stdlib-derived reference solutions.
    assert decon.hits(word_hashes((STDLIB / "colorsys.py").read_text(encoding="utf-8"))) == ["python_bench"]


def test_documents_drop_contaminated_train_documents_only(tmp_path):
    """Real stdlib files, one with a benchmark solution pasted into it, plus colorsys.py
    (whose functions are benchmark references): exactly those two leave train, counted per
    benchmark and source; the blocking check passes on the result and fails without it."""
    originals = [p.read_text(encoding="utf-8") for p in sorted((STDLIB / "email").rglob("*.py"))]
    planted = (
        originals[3] + "\n\n" + _item("balanced_brackets")["prompt"] + _item("balanced_brackets")["canonical_solution"]
    )
    a = write_docs(tmp_path / "a.parquet", originals)
    b = write_docs(tmp_path / "b.parquet", [planted, (STDLIB / "colorsys.py").read_text(encoding="utf-8")])
    decon = Decontaminator(SPEC)
    result = build_documents([("a", a), ("b", b)], ALL_TRAIN, tmp_path / "d", StageIO(tmp_path), decon=decon)
    report = result.summary.decontaminated
    assert report and report.dropped == {"b": 2} and report.benchmarks["python_bench"].train_dropped == 2
    assert result.summary.rows["train"] == {"a": len(originals), "b": 0}  # no distinct real file removed
    kept = set(pq.read_table(tmp_path / "d" / "train").column("text").to_pylist())
    assert kept == set(originals)
    assert check_no_contamination(tmp_path / "d" / "train", SPEC).passed
    plain = build_documents([("a", a), ("b", b)], ALL_TRAIN, tmp_path / "p", StageIO(tmp_path))
    leak = check_no_contamination(tmp_path / "p" / "train", SPEC)
    assert (
        plain.summary.decontaminated is None
        and not leak.passed
        and leak.metadata["per_benchmark"] == {"python_bench": 2}
    )
    # Held-out documents keep benchmark text: only train must be clean.
    held = build_documents(
        [("b", b)], HoldoutSpec(val_fraction=0.99, test_fraction=0), tmp_path / "h", StageIO(tmp_path), decon=decon
    )
    assert held.summary.rows["val"] == {"b": 2} and held.summary.decontaminated
    assert held.summary.decontaminated.dropped == {}
    # The benchmark file is a recorded input of the stage.
    assert [i.path for i in decon.inputs] == ["benchmark/python_bench"] and decon.inputs[0].sha256 == sha256_file(BENCH)


def test_bad_benchmark_files_fail_clearly(tmp_path):
    missing = tmp_path / "none.jsonl"
    with pytest.raises(IngestError, match="no such file"):
        Decontaminator(DecontaminateSpec(benchmarks=(BenchmarkSpec(name="x", path=missing),)))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "def f():"}\n', encoding="utf-8")
    with pytest.raises(IngestError, match=r"bad.jsonl:1: missing field 'canonical_solution'"):
        Decontaminator(DecontaminateSpec(benchmarks=(BenchmarkSpec(name="x", path=bad),)))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(IngestError, match="has no items"):
        Decontaminator(DecontaminateSpec(benchmarks=(BenchmarkSpec(name="x", path=empty),)))
    table = tmp_path / "b.parquet"
    pq.write_table(
        pq.read_table(write_docs(tmp_path / "docs.parquet", [_item("digit_root")["canonical_solution"] * 3])), table
    )
    from_parquet = load_benchmark(BenchmarkSpec(name="p", path=table, fields=("text",)), 13)
    assert from_parquet.items == 1 and len(from_parquet.ngrams) > 0


@pytest.mark.parametrize("name", ["bench.jsonl", "bench.parquet"])
def test_a_benchmark_item_the_reader_would_skip_is_an_error(tmp_path, name):
    """Every item's n-grams matter: a JSONL line over its cap (12 x MAX_CHARS bytes) or a null
    field is an error naming the file, never a silent skip; a blank line is no item."""
    good = [_item(e) for e in ("merge_intervals", "digit_root")]
    path = tmp_path / name
    if name.endswith(".jsonl"):
        long = {"prompt": "word " * (3 * MAX_CHARS), "canonical_solution": "return 1"}
        path.write_text("".join(json.dumps(r) + "\n" for r in [good[0], long, good[1]]) + "\n", encoding="utf-8")
        why = "too_long: 1"
    else:
        solutions = [good[0]["canonical_solution"], None]
        pq.write_table(pa.table({"prompt": [g["prompt"] for g in good], "canonical_solution": solutions}), path)
        why = "null_text: 1"
    with pytest.raises(IngestError, match=rf"decontaminate.benchmarks.b: \S*{name}: 1 item\(s\) unread \({why}\)"):
        load_benchmark(BenchmarkSpec(name="b", path=path), 13)
    (tmp_path / "ok.jsonl").write_text("".join(json.dumps(r) + "\n\n" for r in good), encoding="utf-8")
    assert load_benchmark(BenchmarkSpec(name="b", path=tmp_path / "ok.jsonl"), 13).items == 2


def test_spec_resolves_benchmark_paths_and_rejects_duplicates(tmp_path):
    raw = {
        "sources": [{"name": "s", "kind": "code", "path": str(STDLIB)}],
        "decontaminate": {"benchmarks": [{"name": "b", "path": "bench.jsonl", "fields": ["prompt"]}]},
    }
    spec = parse_spec(raw, tmp_path)
    assert spec.decontaminate.benchmarks[0].path == tmp_path / "bench.jsonl" and spec.decontaminate.ngram == 13
    raw["decontaminate"]["benchmarks"] *= 2
    with pytest.raises(SpecError, match="duplicate benchmark name"):
        parse_spec(raw, tmp_path)

"""Declarative automation with Dagster's own tools: what a source change requests."""

from __future__ import annotations

import json
import os
import shutil

import dagster as dg
import pytest

from albor_pipeline.definitions import build_definitions
from albor_pipeline.defs.automation import BUILD_JOB, OBSERVE_JOB
from albor_pipeline.runtime.artifacts import read_manifest
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.spec import REPO_ROOT, HoldoutSpec, load_spec
from albor_pipeline.stages.documents.documents import split_of
from albor_pipeline.text.documents import text_sha256
from albor_pipeline_tests.support import STDLIB, small_spec_dict, write_spec

pytestmark = pytest.mark.graph  # every test builds the whole graph first


def requested(defs: dg.Definitions, instance: dg.DagsterInstance, cursor) -> tuple[set[str], object]:
    result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
    keys = {k.to_user_string() for k in result._requested_partitions_by_asset_key if result.get_num_requested(k)}
    return keys, result.cursor


def observe(defs: dg.Definitions, instance: dg.DagsterInstance) -> None:
    assert defs.resolve_job_def(OBSERVE_JOB).execute_in_process(instance=instance).success


def run_cascade(defs, instance, cursor) -> tuple[list[set[str]], object]:
    """Evaluate, materialize what was requested, repeat until nothing is requested."""
    waves = []
    job = defs.resolve_job_def(BUILD_JOB)
    while True:
        keys, cursor = requested(defs, instance, cursor)
        if not keys:
            return waves, cursor
        waves.append(keys)
        selection = [dg.AssetKey.from_user_string(k) for k in keys]
        assert job.execute_in_process(instance=instance, asset_selection=selection).success
        assert len(waves) < 12, waves


@pytest.fixture
def setup(tmp_path):
    def _setup(extra: dict | None = None, **tokenizer):
        src = tmp_path / "src"
        shutil.copytree(STDLIB / "json", src / "a", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(STDLIB / "email", src / "b", ignore=shutil.ignore_patterns("__pycache__"))
        raw = small_spec_dict()
        raw["sources"] = [
            {"name": "a", "kind": "code", "path": str(src / "a")},
            {"name": "b", "kind": "code", "path": str(src / "b"), "exclude": ["_*.py"]},
        ]
        raw["tokenizer"] = {"vocab_size": 600, **tokenizer}
        raw.update(extra or {})
        spec = load_spec(write_spec(tmp_path / "spec.yaml", raw))
        defs = build_definitions(spec, tmp_path / "out")
        instance = dg.DagsterInstance.ephemeral()
        observe(defs, instance)
        assert defs.resolve_job_def(BUILD_JOB).execute_in_process(instance=instance).success
        keys, cursor = requested(defs, instance, None)
        assert keys == set()  # after a full materialization nothing is requested
        return src, defs, instance, cursor

    return _setup


def test_touch_requests_nothing_and_edit_rebuilds_only_downstream(setup):
    src, defs, instance, cursor = setup()
    os.utime(src / "a" / "decoder.py", None)
    (src / "b" / "_excluded.py").write_text("x = 1\n" * 20)  # excluded by the source's globs
    observe(defs, instance)
    keys, cursor = requested(defs, instance, cursor)
    assert keys == set()

    path = src / "a" / "decoder.py"
    before = path.read_text()
    after = before + "\n# an edit that changes the bytes\n"
    path.write_text(after)
    observe(defs, instance)
    waves, cursor = run_cascade(defs, instance, cursor)
    changed = {split_of(text_sha256(t), HoldoutSpec(**small_spec_dict()["holdout"])) for t in (before, after)}
    assert waves[:4] == [{"ingested/a"}, {"filtered/a"}, {"documents"}, {"mixed/train", "mixed/val", "mixed/test"}]
    assert waves[4] == {f"fim/{s}" for s in changed} | ({"tokenizer"} if changed & {"train", "val"} else set())
    rebuilt = set().union(*waves)
    assert "ingested/b" not in rebuilt
    assert {f"fim/{s}" for s in ("train", "val", "test")} & rebuilt == {f"fim/{s}" for s in changed}
    assert waves[-1] == {"provenance"}
    assert requested(defs, instance, cursor)[0] == set()


def test_editing_a_benchmark_rebuilds_documents(setup, tmp_path):
    """A decontamination benchmark is an observable source of `documents`: adding an item
    that quotes a train file makes `documents` stale; the rebuild drops that file."""
    bench = tmp_path / "bench.jsonl"
    shutil.copy(REPO_ROOT / "data" / "samples" / "python_bench.jsonl", bench)
    decon = {"decontaminate": {"benchmarks": [{"name": "bench", "path": str(bench)}]}}
    holdout = HoldoutSpec(**small_spec_dict()["holdout"])
    src, defs, instance, cursor = setup(decon)
    train = next(
        p for p in sorted((src / "a").glob("*.py")) if split_of(text_sha256(p.read_text()), holdout) == "train"
    )
    quote = {"prompt": "", "canonical_solution": train.read_text()[-2000:]}
    with bench.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(quote) + "\n")
    observe(defs, instance)
    waves, cursor = run_cascade(defs, instance, cursor)
    assert waves[0] == {"documents"} and "ingested/a" not in set().union(*waves)
    manifest = read_manifest(Layout(tmp_path / "out"), "documents")
    assert manifest.summary["decontaminated"]["examples"] == [[f"a:{train.name}", "bench"]]
    assert [i.path for i in manifest.inputs if i.path.startswith("benchmark/")] == ["benchmark/bench"]


def test_identical_rematerialization_does_not_cascade(setup):
    _, defs, instance, cursor = setup()
    job = defs.resolve_job_def(BUILD_JOB)
    assert job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey(["ingested", "b"])]).success
    keys, _ = requested(defs, instance, cursor)
    assert keys == set()


def test_adding_a_file_changes_the_fingerprint(setup):
    src, defs, instance, cursor = setup()
    (src / "b" / "new_module.py").write_text("def added():\n    return 'a new file in source b'\n" * 3)
    observe(defs, instance)
    keys, _ = requested(defs, instance, cursor)
    assert keys == {"ingested/b"}


def test_manual_tokenizer_is_never_retrained_automatically(setup):
    src, defs, instance, cursor = setup(retrain="manual")
    for name in sorted(os.listdir(src / "a"))[:3]:
        (src / "a" / name).write_text((src / "a" / name).read_text() + "\n# changed\n")
    observe(defs, instance)
    waves, _ = run_cascade(defs, instance, cursor)
    rebuilt = set().union(*waves)
    assert "tokenizer" not in rebuilt
    assert {"ingested/a", "filtered/a", "documents", "provenance"} <= rebuilt
    assert any(k.startswith("corpus/") for k in rebuilt)


def test_upstream_update_in_the_same_tick_as_a_stale_rebuild_is_not_lost(setup):
    """filtered/a rebuilt from the old ingested/a, then ingested/a updated, both before one
    sensor tick: filtered/a still consumed the old version, so it must be requested.
    (With `data_version_changed().since_last_handled()` the own update reset the trigger.)"""
    src, defs, instance, cursor = setup()
    job = defs.resolve_job_def(BUILD_JOB)
    path = src / "a" / "decoder.py"
    path.write_text(path.read_text() + "\n# an edit that changes the bytes\n")
    observe(defs, instance)
    assert job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey(["filtered", "a"])]).success
    assert job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey(["ingested", "a"])]).success
    keys, _ = requested(defs, instance, cursor)
    assert keys == {"filtered/a"}

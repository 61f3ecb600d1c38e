"""docs/development.md's "Adding a stage": a new per-shard stage is its package and one
registry line, and the code the page shows is the code that runs. The test writes the page's
code blocks as the files they name, registers the stage, and materializes it with its
upstream, then restores a lost output from its kept tasks."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

import albor_pipeline.defs
import albor_pipeline.stages
from albor_pipeline.defs import pipeline
from albor_pipeline.defs.automation import BUILD_JOB
from albor_pipeline.runtime.executor import TASKS
from albor_pipeline.spec import REPO_ROOT, load_spec
from albor_pipeline.text.documents import read_document_set
from albor_pipeline_tests.support import small_spec_dict, write_spec

PAGE = REPO_ROOT / "docs" / "development.md"
MAX_LINES = 41  # the step, its declarations (Dagster's too) and imports: lines of code, no blank or comment line
SOURCE = "stdlib_json_email"


def recipe() -> dict[str, str]:
    """The code blocks of the page's "Adding a stage", by the file their first line names."""
    section = PAGE.read_text().split("## Adding a stage", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```", section, re.M | re.S)
    return {re.match(r"# (\S+)", block)[1]: block for block in blocks}  # type: ignore[index]


def test_the_recipe_is_a_step_and_its_declarations_in_at_most_41_lines() -> None:
    files = recipe()
    assert set(files) == {"albor_pipeline/stages/wordcount/wordcount.py", "albor_pipeline/defs/wordcount.py"}
    lines = sum(1 for code in files.values() for line in code.splitlines() if line.strip() and line[0] != "#")
    assert lines <= MAX_LINES, f"the page's stage takes {lines} lines of code"


def _install(root: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """The page's files under `root`, importable as the modules they name; the stage's module."""
    for name, code in recipe().items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(code)
    (root / "albor_pipeline/stages/wordcount/__init__.py").write_text("")
    for package in (albor_pipeline.stages, albor_pipeline.defs):
        extra = str(root / package.__name__.replace(".", "/"))
        monkeypatch.setattr(package, "__path__", [*package.__path__, extra])
    for name in ("albor_pipeline.defs.wordcount", "albor_pipeline.stages.wordcount.wordcount"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module("albor_pipeline.defs.wordcount")


def _run(job: dg.JobDefinition) -> tuple[dg.ExecuteInProcessResult, dict[str, float]]:
    mark = TASKS.mark()
    keys = [["ingested", SOURCE], ["filtered", SOURCE], ["wordcount", SOURCE]]
    result = job.execute_in_process(asset_selection=[dg.AssetKey(k) for k in keys])
    return result, TASKS.since(mark).get("count_shard", {"tasks": 0, "reused": 0})


def test_a_new_per_shard_stage_is_its_package_and_one_registry_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _install(tmp_path / "code", monkeypatch)
    monkeypatch.setattr(pipeline, "STAGE_MODULES", (*pipeline.STAGE_MODULES, module))  # the registry line
    spec = load_spec(write_spec(tmp_path / "spec.yaml", small_spec_dict()))
    out = tmp_path / "data"
    job = pipeline.build_definitions(spec, out).resolve_job_def(BUILD_JOB)
    result, tasks = _run(job)
    assert result.success and tasks["tasks"] >= 1 and tasks["reused"] == 0
    counts = pq.read_table(out / "wordcount" / SOURCE)
    filtered = read_document_set(out / "filtered" / SOURCE, ["sha256", "text"])
    assert counts.column("sha256").to_pylist() == filtered.column("sha256").to_pylist()
    expected = [len(t.split()) for t in filtered.column("text").to_pylist()]
    assert counts.column("words").to_pylist() == expected and sum(expected) > 1000
    # The stage got what every stage gets: a manifest with each shard's SHA-256, and its check ran.
    manifest = (out / "manifests" / f"wordcount__{SOURCE}.json").read_text()
    assert all(p.name in manifest for p in (out / "wordcount" / SOURCE).iterdir())
    checked = {e.asset_check_key for e in result.get_asset_check_evaluations()}
    assert dg.AssetCheckKey(dg.AssetKey(["wordcount", SOURCE]), "schema") in checked
    # Its tasks were kept under what they read: a lost output shard is restored, no task runs.
    next((out / "wordcount" / SOURCE).glob("part-*.parquet")).unlink()
    again, kept = _run(job)
    assert again.success and kept == {**kept, "tasks": tasks["tasks"], "reused": tasks["tasks"]}
    assert pq.read_table(out / "wordcount" / SOURCE).equals(counts)

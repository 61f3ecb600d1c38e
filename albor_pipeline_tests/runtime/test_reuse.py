"""Task reuse: a rerun runs only the tasks whose inputs, settings or code changed, a killed
run resumes from its finished tasks, and either way the outputs are a cold build's bytes."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from albor_pipeline.cli import main as albor
from albor_pipeline.definitions import build_definitions, pipeline_stages
from albor_pipeline.defs.plan import plan_run
from albor_pipeline.defs.resources import ArtifactStore, DataDirChanged
from albor_pipeline.runtime.artifacts import ParquetSink, iter_manifests, read_manifest, sha256_file
from albor_pipeline.runtime.checks import KeptOutcome, kept_outcome
from albor_pipeline.runtime.executor import TASKS
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.nodes import IN_PLACE
from albor_pipeline.runtime.shardmap import CodeChanged, StageIO, Step, TaskIO, _Task, map_shards
from albor_pipeline.runtime.shards import Shard, shard_name
from albor_pipeline.runtime.taskstore import InputFile, TaskStore, reusing
from albor_pipeline.spec import REPO_ROOT, SPLITS, HygieneSpec, SourceSpec, load_spec
from albor_pipeline.stages.hygiene.checks import check_no_secrets
from albor_pipeline.stages.hygiene.hygiene import clean_source
from albor_pipeline.stages.ingest.ingest import ingest_source
from albor_pipeline.stages.stats.facts import CHARTS
from albor_pipeline.text.documents import texts_of
from albor_pipeline_tests.support import (
    ALBOR,
    STDLIB,
    materialize_all,
    recorded_outputs,
    task_counts,
    tiny_spec,
    write_spec,
)

SCHEMA = pa.schema([("text", pa.string())])

FATES_TABLES = {f"corpus/{kind}{s} _fates_table" for s in SPLITS for kind in ("", "long_")}
"""The corpora's fates table: one task, its table linked into every split's corpus."""


@dataclass(frozen=True)
class _Upper:
    suffix: str


@dataclass
class _Written:
    shards: list[Shard]


def _upper(job: _Upper, io: TaskIO, item: tuple[int, InputFile]) -> _Written:
    """A shard-set step: the lines of a text file, upper-cased, as one shard."""
    task, path = item
    lines = io.local(path).read_text().splitlines()
    out = io.directory / shard_name(task)
    with ParquetSink(out, SCHEMA) as sink:
        sink.write(pa.RecordBatch.from_pydict({"text": [ln.upper() + job.suffix for ln in lines]}, schema=SCHEMA))
    return _Written([Shard.of(out, len(lines))])


UPPER = Step(_upper)


def _map(store: TaskStore, files: list[Path], out: Path, suffix: str = "!") -> dict[str, int]:
    """`_upper` over `files` into the set `out`, reusing from `store`: (ran, reused)."""
    mark = TASKS.mark()
    with reusing(store):
        map_shards(
            UPPER, _Upper(suffix), [(i, InputFile(str(f))) for i, f in enumerate(files)], out, StageIO(out.parent)
        )
    seen = TASKS.since(mark)["_upper"]
    return {"ran": int(seen["tasks"] - seen["reused"]), "reused": int(seen["reused"])}


def _set(out: Path) -> dict[str, str]:
    return {p.name: sha256_file(p) for p in sorted(out.iterdir())}


def test_a_task_runs_again_only_when_its_input_settings_or_stored_files_change(tmp_path: Path) -> None:
    files = [tmp_path / f"in{i}.txt" for i in range(4)]
    for i, f in enumerate(files):
        f.write_text(f"line {i}\nmore {i}\n")
    store = TaskStore(str(Layout(tmp_path / "data").task_store), 10**9)
    out = tmp_path / "data" / "upper"
    assert _map(store, files, out) == {"ran": 4, "reused": 0}
    cold = _set(out)
    assert _map(store, files, out) == {"ran": 0, "reused": 4}  # same inputs: nothing runs
    assert _set(out) == cold
    files[2].write_text("line 2\nedited\n")  # an edited input: its task only
    assert _map(store, files, out) == {"ran": 1, "reused": 3}
    assert _map(store, files, out, suffix="?") == {"ran": 4, "reused": 0}  # a changed setting: all
    files[2].write_text("line 2\nmore 2\n")
    assert _map(store, files, out) == {"ran": 0, "reused": 4}  # back to the first bytes: all stored
    assert _set(out) == cold

    io = TaskIO(str(out), IN_PLACE, store)
    entry = store.entry(store.key(_upper, *UPPER.identity(_Upper("!"), io, (1, InputFile(str(files[1]))))))
    stored = next((entry / "files").iterdir())
    stored.unlink()  # a stored shard deleted behind the pipeline's back...
    shutil.copyfile(out / "part-00000-0000.parquet", stored)  # ...and replaced by other bytes
    assert _map(store, files, out) == {"ran": 1, "reused": 3}  # is found, and its task runs
    assert _set(out) == cold
    assert _map(store, files, out) == {"ran": 0, "reused": 4}
    (entry / "result.pickle").unlink()  # half an entry (a kill while one was removed)...
    assert _map(store, files, out) == {"ran": 1, "reused": 3}  # ...is dropped, the task runs and is kept
    assert _map(store, files, out) == {"ran": 0, "reused": 4}


def test_the_store_stays_under_its_cap(tmp_path: Path) -> None:
    files = [tmp_path / f"in{i}.txt" for i in range(6)]
    for i, f in enumerate(files):
        f.write_text(f"{i}\n" * 2000)
    big = TaskStore(str(Layout(tmp_path / "data").task_store), 10**9)
    _map(big, files, tmp_path / "data" / "upper")
    one = max(size for _, _, size in big.entries())
    capped = TaskStore(big.directory, 3 * one)
    capped.trim()
    assert sum(size for _, _, size in capped.entries()) <= 3 * one
    assert 1 <= len(capped.entries()) <= 3


def _check_reuse(result: dg.ExecuteInProcessResult) -> dict[str, tuple[int, int]]:
    """(tasks, reused) of each task function of every check with per-shard tasks, keyed
    "asset check function"."""
    found = {}
    for evaluation in result.get_asset_check_evaluations():
        tasks = evaluation.metadata["tasks"].value if "tasks" in evaluation.metadata else {}
        assert isinstance(tasks, dict)
        for fn, t in tasks.items():
            key = f"{evaluation.asset_key.to_user_string()} {evaluation.check_name} {fn}"
            found[key] = (int(t["tasks"]), int(t["reused"]))
    return found


def _sources(tmp_path: Path) -> dict[str, Any]:
    """A tiny spec over copies of two stdlib packages, in shards of about 50 kB: many tasks."""
    for package in ("json", "email"):
        shutil.copytree(STDLIB / package, tmp_path / "src" / package, ignore=shutil.ignore_patterns("__pycache__"))
    raw = tiny_spec(shard_mb=0.05, execution={"workers": 1})
    for source in raw["sources"]:
        source["path"] = str(tmp_path / "src")
    raw["sources"][1]["include"] = ["email/**/*.py"]
    return raw


@pytest.mark.graph
def test_albor_run_keeps_a_manual_tokenizer_until_its_own_settings_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tokenizer.retrain: manual`: an edited source reaches the mixes and the corpora, which
    are encoded again with the tokenizer a model may already train on; a changed vocab size
    (its own setting) retrains it."""
    raw = {**_sources(tmp_path), "tokenizer": {"vocab_size": 600, "retrain": "manual"}}
    spec_file = write_spec(tmp_path / "spec.yaml", raw)
    out = tmp_path / "out"
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    run = ["run", "--spec", str(spec_file), "--data-dir", str(out)]
    assert albor(run) == 0
    tokenizer = read_manifest(Layout(out), "tokenizer")
    edited = tmp_path / "src" / "json" / "decoder.py"
    edited.write_text(edited.read_text() + "\n# an edit\n")
    spec = load_spec(spec_file)
    plan = plan_run(spec, pipeline_stages(spec), print, out)
    assert "tokenizer" in plan.kept and {"ingested/stdlib_json_email", "mixed/train", "corpus/train"} <= {
        s.name for s in plan.run
    }
    capsys.readouterr()
    assert albor(run) == 0
    assert "tokenizer ok" not in capsys.readouterr().err  # not started
    assert read_manifest(Layout(out), "tokenizer") == tokenizer
    corpus = read_manifest(Layout(out), "corpus/train")
    assert all(a in corpus.inputs for a in tokenizer.outputs)  # encoded again, with the same tokenizer
    retrain = {**raw, "tokenizer": {**raw["tokenizer"], "vocab_size": 700}}
    bigger = load_spec(write_spec(tmp_path / "bigger.yaml", retrain))
    assert "tokenizer" in {s.name for s in plan_run(bigger, pipeline_stages(bigger), print, out).run}


@pytest.mark.graph
def test_a_one_file_edit_reruns_only_the_tasks_that_read_it_and_equals_a_cold_build(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path / "spec.yaml", _sources(tmp_path)))
    built = materialize_all(spec, tmp_path / "out")
    first, first_checks = task_counts(built), _check_reuse(built)
    assert first["ingested/stdlib_async _ingest_group"][0] >= 4
    # A cold build reuses nothing but a split's encoding, shared with its long subset (each
    # row group is encoded once, by whichever of the two stages ran first), and the fates
    # table, the same for every corpus: written by the first, linked into the others.
    shared = {f"corpus/{split} encode_row_group" for split in SPLITS} | FATES_TABLES
    assert {key for key, (_, reused) in first.items() if reused} <= shared
    tables = [first[key] for key in FATES_TABLES if key in first]
    assert sum(ran - reused for ran, reused in tables) == 1 and len(tables) > 1  # written once, linked after
    parts = task_counts(built, ("parts", "parts_reused"))
    for split in SPLITS:
        tasks, reused = first[f"corpus/{split} encode_row_group"]
        long_parts, long_reused = parts.get(f"corpus/long_{split} encode_row_group", (0, 0))
        assert (tasks - reused) + (long_parts - long_reused) == tasks > 0, split
    before = _outputs(tmp_path / "out")
    # A file of the train mix, so the edit reaches every stage down to the train corpus.
    mixed = pq.read_table(tmp_path / "out" / "mixed" / "train", columns=["source", "file"]).to_pylist()
    drawn = sorted({tmp_path / "src" / row["file"] for row in mixed if row["source"] == "stdlib_async"})
    edited = next(path for path in drawn if " the " in path.read_text())
    text = edited.read_text()
    edited.write_text(text.replace(" the ", " THE ", 1))  # the same size: no shard boundary moves
    rebuilt = materialize_all(spec, tmp_path / "out")
    again, checks = task_counts(rebuilt), _check_reuse(rebuilt)
    changed = {path for path, sha in _outputs(tmp_path / "out").items() if before.get(path) != sha}
    # A corpus shard is repacked only when its sequences changed (a task reads its slice of
    # the token spool, not the whole spool); a chart is drawn again only when its figures did.
    for corpus in ("corpus/train", "corpus/long_train"):
        tasks, reused = again.get(f"{corpus} pack_shard", (0, 0))
        assert tasks - reused == sum(p.startswith(f"{corpus}/part-") for p in changed), (corpus, again)
    # The mix gathers again only the output shards whose rows changed (scattering only theirs).
    tasks, reused = again["mixed/train _gather"]
    assert tasks == first["mixed/train _gather"][0] > 1
    assert tasks - reused == sum(p.startswith("mixed/train/part-") for p in changed) >= 1
    tasks, reused = again["stats _draw_chart"]
    assert tasks == len(CHARTS) and 0 < tasks - reused < len(CHARTS)
    assert tasks - reused >= sum(p.endswith(".png") for p in changed)
    # A check's per-shard tasks too: the secrets re-scan of the edited source reads its one
    # changed hygiene shard again; the other source's, its stage kept, keeps its outcome.
    leaks = "filtered/stdlib_async no_secrets_left _shard_leaks"
    assert first_checks[leaks][0] >= 4 and checks[leaks] == (first_checks[leaks][0], first_checks[leaks][0] - 1)
    assert ("filtered/stdlib_json_email", "no_secrets_left") in _kept_checks(rebuilt)
    assert ("filtered/stdlib_async", "no_secrets_left") not in _kept_checks(rebuilt)
    # The edited file's ingest task, its hygiene task and the scan of its row group alone ran.
    # So did its split writing, and the mix's measuring of the one train shard that changed.
    steps = ("_ingest_group", "_clean_shard", "_scan_group", "_write_splits", "_text_sizes")
    for key in (f"{stage} {step}" for stage, step in zip(STAGES, steps, strict=True)):
        tasks, reused = again[key]
        assert (tasks, reused) == (first[key][0], tasks - 1), key
    assert "ingested/stdlib_json_email _ingest_group" not in again  # the other source, unchanged, kept whole
    assert {"ingested/stdlib_json_email", "filtered/stdlib_json_email"} <= _kept(rebuilt)  # and its hygiene
    cold = tmp_path / "cold"
    materialize_all(spec, cold)
    assert recorded_outputs(tmp_path / "out") == recorded_outputs(cold)

    store, layout = TaskStore(str(Layout(tmp_path / "out").task_store), 0), Layout(tmp_path / "out")
    named = store.referenced(m.stage for m in iter_manifests(layout))
    assert len(store.entries()) > len(named)  # the edited file's old tasks are kept too
    gc = subprocess.run([ALBOR, "gc", "--spec", str(tmp_path / "spec.yaml"), "--data-dir", str(layout.root)])
    assert gc.returncode == 0
    assert {entry.name for entry, _, _ in store.entries()} == named  # what no manifest names is gone


@pytest.mark.graph
def test_a_run_killed_mid_stage_resumes_from_its_finished_tasks(tmp_path: Path) -> None:
    spec_path = write_spec(tmp_path / "spec.yaml", _sources(tmp_path))
    env = {**os.environ, "ALBOR_DATA_DIR": str(tmp_path / "out"), "DAGSTER_HOME": str(tmp_path / "home")}
    (tmp_path / "home").mkdir()
    killed = subprocess.run(
        [ALBOR, "run", "--spec", str(spec_path)], env={**env, "ALBOR_FAULT": "task-done:5"}, capture_output=True
    )
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    layout = Layout(tmp_path / "out")
    assert not list(layout.manifests_dir.glob("*.json"))  # killed in the first stage: nothing committed
    stored = TaskStore(str(layout.task_store), 10**9).entries()
    # The five tasks that finished before the kill: the source's file hashing (one inline task,
    # which the store does not keep: it is the other tasks' identity) and four ingest tasks,
    # besides their parts (each batch's redaction decisions, kept under its own identity).
    parts = {part[1] for entry, _, _ in stored for part in pickle.loads((entry / "result.pickle").read_bytes())[1]}
    assert len([entry for entry, _, _ in stored if entry.name not in parts]) == 4 and parts
    spec = load_spec(spec_path)
    resumed = task_counts(materialize_all(spec, tmp_path / "out"))
    # Every task that finished, none that had not (besides the long subsets' encoding and the
    # corpora's one fates table, this run's).
    shared = {f"corpus/{s} encode_row_group" for s in SPLITS} | FATES_TABLES
    assert sum(r for key, (_, r) in resumed.items() if key not in shared) == 4
    cold = tmp_path / "cold"
    materialize_all(spec, cold)
    assert recorded_outputs(tmp_path / "out") == recorded_outputs(cold)


@pytest.mark.graph
def test_albor_gc_and_a_run_keep_the_store_under_the_spec_s_cap(tmp_path: Path) -> None:
    cap = 300_000  # bytes: a few of the tiny build's entries
    raw = tiny_spec(shard_mb=0.05, execution={"workers": 1})
    materialize_all(load_spec(write_spec(tmp_path / "big.yaml", raw)), tmp_path / "out")
    store = TaskStore(str(Layout(tmp_path / "out").task_store), cap)
    assert sum(size for _, _, size in store.entries()) > cap  # the default cap holds them all
    raw["execution"]["task_store_gb"] = cap / 1e9
    capped = write_spec(tmp_path / "capped.yaml", raw)
    gc = subprocess.run([ALBOR, "gc", "--spec", str(capped), "--data-dir", str(tmp_path / "out")])
    assert gc.returncode == 0
    assert 0 < sum(size for _, _, size in store.entries()) <= cap
    materialize_all(load_spec(capped), tmp_path / "out")  # a run trims after every stage
    assert 0 < sum(size for _, _, size in store.entries()) <= cap


STAGES = ("ingested/stdlib_async", "filtered/stdlib_async", "documents", "documents", "mixed/train")


def _outputs(data_dir: Path) -> dict[str, str]:
    """Every committed output of a data dir: its path and SHA-256, as the manifests record them."""
    return {a.path: a.sha256 for m in iter_manifests(Layout(data_dir)) for a in m.outputs}


def _kept_checks(result: dg.ExecuteInProcessResult) -> set[tuple[str, str]]:
    """The (stage, check) of a run whose outcomes were kept (what they check unchanged)."""
    return {k for k, e in _evaluations(result).items() if "unchanged" in e.metadata}


def _outcomes(result: dg.ExecuteInProcessResult) -> dict[tuple[str, str], tuple[bool, str | None]]:
    """(passed, description) of every check of a run, by (stage, check)."""
    return {k: (e.passed, e.description) for k, e in _evaluations(result).items()}


def _evaluations(result: dg.ExecuteInProcessResult) -> dict[tuple[str, str], dg.AssetCheckEvaluation]:
    return {(e.asset_key.to_user_string(), e.check_name): e for e in result.get_asset_check_evaluations()}


def _kept(result: dg.ExecuteInProcessResult) -> set[str]:
    """The stages of a run that kept their outputs (their inputs, settings and code unchanged)."""
    return {
        e.asset_key.to_user_string()
        for e in result.get_asset_materialization_events()
        if "unchanged" in e.materialization.metadata
    }


@pytest.mark.graph
def test_a_stage_whose_inputs_settings_and_code_are_unchanged_keeps_its_outputs(tmp_path: Path) -> None:
    raw = _sources(tmp_path)
    notes = tmp_path / "notes.jsonl"  # a data file source: its path is a file the spec names
    notes.write_text(
        "".join(json.dumps({"text": f"note {i}: " + "words and more words " * 8}) + "\n" for i in range(30))
    )
    raw["sources"].append({"name": "notes", "kind": "jsonl", "path": str(notes)})
    bench = {"name": "python_bench", "path": str(REPO_ROOT / "data" / "samples" / "python_bench.jsonl")}
    raw["decontaminate"] = {"ngram": 13, "benchmarks": [{**bench, "fields": ["prompt", "canonical_solution"]}]}
    spec = load_spec(write_spec(tmp_path / "spec.yaml", raw))
    out, layout = tmp_path / "out", Layout(tmp_path / "out")
    built = materialize_all(spec, out)
    assert not _kept(built) and not _kept_checks(built)
    cold, outcomes = recorded_outputs(out), _outcomes(built)
    # Nothing changed: every stage keeps its outputs, ingestion too (its source's fingerprint,
    # each file's digest trusted while its stat holds, is the one it read). Every check keeps
    # its outcome: what it reads (its stage's files, the manifests, the spec) is the same. So
    # `albor run` decides before starting Dagster that there is nothing to run.
    stages = pipeline_stages(spec)
    everything = {s.name for s in stages}
    plan = plan_run(spec, stages, print, out)
    assert not plan.run and set(plan.seen) == everything
    # What it decided is checked again once a run holds the data dir: a stage another run
    # changed in between fails the run as it starts, before it writes anything.
    changed = {**plan.seen, "fim/val": "0" * 64}
    with pytest.raises(DataDirChanged, match="another run changed fim/val after this run decided"):
        ArtifactStore(data_dir=str(out), kept=changed).setup_for_execution(dg.build_init_resource_context())
    held = ArtifactStore(data_dir=str(out), kept=plan.seen)
    held.setup_for_execution(dg.build_init_resource_context())
    held.teardown_after_execution(dg.build_init_resource_context())
    rerun = materialize_all(spec, out)
    assert _kept(rerun) == everything
    assert _kept_checks(rerun) == set(outcomes) and _outcomes(rerun) == outcomes
    assert recorded_outputs(out) == cold
    # How stages run (workers, backend) is no part of what they write: still kept.
    two = load_spec(write_spec(tmp_path / "two.yaml", {**raw, "execution": {"workers": 2}}))
    assert _kept(materialize_all(two, out)) == everything
    off = load_spec(write_spec(tmp_path / "off.yaml", {**raw, "execution": {"workers": 1, "reuse": False}}))
    checked = materialize_all(off, out)
    assert not _kept(checked) and not _kept_checks(checked)  # reuse off: every stage and check does its work
    assert recorded_outputs(out) == cold
    # An output changed behind the pipeline's back: its stage runs and writes the recorded bytes
    # again, so the stages below it, their inputs' manifests the same bytes, keep theirs. Until
    # then, its checks' outcomes are not kept either: they would check the changed file.
    shard = next(a for a in read_manifest(layout, "fim/val").outputs if a.path.endswith(".parquet"))
    kept = KeptOutcome.model_validate_json(layout.check_outcome("fim/val", "schema").read_bytes())
    assert kept_outcome(layout, "fim/val", "schema", (), kept.identity) is not None
    good = (out / shard.path).read_bytes()
    (out / shard.path).write_bytes(b"not parquet")
    assert kept_outcome(layout, "fim/val", "schema", (), kept.identity) is None
    # The check run alone on the edited file (a Parquet file of another schema) fails, and that
    # outcome is not kept: once the file has its recorded bytes again, the passing one is.
    pq.write_table(pa.table({"other": [1]}), out / shard.path)
    alone = build_definitions(spec, out).resolve_job_def("__ASSET_JOB")
    checked = alone.get_subset(asset_check_selection={dg.AssetCheckKey(dg.AssetKey(["fim", "val"]), "schema")})
    with dg.DagsterInstance.ephemeral() as instance:
        failed = checked.execute_in_process(instance=instance, raise_on_error=False)
    assert [e.passed for e in failed.get_asset_check_evaluations()] == [False]
    (out / shard.path).write_bytes(good)
    again_kept = kept_outcome(layout, "fim/val", "schema", (), kept.identity)
    assert again_kept is not None and again_kept.passed
    (out / shard.path).write_bytes(b"not parquet")
    again = _kept(materialize_all(spec, out))
    assert "fim/val" not in again and {"corpus/val", "fim/train", "tokenizer"} <= again
    assert recorded_outputs(out) == cold
    # A file ingestion skips (too short) changes no document, only the source's fingerprint
    # among the ingested stage's inputs and its count of skips (hygiene and the stats' funnel
    # read it): what reads documents keeps its outputs; stats and provenance, which lists
    # every stage's lineage, run. Before the run, only the other source's stages are known
    # unchanged: the rest wait for what the edited source's ingestion writes.
    (tmp_path / "src" / "json" / "skipped.py").write_text("x = 1\n")
    plan = plan_run(spec, stages, print, out)
    unchanged = {f"{stage}/{src}" for stage in ("ingested", "filtered") for src in ("stdlib_async", "notes")}
    assert set(plan.kept) == unchanged and plan.run[0].name == "ingested/stdlib_json_email"
    again = _kept(materialize_all(spec, out))
    assert not {"provenance", "stats"} & again and {"documents", "fim/train", "tokenizer"} <= again
    assert "ingested/stdlib_json_email" not in again
    # A line added to the data file that hygiene drops: the source is read by its ingestion
    # alone (not in the other stages' identity by content), so what the edit never reaches keeps.
    notes.write_text(notes.read_text() + json.dumps({"text": "x"}) + "\n")
    assert {"fim/train", "tokenizer", "corpus/train"} <= _kept(materialize_all(spec, out))
    # A changed setting (a run config) reruns its stage, and what its new bytes feed.
    changed = materialize_all(spec, out, run_config={"ops": {"fim__train": {"config": {"rate": 0.25}}}})
    again, checks = _kept(changed), {stage for stage, _ in _kept_checks(changed)}
    assert "fim/train" not in again and "corpus/train" not in again and {"fim/val", "corpus/val"} <= again
    assert not {"fim/train", "corpus/train"} & checks and {"fim/val", "corpus/val"} <= checks


def test_a_task_whose_worker_runs_other_code_than_the_run_fails(tmp_path: Path) -> None:
    """A worker spawned after the package's files were edited imports other code than the
    run's process took its identities from: its task refuses to run instead of mixing them."""
    source = tmp_path / "in.txt"
    source.write_text("a line\n")
    io = TaskIO(str(tmp_path), IN_PLACE)
    task = _Task(UPPER, _Upper("!"), io, ())
    assert task((0, InputFile(str(source)))).result.shards[0].rows == 1  # the same code: it runs
    with pytest.raises(CodeChanged, match="changed on disk during the run"):
        _Task(UPPER, _Upper("!"), replace(io, code="0" * 64), ())((0, InputFile(str(source))))


def test_hygiene_and_its_secrets_check_redo_only_the_row_groups_whose_bytes_changed(tmp_path: Path) -> None:
    include = ("*.py", *(f"{p}/**/*.py" for p in ("email", "asyncio", "idlelib", "encodings", "xml", "lib2to3")))
    src = tmp_path / "src"
    for pattern in include:
        for path in sorted(STDLIB.glob(pattern)):
            (src / path.relative_to(STDLIB)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, src / path.relative_to(STDLIB))
    source = SourceSpec(name="s", kind="code", path=src, include=include)
    ingested = tmp_path / "in"
    ingest_source(source, ingested, StageIO(tmp_path), shard_mb=1000)  # one shard of many row groups
    groups = pq.ParquetFile(next(ingested.glob("part-*.parquet"))).num_row_groups
    assert groups >= 2
    store = TaskStore(str(Layout(tmp_path / "data").task_store), 10**9)

    def clean(out: Path) -> tuple[Any, dict[str, dict[str, float]]]:
        mark = TASKS.mark()
        with reusing(store):
            result = clean_source(ingested, HygieneSpec(), out, StageIO(tmp_path))
            check = check_no_secrets([texts_of(p) for p in sorted(out.glob("part-*.parquet"))])
        assert check.passed
        return result, TASKS.since(mark)

    first, first_tasks = clean(tmp_path / "first")
    # Two parts, the shard of texts and the signals, and theirs: per row group its redaction in the
    # first, and its characters, code signals and redaction in the second (each kept on its own),
    # which reuses the redaction the shard of texts had just made.
    shard = first_tasks["_clean_shard"]
    assert shard["parts"] == 4 * groups + 2 and shard["parts_reused"] == groups
    assert first.summary.redacted_documents > 0  # the stdlib's authors' e-mails: real redactions to redo
    middle = sorted(src.glob("*.py"))[len(list(src.glob("*.py"))) // 2]
    middle.write_text(middle.read_text().replace(" the ", " THE ", 1))  # the same size, in one row group
    ingest_source(source, ingested, StageIO(tmp_path), shard_mb=1000)
    again, tasks = clean(tmp_path / "again")
    assert (tasks["_clean_shard"]["tasks"], tasks["_clean_shard"]["reused"]) == (1, 0)
    # Both parts run again (the shard changed); inside them only the edited row group's are redone.
    assert (tasks["_clean_shard"]["parts"], tasks["_clean_shard"]["parts_reused"]) == (4 * groups + 2, 4 * groups - 3)
    leaks = tasks["_shard_leaks"]
    assert (leaks["tasks"], leaks["reused"], leaks["parts_reused"]) == (1, 0, leaks["parts"] - 1)
    cold = clean_source(ingested, HygieneSpec(), tmp_path / "cold", StageIO(tmp_path))  # no store
    assert [(a.path.split("/", 1)[1], a.sha256) for a in again.artifacts] == [
        (a.path.split("/", 1)[1], a.sha256) for a in cold.artifacts
    ]
    assert 0 < again.summary.scanned < cold.summary.scanned == cold.summary.documents_in  # one row group scored
    assert again.summary == cold.summary.model_copy(update={"scanned": again.summary.scanned})
    assert again.artifacts != first.artifacts


def test_documents_scan_again_only_the_row_groups_holding_an_edited_document(tmp_path: Path) -> None:
    """A scan task's identity is its rows' texts (their SHA-256), not its shard's bytes: after
    one document of a 3-row-group shard is edited, one group is scanned again, and the splits
    and signatures equal a cold build's; the benchmark check scans one group again too."""
    from albor_pipeline.spec import BenchmarkSpec, DecontaminateSpec, HoldoutSpec, NearDedupSpec
    from albor_pipeline.stages.documents.checks import check_no_contamination
    from albor_pipeline.stages.documents.documents import build_documents
    from albor_pipeline.text.documents import DOC_SCHEMA, text_sha256

    texts = [p.read_text(encoding="utf-8") for p in sorted(STDLIB.glob("*.py"))[:150]]
    texts += [p.read_text(encoding="utf-8") for p in sorted((STDLIB / "email").rglob("*.py"))]
    texts = [f"{t}\n# part {k}\n" for k in range(3) for t in texts][:600]  # distinct: 3 row groups of 256

    def shard(docs: list[str]) -> Path:
        path = tmp_path / "in" / "part-00000-0000.parquet"
        path.parent.mkdir(exist_ok=True)
        columns = {"text": docs, "source": ["s"] * len(docs), "file": [f"f{i}" for i in range(len(docs))]}
        pq.write_table(pa.table({**columns, "sha256": [text_sha256(t) for t in docs]}, schema=DOC_SCHEMA), path, 256)
        return path

    store = TaskStore(str(Layout(tmp_path / "data").task_store), 10**9)

    def build(out: Path, reuse: bool = True) -> tuple[dict[str, str], dict[str, dict[str, float]]]:
        mark = TASKS.mark()
        with reusing(store if reuse else None):
            holdout = HoldoutSpec(val_fraction=0.2, test_fraction=0.1)
            build_documents([("s", shard(texts))], holdout, out, StageIO(tmp_path), near=NearDedupSpec())
        return {
            p.relative_to(out).as_posix(): sha256_file(p) for p in sorted(out.rglob("*")) if p.is_file()
        }, TASKS.since(mark)

    def check() -> tuple[Any, dict[str, dict[str, float]]]:
        """The benchmark check over the input shard: its scan is kept per row group too."""
        mark = TASKS.mark()
        with reusing(store):
            outcome = check_no_contamination(tmp_path / "in", DecontaminateSpec(benchmarks=(bench,)))
        return outcome, TASKS.since(mark)

    bench = BenchmarkSpec(name="python_bench", path=REPO_ROOT / "data" / "samples" / "python_bench.jsonl")
    build(tmp_path / "first")
    assert pq.ParquetFile(tmp_path / "in" / "part-00000-0000.parquet").num_row_groups == 3
    check()
    texts[300] = texts[300].replace("import", "IMPORT", 1)  # row group 1
    again, tasks = build(tmp_path / "again")
    assert (tasks["_scan_group"]["tasks"], tasks["_scan_group"]["reused"]) == (3, 2)
    cold, _ = build(tmp_path / "cold", reuse=False)
    assert again == cold
    checked, check_tasks = check()
    assert (check_tasks["contaminated"]["parts"], check_tasks["contaminated"]["parts_reused"]) == (3, 2)
    assert checked == check_no_contamination(tmp_path / "in", DecontaminateSpec(benchmarks=(bench,)))  # no store

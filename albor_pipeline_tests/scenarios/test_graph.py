"""The Dagster graph end to end on real stdlib code: keys, metadata, checks, provenance."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from albor_pipeline.cli import main as albor
from albor_pipeline.dataset import Sequences
from albor_pipeline.definitions import build_definitions
from albor_pipeline.defs.automation import AUTOMATION_SENSOR, BUILD_JOB, OBSERVE_JOB, OBSERVE_SCHEDULE
from albor_pipeline.runtime.artifacts import read_manifest
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.spec import DEFAULT_SPEC, load_spec
from albor_pipeline.stages.documents.documents import split_of
from albor_pipeline.text.documents import text_sha256
from albor_pipeline.text.ledger import is_ledger, is_side
from albor_pipeline_tests.support import SHIPPED_SOURCES, STDLIB, materialize_all, small_spec_dict, stage, write_spec

HEX64 = re.compile(r"^[0-9a-f]{64}$")


def test_default_definitions_load_with_expected_keys():
    defs = build_definitions(load_spec(DEFAULT_SPEC))
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    expected = {
        *(f"{stage}/{name}" for stage in ("source", "ingested") for name in SHIPPED_SOURCES),
        *(f"filtered/{name}" for name in SHIPPED_SOURCES[:5]),  # the document sources and the chat sources
        "benchmark/python_bench",  # decontamination's benchmark: an observable source of documents
        "documents",
        "conversations",
        "chat_mixed/train",
        "chat_mixed/val",
        "sft/train",
        "sft/val",
        "eval/python_mc",
        *(f"eval/{name}" for name in ("base_mc", "base_schema", "base_lm")),
        "tokenizer",
        "stats",
        "provenance",
        *(f"{stage}/{s}" for stage in ("mixed", "fim", "corpus") for s in ("train", "val", "test")),
        *(f"corpus/long_{s}" for s in ("train", "val", "test")),
    }
    assert keys == expected
    documents = graph.get(dg.AssetKey("documents"))
    assert dg.AssetKey(["benchmark", "python_bench"]) in documents.parent_keys
    groups = {k.to_user_string(): graph.get(k).group_name for k in graph.materializable_asset_keys}
    assert groups["ingested/stdlib"] == "ingestion" and groups["mixed/val"] == "mix" and groups["fim/test"] == "fim"
    assert (
        groups["tokenizer"] == "tokenizer"
        and groups["corpus/train"] == "corpus"
        and groups["provenance"] == "provenance"
    )
    for key in graph.materializable_asset_keys:
        node = graph.get(key)
        assert node.description and node.code_version, key
        assert node.automation_condition is not None, key
    assert defs.resolve_job_def(BUILD_JOB) and defs.resolve_job_def(OBSERVE_JOB)
    sensor = defs.resolve_sensor_def(AUTOMATION_SENSOR)
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING and sensor.minimum_interval_seconds == 30
    schedule = defs.resolve_schedule_def(OBSERVE_SCHEDULE)
    assert schedule.cron_schedule == "0 * * * *" and schedule.job_name == OBSERVE_JOB
    check_keys = {c.to_user_string() for c in graph.asset_check_keys}
    assert {
        "documents:no_train_leak",
        "documents:no_benchmark_ngrams",
        "tokenizer:val_roundtrip",
        "corpus/train:sequences",
        "fim/val:fim_rate",
        "ingested/stdlib:schema",
    } <= check_keys


def test_a_stage_s_checks_run_as_one_step_and_a_failing_blocking_one_stops_what_is_downstream(reference, tmp_path):
    """Each stage's checks run in one step (Dagster's bookkeeping once per stage, not per
    check), each still its own result. A blocking check that fails stops the assets below its
    stage, and the stage's other checks still run after it."""
    spec, result = reference.spec, reference.result
    graph = build_definitions(spec, reference.out).resolve_asset_graph()
    checked = {k.asset_key for k in graph.asset_check_keys}
    steps = {e.step_key for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_SUCCESS}
    check_steps = {k for k in steps if k.endswith("_checks")}
    assert check_steps == {f"{key.to_python_identifier()}_checks" for key in checked}
    assert len(result.get_asset_check_evaluations()) == len(graph.asset_check_keys) > len(check_steps)
    # A FIM shard rewritten with another schema: fim/val's checks, then the corpus below it.
    out = tmp_path / "out"
    shutil.copytree(reference.out, out)
    shard = next(a for a in read_manifest(Layout(out), "fim/val").outputs if a.path.endswith(".parquet"))
    pq.write_table(pa.table({"other": [1]}), out / shard.path)
    fim_checks = {k for k in graph.asset_check_keys if k.asset_key == dg.AssetKey(["fim", "val"])}
    job = build_definitions(spec, out).resolve_job_def("__ASSET_JOB")
    subset = job.get_subset(asset_selection={dg.AssetKey(["corpus", "val"])}, asset_check_selection=fim_checks)
    with dg.DagsterInstance.ephemeral() as instance:
        run = subset.execute_in_process(instance=instance, raise_on_error=False)
        logs = [e.user_message for e in instance.all_logs(run.run_id)]
    # The schema check fails; the FIM-rate check still runs after it, and raises on the shard.
    assert {e.check_name: e.passed for e in run.get_asset_check_evaluations()} == {"schema": False}
    assert {k.name for k in fim_checks} == {"schema", "fim_rate"}
    assert any("fim/val: fim_rate: IndexError" in m for m in logs)
    assert not run.get_asset_materialization_events()  # corpus/val never ran
    failures = [e for e in run.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert [e.step_key for e in failures] == ["fim__val_checks"]


def test_every_stage_materializes_with_provenance_metadata(reference):
    spec, out, result = reference.spec, reference.out, reference.result
    mats = {
        e.asset_key.to_user_string(): e.step_materialization_data.materialization
        for e in result.get_asset_materialization_events()
    }
    # ingested, filtered, documents, mix/fim/corpus, long, tok, stats, prov
    assert len(mats) == 2 + 2 + 1 + 9 + 3 + 1 + 1 + 1
    for key, mat in mats.items():
        meta = mat.metadata
        assert meta["dagster/row_count"].value > 0 or key.startswith("corpus/long_"), key
        assert HEX64.match(meta["sha256"].value), key
        if key == "provenance":
            continue
        manifest = read_manifest(Layout(out), key)
        assert mat.tags["dagster/data_version"] == manifest.data_version
        assert {r.data["path"]: r.data["sha256"] for r in meta["outputs"].value.records} == {
            a.path: a.sha256 for a in manifest.outputs
        }
        assert set(meta["versions"].value) >= {
            "dagster",
            "polars",
            "pyarrow",
            "tokenizers",
            "detect-secrets",
            "matplotlib",
            "albor-pipeline",
        }
        assert isinstance(meta["config"].value, dict)
    assert set(mats["ingested/stdlib_async"].metadata["inputs"].value) == {"source/stdlib_async"}
    assert mats["documents"].metadata["inputs"].value == {
        a.path: a.sha256 for s in spec.sources for a in read_manifest(Layout(out), f"filtered/{s.name}").outputs
    }
    assert "x" in mats["mixed/train"].metadata["summary"].value
    # A stage of many files points at the directory holding them all.
    assert mats["documents"].metadata["dagster/uri"].path == str(out / "documents")
    assert mats["mixed/train"].metadata["dagster/uri"].path == str(out / "mixed" / "train")
    checks = result.get_asset_check_evaluations()
    assert len(checks) >= 14 and all(c.passed for c in checks), [c.check_name for c in checks if not c.passed]
    # Each stage and check reports its per-shard tasks' seconds, by task function.
    tasks = mats["documents"].metadata["tasks"].value
    assert {"_key_shard", "_repeats", "_scan_group", "_write_splits"} <= set(tasks)
    assert (
        tasks["_key_shard"]["tasks"]
        == tasks["_write_splits"]["tasks"]
        == len([p for p in mats["documents"].metadata["inputs"].value if not is_side(p)])
    )
    assert all(0 <= t["p50_s"] <= t["max_s"] <= t["total_s"] for t in tasks.values())
    assert sum(t["total_s"] for t in tasks.values()) > 0
    leak = next(c for c in checks if c.check_name == "no_near_leak")
    shards = [
        a
        for a in read_manifest(Layout(out), "documents").outputs
        if a.path.endswith(".parquet") and not is_ledger(a.path)
    ]
    assert leak.metadata["tasks"].value["_signatures"]["tasks"] == len(shards)
    assert leak.metadata["stored_signatures"].value == len(shards)  # the stage's, not recomputed


# What every stage records, after its own facts (`defs.stage.materialize_result`).
RECORD = ("dagster/row_count", "dagster/uri", "sha256", "bytes", "outputs", "inputs", "config", "versions")


def test_an_asset_page_leads_with_the_stage_s_own_facts(reference):
    """The asset page lists metadata in its order: a filter's funnel before the hashes and
    the outputs table, which every asset still carries in full."""
    mats = {
        e.asset_key.to_user_string(): e.step_materialization_data.materialization.metadata
        for e in reference.result.get_asset_materialization_events()
    }
    for key, meta in mats.items():
        keys = list(meta)
        first = min(keys.index(k) for k in RECORD)
        assert first > 0 and set(keys[first:]) <= {*RECORD, "tasks", "tasks_reused"}, (key, keys)
    for source in reference.spec.sources:
        keys = list(mats[f"filtered/{source.name}"])
        assert keys[:2] == ["documents_in", "kept"] and keys.index("removed") < keys.index("sha256"), keys
        outputs = mats[f"filtered/{source.name}"]["outputs"].value.records
        assert all(HEX64.match(r.data["sha256"]) for r in outputs) and outputs


def test_dataset_card_loads_in_hf_datasets(reference, tmp_path, monkeypatch):
    """`datasets.load_dataset(data dir, config)` finds the card's configs and features, and the
    rows are the corpus shards'; the card names each source's licence."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    out = reference.out
    card = (out / "README.md").read_text()
    assert card.startswith("---\n") and "PSF-2.0" in card and "## Intended use" in card
    corpus = datasets.load_dataset(str(out), "corpus", cache_dir=str(tmp_path / "hf"))
    assert set(corpus) == {"train", "validation", "test"}
    assert corpus["train"].features["input_ids"].feature.dtype == "uint32"
    shard = pq.read_table(out / "corpus" / "val" / "part-00000.parquet")
    assert corpus["validation"]["input_ids"][:3] == shard.column("input_ids").to_pylist()[:3]
    assert corpus["validation"].num_rows == shard.num_rows
    long = datasets.load_dataset(str(out), "corpus_long", cache_dir=str(tmp_path / "hf"))
    assert "train" in long and len(long["train"][0]["input_ids"]) == 512


def test_provenance_files_and_verify(reference, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(reference.out, out)  # the test breaks a file of it
    prov = json.loads((out / "provenance.json").read_text())
    paths = {a["path"] for a in prov["artifacts"]}
    assert {
        "documents/train/part-00000-0000.parquet",
        "tokenizer/tokenizer.json",
        "corpus/train/part-00000.parquet",
        "corpus/val/megatron.idx",
        "corpus/test/tokens.bin",
    } <= paths
    assert all(HEX64.match(a["sha256"]) for a in prov["artifacts"])
    md = (out / "PROVENANCE.md").read_text()
    for art in prov["artifacts"]:
        assert art["sha256"] in md  # full hashes, never truncated
    assert "## Mix" in md and "## Tokenizer" in md and "## Corpora" in md and "## Corpora by source" in md
    for split in ("train", "val", "test"):  # per-source accounting adds up to the split's corpus
        summary = prov["stages"][f"corpus/{split}"]["summary"]
        sources = summary["sources"].values()
        assert sum(s["documents"] for s in sources) == summary["documents"]
        assert sum(s["tokens"] for s in sources) == summary["tokens"]
        assert all(s["unique_documents"] <= min(s["documents"], s["pool_documents"]) for s in sources)
        assert all(s["epochs"] == round(s["documents"] / s["pool_documents"], 4) for s in sources)
    assert albor(["verify", "--data-dir", str(out)]) == 0
    victim = out / "corpus" / "val" / "megatron.bin"
    original = victim.read_bytes()
    try:
        victim.write_bytes(original[:100] + bytes([original[100] ^ 1]) + original[101:])
        capsys.readouterr()
        assert albor(["verify", "--data-dir", str(out)]) == 1
        err = capsys.readouterr().err
        assert "CHANGED: corpus/val/megatron.bin" in err
        victim.unlink()
        assert albor(["verify", "--data-dir", str(out)]) == 1
        assert "MISSING: corpus/val/megatron.bin" in capsys.readouterr().err
    finally:
        victim.write_bytes(original)
    assert albor(["verify", "--data-dir", str(out)]) == 0


@pytest.mark.graph
def test_run_config_overrides_reach_the_asset(reference, tmp_path):
    result = materialize_all(
        reference.spec, tmp_path / "cfg", run_config={"ops": {"fim__train": {"config": {"rate": 0.9, "format": "spm"}}}}
    )
    mat = next(
        e.step_materialization_data.materialization
        for e in result.get_asset_materialization_events()
        if e.asset_key == dg.AssetKey(["fim", "train"])
    )
    assert mat.metadata["config"].value["rate"] == 0.9
    assert mat.metadata["observed_rate"].value > 0.8
    assert mat.metadata["spm_rows"].value == mat.metadata["fim_rows"].value


@pytest.mark.graph
def test_bad_source_fails_clearly_and_keeps_earlier_artifacts(tmp_path):
    data = tmp_path / "jsonl"
    data.mkdir()
    good = "".join(json.dumps({"text": f"line {i} " * 20}) + "\n" for i in range(5))
    (data / "a.jsonl").write_text(good)
    raw = small_spec_dict([{"name": "notes", "kind": "jsonl", "path": str(data)}])
    spec = load_spec(write_spec(tmp_path / "spec.yaml", raw))
    out = tmp_path / "out"
    materialize_all(spec, out)
    before = (out / "provenance.json").read_bytes()
    (data / "a.jsonl").write_text(good + '{"text": "unterminated\n')
    result = materialize_all(spec, out, raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert failure.step_key == "ingested__notes"
    assert "a.jsonl:6: malformed JSON" in failure.step_failure_data.error.cause.message
    assert (out / "provenance.json").read_bytes() == before
    assert albor(["verify", "--data-dir", str(out)]) == 0


def test_changed_input_stops_the_stage_and_keeps_its_outputs(reference, tmp_path):
    """A stage re-hashes its inputs first: an edited upstream file is a clear error, not lineage."""
    spec, out = reference.spec, reference.out
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    fim = copy / "fim" / "train" / "part-00000-0000.parquet"
    pq.write_table(pq.read_table(fim), fim, compression="snappy")  # same rows, other bytes
    corpus_before = {p.name: p.read_bytes() for p in (copy / "corpus" / "train").rglob("*") if p.is_file()}
    job = build_definitions(spec, copy).resolve_job_def(BUILD_JOB)
    result = job.execute_in_process(asset_selection=[dg.AssetKey(["corpus", "train"])], raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    message = failure.step_failure_data.error.cause.message
    assert "input fim/train/part-00000-0000.parquet was changed since it was materialized" in message
    assert read_manifest(Layout(out), "fim/train").outputs[0].sha256 in message
    assert {p.name: p.read_bytes() for p in (copy / "corpus" / "train").rglob("*") if p.is_file()} == corpus_before
    fim.unlink()
    result = job.execute_in_process(asset_selection=[dg.AssetKey(["corpus", "train"])], raise_on_error=False)
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "input fim/train/part-00000-0000.parquet is missing" in failure.step_failure_data.error.cause.message


@pytest.mark.graph
def test_non_default_settings_build_end_to_end(tmp_path):
    """CSV and Parquet sources, a repeat mix, FIM on train only, a capped tokenizer, the HF
    encoder and padding: every stage and check passes and the settings show in the outputs."""
    data = tmp_path / "data"
    data.mkdir()
    docs = [p.read_text(encoding="utf-8") for p in sorted((STDLIB / "json").glob("*.py"))]
    pq.write_table(pa.table({"body": docs}), data / "json_pkg.parquet")
    with open(data / "notes.csv", "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([["id", "text"], *[[i, f"note {i}: " + "x = 1\n" * (i + 10)] for i in range(40)]])
    raw = small_spec_dict(
        [
            {"name": "json_pkg", "kind": "parquet", "path": str(data / "json_pkg.parquet"), "text_field": "body"},
            {"name": "notes", "kind": "csv", "path": str(data / "notes.csv")},
        ],
        mix={
            "train": {"seed": 1, "repeat": {"stdlib_json_email": 1, "stdlib_async": 1, "json_pkg": 3, "notes": 0.5}},
            "val": {"seed": 2, "rows": 30, "upsample": False},
            "test": {"seed": 3, "rows": 10, "upsample": False},
        },
        fim={"rate": 0.5, "format": "spm", "seed": 5, "splits": ["train"]},
        tokenizer={"vocab_size": 600, "max_chars": 400_000, "doc_cap": 5_000},
        corpus={"seq_len": 128, "remainder": "pad", "formats": ["parquet"], "encoder": "hf"},
    )
    out = tmp_path / "out"
    result = materialize_all(load_spec(write_spec(tmp_path / "spec.yaml", raw)), out)
    checks = result.get_asset_check_evaluations()
    assert len(checks) >= 20 and all(c.passed for c in checks)
    with stage("mixed, fim"):
        plan = {row["source"]: row for row in read_manifest(Layout(out), "mixed/train").summary["plan"]}
        assert plan["json_pkg"]["output rows"] == 3 * plan["json_pkg"]["input rows"]
        assert read_manifest(Layout(out), "fim/val").summary["transformed"] == 0
        fim_train = read_manifest(Layout(out), "fim/train").summary
        assert fim_train["spm"] == fim_train["transformed"] > 0
    corpus_meta = next(
        e.step_materialization_data.materialization.metadata
        for e in result.get_asset_materialization_events()
        if e.asset_key == dg.AssetKey(["corpus", "train"])
    )
    with stage("corpus/train"):
        assert corpus_meta["encoder"].value == "hf (configured)"
        assert read_manifest(Layout(out), "corpus/train").summary["padded_tokens"] > 0
        corpus = {Path(a.path).name for a in read_manifest(Layout(out), "corpus/train").outputs}
        # pieces, documents and fates: the ledger's
        assert corpus == {"part-00000.parquet", "index.json", "pieces.parquet", "documents.parquet", "fates.parquet"}
        ids = pq.read_table(out / "corpus/train/part-00000.parquet").column("input_ids").to_pylist()
        assert {len(s) for s in ids} == {128}
    assert albor(["verify", "--data-dir", str(out)]) == 0


def test_albor_run_cli_materializes_with_progress_byte_identical_to_the_reference(
    reference, tmp_path, monkeypatch, capsys
):
    """`albor run` of the reference's spec in another dir and through the CLI: progress on the
    terminal, a persistent instance, and the same provenance, byte for byte, as the reference."""
    spec = write_spec(tmp_path / "spec.yaml", small_spec_dict())
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ALBOR_SPEC", str(spec))
    monkeypatch.setenv("ALBOR_DATA_DIR", str(tmp_path / "out"))
    assert albor(["run", "--spec", str(spec), "--data-dir", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert re.search(r"\[#+\] \d+/\d+ provenance ok", captured.err)
    assert "ingested__stdlib_async: stdlib_async:" in captured.err  # the stage's own progress message
    assert "corpus/train:" in captured.out and "val round-trip" in captured.out
    assert (tmp_path / "home" / "dagster.yaml").exists()  # a persistent instance was set up
    with dg.DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        assert instance.get_runs(limit=1)[0].status == dg.DagsterRunStatus.SUCCESS
    assert albor(["verify", "--data-dir", str(tmp_path / "out")]) == 0
    # Run again with nothing changed: decided before Dagster starts, so no run is started, and
    # the summary comes from the stages' manifests.
    capsys.readouterr()  # what verify printed
    assert albor(["run", "--spec", str(spec), "--data-dir", str(tmp_path / "out")]) == 0
    again = capsys.readouterr()
    assert "albor: nothing changed: all" in again.err and "so no run was started" in again.err
    assert again.out == captured.out
    with dg.DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        assert len(instance.get_runs()) == 1
    # A chart deleted behind the pipeline's back: the run starts the stats stage and what is
    # downstream of it (provenance) alone, which write the recorded bytes again.
    chart = next(a for a in read_manifest(Layout(tmp_path / "out"), "stats").outputs if a.path.endswith(".png"))
    (tmp_path / "out" / chart.path).unlink()
    assert albor(["run", "--spec", str(spec), "--data-dir", str(tmp_path / "out")]) == 0
    partial = capsys.readouterr()
    assert re.search(r"albor: \d+ stages unchanged \(outputs, check outcomes kept\): not started", partial.err)
    assert partial.out == captured.out and re.search(r"\] (\d)/\1 provenance ok", partial.err)  # its steps alone
    with dg.DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        run = instance.get_runs(limit=1)[0]
        made = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
        assert {r.asset_key.to_user_string() for r in made if r.asset_key} == {"stats", "provenance"}
    # Two runs in different dirs are byte-identical.
    assert (tmp_path / "out" / "provenance.json").read_bytes() == (reference.out / "provenance.json").read_bytes()
    assert (tmp_path / "out" / "PROVENANCE.md").read_bytes() == (reference.out / "PROVENANCE.md").read_bytes()


@pytest.mark.slow
@pytest.mark.graph
def test_default_spec_builds_end_to_end(tmp_path):
    """The shipped spec, unmodified, on this machine's own sources: what `make run` does."""
    spec = load_spec(DEFAULT_SPEC)
    result = materialize_all(spec, tmp_path / "out")
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks)
    prov = json.loads((tmp_path / "out" / "provenance.json").read_text())
    stages = prov["stages"]
    with stage("ingested"):
        assert stages["ingested/stdlib"]["summary"]["documents"] > 500
        assert stages["ingested/pydoc_topics"]["summary"]["documents"] == 79
        assert stages["ingested/chat_formats"]["summary"]["documents"] == 39  # every chat format read
    with stage("tokenizer"):
        assert stages["tokenizer"]["summary"]["vocab_size"] == 32768 + 3 + 8  # + FIM sentinels + chat tokens
        assert stages["tokenizer"]["summary"]["keywords_single_token"] == 8
    with stage("sft, eval"):
        assert (
            stages["sft/train"]["summary"]["conversations"] > 1000
            and stages["eval/python_mc"]["summary"]["items"] == 152
        )
        assert {stages[f"eval/{n}"]["summary"]["task_type"] for n in ("base_mc", "base_schema", "base_lm")} == {
            "multiple_choice",
            "schema",
            "language_modeling",
        }
    # Decontamination: the stdlib files holding the shipped benchmark's stdlib-derived
    # reference solutions leave train (when their content hash put them there).
    decon = stages["documents"]["summary"]["decontaminated"]
    with stage("documents"):
        holdout = spec.holdout
        hosts = [STDLIB / "colorsys.py", STDLIB / "shlex.py", STDLIB / "html" / "__init__.py"]
        in_train = sum(split_of(text_sha256(h.read_text(encoding="utf-8")), holdout) == "train" for h in hosts)
        assert decon["benchmarks"]["python_bench"]["items"] == 16 and decon["dropped"].get("stdlib", 0) >= in_train > 0
        # Every document is accounted for: what hygiene kept = split rows + exact duplicates +
        # near duplicates + decontaminated, per source.
        docs = stages["documents"]["summary"]
        for name in ("stdlib", "site_packages", "pydoc_topics"):
            placed = sum(docs["rows"][split].get(name, 0) for split in ("train", "val", "test"))
            exact = sum(n for pair, n in docs["duplicates"].items() if pair.endswith(f"<- {name}"))
            near = docs["near_duplicates"]["removed"].get(name, 0)
            kept = stages[f"filtered/{name}"]["summary"]["kept"]
            assert kept == placed + exact + near + decon["dropped"].get(name, 0)
    with stage("mixed/train"):
        plan = {p["source"]: p for p in stages["mixed/train"]["summary"]["plan"]}
        assert set(plan) == {"stdlib", "site_packages", "pydoc_topics"}
        assert float(plan["pydoc_topics"]["multiplier"].rstrip("x")) > 1  # the small source is upsampled
    with stage("corpus"):
        assert stages["corpus/train"]["summary"]["sequences"] > 1000
        # Length staging: 32k-token sequences of 32k+-char documents, served as 4k chunks.
        long_dir = tmp_path / "out" / "corpus" / "long_train"
        long = Sequences(long_dir, chunk_len=4096)
        assert stages["corpus/long_train"]["summary"]["sequences"] * 8 == len(long) > 100
        assert long[9]["input_ids"].tolist() == Sequences(long_dir)[1]["input_ids"][4096:8192].tolist()
        # Its shards hold a corpus shard's tokens (256 sequences of 32k), so several workers pack them.
        shards = json.loads((long_dir / "index.json").read_text(encoding="utf-8"))["parquet"]["shards"]
        assert spec.corpus.long is not None and len(shards) > 1
        per_shard = spec.corpus.shard_sequences * spec.corpus.seq_len // spec.corpus.long.seq_len
        assert [s["sequences"] for s in shards[:-1]] == [per_shard] * (len(shards) - 1) and per_shard == 256
    with stage("provenance"):
        # Decontamination, the base-model eval sets and the OpenAI baselines, in the card and PROVENANCE.md.
        md = (tmp_path / "out" / "PROVENANCE.md").read_text(encoding="utf-8")
        card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
        assert "Decontamination" in md
        assert "base-model eval set" in md and "| base_lm | language_modeling | 1 |" in md
        assert all(f"config_name: eval_{n}" in card for n in ("base_mc", "base_schema", "base_lm"))
        assert all(f"{name}_bytes_per_token" in md and f"| {name} |" in card for name in ("gpt2", "gpt4", "gpt4o"))
    assert albor(["verify", "--data-dir", str(tmp_path / "out")]) == 0

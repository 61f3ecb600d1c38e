"""Several pipelines in one code location: `AlborPipeline` components, each under its own
prefix, groups, jobs, resources, data dir and lock."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from albor_pipeline.cli import run_failures
from albor_pipeline.definitions import PIPELINES_ENV, build_definitions, defs, load_pipelines, pipeline_stages
from albor_pipeline.defs.automation import BUILD_JOB
from albor_pipeline.runtime.artifacts import iter_manifests
from albor_pipeline.runtime.layout import PROVENANCE, Layout, ingested_stage
from albor_pipeline.runtime.lock import exclusive
from albor_pipeline.spec import load_spec
from albor_pipeline.stages.provenance.provenance import verify
from albor_pipeline_tests.support import small_spec_dict, write_spec

COMPONENT = "albor_pipeline.defs.component.AlborPipeline"


def tiny_spec(stdlib: Path, source: str, packages: list[str]) -> dict[str, Any]:
    """One code source over `packages` of the stdlib; the smallest graph that still has every stage."""
    raw = small_spec_dict()
    include = [f"{p}/**/*.py" for p in packages]
    raw["sources"] = [
        {"name": source, "kind": "code", "path": str(stdlib), "include": include, "exclude": ["**/test*/**"]}
    ]
    raw["tokenizer"] = {"vocab_size": 600}
    raw["corpus"] = {"seq_len": 256, "formats": ["parquet"]}
    raw["locking"] = {"on_busy": "fail"}  # a pipeline waiting on another's lock would be a failure here
    return raw


def declare(folder: Path, **attributes: str) -> None:
    folder.mkdir(parents=True)
    (folder / "defs.yaml").write_text(yaml.safe_dump({"type": COMPONENT, "attributes": attributes}), encoding="utf-8")


@pytest.fixture
def deployment(tmp_path: Path, stdlib_dir: Path) -> Path:
    """Two pipelines, one folder each (Dagster's defs-folder layout), paths relative to it."""
    write_spec(tmp_path / "code.yaml", tiny_spec(stdlib_dir, "mail", ["email"]))
    write_spec(tmp_path / "other.yaml", tiny_spec(stdlib_dir, "aio", ["json", "asyncio"]))
    declare(tmp_path / "pipelines" / "code", spec="../../code.yaml", prefix="code", data_dir="../../out-code")
    declare(tmp_path / "pipelines" / "other", spec="../../other.yaml", prefix="other", data_dir="../../out-other")
    return tmp_path / "pipelines"


def keys(d: dg.Definitions) -> set[str]:
    return {k.to_user_string() for k in d.resolve_asset_graph().get_all_asset_keys()}


@pytest.mark.graph  # two whole graphs materialize
def test_two_pipelines_side_by_side(deployment: Path) -> None:
    tmp = deployment.parent
    both = load_pipelines(deployment)
    specs = {p: load_spec(tmp / f"{name}.yaml") for p, name in (("code", "code"), ("other", "other"))}
    own = {p: keys(build_definitions(spec, tmp / "unused")) for p, spec in specs.items()}
    assert own["code"] != own["other"]  # different sources: ingested/mail vs ingested/aio
    # Every key of each pipeline, under its prefix; nothing unprefixed, nothing shared.
    assert keys(both) == {f"{p}/{k}" for p, ks in own.items() for k in ks}
    graph = both.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        node, prefix = graph.get(key), key.path[0]
        assert node.group_name and node.group_name.startswith(f"{prefix}_")
        assert all(parent.path[0] == prefix for parent in node.parent_keys)
    assert {k.asset_key.path[0] for k in graph.asset_check_keys} == {"code", "other"}
    repo = both.get_repository_def()
    jobs = {j.name for j in repo.get_all_jobs() if not j.name.startswith("__")}
    assert jobs == {f"{p}_{j}" for p in ("code", "other") for j in (BUILD_JOB, "observe_sources", "hygiene_whatif")}
    assert {s.name for s in repo.schedule_defs} == {"code_observe_sources_schedule", "other_observe_sources_schedule"}
    assert {s.name for s in repo.sensor_defs} == {"code_albor_automation", "other_albor_automation"}
    assert set(both.resources or {}) == {"code_store", "code_execution", "other_store", "other_execution"}
    for prefix in ("code", "other"):
        build = both.resolve_job_def(f"{prefix}_{BUILD_JOB}")
        assert {k.path[0] for k in build.asset_layer.selected_asset_keys} == {prefix}
        assert set(build.run_config["ops"]) == {
            f"{prefix}__{s.key.to_python_identifier()}" for s in pipeline_stages(specs[prefix])
        }

    # Both materialize into one instance, each holding only its own data dir's lock: the
    # other's lock is held by this test the whole time (on_busy: fail would stop the run).
    instance = dg.DagsterInstance.ephemeral()
    with exclusive(Layout(tmp / "out-code").lock_file, "the test, as another run"):  # its own lock: refused
        refused = both.resolve_job_def(f"code_{BUILD_JOB}").execute_in_process(instance=instance, raise_on_error=False)
        assert not refused.success and "in use by the test, as another run" in " ".join(
            run_failures(refused.all_events)
        )
    for prefix, other in (("code", "other"), ("other", "code")):
        with exclusive(Layout(tmp / f"out-{other}").lock_file, "the test, as another run"):
            assert both.resolve_job_def(f"{prefix}_{BUILD_JOB}").execute_in_process(instance=instance).success

    for prefix, source in (("code", "mail"), ("other", "aio")):
        root = tmp / f"out-{prefix}"
        stages = {s.name for s in pipeline_stages(specs[prefix])}
        manifests = list(iter_manifests(Layout(root)))
        assert {m.stage for m in manifests} == stages and ingested_stage(source) in stages
        report = verify(root)  # every recorded file is there; no file no stage of its own recorded
        assert report.failed == [] and report.unrecorded == [] and len(report.files) > len(stages)
        provenance = json.loads(Layout(root).provenance_json.read_text())
        assert set(provenance["stages"]) == stages - {PROVENANCE}
        # Each materialization says where it wrote: under its own pipeline's root.
        for stage in stages:
            event = instance.get_latest_materialization_event(dg.AssetKey([prefix, *stage.split("/")]))
            assert event and event.asset_materialization
            assert Path(str(event.asset_materialization.metadata["dagster/uri"].value)).is_relative_to(root)
    assert not any(p.is_file() for p in deployment.rglob("*") if p.name != "defs.yaml")  # nothing written there


def test_the_code_location_loads_the_folder_in_albor_pipelines(deployment: Path, monkeypatch) -> None:
    monkeypatch.setenv(PIPELINES_ENV, str(deployment))
    loaded = defs()
    assert {k.split("/")[0] for k in keys(loaded)} == {"code", "other"}
    monkeypatch.delenv(PIPELINES_ENV)
    default = defs()  # no selection: the one spec, unprefixed, as `make run` builds it
    assert "documents" in keys(default) and set(default.resources or {}) == {"store", "execution"}
    assert defs() is default  # loaded again (a run's process loads it five times): built once


def test_an_edited_spec_or_data_dir_gives_new_definitions(tmp_path: Path, monkeypatch) -> None:
    raw = small_spec_dict()
    monkeypatch.setenv("ALBOR_SPEC", str(write_spec(tmp_path / "pipeline.yaml", raw)))
    monkeypatch.setenv("ALBOR_DATA_DIR", str(tmp_path / "a"))
    first = defs()
    name = raw["sources"][0]["name"]
    assert defs() is first and f"ingested/{name}" in keys(first)
    raw["sources"][0]["name"] = "renamed"
    write_spec(tmp_path / "pipeline.yaml", raw)
    edited = defs()
    assert "ingested/renamed" in keys(edited) and f"ingested/{name}" not in keys(edited)
    monkeypatch.setenv("ALBOR_DATA_DIR", str(tmp_path / "b"))
    moved = defs()
    assert moved is not edited and (moved.resources or {})["store"].data_dir == str(tmp_path / "b")


def test_one_file_may_declare_several_pipelines(deployment: Path) -> None:
    """Several YAML documents in one defs.yaml, as in data/pipelines/defs.yaml."""
    folder = deployment.parent / "one_file"
    folder.mkdir()
    docs = [
        {"type": COMPONENT, "attributes": {"spec": "../code.yaml", "prefix": p, "data_dir": f"../out-{p}"}}
        for p in ("v1", "v2")
    ]
    (folder / "defs.yaml").write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    assert {k.split("/")[0] for k in keys(load_pipelines(folder))} == {"v1", "v2"}


@pytest.mark.parametrize("second", ["../../out-code", "../../out-code/nested", "../../"])
def test_pipelines_never_share_a_data_dir(deployment: Path, second: str) -> None:
    declare(deployment / "third", spec="../../other.yaml", prefix="third", data_dir=second)
    with pytest.raises(Exception, match="share a data dir"):
        load_pipelines(deployment)


def test_a_prefix_is_a_name(deployment: Path) -> None:
    declare(deployment / "bad", spec="../../other.yaml", prefix="v1/x", data_dir="../../out-bad")
    with pytest.raises(Exception) as raised:
        load_pipelines(deployment)
    causes = [raised.value]
    while causes[-1].__cause__ is not None:
        causes.append(causes[-1].__cause__)
    assert "pipeline prefix 'v1/x': a letter, then letters, digits or '_'" in [str(c) for c in causes]


def test_the_shipped_example_holds_seed_000s_two_versions_and_the_web_recipe() -> None:
    """data/pipelines/defs.yaml: the default spec, the reference spec and the web recipe,
    side by side."""
    loaded = load_pipelines(Path(__file__).resolve().parents[2] / "data" / "pipelines")
    stores = {k: r for k, r in (loaded.resources or {}).items() if k.endswith("_store")}
    assert set(stores) == {"full_store", "reference_store", "web_store"}
    assert {k.split("/")[0] for k in keys(loaded)} == {"full", "reference", "web"}
    assert "web/ingested/python_docs" in {k for k in keys(loaded)}
    assert len({os.path.normpath(r.data_dir) for r in stores.values()}) == 3

"""A fast snapshot of the Dagster definitions: keys, deps, groups, checks, jobs, sensors, schedules.

A change to the graph's shape shows up here as a reviewable diff of
`snapshots/definitions.json`. After an intended change, regenerate it with
`ALBOR_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest albor_pipeline_tests/defs/test_definitions.py`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg

from albor_pipeline.definitions import build_definitions, pipeline_stages
from albor_pipeline.defs.automation import BUILD_JOB
from albor_pipeline.runtime.versions import CODE_VERSION
from albor_pipeline.spec import REPO_ROOT, parse_spec
from albor_pipeline_tests.support import small_spec_dict

SNAPSHOT = Path(__file__).parents[1] / "snapshots" / "definitions.json"


def describe(defs: dg.Definitions) -> dict[str, Any]:
    graph = defs.resolve_asset_graph()
    assets = {}
    for key in sorted(graph.get_all_asset_keys()):
        node = graph.get(key)
        assets[key.to_user_string()] = {
            "group": node.group_name,
            "deps": sorted(k.to_user_string() for k in node.parent_keys),
            "kinds": sorted(node.kinds),
            "observable": node.is_observable,
            "automated": node.automation_condition is not None,
            # The package's code hash (the task store's too): the UI shows which builds ran older code.
            "code_version": "CODE_VERSION" if node.code_version == CODE_VERSION else node.code_version,
        }
    checks = sorted(
        f"{k.asset_key.to_user_string()}:{k.name}{' (blocking)' if graph.get_check_spec(k).blocking else ''}"
        for k in graph.asset_check_keys
    )
    repo = defs.get_repository_def()
    jobs = {
        job.name: sorted(k.to_user_string() for k in job.asset_layer.selected_asset_keys)
        for job in repo.get_all_jobs()
        if not job.name.startswith("__")
    }
    sensors = {
        s.name: {"interval_s": s.minimum_interval_seconds, "default": s.default_status.value} for s in repo.sensor_defs
    }
    schedules = {
        s.name: {"cron": s.cron_schedule, "job": s.job_name, "default": s.default_status.value}
        for s in repo.schedule_defs
    }
    return {"assets": assets, "checks": checks, "jobs": jobs, "sensors": sensors, "schedules": schedules}


def test_definitions_match_the_snapshot() -> None:
    defs = build_definitions(parse_spec(small_spec_dict(), Path(".")))
    actual = describe(defs)
    if os.environ.get("ALBOR_UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(json.dumps(actual, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    assert actual == json.loads(SNAPSHOT.read_text(encoding="utf-8"))


def test_the_code_location_loads_without_dagster_home() -> None:
    """A newcomer's first commands, from the repo root with no instance configured: Dagster's
    CLI then runs a temporary instance on the repo's dagster.yaml, which must not need
    DAGSTER_HOME; `dg check defs` runs as `make lint` runs it."""
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env["VIRTUAL_ENV"] = sys.prefix
    commands = [[sys.executable, "-c", "import albor_pipeline.definitions"]]
    commands.append([sys.executable, "-m", "dagster", "definitions", "validate"])
    if (dg_cli := Path(sys.executable).parent / "dg").exists():
        commands.append([str(dg_cli), "check", "defs"])
    for command in commands:
        done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{command[1:]}: {done.stdout[-2000:]}{done.stderr[-4000:]}"


def test_build_job_launchpad_defaults_are_the_spec_values() -> None:
    raw = small_spec_dict()
    raw["fim"] = {"rate": 0.3, "seed": 9, "splits": ["train"]}
    spec = parse_spec(raw, Path("."))
    ops = build_definitions(spec).resolve_job_def(BUILD_JOB).run_config["ops"]
    assert ops["fim__train"]["config"]["rate"] == 0.3 and ops["fim__train"]["config"]["seed"] == 9
    assert ops["fim__train"]["config"]["enabled"] is True and ops["fim__val"]["config"]["enabled"] is False
    assert ops["tokenizer"]["config"]["vocab_size"] == 1024
    assert ops["ingested__stdlib_async"]["config"]["include"] == raw["sources"][1]["include"]
    # Every stage has its spec values there, so the launchpad never starts from an empty form.
    assert set(ops) == {s.key.to_python_identifier() for s in pipeline_stages(spec)}


def test_best_fit_packing_adds_its_blocking_check() -> None:
    raw = small_spec_dict()
    raw["corpus"] = {"seq_len": 256, "packing": "best_fit", "best_fit_window": 64}
    graph = build_definitions(parse_spec(raw, Path("."))).resolve_asset_graph()
    checks = {k.to_user_string(): graph.get_check_spec(k).blocking for k in graph.asset_check_keys}
    assert all(checks[f"corpus/{split}:no_short_splits"] for split in ("train", "val", "test"))
    assert "corpus/train:no_short_splits" not in json.loads(SNAPSHOT.read_text())["checks"]  # concat: none


def test_descriptions_keep_markup_in_backticks():
    """The UI renders descriptions as markdown/HTML: `</s>` or `list<uint32>` outside backticks
    would be swallowed as a tag. Every description of the default graph keeps them in code."""
    from albor_pipeline.spec import load_spec

    defs = build_definitions(load_spec())
    graph = defs.resolve_asset_graph()
    texts = [graph.get(k).description or "" for k in graph.get_all_asset_keys()]
    texts += [graph.get_check_spec(k).description or "" for k in graph.asset_check_keys]
    bare = [t for t in texts if set("<>") & set(re.sub(r"`[^`]*`", "", t))]
    assert len(texts) > 60 and bare == []


def test_a_prefix_renames_every_name_and_nothing_else() -> None:
    """A pipeline under a prefix (one of several in a code location) is the snapshot's graph
    with the prefix on every asset key, dep, check, group, job, schedule, sensor and resource."""
    prefixed = build_definitions(parse_spec(small_spec_dict(), Path(".")), prefix="v2")
    snapshot = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    expected = {
        "assets": {
            f"v2/{key}": {**node, "group": f"v2_{node['group']}", "deps": [f"v2/{d}" for d in node["deps"]]}
            for key, node in snapshot["assets"].items()
        },
        "checks": sorted(f"v2/{check}" for check in snapshot["checks"]),
        "jobs": {f"v2_{name}": sorted(f"v2/{k}" for k in keys) for name, keys in snapshot["jobs"].items()},
        "sensors": {f"v2_{name}": sensor for name, sensor in snapshot["sensors"].items()},
        "schedules": {
            f"v2_{name}": {**schedule, "job": f"v2_{schedule['job']}"}
            for name, schedule in snapshot["schedules"].items()
        },
    }
    assert describe(prefixed) == expected
    assert set(prefixed.resources or {}) == {"v2_store", "v2_execution"}

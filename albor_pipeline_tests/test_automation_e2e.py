"""Automation end to end: `dagster dev`'s daemon rebuilds what an edited source feeds.

`test_automation.py` proves the conditions with `evaluate_automation_conditions`; this
proves the wiring a data team relies on: the sensor is on by default, the observe job
runs from a deployment, and the daemon carries the change to `provenance` while the
other source's ingestion is left alone.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import dagster as dg
import pytest

from albor_pipeline.definitions import build_definitions
from albor_pipeline.defs.automation import AUTOMATION_SENSOR, BUILD_JOB, OBSERVE_JOB
from albor_pipeline.spec import load_spec

from .support import STDLIB, Server, instance_home, small_spec_dict, write_spec

pytestmark = pytest.mark.e2e

TICK = 5  # automation.sensor_interval_seconds for this test


def latest_run_id(instance: dg.DagsterInstance, key: list[str]) -> str | None:
    event = instance.get_latest_materialization_event(dg.AssetKey(key))
    return event.run_id if event else None


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, dagster_dev) -> tuple[Server, Path]:
    """Two sources, fully built and observed in-process, then served by `dagster dev`."""
    tmp = tmp_path_factory.mktemp("auto")
    src = tmp / "src"
    shutil.copytree(STDLIB / "json", src / "a", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(STDLIB / "email", src / "b", ignore=shutil.ignore_patterns("__pycache__"))
    raw = small_spec_dict()
    raw["sources"] = [
        {"name": "a", "kind": "code", "path": str(src / "a")},
        {"name": "b", "kind": "code", "path": str(src / "b")},
    ]
    raw["tokenizer"] = {"vocab_size": 600}
    raw["automation"] = {"sensor_interval_seconds": TICK}
    spec_path = write_spec(tmp / "spec.yaml", raw)
    home, out = instance_home(tmp / "dagster_home"), tmp / "out"
    defs = build_definitions(load_spec(spec_path), out)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert defs.resolve_job_def(OBSERVE_JOB).execute_in_process(instance=instance).success
        assert defs.resolve_job_def(BUILD_JOB).execute_in_process(instance=instance).success

    return dagster_dev(spec_path, home, out), src


def test_daemon_rebuilds_only_what_an_edited_source_feeds(deployment) -> None:
    from dagster_graphql import DagsterGraphQLClient

    server, src = deployment
    with server.instance() as instance:
        built = instance.get_runs_count()
        before = {k: latest_run_id(instance, k.split("/")) for k in ("ingested/a", "ingested/b", "provenance")}
    time.sleep(4 * TICK)  # several sensor ticks over a fully built graph
    with server.instance() as instance:
        assert instance.get_runs_count() == built, "the sensor launched runs although nothing changed"

    path = src / "a" / "decoder.py"
    path.write_text(path.read_text(encoding="utf-8") + "\n# an edit that changes the bytes\n", encoding="utf-8")
    client = DagsterGraphQLClient("127.0.0.1", port_number=server.port)
    observe = client.submit_job_execution(
        OBSERVE_JOB, repository_location_name="albor_pipeline", repository_name="__repository__"
    )
    assert server.wait_for_run(observe) == dg.DagsterRunStatus.SUCCESS

    deadline = time.monotonic() + 420
    with server.instance() as instance:
        while latest_run_id(instance, ["provenance"]) == before["provenance"]:
            assert time.monotonic() < deadline, "the change did not reach provenance"
            time.sleep(2)
        runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/sensor_name": AUTOMATION_SENSOR}))
        assert runs, "no run was launched by the automation sensor"
        for run in runs:
            assert server.wait_for_run(run.run_id) == dg.DagsterRunStatus.SUCCESS
        assert latest_run_id(instance, ["ingested", "a"]) in {r.run_id for r in runs}
        assert latest_run_id(instance, ["ingested", "b"]) == before["ingested/b"]
        assert latest_run_id(instance, ["provenance"]) in {r.run_id for r in runs}
    manifest = (server.data / "PROVENANCE.md").read_text(encoding="utf-8")
    assert "ingested/a.parquet" in manifest

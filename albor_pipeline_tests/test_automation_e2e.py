"""Automation end to end: `dagster dev`'s daemon rebuilds what an edited source feeds.

`test_automation.py` proves the conditions with `evaluate_automation_conditions`; this
proves the wiring a data team relies on: the sensor is on by default, the observe job
runs from a deployment, and the daemon carries the change to `provenance` while the
other source's ingestion is left alone.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from albor_pipeline.definitions import BUILD_JOB, build_definitions
from albor_pipeline.defs.automation import AUTOMATION_SENSOR, OBSERVE_JOB
from albor_pipeline.spec import REPO_ROOT, load_spec

from .conftest import STDLIB, small_spec_dict, write_spec
from .test_ui_e2e import Server, free_port, wait_for

pytestmark = pytest.mark.e2e

TICK = 5  # automation.sensor_interval_seconds for this test


def latest_run_id(instance: dg.DagsterInstance, key: list[str]) -> str | None:
    event = instance.get_latest_materialization_event(dg.AssetKey(key))
    return event.run_id if event else None


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Iterator[tuple[Server, Path]]:
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
    home, out = tmp / "dagster_home", tmp / "out"
    home.mkdir()
    shutil.copyfile(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    defs = build_definitions(load_spec(spec_path), out)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert defs.resolve_job_def(OBSERVE_JOB).execute_in_process(instance=instance).success
        assert defs.resolve_job_def(BUILD_JOB).execute_in_process(instance=instance).success

    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "ALBOR_SPEC": str(spec_path), "ALBOR_DATA_DIR": str(out)}
    log = open(tmp / "dagster_dev.log", "wb")  # noqa: SIM115 - closed in teardown
    cmd = [str(Path(sys.executable).parent / "dagster"), "dev", "-h", "127.0.0.1", "-p", str(port)]
    cmd += ["-w", str(REPO_ROOT / "workspace.yaml")]
    proc = subprocess.Popen(cmd, env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(f"http://127.0.0.1:{port}/server_info", 180, proc)
        yield Server(port, home, out), src
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


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

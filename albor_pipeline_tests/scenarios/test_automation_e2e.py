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
from pathlib import Path

import dagster as dg
import pytest

from albor_pipeline.cli import main as albor
from albor_pipeline.cli import run_failures
from albor_pipeline.definitions import build_definitions
from albor_pipeline.defs.automation import AUTOMATION_SENSOR, BUILD_JOB, OBSERVE_JOB
from albor_pipeline.defs.launcher import WORKER_TAG
from albor_pipeline.runtime.artifacts import iter_manifests
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.spec import load_spec
from albor_pipeline_tests.support import STDLIB, Server, instance_home, materialize_all, small_spec_dict, write_spec

pytestmark = pytest.mark.e2e

TICK = 5
ALBOR = str(Path(sys.executable).parent / "albor")  # automation.sensor_interval_seconds for this test


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
    # The observe schedule (hourly by default) would add a run when a test spans the hour.
    raw["automation"] = {"sensor_interval_seconds": TICK, "observe_cron": "0 0 1 1 *"}
    # Edits move documents between splits (a split is a hash of the content): 20 % held out
    # keeps every split non-empty however the soak test's edits land.
    raw["holdout"] = {"val_fraction": 0.2, "test_fraction": 0.2, "seed": 0}
    spec_path = write_spec(tmp / "spec.yaml", raw)
    # The run queue looks every second (Dagster's default: every 5 s): the same wiring, but a
    # wave's run starts within the sensor tick that requested it, not one or two ticks later.
    home, out = instance_home(tmp / "dagster_home", run_queue={"dequeue_interval_seconds": 1}), tmp / "out"
    defs = build_definitions(load_spec(spec_path), out)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert defs.resolve_job_def(OBSERVE_JOB).execute_in_process(instance=instance).success
        assert defs.resolve_job_def(BUILD_JOB).execute_in_process(instance=instance).success

    return dagster_dev(spec_path, home, out), src


def test_daemon_rebuilds_only_what_an_edited_source_feeds(deployment) -> None:
    from dagster_graphql import DagsterGraphQLClient

    server, src = deployment
    by_sensor = dg.RunsFilter(tags={"dagster/sensor_name": AUTOMATION_SENSOR})
    with server.instance() as instance:
        built = instance.get_runs_count()
        before = {k: latest_run_id(instance, k.split("/")) for k in ("ingested/a", "ingested/b", "provenance")}
    time.sleep(4 * TICK)  # several sensor ticks over a fully built graph
    with server.instance() as instance:
        assert instance.get_runs_count() == built, "runs were launched although nothing changed"
        assert not instance.get_runs(filters=by_sensor)

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
    assert "ingested/a/part-00000-0000.parquet" in manifest


def _graphql(server: Server):
    from dagster_graphql import DagsterGraphQLClient

    return DagsterGraphQLClient("127.0.0.1", port_number=server.port)


def _launch(server: Server, job: str) -> str:
    return _graphql(server).submit_job_execution(
        job, repository_location_name="albor_pipeline", repository_name="__repository__"
    )


def test_a_killed_cli_run_is_failed_by_run_monitoring_and_frees_the_queue(deployment) -> None:
    """`albor run` (or `dagster asset materialize`) on the deployment's instance, SIGKILLed:
    nothing else watches that process, and with max_concurrent_runs: 1 its STARTED run
    would hold the UI's and the sensor's queue for good."""
    server, _ = deployment
    env = {**os.environ, "DAGSTER_HOME": str(server.home), "ALBOR_SPEC": str(server.spec)}
    cli = subprocess.Popen(
        [ALBOR, "run", "--data-dir", str(server.data)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 120
    with server.instance() as instance:
        while not (
            started := [
                r
                for r in instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
                if r.tags.get(WORKER_TAG, "").split(":")[1:2] == [str(cli.pid)]
            ]
        ):
            assert time.monotonic() < deadline and cli.poll() is None, "the CLI run never recorded its worker"
            time.sleep(0.1)
    cli.send_signal(signal.SIGKILL)
    cli.wait()
    killed, tag = started[0].run_id, started[0].tags[WORKER_TAG]
    queued = _launch(server, OBSERVE_JOB)

    assert server.wait_for_run(killed, timeout=180) == dg.DagsterRunStatus.FAILURE
    assert server.wait_for_run(queued, timeout=180) == dg.DagsterRunStatus.SUCCESS
    with server.instance() as instance:
        messages = [e.message for e in instance.all_logs(killed)]
    assert any(f"{tag} is gone (killed or crashed)" in m for m in messages), messages[-5:]
    assert albor(["verify", "--data-dir", str(server.data)]) == 0  # nothing half-written survived the kill


IN_PROGRESS = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]


@pytest.mark.slow
def test_soak_ten_edits_some_mid_wave_settle_to_the_cold_build(deployment, tmp_path) -> None:
    server, src = deployment
    files = [*sorted((src / "a").glob("*.py")), *sorted((src / "b").glob("*.py"))]
    with server.instance() as instance:
        first_run = instance.get_runs_count()
    for i in range(10):
        path = files[(3 * i) % len(files)]
        path.write_text(path.read_text(encoding="utf-8") + f"\n# soak edit {i}\n", encoding="utf-8")
        assert server.wait_for_run(_launch(server, OBSERVE_JOB)) == dg.DagsterRunStatus.SUCCESS
        time.sleep(TICK if i % 3 else 4 * TICK)  # most edits land while the last wave still runs

    deadline, quiet_since = time.monotonic() + 900, time.monotonic()
    with server.instance() as instance:
        seen = instance.get_runs_count()
        while time.monotonic() - quiet_since < 5 * TICK:  # settled: no run in progress or launched for 5 ticks
            assert time.monotonic() < deadline, "the waves did not settle"
            time.sleep(2)
            count = instance.get_runs_count()
            if count != seen or instance.get_runs(filters=dg.RunsFilter(statuses=IN_PROGRESS)):
                seen, quiet_since = count, time.monotonic()
        runs = instance.get_runs(limit=instance.get_runs_count() - first_run)
        failed = {
            r.run_id: run_failures([e.dagster_event for e in instance.all_logs(r.run_id) if e.dagster_event])
            for r in runs
            if r.status != dg.DagsterRunStatus.SUCCESS
        }
    assert len(runs) > 10 and not failed, failed

    cold = tmp_path / "cold"
    materialize_all(load_spec(server.spec), cold)
    recorded = {a.path: a.sha256 for m in iter_manifests(Layout(cold)) for a in m.outputs}
    served = {a.path: a.sha256 for m in iter_manifests(server.layout) for a in m.outputs}
    assert served == recorded  # every artifact, byte for byte
    assert albor(["verify", "--data-dir", str(server.data)]) == 0

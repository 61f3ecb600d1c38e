"""Dead run workers: find them, fail their runs, free the queue.

Each run records its worker process in a run tag (host, pid, process start time) when
it takes the data dir. `MonitoredRunLauncher` is Dagster's default launcher plus the
health check that the run-monitoring daemon calls: a STARTED run whose worker process
is gone (SIGKILL, OOM) is marked failed, so `max_concurrent_runs` moves on. Without
the daemon, the next run to take the data dir does the same (`fail_dead_runs`).
"""

from __future__ import annotations

import os
import socket

import dagster as dg
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus
from dagster._core.launcher.default_run_launcher import DefaultRunLauncher

from albor_pipeline.runtime.watchdog import start_time

WORKER_TAG = "albor/worker"


def this_worker() -> str:
    """This process as a run-tag value: host:pid:start time."""
    return f"{socket.gethostname()}:{os.getpid()}:{start_time(os.getpid())}"


def worker_alive(tag: str) -> bool | None:
    """Whether the tagged worker still runs (None: on another host, so unknown here)."""
    host, pid, started = tag.rsplit(":", 2)
    if host != socket.gethostname():
        return None
    return start_time(int(pid)) == started


def fail_dead_runs(instance: dg.DagsterInstance, log: dg.DagsterLogManager | None = None) -> list[str]:
    """Mark STARTED runs whose worker process is gone as failed; their run ids."""
    failed = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])):
        tag = run.tags.get(WORKER_TAG)
        if tag and worker_alive(tag) is False:
            instance.report_run_failed(run, f"run worker process {tag} is gone (killed or crashed)")
            failed.append(run.run_id)
            if log:
                log.warning(f"marked run {run.run_id} failed: its worker process {tag} is gone")
    return failed


class MonitoredRunLauncher(DefaultRunLauncher):
    """Dagster's default launcher, with the worker health check run monitoring needs."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        tag = run.tags.get(WORKER_TAG)
        if tag is None:  # not yet at its data dir: the start timeout covers a worker that never gets there
            return CheckRunHealthResult(WorkerStatus.RUNNING, "worker not recorded yet")
        alive = worker_alive(tag)
        if alive is None:
            return CheckRunHealthResult(WorkerStatus.UNKNOWN, f"worker {tag} runs on another host")
        if alive:
            return CheckRunHealthResult(WorkerStatus.RUNNING)
        return CheckRunHealthResult(WorkerStatus.FAILED, f"run worker process {tag} is gone (killed or crashed)")

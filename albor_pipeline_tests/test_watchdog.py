"""A hung stage fails within its time limit, naming what it was on, and leaves no process behind;
a killed run's pool workers exit with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest

from albor_pipeline.core.executor import LocalExecutor
from albor_pipeline.core.watchdog import StageTimeout, reading, time_limit


def _children(pid: int) -> list[int]:
    """Live child processes of `pid` (zombies excluded), from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def _workers(pid: int) -> set[int]:
    """`pid`'s children but multiprocessing's resource tracker (one per process, for its lifetime)."""
    return {c for c in _children(pid) if b"resource_tracker" not in Path(f"/proc/{c}/cmdline").read_bytes()}


def _hang(seconds: float, item: int) -> int:
    time.sleep(seconds)
    return item


def test_a_read_blocked_on_a_fifo_fails_at_the_limit_naming_the_stage_and_file(tmp_path):
    fifo = tmp_path / "src" / "blocked.py"
    fifo.parent.mkdir()
    os.mkfifo(fifo)  # nobody writes: open() blocks for ever
    start = time.monotonic()
    with pytest.raises(StageTimeout) as err, time_limit(1.0, "ingested/code"), reading(fifo), open(fifo) as fh:
        fh.read()
    assert time.monotonic() - start < 10
    assert "stage ingested/code exceeded its time limit of 1 s while reading" in str(err.value)
    assert str(fifo) in str(err.value)


def test_a_hung_task_on_the_local_pool_fails_the_stage_and_its_workers_are_ended():
    before = _workers(os.getpid())
    start = time.monotonic()
    with pytest.raises(StageTimeout, match=r"waiting for task _hang on 0 \(local\)"), time_limit(5.0, "mixed/train"):
        list(LocalExecutor(2).map(partial(_hang, 3600.0), range(4)))
    assert time.monotonic() - start < 30
    deadline = time.monotonic() + 10
    while _workers(os.getpid()) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _workers(os.getpid()) - before, "pool workers outlived the failed stage"


def test_a_limit_that_is_not_reached_changes_nothing():
    with time_limit(30.0, "fim/train"):
        assert list(LocalExecutor(2).map(partial(_hang, 0.01), range(6))) == list(range(6))
    with time_limit(None, "fim/train"):
        assert list(LocalExecutor(2).map(partial(_hang, 0.0), range(3))) == [0, 1, 2]


RUN = """
from functools import partial
from albor_pipeline.core.executor import LocalExecutor
from albor_pipeline_tests.test_watchdog import _hang
for _ in LocalExecutor(2).map(partial(_hang, 3600.0), range(4)):
    pass
"""


def _alive(pid: int) -> bool:
    return _state(pid) not in ("Z", "gone")


def test_pool_workers_exit_when_their_run_is_killed():
    """A SIGKILLed run cannot stop its workers: they watch for it and exit within seconds."""
    run = subprocess.Popen([sys.executable, "-c", RUN], cwd=Path(__file__).parents[1])
    try:
        deadline = time.monotonic() + 60
        while len(_children(run.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # the pool's workers and multiprocessing's helpers, all started
        spawned = _children(run.pid)
        assert len(spawned) >= 2, "the pool never started"
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    deadline = time.monotonic() + 15
    while any(map(_alive, spawned)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in spawned if _alive(pid)], "processes outlived their killed run"


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"

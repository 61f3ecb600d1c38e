"""A hung stage fails within its time limit, naming what it was on, and leaves no process behind;
a killed run's pool workers exit with it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path

import pytest

from albor_pipeline import cli
from albor_pipeline.runtime.executor import LocalExecutor
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.lock import exclusive
from albor_pipeline.runtime.watchdog import EXIT_TIMEOUT, StageTimeout, reading, time_limit, watch_processes
from albor_pipeline_tests.support import ALBOR, tiny_spec, write_spec


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


def _cmdline(pid: int) -> bytes:
    """A process's command line; empty once it is gone (a worker may exit while it is listed)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _workers(pid: int) -> set[int]:
    """`pid`'s pool workers: its fork server's live children, and its own but the fork server and
    multiprocessing's resource tracker (one each per process, for its lifetime)."""
    found: set[int] = set()
    for child in _children(pid):
        cmd = _cmdline(child)
        if b"forkserver" in cmd:
            found.update(_children(child))
        elif cmd and b"resource_tracker" not in cmd:
            found.add(child)
    return found


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
from albor_pipeline.runtime.executor import LocalExecutor
from albor_pipeline_tests.runtime.test_watchdog import _hang
for _ in LocalExecutor(2).map(partial(_hang, 3600.0), range(4)):
    pass
"""


def _alive(pid: int) -> bool:
    return _state(pid) not in ("Z", "gone")


def test_pool_workers_exit_when_their_run_is_killed():
    """A SIGKILLed run cannot stop its workers: they watch for it and exit within seconds."""
    run = subprocess.Popen([sys.executable, "-c", RUN], cwd=Path(__file__).parents[2])
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


@pytest.fixture
def silent_server():
    """A loopback S3 endpoint that accepts connections and never answers (a hung server)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(server.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()
    for conn in held:
        conn.close()


@pytest.mark.slow
@pytest.mark.graph
def test_a_run_hung_on_a_server_that_never_answers_ends_at_its_limit_and_frees_the_data_dir(
    tiny_reference, tmp_path, silent_server, capsys
):
    """Stuck inside native code (pyarrow's S3 client), past the limit and its grace: the run
    ends naming the stage and the object, the lock is free, and what was built stays intact."""
    out = tmp_path / "out"
    shutil.copytree(tiny_reference.out, out)  # what was built
    hung = {"name": "hung", "kind": "jsonl", "path": "s3://bucket/data.jsonl", "text_field": "text"}
    spec = write_spec(
        tmp_path / "b.yaml",
        {**tiny_spec(), "sources": [*tiny_spec()["sources"], hung], "execution": {"stage_timeout_s": 2}},
    )
    env = {
        **os.environ,
        "ALBOR_DATA_DIR": str(out),
        "DAGSTER_HOME": str(tmp_path / "home"),
        "AWS_ENDPOINT_URL": silent_server,
        "AWS_ACCESS_KEY_ID": "albor-test",
        "AWS_SECRET_ACCESS_KEY": "albor-test-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    start = time.monotonic()
    run = subprocess.run([ALBOR, "run", "--spec", str(spec)], env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == EXIT_TIMEOUT, run.stderr[-3000:]
    assert time.monotonic() - start < 120
    assert "stage ingested/hung exceeded its time limit of 2 s while reading s3://bucket/data.jsonl" in run.stderr
    with exclusive(Layout(out).lock_file, "test", wait=False):
        pass  # the dead run's lock is gone
    assert cli.main(["verify", "--data-dir", str(out)]) == 0


def test_a_hung_inline_task_is_named_too():
    """Inline, a task runs while it is submitted: the time-out still names it."""
    from albor_pipeline.runtime.executor import InlineExecutor

    with pytest.raises(StageTimeout, match=r"waiting for task _hang on 1 \(inline\)"), time_limit(1.0, "fim/val"):
        list(InlineExecutor().map(partial(_hang, 3600.0), [1, 2]))


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="watch_processes needs pidfds")
def test_watch_processes_names_an_exit_and_stops_twice_harmlessly():
    """The first of the watched processes to exit is named; `stop` may be called again (Ray's
    shutdown and a failing run both stop the watch): before, a second call wrote to and closed
    the first's fds, by then another pipe's."""
    exits: list[str] = []
    child = subprocess.Popen(["sleep", "60"])
    try:
        stop = watch_processes({child.pid: "raylet"}, exits.append)
        child.kill()
        child.wait()
        deadline = time.monotonic() + 5
        while not exits and time.monotonic() < deadline:
            time.sleep(0.01)
        assert exits == [f"raylet (pid {child.pid})"]
        stop()
        reused_r, reused_w = os.pipe()  # the lowest free fds: likely the ones stop closed
        stop()
        os.write(reused_w, b"ok")
        assert os.read(reused_r, 2) == b"ok"
        os.close(reused_r)
        os.close(reused_w)
    finally:
        child.kill()
        child.wait()

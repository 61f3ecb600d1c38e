"""One pool of worker processes per run: every parallel map of a run shares it, a failed map
ends it and the next map starts a new one, and the outputs are the bytes of an inline run."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from albor_pipeline.runtime.executor import LocalExecutor, TaskError, WorkerPool
from albor_pipeline.spec import load_spec
from albor_pipeline_tests.support import materialize_all, recorded_outputs, small_spec_dict, write_spec


def test_maps_share_the_pool_and_a_failed_map_ends_it() -> None:
    pool = WorkerPool(2)
    executor = LocalExecutor(2, pool=pool)
    before = WorkerPool.starts
    assert list(executor.map(math.sqrt, [4.0, 9.0, 16.0])) == [2.0, 3.0, 4.0]
    assert list(executor.map(math.factorial, range(6))) == [1, 1, 2, 6, 24, 120]
    assert WorkerPool.starts == before + 1  # two maps, one start-up
    with pytest.raises(TaskError, match=r"sqrt failed on -1\.0 \(local\): ValueError"):
        list(executor.map(math.sqrt, [1.0, -1.0, 4.0]))
    assert list(executor.map(math.sqrt, [25.0])) == [5.0]  # a fresh pool after the failure
    assert WorkerPool.starts == before + 2
    pool.close()


def _worker_pid(_: int) -> int:
    time.sleep(0.2)  # both workers take one
    return os.getpid()


MAIN_SCRIPT = """
import os, sys, time
with open(os.environ["IMPORTS_LOG"] if IMPORTABLE else sys.argv[1], "a") as log:
    log.write(f"{__name__} {os.getpid()}\\n")
def pid(_):
    time.sleep(0.1)  # both workers take some
    return os.getpid()
if __name__ == "__main__":
    from albor_pipeline.runtime.executor import LocalExecutor, WorkerPool
    pool = WorkerPool(2)
    workers = set(LocalExecutor(2, pool=pool).map(pid, range(8)))
    print(" ".join(map(str, sorted(workers))))
    pool.close()
"""


@pytest.mark.parametrize("importable", [True, False])
def test_workers_do_not_run_the_run_s_main_script_again(tmp_path: Path, importable: bool) -> None:
    """A worker starts from the fork server with the run's main script (Dagster's command line:
    all of Dagster) already imported there, once, instead of importing it itself as Python
    3.11's fork server would have each one do. A script the fork server cannot import (it
    reads the run's arguments) is run by each worker, as before: the pool still works."""
    script, log = tmp_path / "main_script.py", tmp_path / "imports.log"
    script.write_text(f"IMPORTABLE = {importable}" + MAIN_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "IMPORTS_LOG": str(log)}
    run = subprocess.run([sys.executable, str(script), str(log)], capture_output=True, text=True, env=env, check=True)
    workers = {int(pid) for pid in run.stdout.split()}
    imports = [line.split() for line in log.read_text().splitlines()]
    assert workers and imports[0] == ["__main__", str(run_pid := int(imports[0][1]))]
    again = {int(pid) for name, pid in imports[1:] if name == "__mp_main__"}
    assert len(imports) == 1 + len(again) and run_pid not in workers
    if importable:  # the fork server, once
        assert len(again) == 1 and not again & workers
    else:
        assert again == workers


CONSOLE_SCRIPT = """
import os, sys
with open(sys.argv[1], "a") as log:
    log.write(f"{__name__} {os.getpid()}\\n")
if __name__ == "__main__":
    from albor_pipeline.runtime.executor import LocalExecutor, WorkerPool
    from albor_pipeline_tests.runtime.test_worker_pool import _worker_pid
    pool = WorkerPool(2)
    print(" ".join(map(str, sorted(set(LocalExecutor(2, pool=pool).map(_worker_pid, range(4)))))))
    pool.close()
"""


def test_a_console_script_is_run_by_neither_the_fork_server_nor_its_workers(tmp_path: Path) -> None:
    """An installed entry point's wrapper (`dagster`, `albor`) only imports its package's main:
    the fork server puts a module naming it in its place rather than run it (under Dagster's
    command line, all of Dagster), and the workers skip it too."""
    scripts = Path(sysconfig.get_path("scripts"))
    script, log = scripts / f"albor-test-{os.getpid()}-{tmp_path.name}", tmp_path / "imports.log"
    script.write_text(CONSOLE_SCRIPT)
    try:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
        run = subprocess.run([sys.executable, str(script), str(log)], capture_output=True, text=True, env=env)
    finally:
        script.unlink()
    assert run.returncode == 0, run.stderr
    assert len(run.stdout.split()) == 2  # both workers ran tasks
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["__main__"]


def test_a_killed_run_s_workers_exit() -> None:
    # A run SIGKILLed mid-map cannot stop its workers: they watch the process that started
    # them (the fork server, which ends with the run) and exit on their own.
    code = (
        "import sys, time\n"
        "from albor_pipeline.runtime.executor import LocalExecutor, WorkerPool\n"
        "from albor_pipeline_tests.runtime.test_worker_pool import _worker_pid\n"
        "print(*sorted(set(LocalExecutor(2, pool=WorkerPool(2)).map(_worker_pid, range(8)))), flush=True)\n"
        "time.sleep(600)\n"
    )
    run = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert run.stdout is not None
    workers = [int(pid) for pid in run.stdout.readline().split()]
    assert len(workers) == 2 and run.pid not in workers
    assert _gone_after_kill(run, workers, 10)


SLOW_PRELOAD = """
import os, pathlib, time
pathlib.Path(os.environ["PRELOADING"]).write_text(str(os.getpid()))
time.sleep(120)  # a fork server's imports on a busy machine
"""


def test_a_run_killed_while_its_fork_server_preloads_leaves_no_process(tmp_path: Path) -> None:
    """A run SIGKILLed while its fork server still imports the preloaded modules: the server
    and the resource tracker (whose pipe a request queued to the server holds) lived on until
    the imports were done, 14-21 s on a busy machine, since `multiprocessing` watches the run
    only from then on. The server's first import watches the run, so both end at once."""
    (tmp_path / "slow_preload.py").write_text(SLOW_PRELOAD)
    marker = tmp_path / "preloading"
    code = (
        "import time\n"
        "from albor_pipeline.runtime import executor\n"
        "executor.PRELOADED.insert(1, 'slow_preload')\n"
        "executor.WorkerPool(2).warm()\n"
        "time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{Path(__file__).parents[2]}:{tmp_path}", "PRELOADING": str(marker)}
    run = subprocess.Popen([sys.executable, "-c", code], env=env)
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    children = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if _parent(pid) == run.pid]
    try:
        assert int(marker.read_text()) in children and len(children) == 2  # the server, the tracker
        assert _gone_after_kill(run, children, 3)
    finally:
        for pid in [run.pid, *children]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        run.wait()


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError):
        return None


def _gone_after_kill(run: subprocess.Popen, pids: list[int], seconds: float) -> bool:
    """SIGKILL `run`; whether every one of `pids` has exited within `seconds` after."""
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + seconds
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(map(_alive, pids))


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (an exited one nobody reaped yet is a zombie, `Z`)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.graph
def test_a_run_starts_one_pool_and_writes_the_bytes_of_an_inline_run(tmp_path: Path) -> None:
    outputs = {}
    for workers in (1, 2):
        raw = small_spec_dict(tokenizer={"vocab_size": 600}, execution={"workers": workers})
        raw["sources"][0]["include"] = ["json/**/*.py"]  # two small stdlib sources: a build in seconds
        raw["sources"][1]["include"] = ["email/**/*.py", "concurrent/**/*.py"]
        spec = load_spec(write_spec(tmp_path / f"w{workers}.yaml", raw))
        before = WorkerPool.starts
        materialize_all(spec, tmp_path / f"out{workers}")
        outputs[workers] = recorded_outputs(tmp_path / f"out{workers}")
        assert WorkerPool.starts - before == (0 if workers == 1 else 1)  # every map of the run on one pool
    assert outputs[1] == outputs[2] and len(outputs[1]) > 20

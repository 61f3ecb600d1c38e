"""Where per-shard work runs: this process, a local process pool, or a Ray cluster.

A stage's per-shard step is a plain picklable function of one item (a shard, a chunk
of row groups); the stage hands it to an `Executor` and consumes the results in input
order. The step never knows where it ran, so every backend and worker count gives the
same results, and the same bytes once the stage writes them (datatrove's split between
a pipeline block and its executor).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sized
from concurrent.futures import ProcessPoolExecutor
from contextlib import suppress
from multiprocessing import forkserver, get_context, spawn
from multiprocessing.context import ForkServerContext
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np

from albor_pipeline.runtime.artifacts import NO_ROOM
from albor_pipeline.runtime.memory import release_memory_if_grown
from albor_pipeline.runtime.nodes import Node
from albor_pipeline.runtime.stagerun import Progress
from albor_pipeline.runtime.taskstore import note_worker_code
from albor_pipeline.runtime.watchdog import exit_with, in_flight, start_time

if TYPE_CHECKING:  # the spec sits above the runtime
    from albor_pipeline.spec import ExecutionSpec

PROGRESS_SECONDS = 10.0  # how often a map tells its `progress` how many tasks are done

T = TypeVar("T")
R = TypeVar("R")


def cpu_count() -> int:
    """CPUs this process may use (affinity-aware, unlike os.cpu_count)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


class Executor(Protocol):
    """Runs `fn` over `items` and yields the results in input order. `node`: how its tasks
    reach the data dir where they run (None: on the run's machine, in place)."""

    name: str
    workers: int
    progress: Progress | None
    node: Node | None

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]: ...


class InlineExecutor:
    """In this process: for one worker and for work too small to ship elsewhere."""

    name = "inline"
    workers = 1
    node: Node | None = None

    def __init__(self, progress: Progress | None = None) -> None:
        self.progress = progress

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        # window 1: each task runs as it is collected; its errors reach the caller as they are
        return _windowed(self.name, lambda timed, item: timed(item), lambda done: done, fn, items, 1, self.progress)


PRELOADED = [
    "albor_pipeline.runtime.forkmain",
    "albor_pipeline.runtime.shardmap",
    "pandas",
    "polars",
    "awkward",
    "albor_pipeline.stages.stats.charts",
]
"""What the fork server imports once, before it forks workers: the run's main script
(`forkmain`), the libraries every task uses, pandas (Arrow's `to_numpy` imports it), polars
(the mix's), awkward (gigatoken builds its results with it, importing it at a worker's first
encoding: 0.1 s) and matplotlib (the charts': 0.3 s a worker otherwise, in a rebuild whose
figures moved); then the modules of this package the run has imported (`_preload`)."""

MAIN_SCRIPT = "ALBOR_FORKSERVER_MAIN"
"""The environment variable that names the run's main script to the fork server (`forkmain`)."""


class WorkerPool:
    """A run's local worker processes: started with the run (`warm`) or by its first parallel
    map, and kept for every later one, since a fresh interpreter importing this package costs
    a second or two and a graph runs dozens of maps. A failed map ends them (a worker may be
    hung) and the next map starts new ones; `close` ends them when the run does.

    Workers are forked by a fork server (`multiprocessing`'s forkserver: a process that only
    imports the libraries and forks, so no thread or lock of the run is forked) that imported
    them and the run's own main script (Dagster's command line: `forkmain`) once: a spawned
    worker would import them itself, about a second of a 2-core machine per worker and per
    pool."""

    starts = 0  # pools started in this process: what one pool per run saves is countable

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def get(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                run = os.getpid()
                self._pool = ProcessPoolExecutor(
                    self.workers, mp_context=_fork_context(), initializer=_start_worker, initargs=(run, start_time(run))
                )
                WorkerPool.starts += 1
            return self._pool

    def warm(self) -> None:
        """Start the workers now, in the background: the fork server's imports and the workers'
        start overlap the run's own start (Dagster's, the first stage's listing) instead of
        delaying its first parallel map. Harmless when the run ends first."""

        def start() -> None:
            with suppress(RuntimeError, OSError):  # the pool was closed or killed meanwhile
                for done in [self.get().submit(os.getpid) for _ in range(self.workers)]:
                    done.result()

        threading.Thread(target=start, name="warm-workers", daemon=True).start()

    def kill(self) -> None:
        """End every worker now, busy or not, and forget the pool."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            for process in list(getattr(pool, "_processes", {}).values()):
                process.kill()
            pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """End the workers once their tasks are done."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


def _fork_context() -> ForkServerContext:
    """The fork server's context, with what it imports before it forks (`_preload`) and the
    run's main script, which it inherits (`forkmain`): "" for none, never another run's."""
    context = get_context("forkserver")
    context.set_forkserver_preload(_preload())
    os.environ[MAIN_SCRIPT] = spawn.get_preparation_data("main").get("init_main_from_path", "")
    return context


def start_fork_server() -> None:
    """Start the fork server (`multiprocessing`'s one per process) in the background, before
    the run's pool asks for it: `albor run` calls it once it knows a run will start, so the
    server's imports (about a second and a half of a core) overlap Dagster's own start
    rather than the first parallel map's wait. The run's pool then forks from it."""
    _fork_context()  # its preload and main script, as the pool's
    threading.Thread(target=forkserver.ensure_running, name="fork-server", daemon=True).start()


def _preload() -> list[str]:
    """`PRELOADED`, then every module of this package the run has imported but its Dagster
    layer: the stages whose tasks it ships, imported once in the fork server (0.1-0.2 s) rather
    than by each worker as its first task of a stage arrives."""
    package = __name__.split(".")[0]
    dagster_layer = (f"{package}.defs", f"{package}.definitions")
    ours = sorted(m for m in sys.modules if m.startswith(f"{package}.") and not m.startswith(dagster_layer))
    return [*PRELOADED, *(m for m in ours if m not in PRELOADED)]


class LocalExecutor:
    """`workers` worker processes on this machine (`WorkerPool`): the run's `pool` when it
    has one, else a pool of this map's own."""

    name = "local"
    node: Node | None = None

    def __init__(self, workers: int, progress: Progress | None = None, pool: WorkerPool | None = None) -> None:
        self.workers, self.progress, self.pool = workers, progress, pool

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        if self.workers <= 1:
            yield from InlineExecutor(self.progress).map(fn, items)
            return
        pool = self.pool or WorkerPool(self.workers)
        submit = lambda timed, item: pool.get().submit(_in_worker, timed, item)  # noqa: E731
        try:
            yield from _windowed(
                self.name, submit, lambda fut: fut.result(), fn, items, 2 * self.workers, self.progress
            )
        except BaseException:  # a failed or timed-out stage: a worker may be hung, so end them all
            pool.kill()
            raise
        if self.pool is None:
            pool.close()


def _in_worker(timed: _Timed[T, R], item: T) -> tuple[float, R]:
    """A task in a pool worker, which then hands the memory its tasks freed back to the system
    once it has grown (`runtime/memory.py`): workers live as long as the run."""
    try:
        return timed(item)
    finally:
        release_memory_if_grown()


def _start_worker(run: int, started: str | None) -> None:
    """A pool worker's start: it notes the code its package's files hold (a task refuses to run
    other code than the run's), and watches the run (`run`, started at `started`), exiting once
    it is gone: a SIGKILLed run cannot stop its workers itself, and the fork server stays up
    while its workers do."""
    note_worker_code()
    exit_with(run, started, every=1.0)


class RayExecutor:
    """Ray tasks of one CPU each, at most `2 * workers` in flight, collected in order.

    `connect` (dagster-ray's resource inside Dagster) runs before the first task, so a
    stage with nothing to fan out never starts or joins a cluster; without it, Ray must
    be initialised already. Workers import this package, so a remote cluster needs it
    installed. `node` lets a task on a machine without the run's working copy fetch its
    inputs from the data dir's bucket and send its shards back through it (`runtime/nodes.py`).
    """

    name = "ray"

    def __init__(
        self,
        workers: int,
        connect: Callable[[], None] | None = None,
        progress: Progress | None = None,
        node: Node | None = None,
    ) -> None:
        self.workers, self.progress, self.node = workers, progress, node
        self._connect = connect

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        if self._connect is not None:
            self._connect()  # first: a local Ray is set up before `ray` is imported (`defs/ray.py`)
        import ray

        if not ray.is_initialized():
            raise RuntimeError("execution.backend is ray but Ray is not initialised (no Ray resource connected)")
        remote: Any = ray.remote(num_cpus=1, max_retries=0)(_apply)  # ray.remote takes no partials
        fn_ref = ray.put(_Timed(fn))  # shipped once, not with every task

        def get(ref: Any) -> tuple[float, R]:
            result: tuple[float, R] = ray.get(ref)
            return result

        submit = lambda _, item: remote.remote(fn_ref, item)  # noqa: E731
        yield from _windowed(self.name, submit, get, fn, items, 2 * self.workers, self.progress)


def _apply(fn: Callable[[T], R], item: T) -> R:
    return fn(item)


class _Timed(Generic[T, R]):
    """`fn` returning (the seconds it took where it ran, its result)."""

    def __init__(self, fn: Callable[[T], R]) -> None:
        self.fn = fn

    def __call__(self, item: T) -> tuple[float, R]:
        start = time.perf_counter()
        result = self.fn(item)
        return time.perf_counter() - start, result


def task_name(fn: Callable[..., Any]) -> str:
    while hasattr(fn, "func"):  # a partial (or a shard map's task) names its function
        fn = fn.func
    return str(getattr(fn, "__name__", fn))


class TaskLog:
    """The seconds of every task this process collected, by task function: a stage reports its
    own (`mark`, then `since`) as the cost of its per-shard work, wherever it ran."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = {}
        self.reused: dict[str, int] = {}  # of those, tasks whose stored outputs stood in (`taskstore`)
        self.parts: dict[str, tuple[int, int]] = {}  # parts (`memo`, `run_part`) of tasks that ran: all, reused

    def record(self, name: str, seconds: float) -> None:
        self.seconds.setdefault(name, []).append(seconds)

    def reuse(self, name: str) -> None:
        """The last collected task of `name` stood in by its stored outputs."""
        self.reused[name] = self.reused.get(name, 0) + 1

    def part(self, name: str, reused: bool) -> None:
        """A part of a task of `name` that ran: computed, or reused from the store."""
        done, kept = self.parts.get(name, (0, 0))
        self.parts[name] = (done + 1, kept + int(reused))

    def mark(self) -> dict[str, tuple[int, int, int, int]]:
        return {
            name: (len(runs), self.reused.get(name, 0), *self.parts.get(name, (0, 0)))
            for name, runs in self.seconds.items()
        }

    def since(self, mark: dict[str, tuple[int, int, int, int]]) -> dict[str, dict[str, float]]:
        """Per task function since `mark`: tasks, reused tasks, p50 / p90 / max / total seconds,
        and for a task kept in parts, the parts of the tasks that ran and how many were reused."""
        out = {}
        for name, runs in sorted(self.seconds.items()):
            ran, reused, parts, parts_reused = mark.get(name, (0, 0, 0, 0))
            secs = np.array(runs[ran:])
            if len(secs):
                now_parts, now_reused = self.parts.get(name, (0, 0))
                out[name] = {
                    "tasks": len(secs),
                    "reused": self.reused.get(name, 0) - reused,
                    "p50_s": round(float(np.percentile(secs, 50)), 4),
                    "p90_s": round(float(np.percentile(secs, 90)), 4),
                    "max_s": round(float(secs.max()), 4),
                    "total_s": round(float(secs.sum()), 4),
                }
                if now_parts > parts:
                    out[name].update(parts=now_parts - parts, parts_reused=now_reused - parts_reused)
        return out


TASKS = TaskLog()


class TaskError(RuntimeError):
    """A per-shard task failed unexpectedly; the message names the task, its item and the backend."""


DESCRIBED_CHARS = 300  # of an item in an error: enough to name it (a path, a chart), not its data


def _describe(item: object) -> str:
    if isinstance(item, (list, tuple)) and len(item) > 3:
        return f"[{item[0]!r}, ... {len(item)} items]"
    text = repr(item)
    return text if len(text) <= DESCRIBED_CHARS else f"{text[:DESCRIBED_CHARS]}... ({len(text):,} characters)"


def _windowed(
    backend: str,
    submit: Callable[[_Timed[T, R], T], Any],
    result: Callable[[Any], tuple[float, R]],
    fn: Callable[[T], R],
    items: Iterable[T],
    window: int,
    progress: Progress | None = None,
) -> Iterator[R]:
    """Submit `fn` (timed) ahead by at most `window` items and yield results in input order,
    so memory holds a window of results, never the whole input's; each task's seconds go to
    `TASKS`, and `progress` hears how many are done every PROGRESS_SECONDS."""
    pending: deque[tuple[T, Any]] = deque()
    timed, name = _Timed(fn), task_name(fn)
    total = f"/{len(items)}" if isinstance(items, Sized) else ""
    done, told = 0, time.monotonic()

    def collect() -> R:
        item, handle = pending[0]  # still in flight while waited for (a time-out names it)
        try:
            seconds, value = result(handle)
            pending.popleft()
        except Exception as exc:
            cause = getattr(exc, "cause", None) or exc  # Ray wraps the task's own exception
            if isinstance(cause, OSError) and cause.errno in NO_ROOM:
                raise cause from None  # a full disk is no task's bug: the stage names what it was writing
            if type(cause).__module__.startswith("albor_pipeline."):
                # Our own errors (bad input named by file and line, ...) read the same on every backend.
                raise cause from None
            raise TaskError(f"{name} failed on {_describe(item)} ({backend}): {type(cause).__name__}: {cause}") from exc
        TASKS.record(name, seconds)
        nonlocal done, told
        done += 1
        if progress is not None and time.monotonic() - told >= PROGRESS_SECONDS:
            progress(f"{name}: {done}{total} tasks done ({backend})")
            told = time.monotonic()
        return value

    submitting: list[T] = []  # an inline executor runs the task while submitting it
    waiting = lambda: [*submitting, *(item for item, _ in pending)]  # noqa: E731
    with in_flight(lambda: [f"{name} on {_describe(item)} ({backend})" for item in waiting()]):
        for item in items:
            submitting.append(item)
            handle = submit(timed, item)
            submitting.clear()
            pending.append((item, handle))
            if len(pending) >= window:
                yield collect()
        while pending:
            yield collect()


INLINE = InlineExecutor()


def pool_workers(spec: ExecutionSpec) -> int:
    """The workers of the local pool the spec's runs use: 0 for none (Ray, or one worker, inline)."""
    workers = spec.workers or cpu_count()
    return workers if spec.backend == "local" and workers > 1 else 0


def make_executor(
    spec: ExecutionSpec,
    connect: Callable[[], None] | None = None,
    progress: Progress | None = None,
    node: Node | None = None,
    pool: WorkerPool | None = None,
) -> Executor:
    """The spec's executor: `workers` (default: one per CPU) on its backend, telling `progress`
    (the Dagster log) how many tasks are done; a cluster's tasks reach the data dir by `node`;
    a local pool is the run's `pool` when it has one."""
    workers = spec.workers or cpu_count()
    if spec.backend == "ray":
        return RayExecutor(workers, connect, progress, node)
    return LocalExecutor(workers, progress, pool) if workers > 1 else InlineExecutor(progress)


def for_items(executor: Executor, items: int, minimum: int) -> Executor:
    """`executor`, or inline for fewer than `minimum` items on a local pool, whose start-up
    (worker processes shipped the tasks and their data) would cost more than it saves."""
    if executor.name == LocalExecutor.name and items < minimum:
        return InlineExecutor(executor.progress)
    return executor

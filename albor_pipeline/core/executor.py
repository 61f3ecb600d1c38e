"""Where per-shard work runs: this process, a local process pool, or a Ray cluster.

A stage's per-shard step is a plain picklable function of one item (a shard, a chunk
of row groups); the stage hands it to an `Executor` and consumes the results in input
order. The step never knows where it ran, so every backend and worker count gives the
same results, and the same bytes once the stage writes them (datatrove's split between
a pipeline block and its executor).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any, Protocol, TypeVar

from albor_pipeline.spec import Backend, ExecutionSpec

T = TypeVar("T")
R = TypeVar("R")


def cpu_count() -> int:
    """CPUs this process may use (affinity-aware, unlike os.cpu_count)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


class Executor(Protocol):
    """Runs `fn` over `items` and yields the results in input order."""

    name: str
    workers: int

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]: ...


class InlineExecutor:
    """In this process: for one worker and for work too small to ship elsewhere."""

    name = "inline"
    workers = 1

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        return map(fn, items)  # errors reach the caller as they are


class LocalExecutor:
    """A pool of `workers` spawned processes on this machine (spawn: no forked threads or locks)."""

    name = "local"

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        if self.workers <= 1:
            for item in items:
                yield fn(item)
            return
        pool = ProcessPoolExecutor(self.workers, mp_context=get_context("spawn"))
        try:
            yield from _windowed(self.name, pool.submit, lambda fut: fut.result(), fn, items, 2 * self.workers)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


class RayExecutor:
    """Ray tasks of one CPU each, at most `2 * workers` in flight, collected in order.

    `connect` (dagster-ray's resource inside Dagster) runs before the first task, so a
    stage with nothing to fan out never starts or joins a cluster; without it, Ray must
    be initialised already. Workers import this package, so a remote cluster needs it
    installed, and items must name files every node can reach (object storage or a
    shared filesystem).
    """

    name = "ray"

    def __init__(self, workers: int, connect: Callable[[], None] | None = None) -> None:
        self.workers = workers
        self._connect = connect

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        import ray

        if self._connect is not None:
            self._connect()
        if not ray.is_initialized():
            raise RuntimeError("execution.backend is ray but Ray is not initialised (no Ray resource connected)")
        remote: Any = ray.remote(num_cpus=1, max_retries=0)(_apply)  # ray.remote takes no partials
        fn_ref = ray.put(fn)  # shipped once, not with every task

        def get(ref: Any) -> R:
            result: R = ray.get(ref)
            return result

        yield from _windowed(self.name, lambda f, item: remote.remote(fn_ref, item), get, fn, items, 2 * self.workers)


def _apply(fn: Callable[[T], R], item: T) -> R:
    return fn(item)


class TaskError(RuntimeError):
    """A per-shard task failed unexpectedly; the message names the task, its item and the backend."""


def _describe(item: object) -> str:
    if isinstance(item, (list, tuple)) and len(item) > 3:
        return f"[{item[0]!r}, ... {len(item)} items]"
    return repr(item)


def _windowed(
    backend: str,
    submit: Callable[[Callable[[T], R], T], Any],
    result: Callable[[Any], R],
    fn: Callable[[T], R],
    items: Iterable[T],
    window: int,
) -> Iterator[R]:
    """Submit ahead by at most `window` items and yield results in input order, so memory
    holds a window of results, never the whole input's."""
    pending: deque[tuple[T, Any]] = deque()

    def collect() -> R:
        item, handle = pending.popleft()
        try:
            return result(handle)
        except Exception as exc:
            cause = getattr(exc, "cause", None) or exc  # Ray wraps the task's own exception
            if type(cause).__module__.startswith("albor_pipeline."):
                # Our own errors (bad input named by file and line, ...) read the same on every backend.
                raise cause from None
            name = getattr(fn, "func", fn).__name__  # a partial names its function
            raise TaskError(f"{name} failed on {_describe(item)} ({backend}): {type(cause).__name__}: {cause}") from exc

    for item in items:
        pending.append((item, submit(fn, item)))
        if len(pending) >= window:
            yield collect()
    while pending:
        yield collect()


INLINE = InlineExecutor()


def make_executor(spec: ExecutionSpec, connect: Callable[[], None] | None = None) -> Executor:
    """The spec's executor: `workers` (default: one per CPU) on its backend."""
    workers = spec.workers or cpu_count()
    if spec.backend is Backend.ray:
        return RayExecutor(workers, connect)
    return LocalExecutor(workers) if workers > 1 else INLINE


def remote_only(executor: Executor) -> Executor:
    """`executor` on a cluster, else inline: for a step a local pool does not speed up, whose
    results cost as much to send back between processes as to compute (FIM: 1.2 s inline,
    1.8 s on two processes for the default spec's train split)."""
    return executor if executor.name == RayExecutor.name else INLINE


def for_items(executor: Executor, items: int, minimum: int) -> Executor:
    """`executor`, or inline for fewer than `minimum` items on a local pool, whose start-up
    (spawned interpreters importing this package) would cost more than it saves."""
    return INLINE if executor.name == LocalExecutor.name and items < minimum else executor

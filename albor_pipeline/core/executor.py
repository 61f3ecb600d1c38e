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
from enum import Enum
from multiprocessing import get_context
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Backend(str, Enum):
    local = "local"
    ray = "ray"


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
        return map(fn, items)


class LocalExecutor:
    """A pool of `workers` spawned processes on this machine (spawn: no forked threads or locks)."""

    name = "local"

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        if self.workers <= 1:
            yield from map(fn, items)
            return
        with ProcessPoolExecutor(self.workers, mp_context=get_context("spawn")) as pool:
            yield from _windowed(pool.submit, lambda fut: fut.result(), fn, items, 2 * self.workers)


class RayExecutor:
    """Ray tasks of one CPU each, at most `2 * workers` in flight, collected in order.

    Ray must be initialised already: by dagster-ray's resource inside Dagster, or by
    `ray.init` in a script. Workers import this package, so a remote cluster needs it
    installed, and items must name files every node can reach (object storage or a
    shared filesystem).
    """

    name = "ray"

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        import ray

        if not ray.is_initialized():
            raise RuntimeError("execution.backend is ray but Ray is not initialised (no Ray resource connected)")
        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        yield from _windowed(lambda f, item: remote.remote(item), ray.get, fn, items, 2 * self.workers)


def _windowed(
    submit: Callable[[Callable[[T], R], T], Any],
    result: Callable[[Any], R],
    fn: Callable[[T], R],
    items: Iterable[T],
    window: int,
) -> Iterator[R]:
    """Submit ahead by at most `window` items and yield results in input order, so memory
    holds a window of results, never the whole input's."""
    pending: deque[Any] = deque()
    for item in items:
        pending.append(submit(fn, item))
        if len(pending) >= window:
            yield result(pending.popleft())
    while pending:
        yield result(pending.popleft())


def make_executor(backend: Backend, workers: int | None, items: int) -> Executor:
    """The executor for a step over `items` items: inline when one worker (or item)
    suffices, else `workers` (default: one per CPU) on the chosen backend."""
    workers = workers or cpu_count()
    if backend is Backend.ray:
        return RayExecutor(workers)
    if workers <= 1 or items <= 1:
        return InlineExecutor()
    return LocalExecutor(workers)

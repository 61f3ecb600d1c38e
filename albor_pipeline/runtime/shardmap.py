"""The shard map: one per-shard step over a stage's items, on the run's executor, committing
the shard set it writes. The only place staging, node shipping and landing, the inline
threshold and progress live, so a per-shard stage is its step and its accounting.

A step is a plain function `step(job, io, item) -> result`, where `result.shards` lists the
shards it wrote into `io.directory`; `io.local(path)` is where it reads a data-dir file. It
runs wherever the executor puts it (`runtime/nodes.py`): the map ships its shards from the
task's node and lands them in the run's staging directory, which commits whole
(`staged_dir`), so the set never depends on where tasks ran. A shard set's task is reused
when the run reuses tasks (`runtime/taskstore.py`): its identity is its step, its job
(settings) and its item, with the files they name by content; a task whose identity the
store holds gets its stored shards instead of running.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, cast

from albor_pipeline.runtime.artifacts import naming_write_errors, staged_dir
from albor_pipeline.runtime.commit import fault
from albor_pipeline.runtime.executor import INLINE, TASKS, Executor, LocalExecutor, for_items, task_name
from albor_pipeline.runtime.nodes import IN_PLACE, Node, Spooled, task_node
from albor_pipeline.runtime.shards import Shard
from albor_pipeline.runtime.stage import Progress
from albor_pipeline.runtime.taskstore import (
    NotReusable,
    Outcome,
    TaskStore,
    run_part,
    run_task,
    session,
    worker_code,
)
from albor_pipeline.runtime.versions import CODE_VERSION

PROGRESS_LOG_SECONDS = 2.0
"""How often a map logs its step's progress line (`progress`), besides after its last task."""

INLINE_BELOW = 2
"""Fewer items than this run inline on a local pool: starting and feeding worker processes
costs more than one shard's work. A step whose items are cheaper (FIM,
the mix's waves: about a second a shard) passes a higher `inline_below`."""


class CodeChanged(RuntimeError):
    """A task's worker runs other code than the run's process (the package was edited mid-run)."""


class ShardResult(Protocol):
    """What a step returns: at least the shards it wrote."""

    @property
    def shards(self) -> Sequence[Shard]: ...


NAMED_BY_JOB = "named_by_job"  # a step's attribute: its tasks are named by their job (a function)
READS = "task_reads"
"""A step's attribute: `reads(job, io, item)`, what its task reads, described in full; the
task's identity instead of its job and item. A task that reads a slice of a large spool
(a corpus shard's tokens) is then reused while its slice stays the same, wherever the
slice sits in the spool."""

J = TypeVar("J")
I = TypeVar("I")  # noqa: E741 - an item
R = TypeVar("R", bound=ShardResult)
T = TypeVar("T")


@dataclass(frozen=True)
class TaskIO:
    """Where a task reads and writes, wherever it runs."""

    staging: str  # the run's staging directory (a task writes its shards there)
    node: Node
    store: TaskStore | None = None  # where a shard set's tasks are kept for reuse (None: never)
    code: str = CODE_VERSION  # the code the run's process imported (a task checks its own against it)

    @property
    def directory(self) -> Path:
        """Where this task writes its shards (on its own node)."""
        return self.node.directory(self.staging)

    def local(self, path: str | Path) -> Path:
        """Where this task reads the data-dir file `path`."""
        return self.node.local(path)


@dataclass(frozen=True)
class _Task(Generic[J, I, T]):
    """One map's task as its executor runs it: the step on an item, its stored outputs when
    the store holds its identity; a shard set's task ships what it wrote."""

    step: Callable[[J, TaskIO, I], T]
    job: J
    io: TaskIO
    subsets: tuple[str, ...] | None = None  # a shard set's task: ships what it wrote

    @property
    def func(self) -> Callable[..., Any]:
        """The function a task log and an error name (`executor.task_name`): the step, or its
        job when the step only applies it (`NAMED_BY_JOB`, a check's per-shard function)."""
        return cast(Callable[..., Any], self.job) if getattr(self.step, NAMED_BY_JOB, False) else self.step

    def __call__(self, item: I) -> Outcome:
        if self.io.code != worker_code():  # a worker started after the package's files were edited
            raise CodeChanged(
                "albor_pipeline's code changed on disk during the run: this worker imported other code "
                "than the run's process, and a build must not mix them; run again"
            )
        run = (lambda: self.step(self.job, self.io, item)) if self.subsets is None else (lambda: self._write(item))
        identity = self.identity(self.io, item)
        if identity is None:
            return run_task(None, self.step, None, None, self.io.directory, run)
        return run_task(self.io.store, self.step, *identity, self.io.directory, run)

    def identity(self, io: TaskIO, item: I) -> tuple[Any, Any] | None:
        """(job, item) as the task's identity holds them: the step's description of what it
        reads (`READS`; None when it cannot tell), else its job and item."""
        reads = getattr(self.step, READS, None)
        if reads is None or io.store is None:
            return self.job, item
        try:
            return None, reads(self.job, io, item)
        except NotReusable:
            return None

    def _write(self, item: I) -> ShardResult:
        """A shard set's task: the step, then its shards made reachable by the run."""
        for subset in cast(tuple[str, ...], self.subsets):  # on a node of its own, the directory starts empty
            (self.io.directory / subset).mkdir(parents=True, exist_ok=True)
        result = cast(ShardResult, self.step(self.job, self.io, item))
        for shard in result.shards:
            self.io.node.ship(self.io.directory, shard)
        return result


def shared_task(step: Callable[[J, TaskIO, I], T], job: J, io: TaskIO, item: I) -> T:
    """`step(job, io, item)` called from inside another task, under the identity a map of
    `step` gives it: reused from the store when a map (or another task) ran it, else run and
    kept, as a part of the calling task. Without a store, just the call."""
    identity = _Task(step, job, io).identity(io, item)
    if io.store is None or identity is None:
        return step(job, io, item)
    return cast(T, run_part(io.store, step, *identity, io.directory, lambda: step(job, io, item)))


def held(step: Callable[[J, TaskIO, I], Any], job: J, items: Sequence[I], executor: Executor) -> list[bool]:
    """Whether the store holds each item's task of `step` now (it would be reused): a stage
    then prepares only what the others read (the mix's scatter, for the gathers that run)."""
    store = _store(executor)
    return _held(_Task(step, job, TaskIO("", IN_PLACE, store)), items) if store is not None else [False] * len(items)


def _held(task: _Task[J, I, Any], items: Sequence[I]) -> list[bool]:
    """Whether `task.io.store` holds each item's task now."""
    store, io = cast(TaskStore, task.io.store), replace(task.io, node=IN_PLACE)
    found = []
    for item in items:
        identity = task.identity(io, item)
        try:
            found.append(identity is not None and store.holds(store.key(task.step, *identity)))
        except NotReusable:
            found.append(False)
    return found


def _to_run(task: _Task[J, I, Any], items: Sequence[I], executor: Executor, inline_below: int) -> int:
    """How many of `items` a local pool would run: those the store does not hold. Asked only
    when the answer is cheap (the tasks' identities name files by content, which this process
    has mostly hashed already; a step describing what it reads (`READS`) may read data for it).
    A rebuild's map whose tasks are nearly all reused then runs inline: no shipping, and no
    wait for a pool still starting (the run's first stage)."""
    cheap = task.io.store is not None and getattr(task.step, READS, None) is None
    if not cheap or executor.name != LocalExecutor.name or len(items) < inline_below:
        return len(items)
    return len(items) - sum(_held(task, items))


def runs_inline(executor: Executor, items: int, inline_below: int = INLINE_BELOW) -> bool:
    """Whether a map of `items` items runs in the stage's own process (its step may then use
    what the process already holds, e.g. an encoder on every core)."""
    return for_items(executor, items, inline_below).name == INLINE.name


def _run(
    task: _Task[J, I, T],
    items: Sequence[I],
    executor: Executor,
    inline_below: int,
    spools: Sequence[Spooled | None],
    progress: Callable[[list[T]], str | None] | None,
    log: Progress | None,
) -> Iterator[T]:
    """`task` over `items` on `executor` (inline below `inline_below` items on a local pool),
    results in item order as they come, logging what `progress(done)` says after each."""
    executor = for_items(executor, _to_run(task, items, executor, inline_below), inline_below)
    node = task_node(executor.node).with_spools(spools)
    task = replace(task, io=replace(task.io, node=node))
    done: list[T] = []
    reuse = session()
    told = time.monotonic()
    for outcome in executor.map(task, items):
        result = cast(T, outcome.result)
        if outcome.reused:
            TASKS.reuse(task_name(task))
        else:
            for part in outcome.parts:
                TASKS.part(task_name(task), part.reused)
        if reuse is not None:
            reuse.record([outcome])
        fault("task-done", reuse.stage if reuse is not None else "")
        done.append(result)
        # The last result's line always; others at most every PROGRESS_LOG_SECONDS (each is an
        # event in the run's log, and a reused stage's tasks come back in a burst).
        last = len(done) == len(items)
        due = last or time.monotonic() - told >= PROGRESS_LOG_SECONDS
        if progress and log and due and (line := progress(done)):
            log(line)
            told = time.monotonic()
        yield result


def map_shards(
    step: Callable[[J, TaskIO, I], R],
    job: J,
    items: Sequence[I],
    out: Path,
    executor: Executor,
    progress: Callable[[list[R]], str | None] | None = None,
    log: Progress | None = None,
    finish: Callable[[Path, list[R]], None] | None = None,
    spools: Sequence[Spooled | None] = (),
    inline_below: int = INLINE_BELOW,
    subsets: Sequence[str] = (),
) -> list[R]:
    """Run `step(job, io, item)` for every item on `executor` and commit the shards they wrote
    as the set `out`, in item order. `progress(done)` says what to `log` after each result
    (None: nothing); `finish(staging, results)` may add the set's other files (an index,
    exports) or refuse the set before it commits; `spools`: what an earlier wave (`map_tasks`)
    sent back, for the steps to read; `subsets`: subdirectories of the set (one per split),
    each present even when empty, where steps write shards named `<subset>/part-….parquet`.
    If a step or `finish` fails, nothing is committed and `out` keeps its previous set."""
    done: list[R] = []
    with staged_dir(out) as staging:
        for subset in subsets:
            (staging / subset).mkdir(parents=True)
        task = _Task(step, job, TaskIO(str(staging), IN_PLACE, _store(executor)), tuple(subsets))
        for result in _run(task, items, executor, inline_below, spools, progress, log):
            for shard in result.shards:
                task_node(executor.node).land(staging, shard)
            done.append(result)
        if finish is not None:
            finish(staging, done)
    return done


def map_tasks(
    step: Callable[[J, TaskIO, I], T],
    job: J,
    items: Sequence[I],
    directory: Path,
    executor: Executor,
    progress: Callable[[list[T]], str | None] | None = None,
    log: Progress | None = None,
    spools: Sequence[Spooled | None] = (),
    inline_below: int = INLINE_BELOW,
    reuse: bool = False,
) -> list[T]:
    """A wave of tasks that write no shard of the stage, only files in `directory` that a later
    wave reads (spools, sent back with `io.node.spool`), or nothing: the shard map without a
    commit, its arguments as `map_shards`'. Results in item order. `reuse`: the steps' results
    list the files they wrote in `directory` (`shards`, as a shard set's do), so the task store
    may keep and restore them."""
    io = TaskIO(str(directory), IN_PLACE, _store(executor) if reuse else None)
    task: _Task[J, I, T] = _Task(step, job, io)
    with naming_write_errors(directory):  # a full disk names where the wave was writing
        return list(_run(task, items, executor, inline_below, spools, progress, log))


def _store(executor: Executor) -> TaskStore | None:
    """The stage's task store, when the run reuses tasks and they run where the data dir is
    (a node without the run's working copy has no store)."""
    reuse = session()
    return reuse.store if reuse is not None and task_node(executor.node).bucket is None else None


@contextmanager
def output_set(out: Path) -> Iterator[Path]:
    """A set a stage writes in its own process rather than by per-shard tasks (a tokenizer's
    files, SFT rows): the directory to write it into, committed as one set when the block ends
    well; on an error `out` keeps its previous set."""
    with staged_dir(out) as staging:
        yield staging


def shards_of(results: Sequence[ShardResult]) -> Iterator[Shard]:
    """Every shard the results wrote, in order."""
    for result in results:
        yield from result.shards


@dataclass(frozen=True)
class StageIO:
    """What every stage's entry gets besides its inputs and settings: the data dir's root (artifact
    paths are relative to it), where its per-shard tasks run, and where its progress lines go."""

    root: Path
    executor: Executor = INLINE
    progress: Progress | None = None

    def offer(self, path: Path) -> Spooled | None:
        """A file this process wrote for the stage's tasks (a plan), sent where they can read it."""
        return task_node(self.executor.node).offer(path)

    def receive(self, spooled: Spooled | None) -> None:
        """A spool file a task sent back, brought into this process's copy of the data dir."""
        task_node(self.executor.node).receive(spooled)

"""The shard map: one per-shard step over a stage's items, on the run's executor, committing
the shard set it writes. The only place staging, node shipping and landing, the inline
threshold and progress live, so a per-shard stage is its step and its accounting.

A step is declared once as a `Step`: its function `run(job, io, item) -> result` (where
`result.shards` lists the shards it wrote into `io.directory`, and `io.local(path)` is where
it reads a data-dir file), what a task reads (its identity: settings by value, files as
`InputFile`, by content), whether the task store keeps its tasks, and when a map of it runs
inline. A task runs wherever the executor puts it (`runtime/nodes.py`): the map ships its
shards from the task's node and lands them in the run's staging directory, which commits
whole (`staged_dir`), so the set never depends on where tasks ran. The files a task sends to
a later wave (`io.spool`) go where that wave's tasks can read them, through the stage's
`StageIO`; a task whose identity the store holds gets its stored outputs instead of running.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, cast

from albor_pipeline.runtime.artifacts import naming_write_errors, staged_dir
from albor_pipeline.runtime.commit import fault
from albor_pipeline.runtime.executor import INLINE, TASKS, Executor, LocalExecutor, for_items, task_name
from albor_pipeline.runtime.nodes import IN_PLACE, Node, Spooled, task_node
from albor_pipeline.runtime.shards import Shard
from albor_pipeline.runtime.stagerun import Progress
from albor_pipeline.runtime.taskstore import (
    InputFile,
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


J = TypeVar("J")
I = TypeVar("I")  # noqa: E741 - an item
R = TypeVar("R", bound=ShardResult)
T = TypeVar("T")


@dataclass(frozen=True)
class Written:
    """A step's result when it is only the shards its task wrote."""

    shards: tuple[Shard, ...]


@dataclass(frozen=True)
class TaskIO:
    """Where a task reads and writes, wherever it runs."""

    staging: str  # the run's staging directory (a task writes its shards there)
    node: Node
    store: TaskStore | None = None  # where a shard set's tasks are kept for reuse (None: never)
    code: str = CODE_VERSION  # the code the run's process imported (a task checks its own against it)
    sent: list[Spooled] = field(default_factory=list, compare=False)  # what this task sent (`spool`)

    @property
    def directory(self) -> Path:
        """Where this task writes its shards (on its own node)."""
        return self.node.directory(self.staging)

    def local(self, path: str | Path | InputFile) -> Path:
        """Where this task reads the data-dir file `path`."""
        return self.node.local(path.path if isinstance(path, InputFile) else path)

    def spool(self, written: Path) -> None:
        """A file this task wrote for a later wave of the stage's tasks, or for the stage's own
        process (`StageIO.receive`): sent where they can read it, wherever they run. On a node
        without the run's working copy the file is uploaded and removed here: read it first."""
        if (record := self.node.spool(written)) is not None:
            self.sent.append(record)


@dataclass(frozen=True)
class Step(Generic[J, I, T]):
    """A task step, declared once: the function its tasks run, what a task reads, whether the
    task store keeps its tasks, and how a map of it runs. The shard map derives a task's
    identity, its shipping and its name from this, and from nothing else."""

    run: Callable[[J, TaskIO, I], T]
    reads: Callable[[J, TaskIO, I], Any] | None = None
    """What a task reads, described in full, when that is less than its job and item (a row
    group of a file, a slice of a spool): its identity, with the step's name. None: the job
    and item are, by value, each `InputFile` in them by its content. NotReusable: it runs."""
    kept: bool = True
    """Whether the task store keeps its tasks (their results list the files they wrote in
    `shards`); False for a wave whose files only this run reads."""
    inline_below: int = INLINE_BELOW
    """Fewer items than this run in the stage's own process on a local pool."""
    names: Callable[[J], Callable[..., Any]] | None = None
    """The function a task log names a task by, from its job (a check: its per-shard
    function); None: `run`."""

    def runs_inline(self, executor: Executor, items: int) -> bool:
        """Whether a map of `items` items runs in the stage's own process (its step may then
        use what the process holds, e.g. an encoder on every core)."""
        return for_items(executor, items, self.inline_below).name == INLINE.name

    def identity(self, job: J, io: TaskIO, item: I) -> tuple[Any, Any] | None:
        """(job, item) as the task's identity holds them: `reads` (None when it cannot tell),
        else the job and item themselves."""
        if self.reads is None or io.store is None:
            return job, item
        try:
            return None, self.reads(job, io, item)
        except NotReusable:
            return None


@dataclass(frozen=True)
class _Task(Generic[J, I, T]):
    """One map's task as its executor runs it: the step on an item, its stored outputs when
    the store holds its identity; a shard set's task ships what it wrote."""

    step: Step[J, I, T]
    job: J
    io: TaskIO
    subsets: tuple[str, ...] | None = None  # a shard set's task: ships what it wrote

    @property
    def func(self) -> Callable[..., Any]:
        """The function a task log and an error name (`executor.task_name`)."""
        return self.step.names(self.job) if self.step.names is not None else self.step.run

    def __call__(self, item: I) -> Outcome:
        if self.io.code != worker_code():  # a worker started after the package's files were edited
            raise CodeChanged(
                "albor_pipeline's code changed on disk during the run: this worker imported other code "
                "than the run's process, and a build must not mix them; run again"
            )
        io = replace(self.io, sent=[])
        run = (lambda: self.step.run(self.job, io, item)) if self.subsets is None else (lambda: self._write(io, item))
        identity = self.step.identity(self.job, io, item)
        if identity is None:
            outcome = run_task(None, self.step.run, None, None, io.directory, run)
        else:
            outcome = run_task(io.store, self.step.run, *identity, io.directory, run)
        return outcome._replace(sent=tuple(io.sent))

    def _write(self, io: TaskIO, item: I) -> ShardResult:
        """A shard set's task: the step, then its shards made reachable by the run."""
        for subset in cast(tuple[str, ...], self.subsets):  # on a node of its own, the directory starts empty
            (io.directory / subset).mkdir(parents=True, exist_ok=True)
        result = cast(ShardResult, self.step.run(self.job, io, item))
        for shard in result.shards:
            io.node.ship(io.directory, shard)
        return result


def shared_task(step: Step[J, I, T], job: J, io: TaskIO, item: I) -> T:
    """`step.run(job, io, item)` called from inside another task, under the identity a map of
    `step` gives it: reused from the store when a map (or another task) ran it, else run and
    kept, as a part of the calling task. Without a store, just the call."""
    return shared_outcome(step, job, io, item)[0]


def shared_outcome(step: Step[J, I, T], job: J, io: TaskIO, item: I) -> tuple[T, bool]:
    """`shared_task`'s result, and whether it was reused (what it counts then happened before)."""
    identity = step.identity(job, io, item)
    if io.store is None or identity is None:
        return step.run(job, io, item), False
    outcome = run_part(io.store, step.run, *identity, io.directory, lambda: step.run(job, io, item))
    return cast(T, outcome.result), outcome.reused


def held(step: Step[J, I, Any], job: J, items: Sequence[I], io: StageIO) -> list[bool]:
    """Whether the store holds each item's task of `step` now (it would be reused): a stage
    then prepares only what the others read (the mix's scatter, for the gathers that run)."""
    store = _store(io.executor)
    return [store is not None and _holds(step, job, item, store) for item in items]


def _holds(step: Step[J, I, Any], job: J, item: I, store: TaskStore) -> bool:
    try:
        identity = step.identity(job, TaskIO("", IN_PLACE, store), item)
        return identity is not None and store.holds(store.key(step.run, *identity))
    except NotReusable:
        return False


def _to_run(task: _Task[J, I, Any], items: Sequence[I], io: StageIO) -> int:
    """How many of `items` a local pool would run: those the store does not hold. Asked only
    when the answer is cheap (the tasks' identities name files this process has mostly hashed
    already; a step's `reads` may read data for it). A rebuild's map whose tasks are nearly
    all reused then runs inline: no shipping, and no wait for a pool still starting."""
    cheap = task.io.store is not None and task.step.reads is None
    if not cheap or io.executor.name != LocalExecutor.name or len(items) < task.step.inline_below:
        return len(items)
    return len(items) - sum(held(task.step, task.job, items, io))


def _run(
    task: _Task[J, I, T], items: Sequence[I], io: StageIO, progress: Callable[[list[T]], str | None] | None
) -> Iterator[T]:
    """`task` over `items` on the stage's executor (inline below the step's `inline_below`
    items on a local pool), results in item order as they come, logging what `progress(done)`
    says after each; what the tasks send (`TaskIO.spool`) is noted in `io`."""
    executor = for_items(io.executor, _to_run(task, items, io), task.step.inline_below)
    node = task_node(executor.node).with_spools(io.sent.values())
    task = replace(task, io=replace(task.io, node=node))
    done: list[T] = []
    reuse = session()
    told = time.monotonic()
    for outcome in executor.map(task, items):
        result = cast(T, outcome.result)
        io.note(outcome.sent)
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
        if progress and io.progress and due and (line := progress(done)):
            io.progress(line)
            told = time.monotonic()
        yield result


def map_shards(
    step: Step[J, I, R],
    job: J,
    items: Sequence[I],
    out: Path,
    io: StageIO,
    progress: Callable[[list[R]], str | None] | None = None,
    finish: Callable[[Path, list[R]], None] | None = None,
    subsets: Sequence[str] = (),
) -> list[R]:
    """Run `step` for every item on the stage's executor and commit the shards they wrote as
    the set `out`, in item order. `progress(done)` says what to log after each result (None:
    nothing); `finish(staging, results)` may add the set's other files (an index, exports) or
    refuse the set before it commits; `subsets`: subdirectories of the set (one per split),
    each present even when empty, where steps write shards named `<subset>/part-….parquet`.
    If a step or `finish` fails, nothing is committed and `out` keeps its previous set."""
    done: list[R] = []
    with staged_dir(out) as staging:
        for subset in subsets:
            (staging / subset).mkdir(parents=True)
        task = _Task(step, job, TaskIO(str(staging), IN_PLACE, _store(io.executor)), tuple(subsets))
        for result in _run(task, items, io, progress):
            for shard in result.shards:
                task_node(io.executor.node).land(staging, shard)
            done.append(result)
        if finish is not None:
            finish(staging, done)
    return done


def map_tasks(
    step: Step[J, I, T],
    job: J,
    items: Sequence[I],
    directory: Path,
    io: StageIO,
    progress: Callable[[list[T]], str | None] | None = None,
) -> list[T]:
    """A wave of tasks that write no shard of the stage, only files in `directory` that a later
    wave or the stage reads (`TaskIO.spool`), or nothing: the shard map without a commit, its
    arguments as `map_shards`'. Results in item order. A step the store keeps lists the files
    its tasks wrote in `directory` in its results' `shards`, so the store may restore them."""
    store = _store(io.executor) if step.kept else None
    task: _Task[J, I, T] = _Task(step, job, TaskIO(str(directory), IN_PLACE, store))
    with naming_write_errors(directory):  # a full disk names where the wave was writing
        return list(_run(task, items, io, progress))


def _store(executor: Executor) -> TaskStore | None:
    """The stage's task store, when the run reuses tasks and they run where the data dir is
    (a node without the run's working copy has no store)."""
    reuse = session()
    return reuse.store if reuse is not None and task_node(executor.node).bucket is None else None


def shards_of(results: Sequence[ShardResult]) -> Iterator[Shard]:
    """Every shard the results wrote, in order."""
    for result in results:
        yield from result.shards


@dataclass(frozen=True)
class StageIO:
    """What every stage's entry gets besides its inputs and settings: the data dir's root (artifact
    paths are relative to it), where its per-shard tasks run, where its progress lines go, and
    the files its tasks and its process sent through the data dir's bucket (a later wave reads
    them wherever it runs)."""

    root: Path
    executor: Executor = INLINE
    progress: Progress | None = None
    sent: dict[str, Spooled] = field(default_factory=dict, compare=False)  # by data-dir path

    def note(self, records: Sequence[Spooled]) -> None:
        """Files a task (or this process) sent: a later map's tasks may read them."""
        self.sent.update((record[0], record) for record in records)

    def offer(self, path: Path) -> None:
        """A file this process wrote for the stage's tasks (a plan), sent where they can read it."""
        if (record := task_node(self.executor.node).offer(path)) is not None:
            self.note([record])

    def receive(self, path: Path) -> None:
        """A file a task sent (`TaskIO.spool`), brought into this process's copy of the data
        dir if it is not there."""
        node = task_node(self.executor.node)
        if node.bucket is not None:
            node.receive(self.sent.get(Path(path).relative_to(node.root).as_posix()))

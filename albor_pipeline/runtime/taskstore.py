"""Task reuse: a per-shard task's outputs kept under its identity, reused when it recurs.

A task's identity is the SHA-256 over this package's code and the libraries its bytes
depend on (`CODE_VERSION`), its step function, its settings (the job) and its item, with
every file they name replaced by its content hash. So an edited input, a changed setting
or new code gives a new identity, and a rerun of the same work finds the old one.

The store (`<data dir>/cache/tasks/ab/abcd…/`) keeps what the shard map needs to stand in
for the task: the shards it wrote (hard links to the committed files: no copy, no extra
disk until the stage's next version replaces them) and its pickled result. An entry lands
whole (a temp directory renamed), and a reuse re-hashes every stored shard first: a file
edited or deleted behind the pipeline's back is found, the entry dropped and the task run.
A run killed mid-stage leaves the entries of every task that finished, so its rerun
resumes there (datatrove's completion markers, by content instead of by task number).

What a task reads is declared by its step (`shardmap.Step.reads`): settings enter by value,
a file as an `InputFile` (by its content), and a string is only ever a string. A task whose
identity names this run's temporary files (`….tmp`), or holds a value the identity cannot
describe, is simply run: its identity would not recur. The store is bounded (`trim`: least
recently used first), and `collect` removes what no stage manifest names (`albor gc`).
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from enum import Enum
from functools import partial
from pathlib import Path
from types import FunctionType
from typing import Any, NamedTuple, TypeVar, cast

import numpy as np
from pydantic import BaseModel

from albor_pipeline.runtime.artifacts import file_sha256, load_digests, write_json
from albor_pipeline.runtime.commit import TEMP_SUFFIX
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.shards import Shard, parquet_files
from albor_pipeline.runtime.versions import CODE_VERSION, code_version

T = TypeVar("T")
RESULT = "result.pickle"
REFS = "refs"  # beside the entries: per stage, the identities its current outputs were made of
FILES = "files"


@dataclasses.dataclass(frozen=True)
class InputFile:
    """A file a task or stage reads: its identity holds the file's SHA-256 (and its name under
    the data dir), so an edit to it is a new identity wherever the file sits."""

    path: str

    @property
    def name(self) -> str:
        """The file's name (its last path component)."""
        return os.path.basename(self.path)

    @classmethod
    def shards(cls, path: Path) -> list[InputFile]:
        """Every shard of the Parquet file or shard set at `path`, in order: a map's items."""
        return [cls(str(shard)) for shard in parquet_files(path)]


class NotReusable(ValueError):
    """The task's identity cannot be told (it reads this run's temporary files, or holds a
    value with no stable description): the task runs."""


_WORKER: dict[str, str] = {}  # in a pool worker: the code its package's files held when it started


def note_worker_code() -> None:
    """In a pool worker forked from a server that imported this package earlier: the code the
    package's files hold now, which the modules the worker imports from here on are."""
    _WORKER["code"] = code_version()


def worker_code() -> str:
    """The code this process runs tasks with (`note_worker_code`, else `CODE_VERSION`)."""
    return _WORKER.get("code", CODE_VERSION)


def _describe(value: Any, root: str) -> Any:
    """`value` as JSON, an `InputFile` replaced by (its path under the data dir, its SHA-256)."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, Enum):
        return _describe(value.value, root)
    if isinstance(value, InputFile):
        name = os.path.relpath(value.path, root) if value.path.startswith(root + os.sep) else value.path
        try:
            return {"file": name, "sha256": file_sha256(value.path)}
        except OSError as exc:  # the work that reads it names the error
            raise NotReusable(f"{value.path} cannot be read: {exc}") from None
    if isinstance(value, (str, Path)):
        text = str(value)
        if TEMP_SUFFIX in text and any(part.endswith(TEMP_SUFFIX) for part in Path(text).parts):
            raise NotReusable(f"{text} is this run's temporary file")
        return text
    if isinstance(value, BaseModel):
        return _describe(value.model_dump(mode="json"), root)
    if isinstance(value, partial):
        args, keywords = _describe(value.args, root), _describe(value.keywords, root)
        return {"partial": _describe(value.func, root), "args": args, "keywords": keywords}
    if isinstance(value, FunctionType):  # this package's code is in CODE_VERSION; a closure's state is not
        if not value.__module__.startswith(f"{__package__.split('.')[0]}.") or "<" in value.__qualname__:
            raise NotReusable(f"{value.__qualname__} is not a function of this package")
        return {"function": f"{value.__module__}.{value.__qualname__}"}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _describe(getattr(value, f.name), root) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_describe(v, root) for v in value]
    if isinstance(value, dict):
        return {str(k): _describe(v, root) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, np.ndarray):
        return {"array": str(value.dtype), "shape": value.shape, "sha256": hashlib.sha256(value.tobytes()).hexdigest()}
    if isinstance(value, np.generic):
        return value.item()
    raise NotReusable(f"a {type(value).__name__} has no stable description")


def identity(parts: dict[str, Any], root: str) -> str:
    """SHA-256 over this code (`CODE_VERSION`) and `parts`, each `InputFile` (under the data
    dir `root` or elsewhere) by its content; NotReusable when a part has no stable
    description. A task's identity, and a whole stage's (`runtime/stagerun.py`)."""
    described = {"code": CODE_VERSION, **{name: _describe(value, root) for name, value in parts.items()}}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()


class Part(NamedTuple):
    """A part of a task kept under its own identity (`memo`), and whether it was reused."""

    name: str  # its step function's
    key: str
    reused: bool
    bytes: int = 0  # the files it kept (`run_part`'s task), for the store's tally


class Outcome(NamedTuple):
    """A task's result, whether it was reused, the identity it ran under (None: not reusable),
    and the parts it kept or reused (`memo`)."""

    result: Any
    reused: bool
    key: str | None
    parts: tuple[Part, ...] = ()
    sent: tuple[tuple[str, str, int], ...] = ()  # the files it sent to later waves (`nodes.Spooled`)


@dataclasses.dataclass(frozen=True)
class TaskStore:
    """The data dir's store of task outputs (`directory`), capped at `cap_bytes`."""

    directory: str
    cap_bytes: int

    @property
    def root(self) -> str:
        """The data dir the store belongs to (file names in identities are relative to it)."""
        return str(Path(self.directory).parents[1])

    def key(self, step: Callable[..., Any], job: Any, item: Any) -> str:
        """The task's identity; NotReusable when it has none."""
        load_digests(Layout(Path(self.root)).digests, once=True)  # a worker: the files no one changed, unhashed
        step_name = f"{step.__module__}.{getattr(step, '__qualname__', repr(step))}"
        return identity({"step": step_name, "job": job, "item": item}, self.root)

    def entry(self, key: str) -> Path:
        """Where the outputs of the task `key` are kept."""
        return Path(self.directory) / key[:2] / key

    def _verified(self, key: str) -> tuple[Any, tuple[Part, ...], list[tuple[Path, Shard]]] | None:
        """The entry of `key` (its result, its parts, its stored files) when whole and every
        file has its recorded hash; None (and the entry dropped) when absent, unreadable or
        tampered with."""
        entry = self.entry(key)
        if not entry.is_dir():
            return None
        try:
            result, parts = pickle.loads((entry / RESULT).read_bytes())
        except Exception:  # a torn, half-deleted or foreign entry: run the task again
            _drop(entry)
            return None
        stored = [(entry / FILES / shard.name, shard) for shard in getattr(result, "shards", ())]
        if not all(path.is_file() and file_sha256(path) == shard.sha256 for path, shard in stored):
            _drop(entry)
            return None
        return result, tuple(Part(*p) for p in parts), stored

    def holds(self, key: str) -> bool:
        """Whether the task `key` would be reused now (its entry whole, its files verified)."""
        return self._verified(key) is not None

    def restore(self, key: str, directory: Path) -> tuple[Any, tuple[Part, ...]] | None:
        """The stored result of `key` and the parts it kept, its shards (if any) linked into
        `directory` after their hashes matched; None (and the entry dropped) when absent,
        unreadable or tampered with."""
        verified = self._verified(key)
        if verified is None:
            return None
        result, parts, stored = verified
        for path, shard in stored:
            target = directory / shard.name
            target.parent.mkdir(parents=True, exist_ok=True)
            _link(path, target)
        with suppress(OSError):
            os.utime(self.entry(key))  # recently used: `trim` keeps it longest
        return result, parts

    def save(self, key: str, directory: Path, result: Any, parts: tuple[Part, ...] = ()) -> None:
        """Keep `result`, the shards it wrote in `directory` (linked, not copied) and the parts
        it kept under `key`; the entry appears whole or not at all, and a failure to keep it
        never fails the task."""
        entry = self.entry(key)
        if entry.exists():
            return
        tmp: Path | None = None
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", suffix=TEMP_SUFFIX, dir=entry.parent))
            for shard in getattr(result, "shards", ()):
                target = tmp / FILES / shard.name
                target.parent.mkdir(parents=True, exist_ok=True)
                _link(directory / shard.name, target)
            payload = (result, [tuple(p) for p in parts])
            (tmp / RESULT).write_bytes(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))
            os.rename(tmp, entry)
        except Exception:  # a full disk, a concurrent writer of the same entry: not this task's failure
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def refer(self, stage: str, keys: Iterable[str]) -> None:
        """Record the identities of the tasks `stage`'s current outputs were made of (what
        `collect` keeps); beside the store, so the manifests stay the same whether or not
        tasks were reused."""
        write_json(Path(self.directory) / REFS / f"{stage.replace('/', '__')}.json", sorted(set(keys)), compact=True)

    def referenced(self, stages: Iterable[str]) -> set[str]:
        """The identities the current outputs of `stages` were made of, and their checks'."""
        keys: set[str] = set()
        refs = Path(self.directory) / REFS
        for stage in stages:
            name = stage.replace("/", "__")
            for path in [refs / f"{name}.json", *refs.glob(f"{glob.escape(check_refs(name, ''))}*.json")]:
                with suppress(OSError, ValueError):
                    keys.update(json.loads(path.read_text()))
        return keys

    def entries(self) -> list[tuple[Path, float, int]]:
        """Every entry: (directory, last used, bytes)."""
        found = []
        base = Path(self.directory)
        for entry in base.glob("??/*") if base.is_dir() else ():
            if entry.name.endswith(TEMP_SUFFIX):
                continue
            with suppress(OSError):
                size = sum(f.stat().st_size for f in entry.rglob("*") if f.is_file())
                found.append((entry, entry.stat().st_mtime, size))
        return found

    def trim(self) -> int:
        """Drop the least recently used entries until the store holds at most `cap_bytes`;
        returns the bytes dropped. Costs only reuse: a dropped task runs again when needed."""
        entries = sorted(self.entries(), key=lambda e: e[1])
        held = sum(size for _, _, size in entries)
        dropped = 0
        for entry, _, size in entries:
            if held <= self.cap_bytes:
                break
            _drop(entry)
            held -= size
            dropped += size
        _HELD[self.directory] = held
        return dropped

    def collect(self, keep: Iterable[str]) -> tuple[int, int]:
        """Drop every entry whose identity is not in `keep` (what the manifests name);
        returns (entries, bytes) dropped."""
        wanted = set(keep)
        dropped = (0, 0)
        for entry, _, size in self.entries():
            if entry.name not in wanted:
                _drop(entry)
                dropped = (dropped[0] + 1, dropped[1] + size)
        return dropped


def _drop(entry: Path) -> None:
    """An entry gone at once (renamed to a temp name, then removed): a kill mid-removal
    leaves a temp directory the next run's cleanup takes, never a half entry."""
    doomed = entry.with_name(f".{entry.name}.drop{TEMP_SUFFIX}")
    try:
        os.rename(entry, doomed)
    except OSError:
        return
    shutil.rmtree(doomed, ignore_errors=True)


def _link(source: Path, target: Path) -> None:
    """`target` as a hard link to `source` (a copy across file systems)."""
    with suppress(FileNotFoundError):
        target.unlink()
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def run_task(
    store: TaskStore | None, step: Callable[..., Any], job: Any, item: Any, directory: Path, run: Callable[[], Any]
) -> Outcome:
    """`run()`, the task `step(job, …, item)` writing its shards into `directory`, or its stored
    outputs when `store` holds its identity; what it ran is kept for the next time (a result
    that does not list its files in `shards` cannot be), with
    the parts it kept (`memo`)."""
    if store is None:
        return Outcome(run(), False, None)
    try:
        key = store.key(step, job, item)
    except NotReusable:
        return Outcome(run(), False, None)
    reused = store.restore(key, directory)
    if reused is not None:
        return Outcome(reused[0], True, key, reused[1])
    parts: list[Part] = []
    token = _PARTS.set((store, parts))
    try:
        result = run()
    finally:
        _PARTS.reset(token)
    if not isinstance(getattr(result, "shards", None), (list, tuple)):
        raise TypeError(f"{step.__qualname__} returns no `shards`: the task store cannot keep what it wrote")
    store.save(key, directory, result, tuple(parts))
    return Outcome(result, False, key, tuple(parts))


_PARTS: ContextVar[tuple[TaskStore, list[Part]] | None] = ContextVar("albor_task_parts", default=None)


def run_part(
    store: TaskStore, step: Callable[..., Any], job: Any, item: Any, directory: Path, run: Callable[[], Any]
) -> Outcome:
    """`run_task` of another step's task from inside the running task, kept as one of its
    parts: work two stages share (a row group's encoding, for a split's corpus and its long
    subset) is done by whichever runs first and reused by the other. Its own parts count as
    the calling task's too: what a rebuild redid inside it, and what the run still uses
    (`albor gc` keeps them), reused when it was."""
    outcome = run_task(store, step, job, item, directory, run)
    current = _PARTS.get()
    if current is not None and outcome.key is not None:
        kept = _kept_bytes(outcome.result)
        current[1].extend(part._replace(reused=part.reused or outcome.reused) for part in outcome.parts)
        current[1].append(Part(getattr(step, "__name__", repr(step)), outcome.key, outcome.reused, kept))
    return outcome


def memo(step: Callable[..., Any], job: Any, item: Any, compute: Callable[[], T]) -> T:
    """`compute()`, the part `step(job, item)` of the task running now (a row group's work in a
    shard's task) or of the stage or check this process runs, or its value kept under its own
    identity when the store holds it: work whose input changed in one place redoes only that
    place's part. The value must be small (what the part decided, not the data it copies:
    the caller still writes its outputs); it is kept without files. Outside a reusing task,
    stage or check, just `compute()`."""
    current, reuse = _PARTS.get(), _SESSION.get()
    store = current[0] if current is not None else reuse.store if reuse is not None else None
    if store is None:
        return compute()
    try:
        key = store.key(step, job, item)
    except NotReusable:
        return compute()
    found = store.restore(key, Path(store.directory))
    value = cast(T, found[0]) if found is not None else compute()
    if found is None:
        store.save(key, Path(store.directory), value)
    if current is not None:
        current[1].append(Part(getattr(step, "__name__", repr(step)), key, found is not None))
    elif reuse is not None:
        reuse.record([Outcome(None, found is not None, key)])
    return value


ENTRY_BYTES = 4096  # what an entry holds besides its files (its result), for `Session`'s tally


def _kept_bytes(result: Any) -> int:
    """The bytes of the files a task's result lists (`shards`): what its entry keeps."""
    return sum(getattr(shard, "bytes", 0) for shard in getattr(result, "shards", ()))


_HELD: dict[str, int] = {}  # per store directory: the bytes it held at this process's last walk, plus since


class Session:
    """The run's process side of one stage's reuse: the store, the stage, and the identities
    its tasks had (its manifest records them: what `collect` keeps)."""

    def __init__(self, store: TaskStore, stage: str = "") -> None:
        self.store, self.stage = store, stage
        self.keys: list[str] = []
        self.added = 0  # bytes the tasks that ran and were kept added to the store (about)

    @property
    def stored(self) -> bool:
        """Whether a task ran and was kept: the store grew."""
        return self.added > 0

    def record(self, outcomes: Iterable[Outcome]) -> None:
        """The identities of tasks that ran or were reused: the manifest lists them."""
        for outcome in outcomes:
            if outcome.key is not None:
                self.keys.append(outcome.key)
                if not outcome.reused:
                    self.added += ENTRY_BYTES + _kept_bytes(outcome.result)
            self.keys.extend(part.key for part in outcome.parts)
            if not outcome.reused:  # a reused task's parts were kept when it first ran
                self.added += sum(ENTRY_BYTES + part.bytes for part in outcome.parts if not part.reused)

    def close(self) -> None:
        """After the stage or check: refer to its tasks (what `collect` keeps), and trim the
        store to its cap when it may be over it: the store's bytes at this process's last walk
        of it, plus what its stages have added since, past the cap (a walk visits every entry,
        10 ms a thousand; a data dir has one run at a time, so only this process adds)."""
        self.store.refer(self.stage, self.keys)
        if not self.stored:
            return
        held = _HELD.get(self.store.directory)
        if held is not None and held + self.added <= self.store.cap_bytes:
            _HELD[self.store.directory] = held + self.added
            return
        self.store.trim()  # and notes what the store holds now


_SESSION: ContextVar[Session | None] = ContextVar("albor_task_session", default=None)


@contextmanager
def reusing(store: TaskStore | None, stage: str = "") -> Iterator[Session | None]:
    """Within the block (stage `stage`), the shard maps of this process reuse tasks from
    `store` (None: never)."""
    token = _SESSION.set(Session(store, stage) if store is not None else None)
    try:
        yield _SESSION.get()
    finally:
        _SESSION.reset(token)


def check_refs(stage: str, check: str) -> str:
    """The name a stage's check refers to its tasks by (`refer`): kept while the stage is."""
    return f"{stage}#check#{check}"


def session() -> Session | None:
    """The stage's reuse session, if the run reuses tasks."""
    return _SESSION.get()

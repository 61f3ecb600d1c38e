"""Data checks over finished artifacts (pure functions; the Dagster layer wraps them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from albor_pipeline.runtime.artifacts import read_manifest, recorded_intact, sha256_bytes, write_json
from albor_pipeline.runtime.executor import Executor
from albor_pipeline.runtime.layout import Layout, benchmark_stage, source_stage
from albor_pipeline.runtime.shardmap import StageIO, Step, TaskIO, map_tasks
from albor_pipeline.runtime.shards import Shard
from albor_pipeline.runtime.taskstore import InputFile, NotReusable, identity

T = TypeVar("T")


@dataclass
class CheckOutcome:
    passed: bool
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)


class KeptOutcome(BaseModel):
    """A check's outcome as it was taken, and the identity it was taken under."""

    identity: str
    passed: bool
    description: str
    metadata: dict[str, Any]


def check_identity(layout: Layout, stage: str, check: str, reads: Sequence[str], settings: Any) -> str | None:
    """A check's identity: the code, `settings` (the spec, its files by content), its stage's
    manifest whole (outputs, inputs, settings) and every manifest in `reads` whole (the stages
    the stage builds on, and any other whose files the check reads); None when one of them is
    missing or a setting has no stable description."""
    try:
        manifests = {name: sha256_bytes(layout.manifest(name).read_bytes()) for name in (stage, *reads)}
        return identity({"check": f"{stage}#{check}", "settings": settings, "manifests": manifests}, str(layout.root))
    except (FileNotFoundError, NotReusable):
        return None


def checked_intact(layout: Layout, stage: str, reads: Sequence[str] = ()) -> bool:
    """Whether every file a check may read still has its recorded bytes: its stage's outputs
    and inputs (not the fingerprints of sources and benchmarks, which name no data-dir file:
    their bytes are in the identity), and the outputs of the stages in `reads`."""
    try:
        own, *others = [read_manifest(layout, name) for name in (stage, *reads)]
    except (OSError, ValueError):
        return False
    fingerprints = (source_stage(""), benchmark_stage(""))
    files = [*own.outputs, *(a for a in own.inputs if not a.path.startswith(fingerprints))]
    return recorded_intact(layout.root, [*files, *(a for m in others for a in m.outputs)])


def kept_outcome(layout: Layout, stage: str, check: str, reads: Sequence[str], key: str | None) -> CheckOutcome | None:
    """The check's last outcome, when it was taken under identity `key` and the files it may
    read (`checked_intact`) still have their bytes: checking again would find the same."""
    if key is None:
        return None
    try:
        kept = KeptOutcome.model_validate_json(layout.check_outcome(stage, check).read_bytes())
    except (OSError, ValueError):
        return None
    if kept.identity != key or not checked_intact(layout, stage, reads):
        return None
    return CheckOutcome(kept.passed, kept.description, kept.metadata)


def keep_outcome(layout: Layout, stage: str, check: str, key: str, outcome: CheckOutcome) -> None:
    """Record the outcome a check took under identity `key` (beside the data, whole or not at
    all); a full disk, or metadata with no JSON form, costs only the next run's check."""
    with suppress(OSError, ValueError):
        kept = KeptOutcome(
            identity=key, passed=outcome.passed, description=outcome.description, metadata=outcome.metadata
        )
        write_json(layout.check_outcome(stage, check), kept.model_dump(mode="json"))


def check_schema(paths: list[Path], expected: pa.Schema) -> CheckOutcome:
    """Every Parquet file has exactly the expected column names and types."""
    wrong = {}
    for path in paths:
        actual = pq.read_schema(path)
        if actual.names != expected.names or any(
            actual.field(n).type != expected.field(n).type for n in expected.names
        ):
            wrong[path.name] = str(actual)
    ok = bool(paths) and not wrong
    return CheckOutcome(
        ok,
        f"{len(paths) - len(wrong)}/{len(paths)} Parquet file(s) match the stage contract",
        {"expected": str(expected), "mismatched": wrong},
    )


@dataclass(frozen=True)
class _Checked(Generic[T]):
    """A check's task result; it writes no file."""

    value: T
    shards: tuple[Shard, ...] = ()


@dataclass(frozen=True)
class _CheckJob(Generic[T]):
    """A per-shard check: its function, and the files it reads besides the shard."""

    fn: Callable[[Path], T]
    files: tuple[InputFile, ...] = ()


def _check_shard(job: _CheckJob[T], io: TaskIO, shard: InputFile) -> _Checked[T]:
    return _Checked(job.fn(io.local(shard)))


def _check_fn(job: _CheckJob[T]) -> Callable[[Path], T]:
    return job.fn


CHECK_SHARD: Step[_CheckJob[Any], InputFile, _Checked[Any]] = Step(_check_shard, names=_check_fn)


def per_shard(executor: Executor, fn: Callable[[Path], T], paths: list[Path], reads: Sequence[Path] = ()) -> list[T]:
    """`fn` of each shard of `paths`, a task each on `executor` (inline for one shard), on
    the shard's copy wherever the task runs. Reused as a stage's tasks are, by `fn` (a
    function of this package, or a `partial` of one), the files it `reads` besides its shard
    (a tokenizer, benchmarks) and the shard, by content: a rebuild checks again only the
    shards that changed."""
    # The tasks write nothing: their directory is nominal, the shards' own (in the data dir,
    # where a node without the run's working copy maps it).
    directory = paths[0].parent if paths else Path()
    job = _CheckJob(fn, tuple(InputFile(str(p)) for p in reads))
    shards = [InputFile(str(p)) for p in paths]
    checked = map_tasks(CHECK_SHARD, job, shards, directory, StageIO(directory, executor))
    return [c.value for c in checked]

"""Data checks over finished artifacts (pure functions; the Dagster layer wraps them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from albor_pipeline.runtime.executor import Executor
from albor_pipeline.runtime.shardmap import NAMED_BY_JOB, TaskIO, map_tasks
from albor_pipeline.runtime.shards import Shard

T = TypeVar("T")


@dataclass
class CheckOutcome:
    passed: bool
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)


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


def _check_shard(fn: Callable[[Path], T], io: TaskIO, path: str) -> _Checked[T]:
    return _Checked(fn(io.local(path)))


setattr(_check_shard, NAMED_BY_JOB, True)  # its tasks are named by `fn` (the task log, the bench)


def per_shard(executor: Executor, fn: Callable[[Path], T], paths: list[Path]) -> list[T]:
    """`fn` of each shard of `paths`, a task each on `executor` (inline for one shard), on
    the shard's copy wherever the task runs. Reused as a stage's tasks are, by `fn` (a
    function of this package, or a `partial` of one) and the shard's bytes: a rebuild checks
    again only the shards that changed."""
    # The tasks write nothing: their directory is nominal, the shards' own (in the data dir,
    # where a node without the run's working copy maps it).
    directory = paths[0].parent if paths else Path()
    checked = map_tasks(_check_shard, fn, [str(p) for p in paths], directory, executor, reuse=True)
    return [c.value for c in checked]

"""Data checks over finished artifacts (pure functions; the Dagster layer wraps them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from albor_pipeline.runtime.executor import Executor, for_items
from albor_pipeline.runtime.nodes import OnNode, task_node

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


def per_shard(executor: Executor, fn: Callable[[Path], T], paths: list[Path]) -> list[T]:
    """`fn` of each shard of `paths`, a task each on `executor` (inline for one shard), on
    the shard's copy wherever the task runs."""
    executor = for_items(executor, len(paths), 2)
    return list(executor.map(OnNode(task_node(executor.node), fn), paths))

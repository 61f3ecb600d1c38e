"""Hash partitioning for the global steps (exact-dedup keys, LSH band keys).

A task per input writes its records grouped by partition into one `.npy` file of a spool
directory and returns where each partition starts; then a task per partition reads its
slice of every file, in input order (memory-mapped), so a partition's records keep the
input's order. Every record of one key lands in one partition, so a per-partition answer
is exact, and memory per task is one input's or one partition's records, never the
corpus's. The partition count follows the data's size alone (never the workers), and the
steps built on it give the same answer for any count (tested).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from albor_pipeline.runtime.artifacts import write_array
from albor_pipeline.runtime.nodes import Node
from albor_pipeline.runtime.shards import MB

if TYPE_CHECKING:
    from albor_pipeline.runtime.shardmap import TaskIO

PARTITION_BYTES = 64 * MB  # records a partition task holds at most, about


def partition_count(records: int, record_bytes: int) -> int:
    """Partitions for `records` records of `record_bytes` each: about PARTITION_BYTES apiece."""
    return max(1, math.ceil(records * record_bytes / PARTITION_BYTES))


def spool_file(spool: str | Path, kind: str, task: int) -> Path:
    """Input task `task`'s file of records of `kind` in `spool`."""
    return Path(spool) / f"{kind}-{task:06d}.npy"


def scatter(
    io: TaskIO, spool: str, kind: str, task: int, records: np.ndarray, part: np.ndarray, partitions: int
) -> np.ndarray:
    """Write `records` grouped by their partition `part` (stably: each partition keeps the
    records' order) to task `task`'s file of `kind` where the task writes the spool, sent to
    the partition tasks (`TaskIO.spool`); returns the partitions' start offsets (partitions + 1)."""
    order = np.argsort(part, kind="stable")
    path = spool_file(io.node.directory(spool), kind, task)
    write_array(path, records[order], npy=True)
    io.spool(path)
    return np.searchsorted(part[order], np.arange(partitions + 1)).astype(np.int64)


def gather(node: Node, spool: str | Path, kind: str, starts: np.ndarray, ends: np.ndarray) -> np.ndarray | None:
    """One partition's records: rows `starts[t]:ends[t]` of input task t's file, concatenated
    in task order (None when every slice is empty)."""
    parts = [
        np.asarray(np.load(node.local(spool_file(spool, kind, t)), mmap_mode="r")[s:e])
        for t, (s, e) in enumerate(zip(starts.tolist(), ends.tolist()))
        if e > s
    ]
    return np.concatenate(parts) if parts else None


def partition_items(offsets: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """The per-partition task items (partition, starts, ends) from the input tasks' offsets
    (a row of `partitions + 1` per input task), leaving out empty partitions."""
    items = []
    for p in range(offsets.shape[1] - 1):
        starts, ends = offsets[:, p], offsets[:, p + 1]
        if (ends > starts).any():
            items.append((p, starts, ends))
    return items

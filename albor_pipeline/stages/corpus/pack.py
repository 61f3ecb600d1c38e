"""The packing task: a Parquet shard of sequences filled from the token spool by the plan."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from albor_pipeline.runtime.artifacts import (
    ParquetSink,
)
from albor_pipeline.runtime.shardmap import Step, TaskIO, Written
from albor_pipeline.runtime.shards import Shard
from albor_pipeline.spec import Packing
from albor_pipeline.stages.corpus.encode_task import (
    spool_tokens,
)
from albor_pipeline.stages.corpus.plan import Packed, Plan, Segments, fill
from albor_pipeline.text.sequences import ROW_GROUP_SEQUENCES, SEQ_SCHEMA

PACK_SEQUENCES = 256  # sequences a packing task fills at once: ~2 MB of ids at seq_len 2048


def _list_array(values: np.ndarray, counts: np.ndarray) -> pa.ListArray:
    offsets = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values.astype(np.uint32, copy=False)))


def sequences_batch(packed: Packed) -> pa.RecordBatch:
    n, seq_len = packed.seqs.shape
    ids = _list_array(packed.seqs.reshape(-1), np.full(n, seq_len))
    return pa.RecordBatch.from_arrays([ids, _list_array(packed.pieces, packed.counts)], schema=SEQ_SCHEMA)


@dataclass(frozen=True)
class PackJob:
    """Where a packing task reads its sequences: the plan (`plan.Plan`) and the token files in
    the spool. A task's identity is what it reads of them (`pack_reads`), not the job."""

    spool: str  # the plan and token files
    seq_len: int
    pad_id: int
    dtype: str
    tokens: int
    packing: Packing

    def plan(self, io: TaskIO) -> Plan:
        """The plan in the spool, where this task reads it."""
        return Plan.load(Path(self.spool), self.packing, io.local)

    def read(self, io: TaskIO, offsets: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """Stream positions [lo, hi) as uint32, from the row groups' token files (starting at
        stream positions `offsets`)."""
        task = int(np.searchsorted(offsets, lo, side="right")) - 1
        parts, itemsize = [], np.dtype(self.dtype).itemsize
        while lo < hi:
            end = min(hi, int(offsets[task + 1]))
            if end > lo:
                start = (lo - int(offsets[task])) * itemsize
                tokens = io.local(spool_tokens(self.spool, task))
                parts.append(np.fromfile(tokens, self.dtype, count=end - lo, offset=start))
            lo, task = end, task + 1
        return np.concatenate(parts).astype(np.uint32) if parts else np.zeros(0, np.uint32)


def _chunks(job: PackJob, io: TaskIO, first: int, end: int) -> Iterator[tuple[Segments, int, np.ndarray]]:
    """Sequences [first, end), `PACK_SEQUENCES` at a time: their segments, the stream position
    their tokens start at, and those tokens."""
    plan = job.plan(io)
    for lo in range(first, end, PACK_SEQUENCES):
        segments = plan.segments(lo, min(lo + PACK_SEQUENCES, end), job.seq_len, job.tokens)
        base = int(segments.starts.min())
        yield segments, base, job.read(io, plan.offsets, base, int((segments.starts + segments.lens).max()))


def pack_shard(job: PackJob, io: TaskIO, item: tuple[int, int, int]) -> Written:
    """Write corpus shard `part-NNNNN.parquet` holding sequences [first, end) of the plan:
    a task per shard, so no sequence passes through the stage's own process."""
    shard, first, end = item
    path = io.directory / f"part-{shard:05d}.parquet"
    # No dictionary: ~32k distinct ids per row group make it cost time and bytes (+23 %).
    with ParquetSink(path, SEQ_SCHEMA, ROW_GROUP_SEQUENCES, use_dictionary=False) as sink:
        for segments, base, stream in _chunks(job, io, first, end):
            sink.write(sequences_batch(fill(stream, base, segments, job.seq_len, job.pad_id)))
    return Written((Shard.of(path, sink.rows),))


def pack_reads(job: PackJob, io: TaskIO, item: tuple[int, int, int]) -> dict[str, object]:
    """What a packing task writes its shard from (its identity): the shard's name, the padding,
    and its sequences' pieces and tokens, positions taken from where they start in the stream.
    Not the whole spool: a rebuild repacks only the shards whose sequences changed."""
    shard, first, end = item
    digest = hashlib.sha256()
    for segments, base, stream in _chunks(job, io, first, end):
        for part in (segments.starts - base, segments.lens, segments.counts, stream):
            digest.update(np.int64(len(part)).tobytes() + np.ascontiguousarray(part).tobytes())
    return {"shard": shard, "seq_len": job.seq_len, "pad_id": job.pad_id, "sequences": digest.hexdigest()}


PACK_SHARD = Step(pack_shard, pack_reads)

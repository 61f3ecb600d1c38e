"""No train document in a held-out split, exactly or nearly, and no benchmark n-grams left."""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from albor_pipeline.runtime.artifacts import TEMP_SUFFIX
from albor_pipeline.runtime.checks import CheckOutcome, per_shard
from albor_pipeline.runtime.executor import INLINE, Executor
from albor_pipeline.runtime.shardmap import StageIO, Step, TaskIO, map_tasks
from albor_pipeline.runtime.shards import Shard, iter_batches, parquet_files
from albor_pipeline.runtime.taskstore import InputFile
from albor_pipeline.spec import DecontaminateSpec
from albor_pipeline.stages.documents.decontam import contaminated
from albor_pipeline.stages.documents.lsh import LshJob
from albor_pipeline.stages.documents.minhash import Signer
from albor_pipeline.stages.documents.neardup import NearDupIndex
from albor_pipeline.text.shingles import word_hashes


def _hashes(path: Path) -> set[str]:
    out: set[str] = set()
    for batch in iter_batches(path, ["sha256"], 65536):
        out.update(batch.column(0).to_pylist())
    return out


def check_no_leak(train: Path, *held_out: Path) -> CheckOutcome:
    """No held-out document (by sha256) is also in train (each a Parquet file or shard set)."""
    train_hashes = _hashes(train)
    leaks = {p.stem: len(_hashes(p) & train_hashes) for p in held_out}
    return CheckOutcome(
        not any(leaks.values()),
        "held-out documents shared with train: " + ", ".join(f"{k} {v}" for k, v in leaks.items()),
        {"shared": leaks},
    )


SAMPLED = 8  # documents per shard whose stored signatures the check recomputes


@dataclass(frozen=True)
class _Sampled:
    """How many of a shard's `SAMPLED` recomputed signatures disagree with its stored ones."""

    wrong: int
    shards: tuple[Shard, ...] = ()  # the task writes no file


def _sample_stored(signer: Signer, io: TaskIO, item: tuple[InputFile, InputFile]) -> _Sampled:
    """A shard's stored signatures (its stage's `minhash/…npy`) against `SAMPLED` of its
    documents' recomputed ones (the file's rows must be the shard's documents): a task,
    reused while both files' bytes stay the same."""
    path, stored = item
    signatures = np.load(io.local(stored), mmap_mode="r")
    rows = pq.ParquetFile(io.local(path)).metadata.num_rows
    if len(signatures) != rows:
        return _Sampled(1)
    sample = np.unique(np.linspace(0, rows - 1, SAMPLED).astype(np.int64)) if rows else np.zeros(0, np.int64)
    start = 0
    for batch in iter_batches(io.local(path), ["text"]):  # a batch at a time; only the sample hashed
        for k in sample[(sample >= start) & (sample < start + batch.num_rows)].tolist():
            if not np.array_equal(signer.signature(word_hashes(batch.column(0)[k - start].as_py())), signatures[k]):
                return _Sampled(1)
        start += batch.num_rows
    return _Sampled(0)


SAMPLE_STORED = Step(_sample_stored)


def _signatures(job: tuple[Signer, LshJob], io: TaskIO, item: tuple[int, int, Path, Path | None]) -> np.ndarray:
    """Shard `item` = (task, its first document, path, its stored signatures or None): its
    documents' MinHash signatures (the stored ones, else computed) spooled for LSH, a
    per-shard task; returns the partition offsets."""
    signer, lsh = job
    task, first, path, stored = item
    if stored is None:
        batches = iter_batches(io.local(path), ["text"])
        sigs = [signer.signature(word_hashes(t)) for b in batches for t in b.column(0).to_pylist()]
        stacked = np.stack(sigs) if sigs else np.zeros((0, signer.num_perm), np.uint64)
    else:
        stacked = np.load(io.local(stored))
    return lsh.spool_signatures(task, first, stacked, io)


SIGNATURES = Step(_signatures, kept=False)


def check_no_near_leak(
    paths: dict[str, Path],
    ngram: int,
    num_perm: int,
    bands: int,
    threshold: float,
    executor: Executor = INLINE,
    spool_dir: Path | None = None,
    stored: Callable[[Path], Path | None] = lambda _: None,
) -> CheckOutcome:
    """No document of one split (a Parquet file or shard set) is a near-duplicate (verified
    Jaccard >= threshold on LSH candidates) of a document of another split. Signatures (the
    stage's, where `stored(shard)` names them: a sample recomputed), LSH buckets and the
    cross-split candidates' verification run a shard (or a partition, or a run of pairs) per
    task on `executor`, spooling to `spool_dir`; clusters in this process."""
    index = NearDupIndex(ngram, num_perm, bands, threshold)
    shards = [(split, file) for split, path in paths.items() for file in parquet_files(path)]
    rows = [pq.ParquetFile(f).metadata.num_rows for _, f in shards]
    firsts = np.concatenate(([0], np.cumsum(rows, dtype=np.int64)))
    shard_split = np.array([split for split, _ in shards], dtype=object)

    def locate(docs: np.ndarray) -> np.ndarray:
        shard = np.searchsorted(firsts, docs, side="right") - 1
        return np.stack([shard, docs - firsts[shard]], axis=1)

    with tempfile.TemporaryDirectory(prefix=".albor-minhash-", suffix=TEMP_SUFFIX, dir=spool_dir) as spool:
        io = StageIO(Path(spool), executor)
        lsh = index.lsh(spool, int(firsts[-1]))
        items = [(k, int(firsts[k]), f, stored(f)) for k, (_, f) in enumerate(shards)]
        stored_pairs = [(InputFile(str(f)), InputFile(str(sigs))) for _, _, f, sigs in items if sigs is not None]
        sampled = map_tasks(SAMPLE_STORED, index.signer, stored_pairs, Path(spool), io)
        signed = map_tasks(SIGNATURES, (index.signer, lsh), items, Path(spool), io)
        stacked = np.stack(signed) if signed else np.zeros((0, lsh.partitions + 1), np.int64)
        index.find_candidates(lsh, stacked, firsts, io)
    candidates = len(index.pairs)
    sides = shard_split[locate(index.pairs.ravel())[:, 0]].reshape(-1, 2)
    index.pairs = index.pairs[sides[:, 0] != sides[:, 1]]  # within a split is no leak
    index.verify_shards([str(f) for _, f in shards], locate, spool_dir, io)
    wrong = sum(s.wrong for s in sampled)
    return CheckOutcome(
        not len(index.verified) and not wrong,
        f"{len(index.verified)} near-duplicate pairs across splits (of {candidates} LSH candidates, "
        f"{len(index.pairs)} across splits)"
        + (f"; {wrong} shard(s) whose stored signatures disagree with their documents" if wrong else ""),
        {
            "crossing": len(index.verified),
            "candidates": candidates,
            "documents": int(firsts[-1]),
            "stored_signatures": sum(1 for it in items if it[3] is not None),
            "signature_mismatches": wrong,
        },
    )


def check_no_contamination(train: Path, spec: DecontaminateSpec, executor: Executor = INLINE) -> CheckOutcome:
    """No train document shares an n-gram with any benchmark item (a shard per task)."""
    files = parquet_files(train)
    found: Counter[str] = Counter()
    for hits in per_shard(executor, partial(contaminated, spec=spec), files, [b.path for b in spec.benchmarks]):
        found.update(hits)
    return CheckOutcome(
        not found,
        f"{sum(found.values())} (train document, benchmark) pair(s) share a {spec.ngram}-gram"
        if found
        else f"no train document shares a {spec.ngram}-gram with {', '.join(b.name for b in spec.benchmarks)}",
        {"per_benchmark": dict(sorted(found.items())), "benchmarks": [b.name for b in spec.benchmarks]},
    )

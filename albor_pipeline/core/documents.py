"""Exact dedup across sources and content-hash holdout assignment.

A document's split is a function of (split seed, its SHA-256) alone, so splits are
disjoint by construction and a document never moves when other documents come or go.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from albor_pipeline.core.artifacts import Artifact, ParquetSink, staged_dir
from albor_pipeline.core.decontam import Decontaminator
from albor_pipeline.core.executor import INLINE, Executor, for_items
from albor_pipeline.core.ingest import BATCH_ROWS, DOC_SCHEMA
from albor_pipeline.core.neardup import NearDupIndex, Signer, word_hashes
from albor_pipeline.core.shards import Shard, shard_name
from albor_pipeline.core.stage import Progress
from albor_pipeline.spec import SPLITS, HoldoutSpec, NearDedupSpec


def split_of(sha256_hex: str, holdout: HoldoutSpec) -> str:
    """`u = H(seed, sha256)` in [0, 1): val below val_fraction, then test, else train."""
    digest = hashlib.sha256(f"{holdout.seed}:{sha256_hex}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    if u < holdout.val_fraction:
        return "val"
    if u < holdout.val_fraction + holdout.test_fraction:
        return "test"
    return "train"


@dataclass
class DocumentsResult:
    artifacts: dict[str, list[Artifact]]  # split -> its shard set, a shard per input shard
    rows: dict[str, dict[str, int]]  # split -> source -> rows
    duplicates: dict[str, int] = field(default_factory=dict)  # "kept_source <- dropped_source" -> n
    near: dict[str, Any] = field(default_factory=dict)  # near-dedup: removed per source, clusters, examples
    decontaminated: dict[str, Any] = field(default_factory=dict)  # per benchmark and source, examples


@dataclass(frozen=True)
class _ScanJob:
    """What every row-group task of the scan needs: the inputs, the signer, the benchmarks."""

    paths: tuple[str, ...]
    signer: Signer | None
    decon: Decontaminator | None


SCAN_MIN_GROUPS = 8  # a local pool's start-up pays off from ~2k documents
ScanItem = tuple[int, int, int, np.ndarray]  # (input, row group, its first row, labelled rows in it)


def _scan_group(job: _ScanJob, item: ScanItem) -> tuple[list[np.ndarray], list[list[str]]]:
    """MinHash signatures and benchmark hits of one row group's labelled documents (their
    words hashed once for both): a pure function of the group, for any executor."""
    i, group, _, rows = item
    texts = pq.ParquetFile(job.paths[i]).read_row_group(group, columns=["text"]).column(0).to_pylist()
    sigs, hits = [], []
    for row in rows.tolist():
        words = word_hashes(texts[row])
        if job.signer is not None:
            sigs.append(job.signer.signature(words))
        hits.append(job.decon.hits(words) if job.decon else [])
    return sigs, hits


def _file_of(inputs: list[tuple[str, Path]], i: int, row: int) -> str:
    """`source:file` of one document, read when a report names it (a few examples)."""
    return f"{inputs[i][0]}:{pq.read_table(inputs[i][1], columns=['file']).column(0)[row].as_py()}"


def _scan(
    inputs: list[tuple[str, Path]],
    labels: list[list[str | None]],
    near: NearDedupSpec | None,
    decon: Decontaminator | None,
    spool_dir: Path,
    progress: Progress | None,
    executor: Executor,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One pass over the exact-unique documents (words hashed once) for near-dup signatures
    and benchmark n-grams, a task per row group on `executor`, collected in document order;
    then near-dup clusters, then decontamination, updating `labels`. Returns the near-dup
    and decontamination reports."""
    index = NearDupIndex(near.ngram, near.num_perm, near.bands, near.threshold, spool_dir) if near else None
    items: list[ScanItem] = []
    for i, (_, path) in enumerate(inputs):
        meta = pq.ParquetFile(path).metadata
        labelled = np.array([label is not None for label in labels[i]], dtype=bool)
        start = 0
        for group in range(meta.num_row_groups):
            end = start + meta.row_group(group).num_rows
            rows = np.flatnonzero(labelled[start:end])
            if len(rows):
                items.append((i, group, start, rows))
            start = end
    job = _ScanJob(tuple(str(p) for _, p in inputs), index.signer if index else None, decon)
    located: list[np.ndarray] = []  # (input, row) of each scanned document, in document order
    hits: dict[int, list[str]] = {}
    docs = 0
    results = for_items(executor, len(items), SCAN_MIN_GROUPS).map(partial(_scan_group, job), items)
    for (i, _, first, rows), (sigs, found) in zip(items, results):
        for k in range(len(rows)):
            if index is not None:
                index.add_signature(sigs[k])
            if found[k]:
                hits[docs + k] = found[k]
        located.append(np.stack([np.full(len(rows), i), first + rows], axis=1))
        docs += len(rows)
    where = np.concatenate(located) if located else np.zeros((0, 2), dtype=np.int64)
    near_report = (
        _near_dedup(index, inputs, labels, where, near, spool_dir, progress, executor) if index and near else {}
    )
    decon_report: dict[str, Any] = {}
    if decon:
        dropped: Counter[str] = Counter()
        per_benchmark: Counter[str] = Counter()
        examples: list[list[str]] = []
        for doc, names in sorted(hits.items()):
            i, row = where[doc].tolist()
            if labels[i][row] != "train":  # only train must not contain eval text
                continue
            labels[i][row] = None
            dropped[inputs[i][0]] += 1
            per_benchmark.update(names)
            if len(examples) < 5:
                examples.append([_file_of(inputs, i, row), ", ".join(names)])
        decon_report = {
            "ngram": decon.n,
            "benchmarks": {n: {**r, "train_dropped": per_benchmark[n]} for n, r in decon.report().items()},
            "dropped": dict(sorted(dropped.items())),
            "examples": examples,
        }
    return near_report, decon_report


_HEX = np.full(256, 255, dtype=np.uint8)
_HEX[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16, dtype=np.uint8)
_HEX[np.frombuffer(b"ABCDEF", dtype=np.uint8)] = np.arange(10, 16, dtype=np.uint8)


def sha_keys(column: pa.Array) -> np.ndarray:
    """The first 128 bits of each hex SHA-256 in `column`, as void16 keys, decoded without a
    Python loop (a 2**-64 chance of a false duplicate among 10**9 documents)."""
    hexes = pc.utf8_slice_codeunits(column, 0, 32).cast(pa.binary())
    n = len(hexes)
    offsets = np.frombuffer(hexes.buffers()[1], dtype=np.int32)[hexes.offset : hexes.offset + n + 1]
    if hexes.null_count or (np.diff(offsets) != 32).any():
        raise ValueError("documents: a sha256 value is not 64 hex digits")
    data = np.frombuffer(hexes.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]] if n else np.zeros(0, np.uint8)
    nibbles = _HEX[data].reshape(-1, 32)
    if (nibbles == 255).any():
        raise ValueError("documents: a sha256 value is not 64 hex digits")
    packed = (nibbles[:, 0::2] << 4) | nibbles[:, 1::2]
    return np.ascontiguousarray(packed).view(np.dtype((np.void, 16))).ravel()


def first_occurrences(paths: list[Path]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact dedup over every document of `paths` in order, sort-based: per document, (is it
    the first with its SHA-256, the input holding that first one, its own input). Memory is
    ~30 bytes a document, not a Python dict of every hash."""
    keys, owner = [], []
    for i, path in enumerate(paths):
        for batch in pq.ParquetFile(path).iter_batches(batch_size=65536, columns=["sha256"]):
            keys.append(sha_keys(batch.column(0)))
            owner.append(np.full(batch.num_rows, i, dtype=np.int32))
    if not keys:
        return np.zeros(0, dtype=bool), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
    flat, owners = np.concatenate(keys), np.concatenate(owner)
    _, index, inverse = np.unique(flat, return_index=True, return_inverse=True)  # index: first occurrences
    first = np.zeros(len(flat), dtype=bool)
    first[index] = True
    return first, owners[index[inverse.ravel()]], owners


def _write_splits(staging: str, item: tuple[int, str, list[str | None]]) -> dict[str, Shard]:
    """Input shard `item` = (index, path, its documents' labels) written as shard `index` of
    each split's set (possibly empty, so every split has a shard per input shard): a pure
    function of the shard and its labels, so it runs on any executor."""
    i, path, labels = item
    with ExitStack() as stack:
        sinks = {s: stack.enter_context(ParquetSink(Path(staging) / s / shard_name(i), DOC_SCHEMA)) for s in SPLITS}
        start = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS):
            label_arr = pa.array(labels[start : start + batch.num_rows], pa.string())
            start += batch.num_rows
            for split in SPLITS:
                sinks[split].write(batch.filter(pc.fill_null(pc.equal(label_arr, split), False)))
    return {s: Shard.of(sink.path, sink.rows) for s, sink in sinks.items()}


def _near_dedup(
    index: NearDupIndex,
    inputs: list[tuple[str, Path]],
    labels: list[list[str | None]],
    where: np.ndarray,
    spec: NearDedupSpec,
    spool_dir: Path,
    progress: Progress | None,
    executor: Executor,
) -> dict[str, Any]:
    """Cluster near-duplicates among the exact-unique documents; members either leave (remove)
    or take their representative's split (cluster-aware holdout). The representative is the
    first member in spec order, as in exact dedup. Returns the report."""
    index.candidates()
    if progress:
        progress(f"documents: {len(where):,} signatures, {len(index.pairs):,} LSH candidate pairs")
    index.verify_shards([str(p) for _, p in inputs], where, spool_dir, executor)
    removed: Counter[str] = Counter()
    sizes: Counter[int] = Counter()
    for root, members in index.clusters.groups().items():
        sizes[len(members)] += 1
        ri, rrow = where[root].tolist()
        for member in members[1:]:
            i, row = where[member].tolist()
            if spec.remove:
                labels[i][row] = None
                removed[inputs[i][0]] += 1
            else:
                labels[i][row] = labels[ri][rrow]
    return {
        "removed": dict(sorted(removed.items())),
        "clusters": sum(sizes.values()),
        "cluster_sizes": {str(k): v for k, v in sorted(sizes.items())},
        "candidate_pairs": len(index.pairs),
        "verified_pairs": len(index.verified),
        "examples": [
            [_file_of(inputs, *where[a].tolist()), _file_of(inputs, *where[b].tolist()), j]
            for a, b, j in index.verified[:5]
        ],
    }


def build_documents(
    inputs: list[tuple[str, Path]],
    holdout: HoldoutSpec,
    out_dir: Path,
    data_root: Path,
    progress: Progress | None = None,
    near: NearDedupSpec | None = None,
    decon: Decontaminator | None = None,
    executor: Executor = INLINE,
) -> DocumentsResult:
    """Dedup `inputs` (source name, Parquet shard) in order and write each split as a shard set
    under `out_dir` (shard i of a split holds input shard i's documents of it, written by a
    task on `executor`): exact duplicates first, then (with `near`) near-duplicate clusters, then (with `decon`) train
    documents sharing an n-gram with a benchmark."""
    first, kept_by, owner = first_occurrences([path for _, path in inputs])
    duplicates: Counter = Counter()
    names = np.array([name for name, _ in inputs], dtype=object)
    for (a, b), n in Counter(zip(names[kept_by[~first]].tolist(), names[owner[~first]].tolist())).items():
        duplicates[f"{a} <- {b}"] += n
    labels: list[list[str | None]] = []
    start = 0
    for _, path in inputs:
        own: list[str | None] = []
        for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS, columns=["sha256"]):
            keep = first[start : start + batch.num_rows].tolist()
            start += batch.num_rows
            own += [split_of(sha, holdout) if k else None for sha, k in zip(batch.column(0).to_pylist(), keep)]
        labels.append(own)
    near = near if near is not None and near.enabled else None
    report, decon_report = (
        _scan(inputs, labels, near, decon, out_dir.parent, progress, executor) if near or decon else ({}, {})
    )
    rows: dict[str, Counter] = {s: Counter() for s in SPLITS}
    shards: dict[str, list[Artifact]] = {s: [] for s in SPLITS}
    with staged_dir(out_dir) as staging:
        for split in SPLITS:
            (staging / split).mkdir()
        items = [(i, str(path), labels[i]) for i, (_, path) in enumerate(inputs)]
        written = for_items(executor, len(items), 2).map(partial(_write_splits, str(staging)), items)
        for (name, _), parts in zip(inputs, written):
            for split, shard in parts.items():
                shards[split].append(shard.artifact(out_dir / split, data_root))
                rows[split][name] += shard.rows
        if progress:
            progress(f"documents: {len(inputs)} input shard(s) split")
    return DocumentsResult(
        artifacts=shards,
        rows={s: dict(rows[s]) for s in SPLITS},
        duplicates=dict(sorted(duplicates.items())),
        near=report,
        decontaminated=decon_report,
    )

"""LSH banding by hash partitioning: documents that agree on all `rows` values of any of `bands`
bands share a bucket; each band's rows hash to one key, the keys are hash-partitioned to disk
by the signature tasks, and a task per partition buckets each band by sorting its keys."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from albor_pipeline.runtime import hashpart
from albor_pipeline.runtime.artifacts import write_array
from albor_pipeline.runtime.nodes import IN_PLACE, Node
from albor_pipeline.runtime.shardmap import StageIO, Step, TaskIO, map_tasks
from albor_pipeline.stages.documents.minhash import MAX_HASH
from albor_pipeline.text.shingles import P, mix64

U64 = np.uint64


def band_keys(sigs: np.ndarray, bands: int) -> np.ndarray:
    """One 64-bit key per LSH band of each signature (rows of `sigs`, or one signature): a hash
    of the band's rows (a collision only adds a candidate pair, which the signature estimate
    and exact Jaccard then reject)."""
    rows = np.asarray(sigs).reshape(*np.shape(sigs)[:-1], bands, np.shape(sigs)[-1] // bands)
    with np.errstate(over="ignore"):
        key = rows[..., 0].copy()
        for j in range(1, rows.shape[-1]):
            key = mix64(key * P + rows[..., j])
    return key


ESTIMATE_MARGIN = 0.15  # ~4 standard deviations of a 112-permutation estimate at Jaccard 0.8


PAIR_BLOCK = 1 << 22  # signature-row comparisons held at once when estimating a big bucket


def min_agreement(threshold: float, num_perm: int) -> int:
    """Signature positions two documents must share to be a candidate pair: their MinHash
    estimate of Jaccard at least `threshold` - ESTIMATE_MARGIN."""
    return max(1, math.ceil((threshold - ESTIMATE_MARGIN) * num_perm))


EXACT_BUCKET = 64
"""Buckets up to this size have every pair estimated; a bigger one is walked by
representatives (`_representative_pairs`), so its cost grows with its members, not its pairs."""


def bucket_pairs(keys: np.ndarray, docs: np.ndarray, sigs: np.ndarray, agree: int) -> np.ndarray:
    """(earlier, later) candidate pairs among documents sharing a key; `docs` ascend and
    `sigs[d]` is document d's signature. Two documents are close when their signatures agree
    in at least `agree` positions.

    A bucket of up to EXACT_BUCKET documents gives every close pair: a rule about the pair
    alone. A bigger one (templated pages: thousands of near-copies share a band) gives, for
    each member, its close pairs with the bucket's representatives before it, a member being
    a representative when it is close to none of them: the components of close pairs are
    found with work per member, not per pair. (Pairing only with a bucket's first member
    missed near-copies far from it; here every member meets every representative.)"""
    order = np.argsort(keys, kind="stable")  # stable: within a key, documents stay ascending
    k, d = keys[order], docs[order]
    starts = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1])))
    sizes = np.diff(np.append(starts, len(k)))
    two = starts[sizes == 2]
    a, b = d[two], d[two + 1]
    close = (sigs[a] == sigs[b]).sum(axis=1) >= agree
    pairs = [np.stack([a[close], b[close]], axis=1)]
    for start, size in zip(starts[sizes > 2].tolist(), sizes[sizes > 2].tolist()):
        members = d[start : start + size]
        if size <= EXACT_BUCKET:
            pairs.append(_all_pairs(members, sigs[members], agree))
        else:
            pairs.append(_representative_pairs(members, sigs[members], agree))
    return np.concatenate(pairs).astype(np.int64, copy=False)


def _all_pairs(members: np.ndarray, member_sigs: np.ndarray, agree: int) -> np.ndarray:
    """Every close pair of a bucket, estimated all at once (it is small)."""
    agreeing = (member_sigs[:, None, :] == member_sigs[None, :, :]).sum(axis=2)
    i, j = np.nonzero(np.triu(agreeing >= agree, k=1))
    return np.stack([members[i], members[j]], axis=1)


def _representative_pairs(members: np.ndarray, member_sigs: np.ndarray, agree: int) -> np.ndarray:
    """A big bucket's close pairs (representative, later member), and (earlier member,
    representative). The first member is a representative; so is each later one close to no
    representative before it, and it meets every member before it once (a chain of drifting
    versions stays one component). Members meet the representatives in blocks (vectorised),
    a block's new representatives one at a time: the work is members x representatives. A
    pair of members close only to each other, each joined to a representative the other's
    is not close to, is missed here; the documents stage's survivors' rounds find it."""
    reps = [0]
    out: list[np.ndarray] = []
    size, perm = member_sigs.shape
    first = 1
    while first < size:
        rows = max(1, PAIR_BLOCK // (len(reps) * perm))
        block = member_sigs[first : first + rows]
        hits = (block[:, None, :] == member_sigs[reps][None, :, :]).sum(axis=2) >= agree
        new: list[int] = []
        found = []
        for m in np.flatnonzero(~hits.any(axis=1)).tolist():  # close to no earlier representative
            near = (member_sigs[new] == block[m]).sum(axis=1) >= agree if new else np.zeros(0, bool)
            if not near.any():  # a representative: it meets every member before it once
                earlier = np.flatnonzero((member_sigs[: first + m] == block[m]).sum(axis=1) >= agree)
                found.append(np.stack([earlier, np.full(len(earlier), first + m)], axis=1))
                new.append(first + m)
        i, r = np.nonzero(hits)
        found.append(np.stack([np.asarray(reps)[r], first + i], axis=1))
        if new:  # the block's members after a new representative meet it too
            late = (block[:, None, :] == member_sigs[new][None, :, :]).sum(axis=2) >= agree
            late &= np.asarray(new)[None, :] < first + np.arange(len(block))[:, None]
            i, r = np.nonzero(late)
            found.append(np.stack([np.asarray(new)[r], first + i], axis=1))
        out.extend(found)
        reps += new
        first += len(block)
    local = np.concatenate(out) if out else np.zeros((0, 2), dtype=np.int64)
    return members[local[np.lexsort((local[:, 1], local[:, 0]))]] if len(local) else np.zeros((0, 2), np.int64)


LSH_RECORD = np.dtype([("band", "<u2"), ("key", "<u8"), ("doc", "<i8")])


@dataclass(frozen=True)
class LshJob:
    """LSH by hash partitioning. Each signature task spools its documents' signatures and
    scatters their band keys (`spool_signatures`); then a task per partition buckets each
    band by sorting its keys and keeps the pairs whose signatures agree enough
    (`lsh_candidates`). All of a (band, key) bucket is in one partition, so the candidates
    are those of one pass over every document (datatrove's design, without an all-pairs
    step anywhere)."""

    spool: str
    num_perm: int
    bands: int
    agree: int  # signature positions a candidate pair shares (`min_agreement`)
    partitions: int

    def spool_signatures(
        self, task: int, first: int, sigs: np.ndarray, io: TaskIO, keep: np.ndarray | None = None
    ) -> np.ndarray:
        """Spool task `task`'s signatures (documents `first`, `first` + 1, ...) and scatter
        their band keys where the task writes, both sent to the partition tasks; returns the
        partition offsets for `lsh_candidates`. A survivors' round passes `keep` (which of
        the documents to bucket) and scatters only their keys: their signatures are spooled."""
        sigs = np.asarray(sigs, dtype=U64).reshape(-1, self.num_perm)
        if keep is None:
            path = hashpart.spool_file(io.node.directory(self.spool), "sigs", task)
            write_array(path, sigs, npy=True)
            io.spool(path)
        shingled = sigs[:, 0] != MAX_HASH  # a document without shingles has no buckets
        docs = np.flatnonzero(shingled if keep is None else shingled & keep)
        keys = band_keys(sigs[docs], self.bands)  # (documents, bands)
        records = np.empty(keys.size, LSH_RECORD)
        records["band"] = np.repeat(np.arange(self.bands), len(docs))
        records["key"] = keys.T.ravel()
        records["doc"] = np.tile(first + docs, self.bands)
        part = records["key"] % U64(self.partitions)
        return hashpart.scatter(io, self.spool, "lsh", task, records, part, self.partitions)

    def signatures(self, firsts: np.ndarray, docs: np.ndarray, node: Node = IN_PLACE) -> np.ndarray:
        """The spooled signatures of `docs`; task t spooled documents firsts[t] .. firsts[t+1]-1."""
        tasks = np.searchsorted(firsts, docs, side="right") - 1
        out = np.empty((len(docs), self.num_perm), dtype=U64)
        for t in np.unique(tasks).tolist():
            mine = tasks == t
            spooled = np.load(node.local(hashpart.spool_file(self.spool, "sigs", t)), mmap_mode="r")
            out[mine] = spooled[docs[mine] - firsts[t]]
        return out


@dataclass(frozen=True)
class _BucketJob:
    lsh: LshJob
    firsts: np.ndarray  # each signature task's first document, then the total


def _bucket_partition(bucketing: _BucketJob, io: TaskIO, item: tuple[int, np.ndarray, np.ndarray]) -> np.ndarray:
    """The candidate pairs of one hash partition of band keys: a task on any executor."""
    job, node = bucketing.lsh, io.node
    records = hashpart.gather(node, job.spool, "lsh", item[1], item[2])
    if records is None:
        return np.zeros((0, 2), dtype=np.int64)
    shared = []
    for band in np.unique(records["band"]).tolist():
        mine = records[records["band"] == band]  # documents ascending
        order = np.argsort(mine["key"], kind="stable")
        same = mine["key"][order][1:] == mine["key"][order][:-1]
        in_bucket = np.zeros(len(mine), dtype=bool)
        in_bucket[1:] |= same
        in_bucket[:-1] |= same
        if in_bucket.any():
            shared.append(mine[np.sort(order[in_bucket])])
    if not shared:
        return np.zeros((0, 2), dtype=np.int64)
    need = np.unique(np.concatenate([s["doc"] for s in shared]))
    sigs = job.signatures(bucketing.firsts, need, node)
    pairs = np.concatenate(
        [need[bucket_pairs(s["key"], np.searchsorted(need, s["doc"]), sigs, job.agree)] for s in shared]
    )
    return unique_pairs(pairs)


def unique_pairs(pairs: np.ndarray) -> np.ndarray:
    """The distinct (earlier, later) pairs of `pairs`, sorted: a close pair shares many bands, so
    each band's bucket gives it again (`pair_keys`)."""
    if not len(pairs):
        return np.zeros((0, 2), dtype=np.int64)
    keys = np.unique(pair_keys(pairs), axis=0 if pairs.max() >= 1 << 32 else None)
    if keys.ndim > 1:
        return keys
    return np.stack([keys >> U64(32), keys & U64(0xFFFFFFFF)], axis=1).astype(np.int64)


def pair_keys(pairs: np.ndarray) -> np.ndarray:
    """Each pair as one 64-bit key while document numbers fit in 32 bits (sorting them takes a
    fraction of the time and memory of a row-wise unique), else the pairs themselves."""
    if len(pairs) and pairs.max() >= 1 << 32:
        return pairs
    return (pairs[:, 0].astype(U64) << U64(32)) | pairs[:, 1].astype(U64)


BUCKET_PARTITION = Step(_bucket_partition, kept=False)


def lsh_candidates(job: LshJob, offsets: np.ndarray, firsts: np.ndarray, io: StageIO) -> np.ndarray:
    """Every candidate pair (earlier, later), sorted, from the signature tasks' partition
    offsets (a row per task) and first documents (then the total): a task per partition,
    reading the spool files the signature tasks sent."""
    items = hashpart.partition_items(offsets)
    found = map_tasks(BUCKET_PARTITION, _BucketJob(job, firsts), items, Path(job.spool), io)
    return unique_pairs(np.concatenate([np.zeros((0, 2), dtype=np.int64), *found]))

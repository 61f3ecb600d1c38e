"""Near-duplicate detection: MinHash over word n-grams, LSH banding, exact-Jaccard verification.

Everything per document is numpy: words are runs of [a-z0-9_] in the lowercased UTF-8
bytes, found with a byte class table; each word's 64-bit hash comes from prefix hashes
of the bytes (polynomial, mod 2**64, so any span's hash is two multiplications away);
an n-gram's hash combines its words' hashes the same way. MinHash uses `num_perm`
xor-multiply permutations of a mixed shingle hash. LSH puts documents that agree on all
`rows` values of any of `bands` bands into one bucket: each band's rows hash to one key,
the keys are hash-partitioned to disk by the signature tasks, and a task per partition
buckets each band by sorting its keys (`LshJob`). A
candidate pair becomes a near-duplicate only when the exact Jaccard of the two shingle
sets reaches `threshold`.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from albor_pipeline.runtime import hashpart
from albor_pipeline.runtime.artifacts import TEMP_SUFFIX
from albor_pipeline.runtime.executor import INLINE, Executor
from albor_pipeline.runtime.nodes import IN_PLACE, Node, Spooled
from albor_pipeline.runtime.shardmap import TaskIO, map_tasks

U64 = np.uint64
P = U64(0x100000001B3)  # FNV prime: odd, so it has an inverse mod 2**64
WORD_BYTES = np.zeros(256, dtype=bool)
for _c in b"abcdefghijklmnopqrstuvwxyz0123456789_":
    WORD_BYTES[_c] = True
MAX_HASH = np.iinfo(np.uint64).max


def _powers(n: int) -> np.ndarray:
    """P**0 .. P**n mod 2**64."""
    out = np.full(n + 1, P, dtype=U64)
    out[0] = 1
    with np.errstate(over="ignore"):
        return np.cumprod(out, dtype=U64)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: spreads structured hashes over all 64 bits."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> U64(27))) * U64(0x94D049BB133111EB)
        return x ^ (x >> U64(31))


def word_hashes(text: str) -> np.ndarray:
    """One 64-bit hash per word of `text`, in order: words are runs of [a-z0-9_] in the
    lowercased UTF-8 bytes (so case, punctuation and whitespace are normalized away)."""
    data = np.frombuffer(text.lower().encode("utf-8"), dtype=np.uint8)
    edges = np.diff(np.concatenate(([0], WORD_BYTES[data].astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    if not len(starts):
        return np.zeros(0, dtype=U64)
    powers = _powers(len(data))
    with np.errstate(over="ignore"):
        # prefix[i] = sum_{j<i} data[j] * P**(i-1-j), built without a Python loop:
        # prefix[i] = P**(i-1) * sum_{j<i} data[j] * P**-j, with P's inverse mod 2**64.
        inverse = _powers_of(_inverse(P), len(data))
        scaled = np.cumsum(data.astype(U64) * inverse[:-1], dtype=U64)
        prefix = np.concatenate(([U64(0)], scaled * powers[:-1]))
        return _mix(prefix[ends] - prefix[starts] * powers[ends - starts])


def ngrams(words: np.ndarray, n: int, short: bool = True) -> np.ndarray:
    """The sorted, unique 64-bit hashes of the n-grams of `words`. With fewer than n words:
    one shingle of them all when `short` (near dedup of tiny files), else none (a 13-gram
    match must really be 13 words)."""
    k = min(n, len(words))
    if not k or (k < n and not short):
        return np.zeros(0, dtype=U64)
    with np.errstate(over="ignore"):
        grams = words[: len(words) - k + 1].copy()
        for i in range(1, k):
            grams = grams * P + words[i : len(words) - k + 1 + i]
    return np.unique(_mix(grams))


def shingles(text: str, n: int) -> np.ndarray:
    """The sorted, unique hashes of the word n-grams of `text` (one shingle of all words
    when there are fewer than n; none for a text without words)."""
    return ngrams(word_hashes(text), n)


def _inverse(a: np.uint64) -> np.uint64:
    """a**-1 mod 2**64 for odd a (Newton's iteration)."""
    x = int(a)
    inv = x  # correct to 3 bits for odd x
    for _ in range(6):
        inv = inv * (2 - x * inv) % 2**64
    return U64(inv)


def _powers_of(base: np.uint64, n: int) -> np.ndarray:
    out = np.full(n + 1, base, dtype=U64)
    out[0] = 1
    with np.errstate(over="ignore"):
        return np.cumprod(out, dtype=U64)


@dataclass(frozen=True)
class MinHasher:
    num_perm: int = 112
    seed: int = 1

    @property
    def _params(self) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        seeds = rng.integers(0, 2**63, self.num_perm, dtype=np.int64).astype(U64)
        mults = rng.integers(0, 2**63, self.num_perm, dtype=np.int64).astype(U64) | U64(1)
        return seeds, mults

    def signature(self, shingle_hashes: np.ndarray, block: int = 65536) -> np.ndarray:
        """The MinHash signature (num_perm uint64) of a shingle set, memory bounded by `block`."""
        seeds, mults = self._params
        sig = np.full(self.num_perm, MAX_HASH, dtype=U64)
        with np.errstate(over="ignore"):
            for start in range(0, len(shingle_hashes), block):
                part = shingle_hashes[start : start + block, None]
                np.minimum(sig, ((part ^ seeds) * mults).min(axis=0), out=sig)
        return sig


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted unique shingle arrays."""
    if not len(a) and not len(b):
        return 1.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


class Clusters:
    """Union-find whose representative is the smallest document index (first in spec order)."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, x: int) -> int:
        root = x
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while self.parent.get(x, x) != root:  # path compression
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def groups(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for x in sorted(self.parent):
            out.setdefault(self.find(x), []).append(x)
        for root, members in out.items():
            if root not in members:
                members.insert(0, root)
        return out


def band_keys(sigs: np.ndarray, bands: int) -> np.ndarray:
    """One 64-bit key per LSH band of each signature (rows of `sigs`, or one signature): a hash
    of the band's rows (a collision only adds a candidate pair, which the signature estimate
    and exact Jaccard then reject)."""
    rows = np.asarray(sigs).reshape(*np.shape(sigs)[:-1], bands, np.shape(sigs)[-1] // bands)
    with np.errstate(over="ignore"):
        key = rows[..., 0].copy()
        for j in range(1, rows.shape[-1]):
            key = _mix(key * P + rows[..., j])
    return key


ESTIMATE_MARGIN = 0.15  # ~4 standard deviations of a 112-permutation estimate at Jaccard 0.8
PAIR_BLOCK = 1 << 22  # signature-row comparisons held at once when estimating a big bucket


def min_agreement(threshold: float, num_perm: int) -> int:
    """Signature positions two documents must share to be a candidate pair: their MinHash
    estimate of Jaccard at least `threshold` - ESTIMATE_MARGIN."""
    return max(1, math.ceil((threshold - ESTIMATE_MARGIN) * num_perm))


def bucket_pairs(keys: np.ndarray, docs: np.ndarray, sigs: np.ndarray, agree: int) -> np.ndarray:
    """(earlier, later) candidate pairs among documents sharing a key; `docs` ascend and
    `sigs[d]` is document d's signature.

    A pair is a candidate when it shares a bucket and its signatures agree in at least
    `agree` positions: a rule about the pair alone, so candidates depend neither on document
    order nor on who else is in the bucket. (Pairing only with a bucket's first member, or all
    pairs up to a size cap, missed near-copies in big buckets; a check on the survivors then
    saw smaller buckets and found them.) Every pair of a bucket is estimated, vectorised in
    blocks; sort-based bucketing."""
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
        member_sigs = sigs[members]
        rows = max(1, PAIR_BLOCK // (size * member_sigs.shape[1]))
        for first in range(0, size - 1, rows):
            block = member_sigs[first : first + rows]
            agreeing = (block[:, None, :] == member_sigs[None, :, :]).sum(axis=2)
            i, j = np.nonzero(agreeing >= agree)
            i += first
            later = j > i
            pairs.append(np.stack([members[i[later]], members[j[later]]], axis=1))
    return np.concatenate(pairs).astype(np.int64, copy=False)


@dataclass(frozen=True)
class Signer:
    """A document's MinHash signature from its `word_hashes`: a pure function, so signatures
    can be computed in executor tasks."""

    ngram: int = 5
    num_perm: int = 112

    def signature(self, words: np.ndarray) -> np.ndarray:
        """All-MAX for a document without shingles (LSH skips it)."""
        return MinHasher(self.num_perm).signature(ngrams(words, self.ngram))


_LSH_RECORD = np.dtype([("band", "<u2"), ("key", "<u8"), ("doc", "<i8")])


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
        self, task: int, first: int, sigs: np.ndarray, node: Node = IN_PLACE
    ) -> tuple[np.ndarray, list[Spooled | None]]:
        """Spool task `task`'s signatures (documents `first`, `first` + 1, ...) and scatter
        their band keys where `node` writes; returns the partition offsets for
        `lsh_candidates` and the two spool files."""
        sigs = np.asarray(sigs, dtype=U64).reshape(-1, self.num_perm)
        path = hashpart.spool_file(node.directory(self.spool), "sigs", task)
        np.save(path, sigs)
        docs = np.flatnonzero(sigs[:, 0] != MAX_HASH)  # a document without shingles has no buckets
        keys = band_keys(sigs[docs], self.bands)  # (documents, bands)
        records = np.empty(keys.size, _LSH_RECORD)
        records["band"] = np.repeat(np.arange(self.bands), len(docs))
        records["key"] = keys.T.ravel()
        records["doc"] = np.tile(first + docs, self.bands)
        part = records["key"] % U64(self.partitions)
        offsets, keys_file = hashpart.scatter(node, self.spool, "lsh", task, records, part, self.partitions)
        return offsets, [node.spool(path), keys_file]

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
    return np.concatenate(
        [need[bucket_pairs(s["key"], np.searchsorted(need, s["doc"]), sigs, job.agree)] for s in shared]
    )


def lsh_candidates(
    job: LshJob, offsets: np.ndarray, firsts: np.ndarray, executor: Executor, spools: Sequence[Spooled | None] = ()
) -> np.ndarray:
    """Every candidate pair (earlier, later), sorted, from the signature tasks' partition
    offsets (a row per task) and first documents (then the total): a task per partition,
    reading the spool files the signature tasks sent back (`spools`)."""
    items = hashpart.partition_items(offsets)
    found = map_tasks(_bucket_partition, _BucketJob(job, firsts), items, Path(job.spool), executor, spools=spools)
    pairs = np.concatenate([np.zeros((0, 2), dtype=np.int64), *found])
    return np.unique(pairs, axis=0) if len(pairs) else pairs


class NearDupIndex:
    """Near-dedup clusters from LSH candidate pairs: `find_candidates` from spooled tasks (or
    `add` texts in memory and call `candidates`), then `verify_shards` (exact Jaccard in
    executor tasks) or `verify` (in this process); then read `clusters` and `verified`."""

    def __init__(self, ngram: int = 5, num_perm: int = 112, bands: int = 14, threshold: float = 0.8) -> None:
        self.ngram, self.num_perm, self.bands, self.threshold = ngram, num_perm, bands, threshold
        self.signer = Signer(ngram, num_perm)
        self._added: list[np.ndarray] = []  # `add`'s signatures: the in-memory path
        self.pairs: list[tuple[int, int]] = []
        self.clusters = Clusters()
        self.verified: list[tuple[int, int, float]] = []

    def lsh(self, spool: str | Path, documents: int) -> LshJob:
        """The LSH job for `documents` documents spooled to `spool`."""
        partitions = hashpart.partition_count(documents * self.bands, _LSH_RECORD.itemsize)
        agree = min_agreement(self.threshold, self.num_perm)
        return LshJob(str(spool), self.num_perm, self.bands, agree, partitions)

    def find_candidates(
        self,
        job: LshJob,
        offsets: np.ndarray,
        firsts: np.ndarray,
        executor: Executor,
        spools: Sequence[Spooled | None] = (),
    ) -> None:
        """`pairs` from spooled signature tasks (`lsh_candidates`)."""
        pairs = lsh_candidates(job, offsets, firsts, executor, spools)
        self.pairs = [(int(a), int(b)) for a, b in pairs.tolist()]

    def add(self, text: str) -> int:
        """Index one document in memory (tests and small corpora)."""
        self._added.append(self.signer.signature(word_hashes(text)))
        return len(self._added) - 1

    def candidates(self) -> list[tuple[int, int]]:
        """The LSH candidate pairs of the `add`ed documents (one spooled task, inline)."""
        with tempfile.TemporaryDirectory(prefix=".albor-minhash-", suffix=TEMP_SUFFIX) as spool:
            job = self.lsh(spool, len(self._added))
            sigs = np.stack(self._added) if self._added else np.zeros((0, self.num_perm), dtype=U64)
            offsets, _ = job.spool_signatures(0, 0, sigs)
            self.find_candidates(job, offsets[None], np.array([0, len(sigs)]), INLINE)
        return self.pairs

    def verify(self, texts: Iterable[str]) -> None:
        """Exact Jaccard of the candidate pairs (`candidates` first), in this process; `texts`
        are the added texts again, in order. (`documents` scores pairs in executor tasks.)"""
        self.candidates()
        needed = {d for pair in self.pairs for d in pair}
        sets = {d: shingles(t, self.ngram) for d, t in enumerate(texts) if d in needed}
        self.cluster(score_pairs(np.array(self.pairs, dtype=np.int64).reshape(-1, 2), sets.__getitem__, self.threshold))

    def verify_shards(
        self,
        files: list[str],
        locate: Callable[[np.ndarray], np.ndarray],
        spool_dir: Path | None,
        executor: Executor,
    ) -> None:
        """Exact Jaccard of the candidate pairs in `executor` tasks, then the clusters here.
        `locate(docs)` gives each document's (index into `files`, row). A task per
        file spools its candidate documents' shingles to `spool_dir` (shared with the
        workers), then a task per run of pairs scores them (`score_pair_block`); this
        process holds the pairs, never a shingle."""
        pairs = np.array(self.pairs, dtype=np.int64).reshape(-1, 2)
        docs = np.unique(pairs)
        loc = locate(docs).reshape(-1, 2)
        with tempfile.TemporaryDirectory(prefix=".albor-shingles-", suffix=TEMP_SUFFIX, dir=spool_dir) as spool:
            used = np.unique(loc[:, 0])
            items = [(int(f), files[f], loc[loc[:, 0] == f, 1]) for f in used]
            spans = np.zeros((len(docs), 3), dtype=np.int64)  # (spool file, start, end) per doc
            spooled = []
            shingled = map_tasks(_shingle_file, self.ngram, items, Path(spool), executor)
            for (f, _, _), (offsets, sent) in zip(items, shingled):
                spooled.append(sent)
                mine = np.flatnonzero(loc[:, 0] == f)
                spans[mine] = np.stack([np.full(len(mine), f), offsets[:-1], offsets[1:]], axis=1)
            size = max(MIN_PAIR_BLOCK, -(-len(pairs) // (PAIR_BLOCKS_PER_WORKER * executor.workers)))
            blocks = []
            for start in range(0, len(pairs), size):
                block = pairs[start : start + size]
                block_docs = np.unique(block)
                blocks.append((block, block_docs, spans[np.searchsorted(docs, block_docs)]))
            job = PairJob(spool, self.threshold)
            scored = map_tasks(score_pair_block, job, blocks, Path(spool), executor, spools=spooled)
        self.cluster(np.concatenate(scored) if scored else np.zeros(0))

    def cluster(self, scores: np.ndarray) -> None:
        """Join the candidate pairs scoring at least `threshold`, in pair order; a pair already
        in one cluster is skipped (its score, NaN when `score_pairs` skipped it too, cannot
        change the clusters)."""
        for (a, b), score in zip(self.pairs, scores.tolist()):
            if self.clusters.find(a) == self.clusters.find(b):
                continue
            if score != score:  # NaN: only ever for a pair joined by earlier ones
                raise AssertionError(f"near dedup: pair ({a}, {b}) was not scored")
            if score >= self.threshold:
                self.clusters.union(a, b)
                self.verified.append((a, b, round(score, 4)))

    def duplicates(self) -> set[int]:
        """Members that are not their cluster's representative (the first document)."""
        return {d for d in self.clusters.parent if self.clusters.find(d) != d}


def score_pairs(pairs: np.ndarray, shingles_of: Callable[[int], np.ndarray], threshold: float) -> np.ndarray:
    """Exact Jaccard of each pair of `pairs` (rows of two document ids), in order; NaN for a
    pair that earlier pairs of this list already joined at `threshold` or more (then its score
    cannot change a cluster). Any contiguous run of the sorted pairs can be scored on its own:
    `NearDupIndex.cluster` over the joined scores gives the clusters of one serial pass."""
    clusters = Clusters()
    scores = np.full(len(pairs), np.nan)
    for p, (a, b) in enumerate(pairs.tolist()):
        if clusters.find(a) == clusters.find(b):
            continue
        scores[p] = jaccard(shingles_of(a), shingles_of(b))
        if scores[p] >= threshold:
            clusters.union(a, b)
    return scores


def _shingle_file(ngram: int, io: TaskIO, item: tuple[int, str, np.ndarray]) -> tuple[np.ndarray, Spooled | None]:
    """The shingles of rows `rows` of Parquet file f (candidate documents), concatenated into
    the spool file f in the wave's directory; returns their offsets in it and the file. A
    pure function of the file."""
    f, path, rows = item
    texts = pq.read_table(io.local(path), columns=["text"]).column(0).take(pa.array(rows)).to_pylist()
    sets = [shingles(text, ngram) for text in texts]
    spooled = io.directory / f"{f:05d}.npy"
    np.save(spooled, np.concatenate([np.zeros(0, U64), *sets]))
    return np.cumsum([0, *map(len, sets)]), io.node.spool(spooled)


PAIR_BLOCKS_PER_WORKER = 4  # pair blocks per worker: an even spread, and few tasks
MIN_PAIR_BLOCK = 2048  # pairs a block holds at least (shipping a task costs ~ms)


@dataclass(frozen=True)
class PairJob:
    """Scoring candidate pairs from spooled shingles: `spool`/NNNNN.npy holds the shingles of
    the candidate documents of input shard N, concatenated."""

    spool: str
    threshold: float


def score_pair_block(job: PairJob, io: TaskIO, block: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """`score_pairs` of a run of pairs: a task of `documents` on any executor. `docs` are the
    block's document ids, sorted; `where[k]` is (spool file, start, end) of `docs[k]`'s shingles."""
    pairs, docs, where = block
    files: dict[int, np.ndarray] = {}

    def shingles_of(doc: int) -> np.ndarray:
        f, start, end = where[np.searchsorted(docs, doc)].tolist()
        if f not in files:
            files[f] = np.load(io.local(f"{job.spool}/{f:05d}.npy"), mmap_mode="r")
        return np.asarray(files[f][start:end])

    return score_pairs(pairs, shingles_of, job.threshold)


def near_duplicates(
    texts: list[str], ngram: int = 5, num_perm: int = 112, bands: int = 14, threshold: float = 0.8
) -> Clusters:
    """Verified near-duplicate clusters of `texts` (in memory: the unit-test and small-corpus path)."""
    index = NearDupIndex(ngram, num_perm, bands, threshold)
    for text in texts:
        index.add(text)
    index.verify(texts)
    return index.clusters

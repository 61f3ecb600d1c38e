"""Verification: a candidate pair is a near-duplicate only when the exact Jaccard of its two
shingle sets reaches `threshold`; pairs are scored in tasks from spooled shingles, then joined
into clusters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from albor_pipeline.runtime.artifacts import write_array
from albor_pipeline.runtime.shardmap import Step, TaskIO
from albor_pipeline.runtime.shards import Shard
from albor_pipeline.runtime.taskstore import InputFile
from albor_pipeline.stages.documents.minhash import jaccard
from albor_pipeline.text.documents import read_documents
from albor_pipeline.text.shingles import shingles

U64 = np.uint64


class Clusters:
    """Union-find over the documents of the candidate pairs (`docs`, ascending), held as two
    int64 arrays: memory by the documents in pairs, no Python object per document. The
    representative is the smallest document index (first in spec order)."""

    def __init__(self, docs: np.ndarray | None = None, parent: np.ndarray | None = None) -> None:
        self.docs = np.zeros(0, dtype=np.int64) if docs is None else np.asarray(docs, dtype=np.int64)
        self.parent = np.arange(len(self.docs)) if parent is None else parent

    def _root(self, i: int) -> int:
        parent = self.parent
        while parent[i] != i:
            parent[i] = parent[parent[i]]  # path halving
            i = int(parent[i])
        return i

    def find(self, doc: int) -> int:
        """`doc`'s representative (`doc` itself when it is in no pair)."""
        i = int(np.searchsorted(self.docs, doc))
        if i == len(self.docs) or self.docs[i] != doc:
            return doc
        return int(self.docs[self._root(i)])

    def union(self, a: int, b: int) -> None:
        ra, rb = self._root(int(np.searchsorted(self.docs, a))), self._root(int(np.searchsorted(self.docs, b)))
        if ra != rb:  # docs ascend, so the smaller index is the smaller document
            self.parent[max(ra, rb)] = min(ra, rb)

    def roots(self) -> np.ndarray:
        """Each document's representative, all at once (pointer jumping)."""
        parent = self.parent.copy()
        while True:
            jumped = parent[parent]
            if np.array_equal(jumped, parent):
                return self.docs[parent]
            parent = jumped

    def members(self) -> tuple[np.ndarray, np.ndarray]:
        """(representative, member) of every document in a cluster of two or more, by
        representative then member: arrays, for a report that walks the clusters."""
        roots = self.roots()
        joined = roots != self.docs
        clustered = np.isin(self.docs, roots[joined]) | joined
        order = np.lexsort((self.docs[clustered], roots[clustered]))
        return roots[clustered][order], self.docs[clustered][order]

    def groups(self) -> dict[int, list[int]]:
        """Each cluster of two or more, as {representative: members} (for tests and small
        reports; the stage walks `members`)."""
        out: dict[int, list[int]] = {}
        for root, doc in zip(*(a.tolist() for a in self.members())):
            out.setdefault(root, []).append(doc)
        return out


def _hook(parent: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`parent` (each index's root, the smallest index of its tree) after joining each
    `a[k]` with `b[k]`: the larger root hooked under the smaller, then pointer jumping, until
    every pair shares a root. Pointers only ever go to smaller indices, so no cycle forms."""
    while True:
        ra, rb = parent[a], parent[b]
        apart = ra != rb
        if not apart.any():
            return parent
        a, b, ra, rb = a[apart], b[apart], ra[apart], rb[apart]
        np.minimum.at(parent, np.maximum(ra, rb), np.minimum(ra, rb))
        while not np.array_equal(jumped := parent[parent], parent):
            parent = jumped


def join_in_order(count: int, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(which rows of `ends` join two clusters when walked in order, each of the `count`
    indices' root): Kruskal's walk in row order, without a Python loop per row. The spanning
    forest whose edge weights are the rows' positions is unique, and Borůvka's phases find it:
    each cluster takes its earliest row to another cluster, then the clusters merge."""
    joined = np.zeros(len(ends), dtype=bool)
    root = np.arange(count)
    live = np.arange(len(ends))  # rows still between two clusters
    while True:
        ra, rb = root[ends[live, 0]], root[ends[live, 1]]
        apart = ra != rb
        live, ra, rb = live[apart], ra[apart], rb[apart]
        if not len(live):
            return joined, root
        earliest = np.full(count, len(ends))
        np.minimum.at(earliest, ra, live)
        np.minimum.at(earliest, rb, live)
        chosen = np.unique(earliest[earliest < len(ends)])
        joined[chosen] = True
        merged = _hook(np.arange(count), root[ends[chosen, 0]], root[ends[chosen, 1]])
        root = merged[root]


def score_pairs(pairs: np.ndarray, shingles_of: Callable[[int], np.ndarray], threshold: float) -> np.ndarray:
    """Exact Jaccard of each pair of `pairs` (rows of two document ids), in order; NaN for a
    pair that earlier pairs of this list already joined at `threshold` or more (then its score
    cannot change a cluster). Any contiguous run of the sorted pairs can be scored on its own:
    `NearDupIndex.cluster` over the joined scores gives the clusters of one serial pass."""
    clusters = Clusters(np.unique(pairs))
    scores = np.full(len(pairs), np.nan)
    for p, (a, b) in enumerate(pairs.tolist()):
        if clusters.find(a) == clusters.find(b):
            continue
        scores[p] = jaccard(shingles_of(a), shingles_of(b))
        if scores[p] >= threshold:
            clusters.union(a, b)
    return scores


@dataclass(frozen=True)
class Shingled:
    """A shingling task's spool file, and its documents' offsets in it."""

    offsets: np.ndarray
    shards: tuple[Shard, ...]  # the spool file: the task store keeps it


def shingle_file(ngram: int, io: TaskIO, item: tuple[int, InputFile, np.ndarray]) -> Shingled:
    """The shingles of rows `rows` of Parquet file f (candidate documents), concatenated into
    the spool file f in the wave's directory; returns their offsets in it and the file. A
    pure function of the file and the rows: a task reused while they stay the same."""
    f, path, rows = item
    texts = read_documents(Path(path.path), ["text"], rows=np.asarray(rows), local=io.local).column(0).to_pylist()
    sets = [shingles(text, ngram) for text in texts]
    spooled = io.directory / f"{f:05d}.npy"
    write_array(spooled, np.concatenate([np.zeros(0, U64), *sets]), npy=True)
    shard = Shard.of(spooled, len(sets))
    io.spool(spooled)  # on a node without the run's copy: uploaded, and gone from here
    return Shingled(np.cumsum([0, *map(len, sets)]), (shard,))


SHINGLE_FILE = Step(shingle_file)


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


SCORE_PAIR_BLOCK = Step(score_pair_block, kept=False)

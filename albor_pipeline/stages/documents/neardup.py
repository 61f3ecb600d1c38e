"""Near-duplicate detection: MinHash signatures (`minhash`), LSH candidates (`lsh`), exact-Jaccard
verification (`verify`), joined by `NearDupIndex`."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from albor_pipeline.runtime import hashpart
from albor_pipeline.runtime.artifacts import TEMP_SUFFIX
from albor_pipeline.runtime.nodes import IN_PLACE
from albor_pipeline.runtime.shardmap import StageIO, TaskIO, map_tasks
from albor_pipeline.runtime.taskstore import InputFile
from albor_pipeline.stages.documents.lsh import LSH_RECORD, LshJob, lsh_candidates, min_agreement, pair_keys
from albor_pipeline.stages.documents.minhash import Signer
from albor_pipeline.stages.documents.verify import (
    MIN_PAIR_BLOCK,
    PAIR_BLOCKS_PER_WORKER,
    SCORE_PAIR_BLOCK,
    SHINGLE_FILE,
    Clusters,
    PairJob,
    join_in_order,
    score_pairs,
)
from albor_pipeline.text.shingles import shingles, word_hashes

U64 = np.uint64
SURVIVOR_ROUNDS = 8
"""At most this many survivors' rounds after the first pass (`NearDupIndex.rounds`)."""
VERIFIED = np.dtype([("a", "<i8"), ("b", "<i8"), ("score", "<f8")])
"""A pair that joined two clusters: its documents and exact Jaccard (unrounded)."""


class NearDupIndex:
    """Near-dedup clusters from LSH candidate pairs, in two steps: `find_candidates` from the
    signature tasks' spools, then `verify_shards` (exact Jaccard in tasks, clusters here);
    then read `clusters` and `verified`. `near_duplicates` runs both over texts in memory."""

    def __init__(self, ngram: int = 5, num_perm: int = 112, bands: int = 14, threshold: float = 0.8) -> None:
        self.ngram, self.num_perm, self.bands, self.threshold = ngram, num_perm, bands, threshold
        self.signer = Signer(ngram, num_perm)
        self.pairs = np.zeros((0, 2), dtype=np.int64)  # this round's candidates (earlier, later), sorted
        self.scored = np.zeros((0, 2), dtype=np.int64)  # every round's candidates, in the order scored
        self.scores = np.zeros(0)  # their exact Jaccard (NaN: skipped, already joined)
        self.clusters = Clusters()
        self.verified = np.zeros(0, VERIFIED)  # the pairs that joined clusters, in pair order

    def lsh(self, spool: str | Path, documents: int) -> LshJob:
        """The LSH job for `documents` documents spooled to `spool`."""
        partitions = hashpart.partition_count(documents * self.bands, LSH_RECORD.itemsize)
        agree = min_agreement(self.threshold, self.num_perm)
        return LshJob(str(spool), self.num_perm, self.bands, agree, partitions)

    def find_candidates(self, job: LshJob, offsets: np.ndarray, firsts: np.ndarray, io: StageIO) -> None:
        """`pairs` from spooled signature tasks (`lsh_candidates`)."""
        self.pairs = lsh_candidates(job, offsets, firsts, io)

    def verify_shards(
        self, files: list[str], locate: Callable[[np.ndarray], np.ndarray], spool_dir: Path | None, io: StageIO
    ) -> None:
        """Exact Jaccard of the candidate pairs in the stage's tasks, then the clusters here.
        `locate(docs)` gives each document's (index into `files`, row). A task per
        file spools its candidate documents' shingles to `spool_dir` (shared with the
        workers), then a task per run of pairs scores them (`score_pair_block`); this
        process holds the pairs, never a shingle."""
        pairs = self.pairs
        docs = np.unique(pairs)
        loc = locate(docs).reshape(-1, 2)
        with tempfile.TemporaryDirectory(prefix=".albor-shingles-", suffix=TEMP_SUFFIX, dir=spool_dir) as spool:
            used = np.unique(loc[:, 0])
            items = [(int(f), InputFile(files[f]), loc[loc[:, 0] == f, 1]) for f in used]
            spans = np.zeros((len(docs), 3), dtype=np.int64)  # (spool file, start, end) per doc
            shingled = map_tasks(SHINGLE_FILE, self.ngram, items, Path(spool), io)
            for (f, _, _), done in zip(items, shingled):
                mine = np.flatnonzero(loc[:, 0] == f)
                spans[mine] = np.stack([np.full(len(mine), f), done.offsets[:-1], done.offsets[1:]], axis=1)
            size = max(MIN_PAIR_BLOCK, -(-len(pairs) // (PAIR_BLOCKS_PER_WORKER * io.executor.workers)))
            blocks = []
            for start in range(0, len(pairs), size):
                block = pairs[start : start + size]
                block_docs = np.unique(block)
                blocks.append((block, block_docs, spans[np.searchsorted(docs, block_docs)]))
            scored = map_tasks(SCORE_PAIR_BLOCK, PairJob(spool, self.threshold), blocks, Path(spool), io)
        self.cluster(np.concatenate(scored) if scored else np.zeros(0))

    def cluster(self, scores: np.ndarray) -> None:
        """Join the pairs of every round so far (this round's `pairs` scored `scores`, after
        the earlier rounds') that score at least `threshold`, as a walk in that order would:
        a pair already in one cluster joins nothing (its score, NaN when `score_pairs` skipped
        it too, cannot change the clusters). Arrays throughout (`join_in_order`): no Python
        object per pair or document."""
        self.scored = np.concatenate([self.scored, self.pairs])
        self.scores = np.concatenate([self.scores, scores])
        pairs, scores = self.scored, self.scores
        docs = np.unique(pairs)
        ends = np.searchsorted(docs, pairs).reshape(-1, 2)
        close = np.flatnonzero(scores >= self.threshold)  # NaN is not
        joins, root = join_in_order(len(docs), ends[close])
        unscored = ends[np.isnan(scores)]
        if (root[unscored[:, 0]] != root[unscored[:, 1]]).any():  # only ever a pair joined by others
            raise AssertionError("near dedup: a pair that was not scored is in two clusters")
        self.clusters = Clusters(docs, root)
        joined = close[joins]
        self.verified = np.zeros(len(joined), VERIFIED)
        self.verified["a"], self.verified["b"] = pairs[joined, 0], pairs[joined, 1]
        self.verified["score"] = scores[joined]

    def survivors(self, documents: int) -> np.ndarray:
        """Which of `documents` documents a survivors' round buckets: those in a scored pair
        that no cluster removes. A close pair a round missed shares a big bucket, where each
        of its documents was paired with a representative, so both are in scored pairs."""
        keep = np.zeros(documents, dtype=bool)
        keep[np.unique(self.scored)] = True
        reps, members = self.clusters.members()
        keep[members[members != reps]] = False
        return keep

    def next_round(self, candidates: np.ndarray) -> bool:
        """A survivors' round's candidates, less the pairs an earlier round scored, as `pairs`:
        whether any is left to verify."""
        if len(candidates) and len(self.scored):
            both = np.concatenate([self.scored, candidates])
            keys = pair_keys(both)
            _, first = np.unique(keys, return_index=True, axis=0 if keys.ndim > 1 else None)
            candidates = both[np.sort(first[first >= len(self.scored)])]
        self.pairs = candidates
        return bool(len(candidates))

    def rounds(
        self, documents: int, candidates: Callable[[np.ndarray], None], verify: Callable[[], None]
    ) -> Iterator[int]:
        """Survivors' rounds after the first pass, until one joins nothing (at most
        `SURVIVOR_ROUNDS`), each yielding the pairs it joined: `candidates(keep)` puts the LSH
        candidates of the documents `keep` says in `pairs`, `verify()` scores them and joins.
        A big bucket is walked by representatives, so a loose cluster (members close to a
        template that is no document, and around the threshold to each other) can come out
        split; its parts' representatives then share small buckets."""
        for _ in range(SURVIVOR_ROUNDS):
            candidates(self.survivors(documents))
            joined = len(self.verified)
            if not self.next_round(self.pairs):
                return
            verify()
            yield len(self.verified) - joined
            if len(self.verified) == joined:
                return

    def duplicates(self) -> set[int]:
        """Members that are not their cluster's representative (the first document)."""
        reps, members = self.clusters.members()
        return set(members[reps != members].tolist())


def near_duplicates(
    texts: list[str], ngram: int = 5, num_perm: int = 112, bands: int = 14, threshold: float = 0.8
) -> NearDupIndex:
    """The index's steps over `texts` in memory (tests and small corpora), survivors' rounds
    included: signatures spooled as one task's, candidates, exact Jaccard in this process,
    clusters."""
    index = NearDupIndex(ngram, num_perm, bands, threshold)
    sigs = [index.signer.signature(word_hashes(text)) for text in texts]
    stacked = np.stack(sigs) if sigs else np.zeros((0, num_perm), dtype=U64)
    firsts = np.array([0, len(sigs)])
    with tempfile.TemporaryDirectory(prefix=".albor-minhash-", suffix=TEMP_SUFFIX) as spool:
        job = index.lsh(spool, len(sigs))

        def candidates(keep: np.ndarray | None) -> None:
            offsets = job.spool_signatures(0, 0, stacked, TaskIO(spool, IN_PLACE), keep)
            index.find_candidates(job, offsets[None], firsts, StageIO(Path(spool)))

        def verify() -> None:
            sets = {d: shingles(texts[d], ngram) for d in np.unique(index.pairs).tolist()}
            index.cluster(score_pairs(index.pairs, sets.__getitem__, threshold))

        candidates(None)
        verify()
        for _ in index.rounds(len(sigs), candidates, verify):
            pass
    return index

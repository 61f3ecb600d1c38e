"""Removal requests in `documents`: a document is removed when it is an exact copy of a
document removed at ingestion (a tombstone, `text/removal.py`) or its near-duplicate by near
dedup's rule (an LSH candidate: a shared band key and signatures agreeing in `min_agreement`
positions; then exact Jaccard of the shingle sets at least `threshold`). The blocking check
holds the outputs to the same rule."""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from albor_pipeline.runtime.artifacts import TEMP_SUFFIX
from albor_pipeline.runtime.checks import CheckOutcome
from albor_pipeline.runtime.executor import INLINE, Executor
from albor_pipeline.runtime.shardmap import StageIO, Step, TaskIO, map_tasks
from albor_pipeline.runtime.shards import parquet_files
from albor_pipeline.spec import NearDedupSpec
from albor_pipeline.stages.documents.lsh import band_keys, min_agreement
from albor_pipeline.stages.documents.minhash import MAX_HASH, MinHasher, Signer, jaccard
from albor_pipeline.summaries.documents import Removals
from albor_pipeline.text.documents import read_documents
from albor_pipeline.text.removal import Tombstone
from albor_pipeline.text.shingles import ngrams, word_hashes

EXACT, NEAR = "exact", "near"


class RemovalIndex:
    """The tombstones as documents are matched against them: their SHA-256s, and with near
    dedup their signatures, LSH band keys (a bucket per band and key) and shingle sets."""

    def __init__(self, tombstones: list[Tombstone], near: NearDedupSpec | None) -> None:
        self.near = near
        self.sha256 = sorted({t.sha256 for t in tombstones})
        self._exact = set(self.sha256)
        self._stones: list[Tombstone] = []
        self._buckets: dict[tuple[int, int], list[int]] = {}
        if near is None:
            return
        for stone in tombstones:
            if stone.ngram != near.ngram:
                raise ValueError(
                    f"the tombstones of source {stone.source!r} hold {stone.ngram}-word shingles and near_dedup.ngram "
                    f"is {near.ngram}: materialize its ingested and filtered stages again"
                )
        self._stones = [t for t in tombstones if len(t.shingles)]  # no shingles: no LSH bucket (as near dedup)
        hasher = MinHasher(near.num_perm)
        sigs = [hasher.signature(t.shingles) for t in self._stones]
        self._sigs = np.stack(sigs) if sigs else np.zeros((0, near.num_perm), np.uint64)
        for t, keys in enumerate(band_keys(self._sigs, near.bands).tolist()):
            for band, key in enumerate(keys):
                self._buckets.setdefault((band, key), []).append(t)
        self._agree = min_agreement(near.threshold, near.num_perm)

    def reads(self) -> dict[str, Any]:
        """What a scan task using the index reads (part of its identity): the tombstones (by
        their SHA-256, which with `ngram` fixes their shingles) and the rule."""
        return {"sha256": self.sha256, "near": self.near.model_dump(mode="json") if self.near else None}

    @property
    def signer(self) -> Signer | None:
        return Signer(self.near.ngram, self.near.num_perm) if self.near else None

    def match(self, sha256: str, signature: np.ndarray | None, words: np.ndarray | None) -> tuple[str, str] | None:
        """(`exact` or `near`, the tombstone's SHA-256) for a document that is a removed one or
        its near-duplicate (given its signature and `word_hashes`), else None."""
        if sha256 in self._exact:
            return EXACT, sha256
        if self.near is None or signature is None or words is None or signature[0] == MAX_HASH:
            return None
        keys = band_keys(signature, self.near.bands).tolist()
        candidates = sorted({t for band, key in enumerate(keys) for t in self._buckets.get((band, key), ())})
        close = [t for t in candidates if int((self._sigs[t] == signature).sum()) >= self._agree]
        mine = ngrams(words, self.near.ngram) if close else words
        for t in close:
            if jaccard(mine, self._stones[t].shingles) >= self.near.threshold:
                return NEAR, self._stones[t].sha256
        return None


EXAMPLES = 5


def drop_removed(
    found: Mapping[int, tuple[str, str]],
    locate: Callable[[int], tuple[int, int]],
    names: list[str],
    codes: list[np.ndarray],
    dropped: np.uint8,
    file_of: Callable[[int, int], str],
    tombstones: int,
) -> Removals:
    """Mark each document of `found` (document -> how it matched, the tombstone's SHA-256)
    `dropped` in the split `codes` (`locate(doc)`: its input and row; `names`: each input's
    source) and count them per source; `file_of(input, row)` names a few examples."""
    exact: Counter[str] = Counter()
    near: Counter[str] = Counter()
    examples: list[tuple[str, str]] = []
    for doc, (how, sha256) in sorted(found.items()):
        i, row = locate(doc)
        codes[i][row] = dropped
        (exact if how == EXACT else near)[names[i]] += 1
        if len(examples) < EXAMPLES:
            examples.append((file_of(i, row), sha256))
    return Removals(
        tombstones=tombstones, exact=dict(sorted(exact.items())), near=dict(sorted(near.items())), examples=examples
    )


def _removed_in_shard(index: RemovalIndex, io: TaskIO, item: tuple[str, str | None]) -> tuple[int, list[str]]:
    """Shard `item` = (path, its stored signatures or None): its rows, and how each document a
    tombstone matches was matched (`exact` or `near`)."""
    path, stored = item
    near = index.near is not None
    table = read_documents(Path(path), ["sha256", "text"] if near else ["sha256"], local=io.local)
    sigs = np.load(io.local(stored)) if stored and near else None
    signer = index.signer
    found = []
    shas = table.column("sha256")
    if pa.types.is_list(shas.type):  # packed SFT rows: a SHA-256 per conversation
        shas = pc.list_flatten(shas)
    for row, sha in enumerate(shas.to_pylist()):
        words = word_hashes(table.column("text")[row].as_py()) if near else None
        sig = None if signer is None or words is None else sigs[row] if sigs is not None else signer.signature(words)
        if hit := index.match(sha, sig, words):
            found.append(hit[0])
    return len(shas), found


REMOVED_IN_SHARD = Step(_removed_in_shard, kept=False)


def check_no_removed(
    tombstones: list[Tombstone],
    sets: Mapping[str, Path],
    near: NearDedupSpec | None = None,
    executor: Executor = INLINE,
    stored: Callable[[Path], Path | None] = lambda _: None,
) -> CheckOutcome:
    """No document of `sets` (name -> Parquet file or shard set with a `sha256` column) is a
    removed document (its SHA-256) or, with `near`, its near-duplicate by near dedup's rule
    (each set's signatures where `stored(shard)` names them, else computed). A shard per task."""
    index = RemovalIndex(tombstones, near)
    items = [(name, str(f), str(s) if (s := stored(f)) else None) for name, p in sets.items() for f in parquet_files(p)]
    with tempfile.TemporaryDirectory(prefix=".albor-removal-", suffix=TEMP_SUFFIX) as spool:
        results = map_tasks(
            REMOVED_IN_SHARD, index, [(f, s) for _, f, s in items], Path(spool), StageIO(Path(spool), executor)
        )
    per_set: Counter[str] = Counter()
    how: Counter[str] = Counter()
    for (name, _, _), (_, found) in zip(items, results):
        per_set[name] += len(found)
        how.update(found)
    rule = f"or near-duplicates (Jaccard >= {near.threshold})" if near else "(exact copies; near dedup is off)"
    return CheckOutcome(
        not how,
        f"{sum(how.values())} of {sum(rows for rows, _ in results)} document(s) are removed documents {rule} "
        f"of {len(index.sha256)} removed on request",
        {"tombstones": len(index.sha256), "found": dict(how), "per_set": dict(per_set), "sets": list(sets)},
    )

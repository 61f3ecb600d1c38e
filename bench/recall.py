"""Near-dedup recall against exact all-pairs Jaccard, per cluster size.

The corpus is real text nobody here wrote: stdlib `.py` files, each cut to a length drawn
log-uniformly from 300 B to 10 KB, as base documents. Each base gets a cluster of near
copies whose size follows a power law from 2 to 200 (as templated pages form): every copy
replaces each word of its base with a word of the same base at a rate of its own, drawn from
0 to 6 %, so the pairs' Jaccard similarities spread across the 0.8 threshold rather than sit
far above it.

Truth is exact: every pair of documents of the whole corpus, not only within a cluster, is
scored on the word 5-gram sets the pipeline verifies with (`text.shingles`), by a sparse
product (scipy). A pair at or above the threshold is found when near dedup
(`neardup.near_duplicates`: the signatures, LSH bands and exact verification the documents
stage runs, over texts in memory) puts both documents in one cluster. Recall is reported
for every cluster size band, at two corpus sizes, one double the other, with the spec's
default LSH bands (28 of 4 rows) and with half as many (14 of 8, BigCode's and datatrove's
setting).
"""

from __future__ import annotations

import math
import random
import re
import sysconfig
import time
from pathlib import Path
from typing import Any

import numpy as np

from albor_pipeline.spec import NearDedupSpec
from albor_pipeline.stages.documents.neardup import near_duplicates
from albor_pipeline.text.shingles import shingles

MAX_CLUSTER = 200
BANDS = ((2, 2), (3, 5), (6, 20), (21, 100), (101, MAX_CLUSTER))  # cluster sizes reported together
_WORD = re.compile(r"(\w+)")


def _bases(count: int, seed: int) -> list[str]:
    """`count` stdlib files (`.py`, not tests), each cut at a line to a length drawn
    log-uniformly from 300 B to 10 KB."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "site-packages", "dist-packages"}
    files = sorted(p for p in stdlib.rglob("*.py") if not skip & set(p.parts) and p.stat().st_size > 2000)
    rng = random.Random(seed)
    out = []
    for path in rng.sample(files, count):
        text = path.read_text(encoding="utf-8", errors="replace")
        limit = int(math.exp(rng.uniform(math.log(300), math.log(10_000))))
        cut = text.rfind("\n", 0, limit)
        out.append(text[: cut if cut > 100 else limit])
    return out


def _copy(base: str, rate: float, rng: random.Random) -> str:
    """`base` with each word replaced, at `rate`, by another word of `base`."""
    parts = _WORD.split(base)
    words = parts[1::2] or [""]
    for i in range(1, len(parts), 2):
        if rng.random() < rate:
            parts[i] = rng.choice(words)
    return "".join(parts)


def corpus(clusters: int, seed: int = 7) -> tuple[list[str], np.ndarray]:
    """The texts and each one's generated cluster (its index); cluster sizes follow a power
    law (Zipf, exponent 1.6) from 2 to MAX_CLUSTER."""
    rng = random.Random(seed)
    sizes = np.minimum(1 + np.random.default_rng(seed).zipf(1.6, clusters), MAX_CLUSTER)
    texts, cluster = [], []
    for k, (base, size) in enumerate(zip(_bases(clusters, seed), sizes.tolist())):
        texts.append(base)
        texts += [_copy(base, rng.uniform(0, 0.06), rng) for _ in range(size - 1)]
        cluster += [k] * size
    return texts, np.array(cluster)


def exact_pairs(texts: list[str], ngram: int, threshold: float) -> tuple[np.ndarray, int]:
    """Every pair (i < j) of `texts` whose shingle sets' Jaccard is at least `threshold`, and
    how many pairs share any shingle: a sparse product of the document-by-shingle matrix."""
    from scipy import sparse

    sets = [shingles(t, ngram) for t in texts]
    hashes, column = np.unique(np.concatenate(sets), return_inverse=True)
    rows = np.repeat(np.arange(len(sets)), [len(s) for s in sets])
    m = sparse.csr_matrix((np.ones(len(rows), np.int32), (rows, column)), shape=(len(sets), len(hashes)))
    shared = sparse.triu(m @ m.T, k=1).tocoo()
    sizes = np.array([len(s) for s in sets])
    jaccard = shared.data / (sizes[shared.row] + sizes[shared.col] - shared.data)
    keep = jaccard >= threshold
    return np.stack([shared.row[keep], shared.col[keep]], axis=1), int(shared.nnz)


def recall(clusters: int, near: NearDedupSpec) -> dict[str, Any]:
    """Near dedup against exact all-pairs on a generated corpus of `clusters` clusters."""
    texts, cluster = corpus(clusters)
    start = time.perf_counter()
    truth, sharing = exact_pairs(texts, near.ngram, near.threshold)
    exact_s = time.perf_counter() - start
    start = time.perf_counter()
    index = near_duplicates(texts, near.ngram, near.num_perm, near.bands, near.threshold)
    found_s = time.perf_counter() - start
    root = np.arange(len(texts))
    reps, members = index.clusters.members()
    root[members] = reps
    found = root[truth[:, 0]] == root[truth[:, 1]]
    size = np.bincount(cluster)[cluster[truth[:, 0]]]
    across = cluster[truth[:, 0]] != cluster[truth[:, 1]]
    bands = {}
    for low, high in BANDS:
        mine = (size >= low) & (size <= high) & ~across
        bands[f"{low}-{high}"] = {"pairs": int(mine.sum()), "found": int(found[mine].sum())}
    bands["across clusters"] = {"pairs": int(across.sum()), "found": int(found[across].sum())}
    return {
        "documents": len(texts),
        "clusters": clusters,
        "largest_cluster": int(np.bincount(cluster).max()),
        "text_mb": round(sum(map(len, texts)) / 1e6, 2),
        "pairs_sharing_a_shingle": sharing,
        "true_pairs": len(truth),
        "found_pairs": int(found.sum()),
        "recall": round(float(found.mean()), 5) if len(truth) else 1.0,
        "bands": bands,
        "exact_s": round(exact_s, 2),
        "near_dedup_s": round(found_s, 2),
    }


def bench_recall(clusters: int = 150) -> dict[str, Any]:
    """Recall at `clusters` clusters and at twice as many: with the spec's default near dedup
    (`bands` rows of `num_perm / bands` signature positions), and with half its bands (twice
    the rows each: a pair at the threshold shares no band far more often)."""
    default = NearDedupSpec()
    runs = []
    for near in (default, default.model_copy(update={"bands": default.bands // 2})):
        row = {"bands": near.bands, "rows": near.num_perm // near.bands}
        runs.append({**row, "small": recall(clusters, near), "large": recall(2 * clusters, near)})
    return {"ngram": default.ngram, "num_perm": default.num_perm, "threshold": default.threshold, "runs": runs}

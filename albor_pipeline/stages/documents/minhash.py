"""MinHash over word n-grams (`text/shingles.py`): `num_perm` xor-multiply permutations of
each mixed shingle hash, the minimum of each kept."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from albor_pipeline.text.shingles import U64, ngrams

MAX_HASH = np.iinfo(np.uint64).max


@dataclass(frozen=True)
class MinHasher:
    num_perm: int = 112
    seed: int = 1

    def signature(self, shingle_hashes: np.ndarray, block: int = 65536) -> np.ndarray:
        """The MinHash signature (num_perm uint64) of a shingle set, memory bounded by `block`."""
        seeds, mults = _permutations(self.num_perm, self.seed)
        sig = np.full(self.num_perm, MAX_HASH, dtype=U64)
        with np.errstate(over="ignore"):
            for start in range(0, len(shingle_hashes), block):
                part = shingle_hashes[start : start + block, None]
                np.minimum(sig, ((part ^ seeds) * mults).min(axis=0), out=sig)
        return sig


@lru_cache(maxsize=4)
def _permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The xor seeds and odd multipliers of `num_perm` permutations (drawn once per process)."""
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, 2**63, num_perm, dtype=np.int64).astype(U64)
    mults = rng.integers(0, 2**63, num_perm, dtype=np.int64).astype(U64) | U64(1)
    return seeds, mults


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted unique shingle arrays."""
    if not len(a) and not len(b):
        return 1.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


@dataclass(frozen=True)
class Signer:
    """A document's MinHash signature from its `word_hashes`: a pure function, so signatures
    can be computed in executor tasks."""

    ngram: int = 5
    num_perm: int = 112

    def signature(self, words: np.ndarray) -> np.ndarray:
        """All-MAX for a document without shingles (LSH skips it)."""
        return MinHasher(self.num_perm).signature(ngrams(words, self.ngram))

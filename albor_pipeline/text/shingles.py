"""Word and word n-gram hashes of a text, all numpy: what near dedup's MinHash and exact
Jaccard, decontamination's n-grams and removal tombstones are made of.

Words are runs of [a-z0-9_] in the lowercased UTF-8 bytes, found with a byte class table;
each word's 64-bit hash comes from prefix hashes of the bytes (polynomial, mod 2**64, so
any span's hash is two multiplications away); an n-gram's hash combines its words' hashes
the same way, mixed (splitmix64). A shingle set is never the text: it cannot be read back.
"""

from __future__ import annotations

import numpy as np

U64 = np.uint64


P = U64(0x100000001B3)  # FNV prime: odd, so it has an inverse mod 2**64


WORD_BYTES = np.zeros(256, dtype=bool)
for _c in b"abcdefghijklmnopqrstuvwxyz0123456789_":
    WORD_BYTES[_c] = True


def _powers(n: int) -> np.ndarray:
    """P**0 .. P**n mod 2**64."""
    return _cached_powers(P, n)


CACHED_POWERS = 1 << 20  # 8 MB per base at most
_POWERS: dict[int, np.ndarray] = {}  # base -> its powers so far: a document's are a prefix


def _cached_powers(base: np.uint64, n: int) -> np.ndarray:
    """base**0 .. base**n mod 2**64, computed once per process up to the longest text yet
    (up to CACHED_POWERS: a rare longer text gets its own)."""
    if n > CACHED_POWERS:
        return _powers_of(base, n)
    have = _POWERS.get(int(base))
    if have is None or len(have) <= n:
        have = _powers_of(base, min(CACHED_POWERS, max(n, 2 * (len(have) if have is not None else 0), 1 << 16)))
        _POWERS[int(base)] = have
    return have[: n + 1]


def mix64(x: np.ndarray) -> np.ndarray:
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
        inverse = _cached_powers(INVERSE_P, len(data))
        scaled = np.cumsum(data.astype(U64) * inverse[:-1], dtype=U64)
        prefix = np.concatenate(([U64(0)], scaled * powers[:-1]))
        return mix64(prefix[ends] - prefix[starts] * powers[ends - starts])


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
    return sorted_unique(mix64(grams))


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """np.unique of a 1-d array by sorting (numpy's hash-based unique is several times slower
    on these 64-bit hashes)."""
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if len(ordered) else ordered


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


INVERSE_P = _inverse(P)


def _powers_of(base: np.uint64, n: int) -> np.ndarray:
    out = np.full(n + 1, base, dtype=U64)
    out[0] = 1
    with np.errstate(over="ignore"):
        return np.cumprod(out, dtype=U64)

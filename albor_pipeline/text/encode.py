"""Document encoders: the HF tokenizer itself, or gigatoken loaded from the same tokenizer.json.

Both treat special-token strings inside text as ordinary text and return every text's ids
as one flat uint32 array plus offsets, so callers never build a list per document.

gigatoken (a SIMD pre-tokenizer with a pre-token cache, ~16x tiktoken per core here) splits
with Unicode 17 tables where HF's regex engine has Unicode 14's: a code point unassigned in
14 and assigned since is a letter to one and punctuation to the other. That is the only
disagreement (`test_gigatoken_splits_every_code_point_like_hf` checks all 1.1M code points on
a vocabulary built to expose any split), so `GigatokenEncoder` encodes the rare text holding
a code point unassigned in this Python's Unicode database (14.0 on 3.11) with HF instead.
`pick_encoder` also checks it against HF on a sample of the actual documents.
"""

from __future__ import annotations

import sys
import unicodedata
from array import array
from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol

import gigatoken
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tokenizers import Tokenizer

from albor_pipeline.runtime.executor import cpu_count
from albor_pipeline.runtime.readcache import user_cached
from albor_pipeline.text.vocab import added_tokens, plain_json, plain_tokenizer

# The regex HF's ByteLevel pre-tokenizer applies (GPT-2's), as written in HF and GPT-2.
BYTELEVEL_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# The same splits, written so a backtracking engine (fancy_regex: tiktoken's) runs ~1.8x faster:
# the branches without look-around form one group handed to the regex crate's automaton in
# one step, so only the whitespace branch backtracks. `\s` replaces the last `\s+`: that
# branch is reached only by one whitespace character before a non-space.
# Equivalence is tested (same splits on generated text and real code); the bench's bare
# tiktoken baseline uses it, so the stage is compared with tiktoken at its best.
FAST_BYTELEVEL_PATTERN = r"""(?:'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+)|\s+(?!\S)|\s"""

Encoded = tuple[np.ndarray, np.ndarray]  # (flat uint32 ids, int64 offsets: text i is ids[o[i]:o[i+1]])


class Encoder(Protocol):
    name: str

    def encode_flat(self, texts: Sequence[str]) -> Encoded: ...


def encode_lists(encoder: Encoder, texts: Sequence[str]) -> list[list[int]]:
    """Each text's ids as a list, for callers that assemble small sequences by hand."""
    flat, offsets = encoder.encode_flat(texts)
    ids = flat.tolist()
    return [ids[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]


class HFEncoder:
    """The reference: the HF tokenizer without its added-token table."""

    name = "hf"

    def __init__(self, tok: Tokenizer) -> None:
        self._tok = plain_tokenizer(tok)

    def encode_flat(self, texts: Sequence[str]) -> Encoded:
        flat, offsets = array("I"), array("q", [0])
        for e in self._tok.encode_batch_fast(list(texts), add_special_tokens=False):
            flat.extend(e.ids)
            offsets.append(len(flat))
        return np.frombuffer(flat, dtype=np.uint32), np.frombuffer(offsets, dtype=np.int64)


@lru_cache(maxsize=1)
def _unassigned_class() -> str:
    """An RE2 class of the code points this Python's Unicode database leaves unassigned (Cn):
    kept in the user's cache per Unicode version, since deriving it walks every code point
    (~0.9 s of each process that meets a non-ASCII text: the run's and each worker's)."""
    name = f"unicode/unassigned-{unicodedata.unidata_version}-{sys.maxunicode:x}.txt"
    return user_cached(name, lambda: _unassigned_ranges().encode("ascii"), _re2_class)


def _unassigned_ranges() -> str:
    ranges, start = [], None
    for cp in range(sys.maxunicode + 2):
        cn = cp <= sys.maxunicode and unicodedata.category(chr(cp)) == "Cn"
        if cn and start is None:
            start = cp
        elif not cn and start is not None:
            ranges.append(f"\\x{{{start:x}}}-\\x{{{cp - 1:x}}}")
            start = None
    return f"[{''.join(ranges)}]"


def _re2_class(data: bytes) -> str:
    """The cached class, checked whole: a torn file is rebuilt (ValueError)."""
    text = data.decode("ascii")
    if not (text.startswith("[\\x{") and text.endswith("}]")):
        raise ValueError("not a whole RE2 class")
    return text


def with_unassigned(texts: Sequence[str]) -> list[int]:
    """Indices of the texts holding a code point unassigned in this Python's Unicode database.

    ASCII texts are skipped in O(1) each; the rest are matched by RE2 in Arrow (~600 MB/s here,
    where Python's `re` with this class runs at ~35 MB/s).
    """
    wide = [i for i, t in enumerate(texts) if not t.isascii()]
    if not wide:
        return []
    hits = pc.match_substring_regex(pa.array([texts[i] for i in wide], pa.large_string()), _unassigned_class())
    return [i for i, hit in zip(wide, hits.to_pylist()) if hit]


@lru_cache(maxsize=1)
def _gigatoken(tokenizer_json: str) -> gigatoken.Tokenizer:
    """gigatoken on a tokenizer.json's plain copy, built once per tokenizer in a process: a
    run's corpora share it (building it takes ~0.25 s of each corpus stage otherwise)."""
    return gigatoken.Tokenizer.from_json(plain_json(tokenizer_json))


class GigatokenEncoder:
    """gigatoken on the tokenizer's own tokenizer.json; HF for texts with unassigned code points."""

    name = "gigatoken"

    def __init__(self, tok: Tokenizer, threads: int | None = None) -> None:
        self._tok = tok
        self._gt = _gigatoken(tok.to_str())
        self._parallel = (threads or cpu_count()) > 1
        self._hf: HFEncoder | None = None  # built on first need: the plain copy costs start-up

    def encode_flat(self, texts: Sequence[str]) -> Encoded:
        texts = list(texts)
        if not texts:
            return np.zeros(0, np.uint32), np.zeros(1, np.int64)
        layout = self._gt.encode_batch(texts, parallel=self._parallel).layout
        offsets = np.asarray(layout.offsets.data, dtype=np.int64)
        flat = np.asarray(layout.content.data, dtype=np.uint32)[offsets[0] : offsets[-1]]
        offsets = offsets - offsets[0]
        routed = with_unassigned(texts)
        if not routed:
            return flat, offsets
        if self._hf is None:
            self._hf = HFEncoder(self._tok)
        hf_flat, hf_offsets = self._hf.encode_flat([texts[i] for i in routed])
        parts, lengths, done = [], np.diff(offsets), 0
        for k, i in enumerate(routed):
            parts += [flat[offsets[done] : offsets[i]], hf_flat[hf_offsets[k] : hf_offsets[k + 1]]]
            lengths[i] = hf_offsets[k + 1] - hf_offsets[k]
            done = i + 1
        parts.append(flat[offsets[done] :])
        return np.concatenate(parts), np.concatenate([[0], np.cumsum(lengths)])


def make_encoder(tok: Tokenizer, name: str, threads: int | None = None) -> Encoder:
    """An encoder by name ("hf" or "gigatoken"), e.g. in a worker process."""
    return GigatokenEncoder(tok, threads) if name == "gigatoken" else HFEncoder(tok)


def pick_encoder(tok: Tokenizer, choice: str, sample: Sequence[str]) -> tuple[Encoder, str]:
    """The encoder to use and why. `auto` takes gigatoken only if it matches HF on `sample`.

    The check runs `tok` itself on the sample documents that contain no special-token
    string (there `tok` and its plain copy agree), so the plain HF copy is only built
    when HF is the encoder: that copy costs more start-up than the check.
    """
    if choice == "hf":
        return HFEncoder(tok), "hf (configured)"
    try:
        fast = GigatokenEncoder(tok)
    except Exception as exc:  # gigatoken raises its own types for a tokenizer.json it cannot load
        if choice == "gigatoken":
            raise
        return HFEncoder(tok), f"hf (gigatoken unavailable: {exc})"
    if choice == "gigatoken":
        return fast, "gigatoken (configured)"
    specials = list(added_tokens(tok))
    checked = [t for t in sample if not any(s in t for s in specials)]
    expected = [e.ids for e in tok.encode_batch_fast(checked, add_special_tokens=False)]
    if encode_lists(fast, checked) != expected:
        return HFEncoder(tok), f"hf (gigatoken disagreed with HF on a {len(checked)}-document sample)"
    return fast, f"gigatoken (matched HF on a {len(checked)}-document sample)"

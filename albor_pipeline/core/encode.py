"""Document encoders: the HF tokenizer, or tiktoken built from its own ranks.

Both treat special-token strings inside text as ordinary text. tiktoken is used only
after it reproduces the HF ids on a sample of the actual documents (`pick_encoder`);
the test suite proves equality more broadly, including generated Unicode.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol

import tiktoken
from tokenizers import Tokenizer

from albor_pipeline.core.vocab import added_tokens, plain_tokenizer, token_to_bytes

# The regex HF's ByteLevel pre-tokenizer applies (GPT-2's), as written in HF and GPT-2.
BYTELEVEL_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# The same splits, written so tiktoken's fancy_regex runs ~1.8x faster: the branches without
# look-around form one group that it hands to the regex crate's automaton in one step, so
# only the whitespace branch runs in its backtracking VM. `\s` replaces the last `\s+`:
# that branch is reached only by one whitespace character before a non-space.
# Equivalence is tested (same splits on generated text and real code, same ids as HF).
FAST_BYTELEVEL_PATTERN = r"""(?:'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+)|\s+(?!\S)|\s"""


class Encoder(Protocol):
    name: str

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]: ...


def cpu_count() -> int:
    """CPUs this process may use (affinity-aware, unlike os.cpu_count)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


class HFEncoder:
    name = "hf"

    def __init__(self, tok: Tokenizer) -> None:
        self._tok = plain_tokenizer(tok)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch_fast(list(texts), add_special_tokens=False)]


class TiktokenEncoder:
    name = "tiktoken"

    def __init__(self, tok: Tokenizer, threads: int | None = None, pattern: str = FAST_BYTELEVEL_PATTERN) -> None:
        specials = set(added_tokens(tok))
        vocab = tok.get_vocab(with_added_tokens=False)
        ranks = {token_to_bytes(t): i for t, i in vocab.items() if t not in specials}
        self._enc = tiktoken.Encoding(name="albor", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
        self._threads = threads or cpu_count()

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        if self._threads == 1:
            return [self._enc.encode_ordinary(t) for t in texts]
        return self._enc.encode_ordinary_batch(list(texts), num_threads=self._threads)


def make_encoder(tok: Tokenizer, name: str, threads: int | None = None) -> Encoder:
    """An encoder by name ("hf" or "tiktoken"), e.g. in a worker process."""
    return TiktokenEncoder(tok, threads) if name == "tiktoken" else HFEncoder(tok)


def pick_encoder(tok: Tokenizer, choice: str, sample: Sequence[str]) -> tuple[Encoder, str]:
    """The encoder to use and why. `auto` takes tiktoken only if it matches HF on `sample`.

    The check runs `tok` itself on the sample documents that contain no special-token
    string (there `tok` and its plain copy agree), so the plain HF copy is only built
    when HF is the encoder: that copy costs more start-up than the check.
    """
    if choice == "hf":
        return HFEncoder(tok), "hf (configured)"
    try:
        fast = TiktokenEncoder(tok)
    except (ValueError, KeyError) as exc:  # e.g. a vocabulary tiktoken cannot represent
        if choice == "tiktoken":
            raise
        return HFEncoder(tok), f"hf (tiktoken unavailable: {exc})"
    if choice == "tiktoken":
        return fast, "tiktoken (configured)"
    specials = list(added_tokens(tok))
    checked = [t for t in sample if not any(s in t for s in specials)]
    expected = [e.ids for e in tok.encode_batch_fast(checked, add_special_tokens=False)]
    if fast.encode_batch(checked) != expected:
        return HFEncoder(tok), f"hf (tiktoken disagreed with HF on a {len(checked)}-document sample)"
    return fast, f"tiktoken (matched HF on a {len(checked)}-document sample)"

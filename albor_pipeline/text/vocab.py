"""The token strings every stage agrees on, and ByteLevel's byte map.

Kept free of pydantic, the spec and Dagster so the encode workers import little.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

SPECIALS = ("<unk>", "<s>", "</s>", "<pad>")
UNK, BOS, EOS, PAD = SPECIALS
FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX = "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"
FIM_TOKENS = (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)
FIM_SENTINEL_CHARS = sum(map(len, FIM_TOKENS))  # what FIM adds to a text (ASCII: also its bytes)


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """GPT-2's printable-character -> byte map used by ByteLevel."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


@lru_cache(maxsize=1)
def _byte_translation() -> dict[int, int]:
    return {ord(ch): b for ch, b in byte_decoder().items()}


def token_to_bytes(token: str) -> bytes:
    """The bytes a ByteLevel token stands for (every char maps to one byte, so latin-1 is exact)."""
    return token.translate(_byte_translation()).encode("latin-1")


def added_tokens(tok: Tokenizer) -> dict[str, int]:
    """Every special token of `tok` (ids 0-3, FIM sentinels, chat tokens) by string."""
    return {t.content: i for i, t in sorted(tok.get_added_tokens_decoder().items())}


def id_bytes(tok: Tokenizer) -> list[bytes]:
    """The bytes every id stands for in text, b"" for the special tokens: checks join them to
    compare token spans with the text they must be, byte for byte."""
    specials = set(added_tokens(tok).values())
    table = [b""] * tok.get_vocab_size(with_added_tokens=True)
    for token, i in tok.get_vocab(with_added_tokens=False).items():
        if i not in specials:
            table[i] = token_to_bytes(token)
    return table


def load_tokenizer(path: str | Path) -> Tokenizer:
    """`Tokenizer.from_file`, parsed once per version of the file in a process (0.05 s a load
    at 32k tokens; a run's corpus, SFT and eval stages and their checks read the same
    tokenizer.json about twenty times). Only read and encoded with: never mutated."""
    st = os.stat(path)
    return _loaded(str(path), st.st_ino, st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=2)
def _loaded(path: str, inode: int, size: int, mtime_ns: int) -> Tokenizer:
    return Tokenizer.from_file(path)


def plain_tokenizer(tok: Tokenizer) -> Tokenizer:
    """A copy that treats special-token strings in text as ordinary text.

    HF tokenizers split added tokens out of raw text even with add_special_tokens=False;
    without the added-token table, `</s>` in a document is just bytes.
    """
    return _plain_from(tok.to_str())


@lru_cache(maxsize=2)
def _plain_from(tokenizer_json: str) -> Tokenizer:
    """The plain copy of a tokenizer.json, built once per tokenizer in a process (0.1 s; the
    tokenizer stage's evaluation and comparison share it). Only encoded with: never mutated."""
    return Tokenizer.from_str(plain_json(tokenizer_json))


def plain_json(tokenizer_json: str) -> str:
    """`plain_tokenizer`'s tokenizer.json from a tokenizer's, without building it (gigatoken
    loads this)."""
    data = json.loads(tokenizer_json)
    data["added_tokens"] = []
    return json.dumps(data)


PICKLE_PROTOCOL = 4  # fixed, so a pickle's bytes do not follow a Python's default protocol
PAD_VOCAB_TO = 64  # nanoGPT pads GPT-2's 50,257 to 50,304, a multiple of 64, for faster matmuls


def padded_vocab_size(vocab_size: int) -> int:
    """A model's vocabulary size for a tokenizer of `vocab_size` ids: the next multiple of 64."""
    return -(-vocab_size // PAD_VOCAB_TO) * PAD_VOCAB_TO


def token_dtype(vocab_size: int, signed: bool = False) -> np.dtype:
    """uint16 when every id fits, else int32 (Megatron) / uint32 (flat stream)."""
    if vocab_size <= 65536:
        return np.dtype(np.uint16)
    return np.dtype(np.int32 if signed else np.uint32)

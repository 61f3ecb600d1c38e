"""The document schema every text stage reads and writes, and its SHA-256 keys."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DOC_SCHEMA = pa.schema([("text", pa.string()), ("source", pa.string()), ("file", pa.string()), ("sha256", pa.string())])
BATCH_ROWS = 2048


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_HEX = np.full(256, 255, dtype=np.uint8)
_HEX[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16, dtype=np.uint8)
_HEX[np.frombuffer(b"ABCDEF", dtype=np.uint8)] = np.arange(10, 16, dtype=np.uint8)


def sha_keys(column: pa.Array) -> np.ndarray:
    """The first 128 bits of each hex SHA-256 in `column`, as void16 keys, decoded without a
    Python loop (a 2**-64 chance of a false duplicate among 10**9 documents)."""
    hexes = pc.utf8_slice_codeunits(column, 0, 32).cast(pa.binary())
    n = len(hexes)
    offsets = np.frombuffer(hexes.buffers()[1], dtype=np.int32)[hexes.offset : hexes.offset + n + 1]
    if hexes.null_count or (np.diff(offsets) != 32).any():
        raise ValueError("documents: a sha256 value is not 64 hex digits")
    data = np.frombuffer(hexes.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]] if n else np.zeros(0, np.uint8)
    nibbles = _HEX[data].reshape(-1, 32)
    if (nibbles == 255).any():
        raise ValueError("documents: a sha256 value is not 64 hex digits")
    packed = (nibbles[:, 0::2] << 4) | nibbles[:, 1::2]
    return np.ascontiguousarray(packed).view(np.dtype((np.void, 16))).ravel()

"""The token-stream exports: Megatron MMIDIDX v1 `.bin/.idx` and a flat nanoGPT `tokens.bin` + JSON."""

from __future__ import annotations

import hashlib
import os
import pickle
import struct
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from albor_pipeline.runtime.artifacts import (
    atomic_path,
    write_bytes,
    write_json,
)
from albor_pipeline.spec import ExportFormat
from albor_pipeline.stages.corpus.encode_task import (
    spool_tokens,
)
from albor_pipeline.text.vocab import PICKLE_PROTOCOL, padded_vocab_size, token_dtype

STREAMS = ((ExportFormat.megatron, "megatron.bin", True), (ExportFormat.nanogpt, "tokens.bin", False))
"""Token-stream exports: (format, file, signed dtype): Megatron wants int32 past uint16, nanoGPT uint32."""


NANOGPT_META = "meta.pkl"

MMIDIDX_MAGIC = b"MMIDIDX\x00\x00"


MEGATRON_DTYPE_CODES = {np.dtype(np.uint16): 8, np.dtype(np.int32): 4}


def megatron_index(lengths: np.ndarray, dtype: np.dtype) -> bytes:
    """MMIDIDX v1: header, int32 lengths, int64 byte pointers, int64 document indices."""
    n = len(lengths)
    pointers = np.zeros(n, dtype=np.int64)
    if n:
        np.cumsum(lengths[:-1].astype(np.int64) * dtype.itemsize, out=pointers[1:])
    doc_idx = np.arange(n + 1, dtype=np.int64)
    header = MMIDIDX_MAGIC + struct.pack("<Q", 1) + struct.pack("<B", MEGATRON_DTYPE_CODES[dtype])
    header += struct.pack("<Q", n) + struct.pack("<Q", n + 1)
    return header + lengths.astype(np.int32).tobytes() + pointers.tobytes() + doc_idx.tobytes()


def concat_streams(spool: Path, tasks: int, names: list[str], into: Path, limit: int) -> tuple[str, int]:
    """The spooled ids end to end, their first `limit` bytes (the kept documents'), into each
    file `names` under `into` (the same bytes: one SHA-256 and size, returned). The stream is
    written once; the other names are hard links of it (no second copy on disk)."""
    digest, size = hashlib.sha256(), 0
    with ExitStack() as stack:
        paths = [stack.enter_context(atomic_path(into / n)) for n in names]
        out = stack.enter_context(open(paths[0], "wb")) if paths else None
        for task in range(tasks):
            with open(spool_tokens(spool, task), "rb") as src:
                while size < limit and (chunk := src.read(min(1 << 22, limit - size))):
                    digest.update(chunk)
                    size += len(chunk)
                    if out is not None:
                        out.write(chunk)
        if out is not None:
            out.close()
        for other in paths[1:]:
            other.unlink()
            os.link(paths[0], other)
    return digest.hexdigest(), size


def write_sidecars(out: Path, formats: set[ExportFormat], lengths: np.ndarray, nanogpt: dict[str, int]) -> list[Path]:
    """The exports' index files: Megatron's `.idx` (a record per document), nanoGPT's JSON (with
    the padded vocab size a model takes) and its `meta.pkl`, whose `vocab_size` nanoGPT's
    train.py sizes the model from (as its prepare scripts write it)."""
    written = []
    vocab = nanogpt["vocab_size"]
    if ExportFormat.megatron in formats:
        with atomic_path(out / "megatron.idx") as tmp:
            tmp.write_bytes(megatron_index(lengths, token_dtype(vocab, signed=True)))
        written.append(out / "megatron.idx")
    if ExportFormat.nanogpt in formats:
        meta = {"dtype": token_dtype(vocab).name, **nanogpt, "padded_vocab_size": padded_vocab_size(vocab)}
        write_json(out / "tokens.json", meta)
        write_bytes(out / NANOGPT_META, pickle.dumps({"vocab_size": vocab}, protocol=PICKLE_PROTOCOL))
        written += [out / "tokens.json", out / NANOGPT_META]
    return written

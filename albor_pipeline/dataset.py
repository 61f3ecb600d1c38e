"""Random access to an exported token stream (nanoGPT-style `tokens.bin` + `tokens.json`).

`TokenDataset(dir, seq_len)[i]` is sequence i, read from a numpy memmap in O(1): a
map-style dataset (len + getitem) that a PyTorch DataLoader accepts without this
module importing torch.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


class TokenDataset:
    """Non-overlapping `seq_len` windows over the token stream of one split."""

    def __init__(self, directory: str | Path, seq_len: int | None = None) -> None:
        directory = Path(directory)
        self.meta = json.loads((directory / "tokens.json").read_text(encoding="utf-8"))
        self.seq_len = int(seq_len or self.meta["seq_len"])
        self.tokens = np.memmap(directory / "tokens.bin", dtype=np.dtype(self.meta["dtype"]), mode="r")
        if len(self.tokens) != self.meta["tokens"]:
            raise ValueError(
                f"{directory}: tokens.bin holds {len(self.tokens)} tokens, tokens.json says {self.meta['tokens']}"
            )

    def __len__(self) -> int:
        return len(self.tokens) // self.seq_len

    def __getitem__(self, index: int) -> np.ndarray:
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"sequence {index} out of range for {n} sequences")
        start = index * self.seq_len
        return np.asarray(self.tokens[start : start + self.seq_len])

"""Random access to an exported token stream (nanoGPT-style `tokens.bin` + `tokens.json`).

`TokenDataset(dir, seq_len)[i]` is sequence i, read from a numpy memmap in O(1): a
map-style dataset (len + getitem) that a PyTorch DataLoader accepts without this
module importing torch. Ids come as int64 by default (what `torch.nn.Embedding` takes;
the file's uint16 does not), and `xy=True` gives nanoGPT's (input, target) windows.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import numpy.typing as npt


class TokenDataset:
    """Non-overlapping `seq_len` windows over the token stream of one split.

    `xy`: item i is `(x, y)` with `x = tokens[i*L : i*L+L]` and `y` the same window one
    token later (seq_len + 1 tokens read), so every window has its next-token targets.
    """

    def __init__(
        self, directory: str | Path, seq_len: int | None = None, dtype: npt.DTypeLike = np.int64, xy: bool = False
    ) -> None:
        directory = Path(directory)
        self.meta = json.loads((directory / "tokens.json").read_text(encoding="utf-8"))
        self.seq_len = int(seq_len or self.meta["seq_len"])
        self.dtype, self.xy = np.dtype(dtype), xy
        self.tokens = np.memmap(directory / "tokens.bin", dtype=np.dtype(self.meta["dtype"]), mode="r")
        if len(self.tokens) != self.meta["tokens"]:
            raise ValueError(
                f"{directory}: tokens.bin holds {len(self.tokens)} tokens, tokens.json says {self.meta['tokens']}"
            )

    def __len__(self) -> int:
        return (len(self.tokens) - self.xy) // self.seq_len  # x/y windows need one token past the last

    def __getitem__(self, index: int) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"sequence {index} out of range for {n} sequences")
        start = index * self.seq_len
        window = np.asarray(self.tokens[start : start + self.seq_len + self.xy], dtype=self.dtype)
        return (window[:-1], window[1:]) if self.xy else window

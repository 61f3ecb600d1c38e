"""Packed SFT rows: whole conversations best-fit into fixed-length rows, as nanochat's SFT
loader packs them (`sft_data_generator_bos_bestfit`), kept in the data.

From a window of `pack_window` conversations in mix order, a row takes the longest one
that fits what is left of it (the earliest among equals), refilling the window after each
pick, until none fits; the rest of the row is BOS with mask 0. Every conversation is at
most a row long (`overlong` has already skipped or cut the others) and has a trained
token, so a row never stays empty or all-masked and nothing clogs the window (the
failure nanochat#590, #811 and #803 report).
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import TypeVar

import numpy as np
import pyarrow as pa

from albor_pipeline.text.sequences import PACKED_SCHEMA

T = TypeVar("T")


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Lists of `size` items in order, the last shorter (itertools.batched, Python 3.12+)."""
    source = iter(items)
    while chunk := list(islice(source, size)):
        yield chunk


@dataclass(frozen=True)
class Conversation:
    """One rendered conversation: what a packed row is made of."""

    ids: np.ndarray
    mask: np.ndarray
    source: str
    sha256: str
    messages: str


def best_fit(conversations: Iterable[Conversation], capacity: int, window: int) -> Iterator[list[Conversation]]:
    """Rows of whole conversations (each at most `capacity` tokens), in a deterministic order."""
    source = iter(conversations)
    keys: list[tuple[int, int]] = []  # (length, -arrival), sorted: the last one <= a length is the pick
    held: dict[int, Conversation] = {}
    arrived = 0

    def refill() -> None:
        nonlocal arrived
        while len(keys) < window and (item := next(source, None)) is not None:
            if len(item.ids) > capacity:
                raise ValueError(f"a conversation of {len(item.ids)} tokens cannot fit a row of {capacity}")
            insort(keys, (len(item.ids), -arrived))
            held[arrived] = item
            arrived += 1

    refill()
    while keys:
        row: list[Conversation] = []
        remaining = capacity
        while (j := bisect_right(keys, (remaining, 1)) - 1) >= 0:
            length, order = keys.pop(j)
            row.append(held.pop(-order))
            remaining -= length
            refill()
        yield row


def packed_batch(rows: list[list[Conversation]], capacity: int, bos: int) -> pa.RecordBatch:
    """The Parquet rows of packed `rows`: ids and mask padded to `capacity` with BOS / 0."""
    ids, masks = [], []
    for row in rows:
        pad = capacity - sum(len(c.ids) for c in row)
        ids.append(np.concatenate([*(c.ids for c in row), np.full(pad, bos, dtype=np.uint32)]))
        masks.append(np.concatenate([*(c.mask for c in row), np.zeros(pad, dtype=np.uint8)]))
    columns = {
        "input_ids": ids,
        "loss_mask": masks,
        "doc_lens": [[len(c.ids) for c in row] for row in rows],
        "sources": [[c.source for c in row] for row in rows],
        "sha256": [[c.sha256 for c in row] for row in rows],
        "messages": [[c.messages for c in row] for row in rows],
    }
    return pa.RecordBatch.from_pydict(columns, schema=PACKED_SCHEMA)

"""The packing plan: every sequence as segments of the token stream, from the documents' lengths alone
(`concat`: cut every `seq_len` tokens; `best_fit`: whole documents into bins)."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from albor_pipeline.runtime.artifacts import atomic_path, write_array
from albor_pipeline.spec import Packing


@dataclass
class Packed:
    """Full sequences and the document pieces of each (piece lengths, sequence after sequence)."""

    seqs: np.ndarray  # (n, seq_len) uint32
    pieces: np.ndarray  # uint32 lengths of the document pieces
    counts: np.ndarray  # pieces per sequence


@dataclass
class Segments:
    """Sequences as segments of the token stream: segment j is `lens[j]` tokens from stream
    position `starts[j]`; sequence i is the next `counts[i]` segments, then padding. The
    segments are the sequences' document pieces (`doc_lens`)."""

    starts: np.ndarray  # int64
    lens: np.ndarray  # int64
    counts: np.ndarray  # int64, one per sequence


@dataclass(frozen=True)
class Plan:
    """The plan as the packing tasks read it: the stage's process saves it into the token spool,
    each task loads it there. The one owner of its files' names, so writer and readers agree.

    `offsets`: where each row group's token file starts in the stream, then the total. `concat`
    cuts its sequences from the documents' `ends`; `best_fit`'s are explicit segments
    (`seg_starts`, `seg_lens`) with each sequence's first segment, then the total (`seq_first`),
    so a task finds its own sequences' segments without reading the others'."""

    offsets: np.ndarray  # int64
    ends: np.ndarray | None = None  # int64, `concat`
    seg_starts: np.ndarray | None = None  # int64, `best_fit`
    seg_lens: np.ndarray | None = None
    seq_first: np.ndarray | None = None

    @classmethod
    def best_fit(cls, offsets: np.ndarray, segments: Segments) -> Plan:
        """`best_fit`'s plan of `segments`: their sequences become first segments."""
        seq_first = np.concatenate([[0], np.cumsum(segments.counts)]).astype(np.int64)
        return cls(offsets, seg_starts=segments.starts, seg_lens=segments.lens, seq_first=seq_first)

    def save(self, spool: Path) -> list[Path]:
        """The plan's files in `spool`, each written whole before a task can map it; returned
        in name order, to offer them to tasks on other nodes."""
        arrays = {
            "ends": self.ends,
            "offsets": self.offsets,
            "seg_lens": self.seg_lens,
            "seg_starts": self.seg_starts,
            "seq_first": self.seq_first,
        }
        saved = [(spool / f"{name}.npy", array) for name, array in arrays.items() if array is not None]
        for path, array in saved:
            with atomic_path(path) as tmp:
                write_array(tmp, array, npy=True)
        return [path for path, _ in saved]

    @classmethod
    def load(cls, spool: Path, packing: Packing, local: Callable[[Path], Path]) -> Plan:
        """The plan `save` wrote into `spool`, memory-mapped: a task reads only its sequences'
        part. `local`: where the task reads a spool file (`TaskIO.local`)."""

        def array(name: str) -> np.ndarray:
            return np.load(local(spool / f"{name}.npy"), mmap_mode="r")

        if packing is Packing.concat:
            return cls(array("offsets"), ends=array("ends"))
        return cls(
            array("offsets"), seg_starts=array("seg_starts"), seg_lens=array("seg_lens"), seq_first=array("seq_first")
        )

    def segments(self, first: int, end: int, seq_len: int, tokens: int) -> Segments:
        """Sequences [first, end)'s segments (`concat`: of a stream packed up to `tokens`)."""
        if self.ends is not None:
            return concat_segments(self.ends, first * seq_len, min(end * seq_len, tokens), seq_len)
        if self.seg_starts is None or self.seg_lens is None or self.seq_first is None:
            raise ValueError("a plan holds either document ends or segments")
        bounds = np.asarray(self.seq_first[first : end + 1])
        a, b = int(bounds[0]), int(bounds[-1])
        return Segments(np.asarray(self.seg_starts[a:b]), np.asarray(self.seg_lens[a:b]), np.diff(bounds))


@dataclass(frozen=True)
class PlanSummary:
    """What packing does to the stream as a whole (stage metadata)."""

    sequences: int
    cut_documents: int  # documents split across two or more sequences
    padded: int
    dropped: int


def concat_plan(ends: np.ndarray, seq_len: int, pad_remainder: bool, limit: int | None = None) -> PlanSummary:
    """`concat` over documents ending at stream positions `ends`: cut every `seq_len` tokens;
    the tail is one padded sequence (`pad_remainder`) or dropped. With `limit` (a budget's
    cut, whole sequences), the stream past it is dropped."""
    stream = int(ends[-1]) if len(ends) else 0
    total = stream if limit is None else limit
    full, rest = divmod(total, seq_len)
    edges = np.arange(1, full + 1, dtype=np.int64) * seq_len
    at = np.searchsorted(ends, edges)  # the document holding each edge, or ending on it
    cut = len(np.unique(at[ends[at] != edges])) if full else 0
    padded = seq_len - rest if pad_remainder and rest else 0
    return PlanSummary(full + (padded > 0), cut, padded, stream - total + (0 if pad_remainder else rest))


@dataclass(frozen=True)
class Cut:
    """Where a token budget cuts a split: its first `documents` documents are kept and
    `tokens` of their stream are packed."""

    documents: int
    tokens: int


def budget_cut(lengths: np.ndarray, budget: int, seq_len: int, whole_documents: bool) -> Cut | None:
    """The documents, in mix order, up to `budget` tokens; None when they hold fewer.

    `concat` packs the budget rounded to whole sequences (the document holding the last
    edge is cut there, like a dropped remainder); `best_fit` (`whole_documents`) keeps the
    prefix of whole documents whose tokens come nearest the budget. Either lands within
    half a sequence or one document of it, from the lengths alone: a cheap global step
    after the per-shard encoding."""
    ends = np.cumsum(lengths, dtype=np.int64)
    total = int(ends[-1]) if len(ends) else 0
    if total < budget:
        return None
    if whole_documents:
        k = int(np.searchsorted(ends, budget))  # ends[k] >= budget
        if k and budget - int(ends[k - 1]) < int(ends[k]) - budget:
            return Cut(k, int(ends[k - 1]))
        return Cut(k + 1, int(ends[k]))
    tokens = min(max(round(budget / seq_len), 1), total // seq_len) * seq_len
    return Cut(int(np.searchsorted(ends, tokens)) + 1, tokens) if tokens else Cut(0, 0)


def concat_segments(ends: np.ndarray, lo: int, hi: int, seq_len: int) -> Segments:
    """The `concat` segments of stream positions [lo, hi) (lo on a sequence edge): the pieces
    between the document ends and sequence edges inside it. Any cut of the stream into
    ranges gives the same pieces, so shards never depend on one another."""
    inner = np.asarray(ends[np.searchsorted(ends, lo, side="right") : np.searchsorted(ends, hi, side="left")])
    bounds = np.concatenate([[lo], np.union1d(inner, np.arange(lo + seq_len, hi, seq_len, dtype=np.int64)), [hi]])
    starts = bounds[:-1].astype(np.int64)
    counts = np.bincount((starts - lo) // seq_len, minlength=-(-(hi - lo) // seq_len))
    return Segments(starts, np.diff(bounds).astype(np.int64), counts.astype(np.int64))


def best_fit_plan(lengths: np.ndarray, seq_len: int, window: int) -> tuple[Segments, PlanSummary]:
    """`best_fit`: whole documents into `seq_len` bins, best-fit decreasing over windows of
    `window` documents, each window padded on its own, so memory is bounded by the window
    and the output depends only on the documents' order.

    A document longer than `seq_len` is the only one ever split: its full chunks become
    sequences of their own (where it comes in the stream) and its tail is packed like a
    document."""
    L = seq_len
    starts_of = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(lengths) else lengths
    starts: list[int] = []
    lens: list[int] = []
    counts: list[int] = []
    pending: list[tuple[int, int]] = []  # (stream position, tokens) of the window's documents
    cut = padded = 0

    def pack_window() -> None:
        nonlocal padded
        bins: list[list[int]] = []
        room: list[tuple[int, int]] = []  # (free tokens, bin), sorted: the best fit is the first that fits
        for i in sorted(range(len(pending)), key=lambda i: (-pending[i][1], i)):
            n = pending[i][1]
            at = bisect.bisect_left(room, (n, -1))
            if at < len(room):
                free, b = room.pop(at)
                bins[b].append(i)
            else:
                free, b = L, len(bins)
                bins.append([i])
            bisect.insort(room, (free - n, b))
        for members in bins:
            for i in members:
                starts.append(pending[i][0])
                lens.append(pending[i][1])
            counts.append(len(members))
            padded += L - sum(pending[i][1] for i in members)
        pending.clear()

    for start, n in zip(starts_of.tolist(), lengths.tolist()):
        if n > L:
            cut += 1
            chunks = n // L
            starts += range(start, start + chunks * L, L)
            lens += [L] * chunks
            counts += [1] * chunks
            start, n = start + chunks * L, n - chunks * L
        if n:
            pending.append((start, n))
        if len(pending) >= window:
            pack_window()
    pack_window()
    segments = Segments(np.array(starts, np.int64), np.array(lens, np.int64), np.array(counts, np.int64))
    return segments, PlanSummary(len(counts), cut, padded, 0)


def fill(stream: np.ndarray, base: int, segments: Segments, seq_len: int, pad_id: int) -> Packed:
    """The sequences of `segments`, whose tokens are in `stream` (stream position `base` on).

    A slice copy per segment: about a microsecond each, where indexing every token (an 8-byte
    index per token, twice) took 0.9 s for a 12M-token shard of 9.5k segments (the loop: 0.01 s);
    even 10-token segments cost about the same either way."""
    starts, lens, counts = segments.starts, segments.lens, segments.counts
    out = np.full(len(counts) * seq_len, pad_id, dtype=np.uint32)
    before = np.cumsum(lens) - lens  # tokens of the earlier segments
    first = np.cumsum(counts) - counts  # each sequence's first segment
    dest = np.repeat(np.arange(len(counts), dtype=np.int64) * seq_len - before[first], counts) + before
    for to, at, n in zip(dest.tolist(), (starts - base).tolist(), lens.tolist()):
        out[to : to + n] = stream[at : at + n]
    return Packed(out.reshape(len(counts), seq_len), lens.astype(np.uint32), counts)

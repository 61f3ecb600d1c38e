"""Each numeric rule's signal as a histogram over a source's documents, with its threshold:
what the card and the stats chart draw. Read from the stored signal shards a column at a
time, in two passes (the range, then the counts), so memory is a shard's column."""

from __future__ import annotations

from collections import Counter
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from albor_pipeline.runtime.taskstore import memo
from albor_pipeline.stages.hygiene.rules import Cond
from albor_pipeline.summaries.hygiene import SignalHistogram

BINS = 40


def _numeric(cond: Cond) -> bool:
    """A rule comparing a number with a threshold (not an equality: `chars == 0`)."""
    numbers = isinstance(cond.limit, (int, float)) and not isinstance(cond.limit, bool)
    return numbers and cond.op in ("<", "<=", ">", ">=")


def signal_histograms(
    shards: list[Path], digests: list[str], cs: list[Cond], dropped: Counter[str]
) -> list[SignalHistogram]:
    """The histogram of every rule comparing a number (`dropped`: documents by reason). The
    bins and counts are kept under the signal shards' `digests`: a threshold's change, whose
    signals are the same bytes, reads none of them."""
    numeric = [c for c in cs if _numeric(c)]
    signals = tuple(sorted({c.signal for c in numeric}))
    if not shards or not signals:
        return []
    binned = memo(_binned, signals, tuple(digests), partial(_binned, signals, shards))
    return [
        SignalHistogram(
            signal=c.signal,
            rule=c.reason,
            op=c.op,
            threshold=float(c.limit),  # type: ignore[arg-type]
            log=binned[c.signal][1],
            edges=[float(e) for e in binned[c.signal][0]],
            counts=binned[c.signal][2].tolist(),
            dropped=dropped.get(c.reason, 0),
        )
        for c in numeric
    ]


def _binned(signals: tuple[str, ...], shards: list[Path]) -> dict[str, tuple[np.ndarray, bool, np.ndarray]]:
    """Each signal's bin edges, whether they are on log10(value + 1), and its counts."""
    low, high = dict.fromkeys(signals, np.inf), dict.fromkeys(signals, -np.inf)
    for path in shards:
        table = pq.ParquetFile(path).read(columns=list(signals))
        for name in signals:
            values = _finite(table.column(name).to_numpy(zero_copy_only=False))
            if len(values):
                low[name], high[name] = min(low[name], values.min()), max(high[name], values.max())
    edges = {name: _edges(low[name], high[name]) for name in signals}
    counts = {name: np.zeros(BINS, np.int64) for name in signals}
    for path in shards:
        table = pq.ParquetFile(path).read(columns=list(signals))
        for name in signals:
            bins, log = edges[name]
            values = _finite(table.column(name).to_numpy(zero_copy_only=False))
            counts[name] += np.histogram(np.log10(values + 1) if log else values, bins)[0]
    return {name: (*edges[name], counts[name]) for name in signals}


def _finite(values: np.ndarray) -> np.ndarray:
    values = values.astype(np.float64)
    return values[np.isfinite(values)]


def _edges(low: float, high: float) -> tuple[np.ndarray, bool]:
    """BINS bins over the range: linear for a share (within [0, 1]) or a short range, else on
    log10(value + 1) for a long tail (lengths, counts)."""
    if not np.isfinite(low):
        return np.linspace(0.0, 1.0, BINS + 1), False
    if low >= 0 and high > 100 * max(low, 1.0):
        return np.linspace(0.0, float(np.log10(high + 1)), BINS + 1), True
    top = high if high > low else low + 1.0
    return np.linspace(min(low, 0.0) if high <= 1 else low, top, BINS + 1), False

"""Length distributions: exact quantiles and a log-binned histogram, kept as exact value counts.

A stage that measures lengths (documents in characters or tokens, sequences' fill) adds
them batch by batch to a `ValueCounts`: memory grows with the number of distinct lengths,
not with the documents, and the quantiles are exactly numpy's (`np.quantile`, linear) over
every value. The histogram's bins are one grid for every distribution (`BINS_PER_DECADE`
a decade), so two sources' histograms line up and add.
"""

from __future__ import annotations

import numpy as np

from albor_pipeline.runtime.report import Report

QUANTILES = {"p10": 0.1, "p50": 0.5, "p90": 0.9, "p99": 0.99}
BINS_PER_DECADE = 10


def bin_edge(k: int | np.ndarray) -> np.ndarray:
    """The lower edge of log bin `k`: bin k holds the values in [10**(k/B), 10**((k+1)/B))."""
    return np.power(10.0, np.asarray(k, dtype=np.float64) / BINS_PER_DECADE)


class Distribution(Report):
    """Integer lengths summarized: count, sum, range, mean, quantiles and a log histogram."""

    count: int
    total: int
    min: int
    max: int
    mean: float
    quantiles: dict[str, float]  # p10, p50, p90, p99: numpy's linear interpolation
    first_bin: int  # the log bin of `bins[0]` (`bin_edge`); values below 1 count in bin 0
    bins: list[int]  # values per log bin, from `first_bin` to the bin of `max`

    def edges(self) -> np.ndarray:
        """The bins' edges: len(bins) + 1 values."""
        return bin_edge(np.arange(self.first_bin, self.first_bin + len(self.bins) + 1))


class ValueCounts:
    """Exact counts of integer values (a length -> how many have it), added a batch at a time."""

    def __init__(self) -> None:
        self.values = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=np.int64)

    @classmethod
    def of(cls, values: np.ndarray) -> ValueCounts:
        counts = cls()
        counts.add(values)
        return counts

    def add(self, values: np.ndarray, counts: np.ndarray | None = None) -> None:
        """Count `values` (each `counts` times, default once)."""
        weights = np.ones(len(values), dtype=np.int64) if counts is None else counts
        merged, inverse = np.unique(np.concatenate([self.values, values.astype(np.int64)]), return_inverse=True)
        total = np.zeros(len(merged), dtype=np.int64)
        np.add.at(total, inverse, np.concatenate([self.counts, weights]))
        self.values, self.counts = merged, total

    def merge(self, other: ValueCounts) -> None:
        self.add(other.values, other.counts)

    def _nth(self, k: np.ndarray) -> np.ndarray:
        """The k-th smallest values (0-based) of the multiset."""
        return self.values[np.searchsorted(np.cumsum(self.counts), k, side="right")].astype(np.float64)

    def quantiles(self, qs: list[float]) -> list[float]:
        """`np.quantile(every value, qs)` (linear), from the counts alone."""
        n = int(self.counts.sum())
        h = (n - 1) * np.asarray(qs, dtype=np.float64)
        lo = np.floor(h).astype(np.int64)
        a, b, t = self._nth(lo), self._nth(np.minimum(lo + 1, n - 1)), h - lo
        # numpy's lerp: from the nearer end, so a constant run gives its value exactly.
        return [float(x) for x in np.where(t >= 0.5, b - (b - a) * (1 - t), a + (b - a) * t)]

    def histogram(self) -> tuple[int, list[int]]:
        """(first bin, values per bin up to the last non-empty one) on the shared log grid."""
        logs = np.log10(np.maximum(self.values, 1).astype(np.float64)) * BINS_PER_DECADE
        lo, hi = int(np.floor(logs.min())) - 1, int(np.floor(logs.max())) + 1
        edges = bin_edge(np.arange(lo, hi + 2))
        where = np.searchsorted(edges, np.maximum(self.values, 1), side="right") - 1
        per_bin = np.bincount(where, weights=self.counts, minlength=len(edges) - 1).astype(np.int64)
        used = np.flatnonzero(per_bin)
        return lo + int(used[0]), [int(c) for c in per_bin[used[0] : used[-1] + 1]]

    def distribution(self, digits: int = 2) -> Distribution | None:
        """The summary (quantiles and mean rounded to `digits`), or None when nothing was counted."""
        n = int(self.counts.sum())
        if not n:
            return None
        total = int((self.values * self.counts).sum())
        first, bins = self.histogram()
        qs = self.quantiles(list(QUANTILES.values()))
        return Distribution(
            count=n,
            total=total,
            min=int(self.values[0]),
            max=int(self.values[-1]),
            mean=round(total / n, digits),
            quantiles={name: round(q, digits) for name, q in zip(QUANTILES, qs)},
            first_bin=first,
            bins=bins,
        )

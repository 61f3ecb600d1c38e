"""A column of texts as one column of their lines, for regex passes over a whole batch.

Python's `re` scans a text at a time; Arrow's RE2 scans a column at once. A pattern that
cannot match across a newline finds the same matches line by line as over the whole text,
so a batch is split once on "\n" and every line-level pass (secret candidates, filter
measures) runs over the flat column, then folds back to texts by `owner`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class ColumnLines:
    """Every line of every text of a column: `flat[k]` is a line of text `owner[k]`, which
    starts at character `starts[k]` of it; `first[t]` is text t's first line (every text has
    at least one: "" is one empty line)."""

    flat: pa.Array
    owner: np.ndarray
    chars: np.ndarray  # each line's length in characters
    starts: np.ndarray
    first: np.ndarray

    @classmethod
    def of(cls, texts: pa.Array | pa.ChunkedArray) -> ColumnLines:
        texts = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
        lines = pc.split_pattern(texts, "\n")
        flat = pc.list_flatten(lines)
        owner = pc.list_parent_indices(lines).to_numpy()
        chars = pc.utf8_length(flat).to_numpy().astype(np.int64)
        width = chars + 1  # and its newline
        begins = np.cumsum(width) - width
        first = np.searchsorted(owner, np.arange(len(texts)))
        return cls(flat, owner, chars, begins - begins[first][owner], first)

    def per_text(self, values: np.ndarray) -> np.ndarray:
        """`values` (one per line) summed per text."""
        return np.bincount(self.owner, weights=values, minlength=len(self.first)).astype(np.int64)

    def matching(self, pattern: str) -> np.ndarray:
        """The lines where RE2's `pattern` matches, ascending."""
        return np.flatnonzero(pc.match_substring_regex(self.flat, pattern).to_numpy(zero_copy_only=False))

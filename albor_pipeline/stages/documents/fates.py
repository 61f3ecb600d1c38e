"""Why each document the documents stage dropped went, as columns.

The run's process decides every drop (exact repeats, removal requests' copies, near-duplicate
members, contaminated train documents), but a split-writing task writes its ledger rows. In
between, a dropped document's fate is an 11-byte record (its row, a fate kind, the index of a
shared detail text, a Jaccard in ten-thousandths), never a Python object: at web scale a
third of the documents are dropped. A detail text is one per source, representative or benchmark list, shared by
every document that names it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FATE_RECORD = np.dtype([("row", "<i4"), ("kind", "u1"), ("text", "<i4"), ("value", "<u2")])
KINDS = ("duplicate", "near_duplicate", "removed", "decontaminated")
_DETAILS = ("same SHA-256 as the copy kept in {text}", "of {text}, Jaccard {value}", "{text}", "{text}")
"""Each kind's ledger detail, from its record's text and value (a Jaccard to 4 decimals)."""


@dataclass(frozen=True)
class InputFates:
    """One input shard's dropped documents: records by row, and the detail texts they name."""

    records: np.ndarray  # FATE_RECORD, rows ascending
    texts: tuple[str, ...]

    def of(self, row: int) -> tuple[str, str]:
        """(fate, detail) of the input's document `row`; ("dropped", "") when none was noted."""
        k = int(np.searchsorted(self.records["row"], row))
        if k == len(self.records) or self.records["row"][k] != row:
            return "dropped", ""
        record = self.records[k]
        kind = int(record["kind"])
        value = round(int(record["value"]) / 10_000, 4)  # the double Python's round(j, 4) gave
        return KINDS[kind], _DETAILS[kind].format(text=self.texts[int(record["text"])], value=value)


NO_FATES = InputFates(np.zeros(0, FATE_RECORD), ())


class Fates:
    """The stage's fates while it decides: per input, blocks of records, and the detail texts."""

    def __init__(self) -> None:
        self._texts: dict[str, int] = {}
        self._names: list[str] = []
        self._blocks: dict[int, list[np.ndarray]] = {}

    def text(self, detail: str) -> int:
        """The index of a detail text (a source, a representative, a benchmark list)."""
        if detail not in self._texts:
            self._texts[detail] = len(self._names)
            self._names.append(detail)
        return self._texts[detail]

    def add(self, i: int, rows: np.ndarray, kind: str, texts: np.ndarray, values: np.ndarray | int = 0) -> None:
        """Input `i`'s documents `rows` dropped as `kind`, each naming a text (and a value:
        `ten_thousandths` of a Jaccard)."""
        block = np.zeros(len(rows), FATE_RECORD)
        block["row"], block["kind"], block["text"], block["value"] = rows, KINDS.index(kind), texts, values
        if len(block):
            self._blocks.setdefault(i, []).append(block)

    def take(self, i: int) -> InputFates:
        """Input `i`'s fates by row (a row is dropped once: each step drops only what the
        steps before kept), naming only its own texts; its blocks are let go."""
        blocks = self._blocks.pop(i, None)
        if not blocks:
            return NO_FATES
        records = np.concatenate(blocks)
        records = records[np.argsort(records["row"], kind="stable")]
        used, records["text"] = np.unique(records["text"], return_inverse=True)
        return InputFates(records, tuple(self._names[t] for t in used.tolist()))


def ten_thousandths(scores: np.ndarray) -> np.ndarray:
    """Jaccard scores as the integers of `round(score, 4)` in ten-thousandths, exactly as Python
    rounds each (numpy's rounding can differ at a half), a block at a time."""
    out = np.zeros(len(scores), np.uint16)
    for start in range(0, len(scores), 4096):
        block = scores[start : start + 4096].tolist()
        out[start : start + len(block)] = [round(round(score, 4) * 10_000) for score in block]
    return out

"""Why each document the documents stage dropped went, as columns.

The run's process decides every drop (exact repeats, removal requests' copies, near-duplicate
members, contaminated train documents), but a split-writing task writes its ledger rows. In
between, a dropped document's fate is an 11-byte record (its row, a fate kind, the index of a
shared detail text, a Jaccard in ten-thousandths), never a Python object, appended to its
input's file in the stage's spool: at web scale a third of the documents are dropped. The
run's process sorts one input's file at a time for its writer, which reads it. A detail
text is one per source, representative or benchmark list, shared by every document that
names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True)
class SpooledFates:
    """One input shard's fates as its writer gets them: the file of its records by row (None
    when it has none) and the detail texts they name."""

    path: str | None
    texts: tuple[str, ...]

    def load(self, local: Path | None) -> InputFates:
        """The fates, read from `local` (where the file sits for the task that reads it)."""
        return NO_FATES if local is None else InputFates(np.fromfile(local, FATE_RECORD), self.texts)


NONE_SPOOLED = SpooledFates(None, ())


class Fates:
    """The stage's fates while it decides: per input, a file of records in `spool`, and the
    detail texts."""

    def __init__(self, spool: Path) -> None:
        self._spool = spool
        self._texts: dict[str, int] = {}
        self._names: list[str] = []

    def text(self, detail: str) -> int:
        """The index of a detail text (a source, a representative, a benchmark list)."""
        if detail not in self._texts:
            self._texts[detail] = len(self._names)
            self._names.append(detail)
        return self._texts[detail]

    def add(self, i: int, rows: np.ndarray, kind: str, texts: np.ndarray, values: np.ndarray | int = 0) -> None:
        """Input `i`'s documents `rows` dropped as `kind`, each naming a text (and a value:
        `ten_thousandths` of a Jaccard), appended to the input's file."""
        if not len(rows):
            return
        block = np.zeros(len(rows), FATE_RECORD)
        block["row"], block["kind"], block["text"], block["value"] = rows, KINDS.index(kind), texts, values
        with self._file(i).open("ab") as f:
            f.write(block.tobytes())

    def seal(self, i: int) -> SpooledFates:
        """Input `i`'s fates for its writer: its file rewritten by row (a row is dropped once:
        each step drops only what the steps before kept), naming only its own texts."""
        path = self._file(i)
        if not path.exists():
            return NONE_SPOOLED
        records = np.fromfile(path, FATE_RECORD)
        records = records[np.argsort(records["row"], kind="stable")]
        used, records["text"] = np.unique(records["text"], return_inverse=True)
        records.tofile(path)
        return SpooledFates(str(path), tuple(self._names[t] for t in used.tolist()))

    def _file(self, i: int) -> Path:
        return self._spool / f"fates-{i}.bin"


def ten_thousandths(scores: np.ndarray) -> np.ndarray:
    """Jaccard scores as the integers of `round(score, 4)` in ten-thousandths, exactly as Python
    rounds each (numpy's rounding can differ at a half), a block at a time."""
    out = np.zeros(len(scores), np.uint16)
    for start in range(0, len(scores), 4096):
        block = scores[start : start + 4096].tolist()
        out[start : start + len(block)] = [round(round(score, 4) * 10_000) for score in block]
    return out

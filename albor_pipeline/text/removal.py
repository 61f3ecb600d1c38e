"""Tombstones: what ingestion keeps of a document it removed on request (`remove:` in the spec).

A tombstone is the document's identity (source, file, SHA-256 of its text) and its word
n-gram shingle set (`text/shingles.py`), from which near dedup's MinHash signature and exact
Jaccard both derive: enough to find and remove its near-duplicates in other sources, never
its text. Ingestion writes them as `removed.parquet` beside its shards, hygiene carries the
file into `filtered/<source>`, and `documents` reads every source's.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from albor_pipeline.runtime.artifacts import Artifact, ParquetSink, record
from albor_pipeline.runtime.files import matches
from albor_pipeline.text.documents import text_sha256
from albor_pipeline.text.shingles import shingles

REMOVED = "removed.parquet"
"""A shard set's tombstones (not a shard: `shard_files` reads `part-*.parquet` only)."""
TOMBSTONE_SCHEMA = pa.schema(
    [
        ("source", pa.string()),
        ("file", pa.string()),
        ("sha256", pa.string()),
        ("ngram", pa.int32()),
        ("shingles", pa.list_(pa.uint64())),
    ]
)


@dataclass(frozen=True)
class Tombstone:
    """A removed document: who it was and its shingles (sorted unique word n-gram hashes)."""

    source: str
    file: str
    sha256: str
    ngram: int
    shingles: np.ndarray

    @classmethod
    def of(cls, source: str, file: str, text: str, ngram: int) -> Tombstone:
        return cls(source, file, text_sha256(text), ngram, shingles(text, ngram))


_ROW = re.compile(r"(.+)[:#][0-9]+", re.DOTALL)  # a data file's row: `path:line` or `path#row`


@dataclass(frozen=True)
class Removal:
    """One source's removal requests as a task applies them: globs, digests (with those of
    its `sha256_file` as read now), the n-gram size of the tombstones' shingles (near
    dedup's) and the SHA-256 of the request list (`rules_sha256`, what reports show)."""

    paths: tuple[str, ...]
    digests: tuple[str, ...]  # sorted, unique
    ngram: int
    rules_sha256: str

    def names(self, file: str, sha256: str) -> bool:
        """Whether a request names the document: its file, its data file, or its SHA-256."""
        row = _ROW.fullmatch(file)
        if matches(file, self.paths) or (row is not None and matches(row.group(1), self.paths)):
            return True
        at = bisect_left(self.digests, sha256)
        return self.digests[at : at + 1] == (sha256,)

    def tombstone(self, source: str, file: str, text: str, sha256: str) -> Tombstone | None:
        """The document's tombstone when a request names it, else None."""
        if not self.names(file, sha256):
            return None
        return Tombstone(source, file, sha256, self.ngram, shingles(text, self.ngram))


def write_tombstones(path: Path, tombstones: Iterable[Tombstone]) -> int:
    """`tombstones` in order as the Parquet file `path` (atomic); returns the rows written."""
    rows = list(tombstones)
    columns = {
        "source": [t.source for t in rows],
        "file": [t.file for t in rows],
        "sha256": [t.sha256 for t in rows],
        "ngram": [t.ngram for t in rows],
        "shingles": [t.shingles.tolist() for t in rows],
    }
    with ParquetSink(path, TOMBSTONE_SCHEMA) as sink:
        sink.write(pa.table(columns, schema=TOMBSTONE_SCHEMA))
    return sink.rows


def read_tombstones(paths: Iterable[Path]) -> list[Tombstone]:
    """The tombstones of `paths` (tombstone files, in order)."""
    found = []
    for path in paths:
        table = pq.read_table(path, schema=TOMBSTONE_SCHEMA)
        for row, sets in zip(table.drop_columns(["shingles"]).to_pylist(), table.column("shingles").to_pylist()):
            found.append(Tombstone(**row, shingles=np.array(sets, dtype=np.uint64)))
    return found


def tombstone_files(directories: Iterable[Path]) -> list[Path]:
    """The tombstone files of these shard sets (a set without removal requests has none)."""
    return [d / REMOVED for d in directories if (d / REMOVED).is_file()]


def carry_tombstones(source: Path, staging: Path) -> None:
    """The tombstones of shard set `source`, if any, into the staging directory of the set made
    from it (hygiene's), so the stage that reads that set finds them among its verified inputs."""
    if (source / REMOVED).is_file():
        shutil.copyfile(source / REMOVED, staging / REMOVED)


def tombstone_artifacts(directory: Path, root: Path) -> list[Artifact]:
    """The committed set `directory`'s tombstone file as an artifact (none without one)."""
    path = directory / REMOVED
    return [record(path, root, pq.ParquetFile(path).metadata.num_rows)] if path.is_file() else []


def canonical_sha256(value: object) -> str:
    """SHA-256 of `value` as canonical JSON (sorted keys, no spaces): a list's identity."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

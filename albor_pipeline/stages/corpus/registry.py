"""A kept version's documents and fates tables, stored so versions share what they have in common.

A corpus's documents table (`lineage.DOCUMENTS`: FIM row -> source, file, SHA-256) is most
of a version's facts, and the next build changes a handful of its documents. So a kept
version stores it as the sorted set of its distinct documents, cut into chunks where a
document's (source, file) hash says (content-defined: an added, removed or edited document
changes its own chunk only), each chunk a content-addressed object under
`versions/objects/` that every version holding it shares; and the version's own part, each
row's place in that set (`order.parquet`, whose SHA-256 the listing records). The fates
table (`lineage.FATES`, already a sorted set) is chunked the same way, with no order.
"""

from __future__ import annotations

import hashlib
import io
import json
from itertools import pairwise
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from albor_pipeline.runtime.artifacts import PARQUET_OPTIONS, atomic_path, sha256_file
from albor_pipeline.runtime.shards import read_files
from albor_pipeline.stages.corpus.lineage import DOCUMENT_SCHEMA, FATE_SCHEMA

OBJECTS = "objects"  # under versions/: the chunks, by the SHA-256 of their bytes
CHUNKS = "documents.json"  # a kept version's list of its documents' chunks and rows
FATE_CHUNKS = "fates.json"  # the same for its fates table
ORDER = "order.parquet"  # a kept version's rows: each one's place in its chunks' documents
CHUNK_MASK = 0xFF  # a chunk ends after a document whose (source, file) hash is 0 in these bits: ~256 documents
KEY = ["source", "file", "sha256"]


def keep_documents(documents: Path, objects: Path, into: Path) -> None:
    """Store the documents table at `documents` as chunks in `objects` (those already there
    are shared) and this version's order in `into`."""
    table = read_files([documents])
    distinct = table.select(KEY).group_by(KEY).aggregate([]).sort_by([(k, "ascending") for k in KEY])
    chunks = _store(distinct, objects)
    place = distinct.append_column("place", pa.array(np.arange(distinct.num_rows, dtype=np.int32)))
    order = table.join(place, keys=KEY).sort_by("row").select(["place"])
    pq.write_table(order, into / ORDER, **PARQUET_OPTIONS)
    listing = {"chunks": chunks, "rows": table.num_rows, "order_sha256": sha256_file(into / ORDER)}
    (into / CHUNKS).write_text(json.dumps(listing))


def keep_fates(fates: Path, objects: Path, into: Path) -> None:
    """Store the fates table at `fates` (sorted, `lineage.write_fates`) as chunks in `objects`."""
    table = read_files([fates])
    (into / FATE_CHUNKS).write_text(json.dumps({"chunks": _store(table, objects), "rows": table.num_rows}))


def _store(table: pa.Table, objects: Path) -> list[str]:
    """`table` cut into chunks (`_chunks`), each written to `objects` unless there; their names."""
    names = []
    for chunk in _chunks(table):
        sink = io.BytesIO()
        pq.write_table(chunk, sink, **PARQUET_OPTIONS)
        data = sink.getvalue()
        name = f"{hashlib.sha256(data).hexdigest()}.parquet"
        if not (objects / name).is_file():
            with atomic_path(objects / name) as tmp:
                tmp.write_bytes(data)
        names.append(name)
    return names


def _chunks(distinct: pa.Table) -> list[pa.Table]:
    """`distinct` cut after each row whose (source, file) hash ends in CHUNK_MASK's zero bits."""
    keys = zip(distinct.column("source").to_pylist(), distinct.column("file").to_pylist())
    ends = [i + 1 for i, (s, f) in enumerate(keys) if not _hash(f"{s}\0{f}") & CHUNK_MASK]
    bounds = [0, *[e for e in ends if e < distinct.num_rows], distinct.num_rows]
    return [distinct.slice(a, b - a) for a, b in pairwise(bounds) if b > a]


def _hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=4).digest(), "big")


def load_documents(objects: Path, kept: Path, columns: list[str] | None = None) -> pa.Table:
    """A kept version's documents table (`lineage.DOCUMENT_SCHEMA`), rebuilt from its chunks and order."""
    listed = json.loads((kept / CHUNKS).read_text())
    distinct = read_files([objects / name for name in listed["chunks"]], KEY)
    place = read_files([kept / ORDER]).column("place")
    rows = pa.array(np.arange(len(place), dtype=np.int64))
    table = pa.table([rows, *pc.take(distinct, place).columns], schema=DOCUMENT_SCHEMA)
    return table.select(columns) if columns else table


def load_fates(objects: Path, kept: Path) -> pa.Table:
    """A kept version's fates table (`lineage.FATE_SCHEMA`), from its chunks."""
    listed = json.loads((kept / FATE_CHUNKS).read_text())
    return read_files([objects / name for name in listed["chunks"]]) if listed["chunks"] else FATE_SCHEMA.empty_table()


def referenced(kept: list[Path]) -> set[str]:
    """The objects the kept versions `kept` name."""
    listings = [d / name for d in kept for name in (CHUNKS, FATE_CHUNKS)]
    return {name for p in listings if p.is_file() for name in json.loads(p.read_text())["chunks"]}


def kept_problems(objects: Path, kept: list[Path]) -> list[str]:
    """What no longer has its recorded bytes among the kept versions' chunks (each named by
    its SHA-256, hashed once however many versions share it) and orders (their SHA-256 in
    the listing): `albor verify`'s check."""
    problems = []
    for chunk in sorted(referenced(kept)):
        path = objects / chunk
        if not path.is_file() or sha256_file(path) != chunk.removesuffix(".parquet"):
            problems.append(f"{path}: {'missing' if not path.is_file() else 'does not hash to its name'}")
    for directory in kept:
        listed = json.loads((directory / CHUNKS).read_text()) if (directory / CHUNKS).is_file() else {}
        order = directory / ORDER
        if "order_sha256" in listed and (not order.is_file() or sha256_file(order) != listed["order_sha256"]):
            problems.append(f"{order}: missing, or not its recorded SHA-256")
    return problems

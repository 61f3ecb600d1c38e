"""A kept version's documents table, stored so versions share what they have in common.

A corpus's documents table (`lineage.DOCUMENTS`: FIM row -> source, file, SHA-256) is most
of a version's facts, and the next build changes a handful of its documents. So a kept
version stores it as the sorted set of its distinct documents, cut into chunks where a
document's (source, file) hash says (content-defined: an added, removed or edited document
changes its own chunk only), each chunk a content-addressed object under
`versions/objects/` that every version holding it shares; and the version's own part, each
row's place in that set (`order.parquet`).
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

from albor_pipeline.runtime.artifacts import PARQUET_OPTIONS, atomic_path
from albor_pipeline.runtime.shards import read_files
from albor_pipeline.stages.corpus.lineage import DOCUMENT_SCHEMA

OBJECTS = "objects"  # under versions/: the chunks, by the SHA-256 of their bytes
CHUNKS = "documents.json"  # a kept version's list of chunks and rows
ORDER = "order.parquet"  # a kept version's rows: each one's place in its chunks' documents
CHUNK_MASK = 0xFF  # a chunk ends after a document whose (source, file) hash is 0 in these bits: ~256 documents
KEY = ["source", "file", "sha256"]


def keep_documents(documents: Path, objects: Path, into: Path) -> None:
    """Store the documents table at `documents` as chunks in `objects` (those already there
    are shared) and this version's order in `into`."""
    table = read_files([documents])
    distinct = table.select(KEY).group_by(KEY).aggregate([]).sort_by([(k, "ascending") for k in KEY])
    chunks = []
    for chunk in _chunks(distinct):
        sink = io.BytesIO()
        pq.write_table(chunk, sink, **PARQUET_OPTIONS)
        data = sink.getvalue()
        name = f"{hashlib.sha256(data).hexdigest()}.parquet"
        if not (objects / name).is_file():
            with atomic_path(objects / name) as tmp:
                tmp.write_bytes(data)
        chunks.append(name)
    place = distinct.append_column("place", pa.array(np.arange(distinct.num_rows, dtype=np.int32)))
    order = table.join(place, keys=KEY).sort_by("row").select(["place"])
    pq.write_table(order, into / ORDER, **PARQUET_OPTIONS)
    (into / CHUNKS).write_text(json.dumps({"chunks": chunks, "rows": table.num_rows}))


def _chunks(distinct: pa.Table) -> list[pa.Table]:
    """`distinct` cut after each document whose (source, file) hash ends in CHUNK_MASK's zero bits."""
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


def referenced(kept: list[Path]) -> set[str]:
    """The objects the kept versions `kept` name."""
    return {name for d in kept if (d / CHUNKS).is_file() for name in json.loads((d / CHUNKS).read_text())["chunks"]}

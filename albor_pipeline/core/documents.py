"""Exact dedup across sources and content-hash holdout assignment.

A document's split is a function of (split seed, its SHA-256) alone, so splits are
disjoint by construction and a document never moves when other documents come or go.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from albor_pipeline.core.artifacts import Artifact, ParquetSink, record, staged_dir
from albor_pipeline.core.ingest import BATCH_ROWS, DOC_SCHEMA
from albor_pipeline.core.stage import Progress
from albor_pipeline.spec import SPLITS, HoldoutSpec


def split_of(sha256_hex: str, holdout: HoldoutSpec) -> str:
    """`u = H(seed, sha256)` in [0, 1): val below val_fraction, then test, else train."""
    digest = hashlib.sha256(f"{holdout.seed}:{sha256_hex}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    if u < holdout.val_fraction:
        return "val"
    if u < holdout.val_fraction + holdout.test_fraction:
        return "test"
    return "train"


@dataclass
class DocumentsResult:
    artifacts: dict[str, Artifact]
    rows: dict[str, dict[str, int]]  # split -> source -> rows
    duplicates: dict[str, int] = field(default_factory=dict)  # "kept_source <- dropped_source" -> n


def build_documents(
    inputs: list[tuple[str, Path]],
    holdout: HoldoutSpec,
    out_dir: Path,
    data_root: Path,
    progress: Progress | None = None,
) -> DocumentsResult:
    """Dedup `inputs` (source name, ingested Parquet) in order and write one Parquet per split."""
    first_source: dict[bytes, str] = {}
    duplicates: Counter = Counter()
    rows: dict[str, Counter] = {s: Counter() for s in SPLITS}
    with staged_dir(out_dir) as staging, ExitStack() as stack:
        sinks = {s: stack.enter_context(ParquetSink(staging / f"{s}.parquet", DOC_SCHEMA)) for s in SPLITS}
        for name, path in inputs:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS):
                labels: list[str | None] = []
                for sha in batch.column("sha256").to_pylist():
                    key = bytes.fromhex(sha)
                    kept_by = first_source.get(key)
                    if kept_by is None:
                        first_source[key] = name
                        labels.append(split_of(sha, holdout))
                    else:
                        duplicates[f"{kept_by} <- {name}"] += 1
                        labels.append(None)
                label_arr = pa.array(labels, pa.string())
                for split in SPLITS:
                    part = batch.filter(pc.fill_null(pc.equal(label_arr, split), False))
                    sinks[split].write(part)
                    rows[split][name] += part.num_rows
            if progress:
                progress(f"documents: {name} done, {len(first_source):,} unique so far")
    return DocumentsResult(
        artifacts={s: record(out_dir / f"{s}.parquet", data_root, rows=sinks[s].rows) for s in SPLITS},
        rows={s: dict(rows[s]) for s in SPLITS},
        duplicates=dict(sorted(duplicates.items())),
    )

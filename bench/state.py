"""What the documents stage's run process holds per document.

Web data is a third exact copies, and every stage but `documents` holds nothing per
document in the run's process. This generates corpora of short documents from stdlib lines
(3 to 40 lines each, picked one by one, so two documents rarely share 5-grams), 30 % of them
exact copies of an earlier one, at three sizes, each double the one before, in 25,000-row
shards. `build_documents` runs with near dedup on a 2-worker pool, with hash partitions of
1 MB, so no partition task runs inline and what is measured is this process's own state.
`tracemalloc` gives the peak of what Python and numpy allocated in the run's process;
bytes per document is the peak's growth over the documents added.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import sysconfig
import time
import tracemalloc
from itertools import pairwise
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from albor_pipeline.runtime import hashpart
from albor_pipeline.runtime.executor import LocalExecutor, WorkerPool
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import AuditSpec, HoldoutSpec, NearDedupSpec
from albor_pipeline.stages.documents.documents import build_documents
from albor_pipeline.text.documents import DOC_SCHEMA

SHARD_ROWS = 25_000
EXACT_SHARE = 0.3


def _lines() -> list[str]:
    """Lines of the stdlib's Python files (over 20 characters), in path order."""
    lines = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"))[:3000]:
        try:
            lines += [line for line in path.read_text(encoding="utf-8").splitlines() if len(line) > 20]
        except (UnicodeDecodeError, OSError):
            continue
    return lines


def _corpus(documents: int, lines: list[str], root: Path) -> list[tuple[str, Path]]:
    """`documents` documents in shards of SHARD_ROWS, EXACT_SHARE of them exact copies."""
    rng = random.Random(0)
    texts: list[str] = []
    for k in range(documents):
        if texts and rng.random() < EXACT_SHARE:
            texts.append(texts[rng.randrange(len(texts))])
        else:
            texts.append("\n".join(rng.choice(lines) for _ in range(rng.randrange(3, 40))) + f"\n# {k}")
    inputs = []
    for start in range(0, documents, SHARD_ROWS):
        chunk = texts[start : start + SHARD_ROWS]
        table = pa.table(
            {
                "text": chunk,
                "source": ["web"] * len(chunk),
                "file": [f"page{start + i}.html" for i in range(len(chunk))],
                "sha256": [hashlib.sha256(t.encode()).hexdigest() for t in chunk],
            },
            schema=DOC_SCHEMA,
        )
        path = root / "in" / f"part-{start // SHARD_ROWS:05d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path, row_group_size=2048)
        inputs.append(("web", path))
    return inputs


def _peak(inputs: list[tuple[str, Path]], root: Path, pool: WorkerPool) -> tuple[int, float, int]:
    """(peak bytes this process allocated, seconds, documents dropped) of one documents stage."""
    out = root / "documents"
    out.mkdir()
    io = StageIO(root, LocalExecutor(2, pool=pool))
    tracemalloc.start()
    try:
        start = time.perf_counter()
        result = build_documents(inputs, HoldoutSpec(), out, io, near=NearDedupSpec(), audit=AuditSpec())
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    kept = sum(sum(rows.values()) for rows in result.summary.rows.values())
    return peak, seconds, sum(pq.ParquetFile(p).metadata.num_rows for _, p in inputs) - kept


def bench_state(work: Path, documents: int = 100_000) -> dict[str, Any]:
    """The run process's peak at `documents`, twice and four times as many."""
    shutil.rmtree(work, ignore_errors=True)
    saved, hashpart.PARTITION_BYTES = hashpart.PARTITION_BYTES, 1 << 20
    pool = WorkerPool(2)
    lines, sizes = _lines(), []
    try:
        for n in (documents, 2 * documents, 4 * documents):
            root = work / str(n)
            peak, seconds, dropped = _peak(_corpus(n, lines, root), root, pool)
            sizes.append({"documents": n, "peak_mb": round(peak / 1e6, 2), "seconds": round(seconds, 2)})
            sizes[-1]["dropped"] = dropped
            shutil.rmtree(root, ignore_errors=True)
    finally:
        pool.close()
        hashpart.PARTITION_BYTES = saved
    slopes = [
        round((b["peak_mb"] - a["peak_mb"]) * 1e6 / (b["documents"] - a["documents"]), 1) for a, b in pairwise(sizes)
    ]
    return {"exact_share": EXACT_SHARE, "sizes": sizes, "bytes_per_document": slopes}

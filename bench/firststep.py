"""The first corpus step of a run against the same work on a warm pool.

A run whose first step is corpus/train (its inputs built by an earlier run: `dagster asset
materialize` of everything upstream, then of corpus/train alone, as a rebuild after a corpus
setting changed) pays, inside that step, its pool's fork server start, each worker's first
encoder and the run process's first encoder choice. The figure is that step's seconds as
Dagster recorded them, against `build_corpus` on the same split, tokenizer and settings on a
pool that has built it before (the stages section's warm pool), in this process. Beside it:
the same call on new workers forked from this process's running fork server, which pay only
their first encoders.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from albor_pipeline.runtime.executor import LocalExecutor, WorkerPool
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import CorpusSpec
from bench.common import REPO
from bench.graph import run_graph, shipped_spec

SPEC = REPO / "data" / "pipeline.yaml"


def _build(work: Path, pool: WorkerPool) -> float:
    """Seconds of one cold `build_corpus` of the default spec's fim/train on `pool`."""
    from albor_pipeline.stages.corpus.corpus import build_corpus

    layout, out = Layout(work / "artifacts"), work / "warm" / "corpus"
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = CorpusSpec(**shipped_spec().get("corpus", {}))
    start = time.perf_counter()
    build_corpus(
        layout.fim("train"), layout.tokenizer_json, settings, out, StageIO(out.parent, LocalExecutor(2, pool=pool))
    )
    return time.perf_counter() - start


def _new_workers(work: Path) -> float:
    """One build on new workers (`multiprocessing` keeps one fork server per process)."""
    pool = WorkerPool(2)
    try:
        return _build(work, pool)
    finally:
        pool.close()


def bench_first_step(work: Path, repeat: int = 3) -> dict[str, Any]:
    """The first corpus step of a run, and the same work warm and on new workers."""
    shutil.rmtree(work, ignore_errors=True)
    run_graph(SPEC, work, select="*fim/train,*tokenizer")
    step = run_graph(SPEC, work, select="corpus/train", cold=False)["steps_s"]["corpus__train"]
    pool = WorkerPool(2)
    try:
        _build(work, pool)  # the pool's start and its workers' first encoders
        warm = statistics.median(_build(work, pool) for _ in range(repeat))
    finally:
        pool.close()
    fim_mb = sum(p.stat().st_size for p in Layout(work / "artifacts").fim("train").rglob("*.parquet")) / 1e6
    return {
        "fim_parquet_mb": round(fim_mb, 1),
        "first_step_s": round(step, 2),
        "warm_s": round(warm, 2),
        "ratio": round(step / warm, 2),
        "new_workers_s": round(_new_workers(work), 2),
    }

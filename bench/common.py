"""What every section shares: the repo, the default executor, medians, the corpora as code sources."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from albor_pipeline.runtime.executor import make_executor
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import ExecutionSpec, SourceSpec, path_variables
from albor_pipeline.stages.ingest.ingest import ingest_source

REPO = Path(__file__).resolve().parent.parent
LOCAL = make_executor(ExecutionSpec())  # the default backend: a process pool, one worker per CPU
DATATROVE_MISSING = "not installed (pip install -e '.[bench]')"


def median_time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def median_record(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-key medians; nested dicts (step seconds) key by key."""
    out: dict[str, Any] = {}
    for k, v in records[0].items():
        if isinstance(v, dict):
            med = median_record([r[k] for r in records if k in r])
            numeric = all(isinstance(x, int | float) for x in med.values())
            out[k] = dict(sorted(med.items(), key=lambda kv: -kv[1])) if numeric else med
        elif isinstance(v, int | float):
            out[k] = round(statistics.median(r[k] for r in records), 2)
        else:  # a name (the peak process's command line): the first run's
            out[k] = v
    return out


def default_corpora() -> list[Path]:
    paths = path_variables()
    return [Path(paths["stdlib"]), Path(paths["site_packages"])]


def code_sources(corpora: list[Path]) -> list[SourceSpec]:
    excludes = ("site-packages/**", "dist-packages/**", "**/test/**", "**/tests/**")
    return [SourceSpec(name=f"c{i}", kind="code", path=p, exclude=excludes) for i, p in enumerate(corpora)]


def ingest_code(corpora: list[Path], work: Path) -> tuple[list[tuple[str, Path]], int]:
    """The corpora ingested as code sources: (name, shard) of every shard, as `documents` reads
    them, and their text bytes."""
    ingested, total = [], 0
    for src in code_sources(corpora):
        out = work / "ingested" / src.name
        result = ingest_source(src, out, StageIO(work))
        total += result.summary.text_bytes
        ingested += [(src.name, work / a.path) for a in result.artifacts]
    return ingested, total

"""Quality: the prose signals against datatrove's filters, what a threshold change costs against a
cold hygiene stage, and how fast `albor whatif` answers on the default spec.

- Scoring: `bench.signals` on real prose nobody here wrote, small (the pydoc topics), about
  `prose_mb` (python3-doc's manual reduced to text, then Debian changelogs) and all of that
  prose the machine holds, one core.
- Threshold change: hygiene over the bench corpus (code, StarCoder's rules) and over the
  prose, cold with a task store, then again with a changed threshold, three times (three
  thresholds, three stores), on one pool of workers as a run's stages share it; the median
  rebuild's time over the median cold one's, and whether its files equal a cold build of
  the changed spec.
- What-if: the default spec built once; `albor whatif` on every source as a fresh process,
  and `answer_all` in this warm one.
"""

from __future__ import annotations

import gzip
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from pydoc_data.topics import topics
from typing import Any

from albor_pipeline.runtime.executor import LocalExecutor, WorkerPool
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.taskstore import TaskStore, reusing
from albor_pipeline.spec import DEFAULT_SPEC, HygieneRules, HygieneSpec, SourceKind, SourceSpec, StarCoder, load_spec
from albor_pipeline.stages.hygiene.hygiene import HygieneResult, clean_source
from albor_pipeline.stages.hygiene.whatif import answer_all, proposal
from albor_pipeline.stages.ingest.ingest import ingest_source
from bench.common import LOCAL, REPO, ingest_code, median_time
from bench.signals import bench_prose_signals, html_text

PYTHON_DOC = Path("/usr/share/doc/python3-doc/html")
CHANGE = ["hygiene.rules.gopher_quality.max_non_alpha_words_ratio=0.4"]


def prose(mb: float) -> list[str]:
    """About `mb` MB of real prose: python3-doc's pages as text, then Debian changelogs."""
    texts: list[str] = []
    size = 0.0
    pages = sorted(PYTHON_DOC.rglob("*.html"))
    changelogs = (
        gzip.decompress(p.read_bytes()).decode(errors="replace")
        for p in sorted(Path("/usr/share/doc").glob("*/changelog*.gz"))
    )
    for text in (*(html_text(p) for p in pages), *changelogs):
        if size >= mb:
            break
        texts.append(text)
        size += len(text.encode()) / 1e6
    return texts


def bench_quality(corpora: list[Path], work: Path, prose_mb: float) -> dict[str, Any]:
    res: dict[str, Any] = {
        "signals_small": bench_prose_signals(list(topics.values())),
        "signals_large": bench_prose_signals(prose(prose_mb)),
        "signals_full": bench_prose_signals(prose(float("inf"))),  # all the machine's prose: the bench's full size
    }
    ingested, _ = ingest_code(corpora, work / "code")
    code = {name: work / "code" / "ingested" / name for name, _ in ingested}
    lengths = (500, 450, 400)  # StarCoder's is 1000
    res["threshold_code"] = threshold_change(
        code,
        HygieneSpec(),
        [HygieneSpec(rules=HygieneRules(starcoder=StarCoder(max_line_length=n))) for n in lengths],
        work / "tc",
    )
    path = work / "prose.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in prose(prose_mb / 5)))
    ingest_source(SourceSpec(name="prose", kind="jsonl", path=path), work / "prose_in", StageIO(work, LOCAL))
    loose = [HygieneSpec(rules=HygieneRules(gopher_quality={"max_non_alpha_words_ratio": r})) for r in (0.4, 0.5, 0.6)]
    res["threshold_prose"] = threshold_change({"prose": work / "prose_in"}, HygieneSpec(), loose, work / "tp", TEXT)
    res["whatif"] = bench_whatif(work / "default")
    return res


TEXT = SourceKind.jsonl


def _clean(
    ingested: dict[str, Path], spec: HygieneSpec, out: Path, kind: SourceKind, executor: LocalExecutor
) -> list[HygieneResult]:
    return [clean_source(d, spec, out / n, StageIO(out.parent, executor), kind=kind) for n, d in ingested.items()]


def threshold_change(
    ingested: dict[str, Path],
    before: HygieneSpec,
    after: list[HygieneSpec],
    work: Path,
    kind: SourceKind = SourceKind.code,
) -> dict[str, Any]:
    """Per change in `after` (each a threshold of its own, so each rebuild really runs): a cold
    hygiene stage of `before` in a store of its own, the rebuild after the change, and a cold
    build of the changed spec without a store, whose files the rebuild's must equal. All on
    one pool of workers started before them, as the stages of a run share the run's; the
    figure is the median rebuild over the median cold stage."""
    pool = WorkerPool(LOCAL.workers)
    run = LocalExecutor(LOCAL.workers, pool=pool)
    try:
        list(run.map(abs, range(2 * LOCAL.workers)))  # the pool started, as a run's is by its first stage
        runs = [_change(ingested, before, spec, work / str(i), kind, run) for i, spec in enumerate(after)]
    finally:
        pool.close()
    cold_s, change_s = statistics.median(r["cold_s"] for r in runs), statistics.median(r["change_s"] for r in runs)
    return {
        "documents": runs[0]["documents"],
        "changes": len(runs),
        "cold_s": round(cold_s, 2),
        "change_s": round(change_s, 3),
        "changes_s": [round(r["change_s"], 3) for r in runs],
        "change_vs_cold": round(change_s / cold_s, 3),
        "scored_on_change": sum(r["scored"] for r in runs),
        "equals_cold_build": all(r["same"] for r in runs),
    }


def _change(
    ingested: dict[str, Path], before: HygieneSpec, after: HygieneSpec, work: Path, kind: SourceKind, run: LocalExecutor
) -> dict[str, Any]:
    """One change: cold `before` in a store of its own, the rebuild with `after`, and a cold
    build of `after` without a store."""
    with reusing(TaskStore(str(Layout(work / "data").task_store), 10**11)):
        cold_s, _ = median_time(lambda: _clean(ingested, before, work / "cold", kind, run), 1)
        change_s, changed = median_time(lambda: _clean(ingested, after, work / "changed", kind, run), 1)
    _, reference = median_time(lambda: _clean(ingested, after, work / "reference", kind, run), 1)
    return {
        "documents": sum(r.summary.documents_in for r in changed),
        "cold_s": cold_s,
        "change_s": change_s,
        "scored": sum(r.summary.scanned for r in changed),
        "same": [[a.sha256 for a in r.artifacts] for r in changed]
        == [[a.sha256 for a in r.artifacts] for r in reference],
    }


def bench_whatif(data: Path) -> dict[str, Any]:
    """`albor whatif` on every source of the default spec: a fresh process's wall time, and
    `answer_all` in this process (warm)."""
    albor = [sys.executable, "-m", "albor_pipeline.cli"]
    subprocess.run([*albor, "run", "--data-dir", str(data)], check=True, cwd=REPO, capture_output=True)
    start = time.perf_counter()
    subprocess.run(
        [*albor, "whatif", "--data-dir", str(data), *(f"--set={c}" for c in CHANGE)],
        check=True,
        cwd=REPO,
        capture_output=True,
    )
    fresh = time.perf_counter() - start
    spec = load_spec(DEFAULT_SPEC)
    answer_all(spec, Layout(data), proposal(CHANGE))  # warm: imports, spaCy-free
    warm, answers = median_time(lambda: answer_all(spec, Layout(data), proposal(CHANGE)), 3)
    return {
        "sources": len(answers),
        "documents": sum(a.documents for a in answers),
        "fresh_process_s": round(fresh, 2),
        "warm_s": round(warm, 3),
    }

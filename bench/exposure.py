"""Lineage past the data dir on the default spec: `albor exposure` of one file over 100
checkpoint states, one checkpoint's diet, `albor diff` of two builds a one-file edit apart,
and what keeping 10 versions' facts costs against one build's output bytes (10 one-file
edits, each rebuilt).

The default spec is built once (`albor run`, a fresh process), with its `pydoc_topics`
sample copied so one document can be edited and the tokenizer kept (`retrain: manual`);
the edited build is a copy of the first, rebuilt. The states come from the project's own
`Batches` reading corpus/train's token stream: 8 ranks of 16, resumed on 4 ranks midway,
over one and a half epochs, a state saved every few steps. Each command runs as a user
runs it (a fresh process, imports included) and, beside it, warm (the same call in this
process after a first one).
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

from albor_pipeline.dataset import Batches, Sequences
from albor_pipeline.diff import diff_data_dirs, diff_versions
from albor_pipeline.exposure import Exposure
from albor_pipeline.runtime.artifacts import iter_manifests
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.spec import load_spec
from albor_pipeline.stages.corpus.exposure import read_states
from albor_pipeline.stages.corpus.lineage import DOCUMENTS
from albor_pipeline.stages.corpus.versions import kept_bytes, versions
from bench.common import REPO
from bench.graph import shipped_spec

ALBOR = str(Path(sys.executable).parent / "albor")
STATES = 100


def _spec(work: Path) -> Path:
    """The default spec, its samples read from the checkout, `pydoc_topics` from a copy here."""
    spec = shipped_spec()
    for src in spec["sources"]:
        if not src["path"].startswith("{"):
            src["path"] = str(REPO / "data" / src["path"])
        if src["name"] == "pydoc_topics":
            shutil.copy(src["path"], work / "pydoc_topics.jsonl")
            src["path"] = str(work / "pydoc_topics.jsonl")
    spec.setdefault("tokenizer", {})["retrain"] = "manual"
    path = work / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _run(args: list[str], spec: Path, data: Path, home: Path) -> float:
    """Seconds of `albor <args>` as a user runs it (a fresh process)."""
    env = {**_env(home), "ALBOR_SPEC": str(spec), "ALBOR_DATA_DIR": str(data)}
    start = time.perf_counter()
    done = subprocess.run([ALBOR, *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"albor {' '.join(args[:3])}: {done.stderr[-2000:]}")
    return time.perf_counter() - start


def _env(home: Path) -> dict[str, str]:
    import os

    home.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "DAGSTER_HOME": str(home)}


def _edit(spec: Path, k: int = 0) -> None:
    """Pydoc topic `k`'s text changed (a line added), the rest as it was."""
    path = Path(next(s["path"] for s in yaml.safe_load(spec.read_text())["sources"] if s["name"] == "pydoc_topics"))
    lines = path.read_text().splitlines()
    row = json.loads(lines[k])
    row["text"] += "\n\nAn edited line."
    lines[k] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")


def _versions_kept(spec: Path, b: Path, home: Path, count: int) -> int:
    """Bytes of the facts `b` keeps after `count` more one-file edits, each rebuilt: every
    corpus's versions, their shared chunks included."""
    for k in range(1, count):
        _edit(spec, k)
        _run(["run", "--spec", str(spec), "--data-dir", str(b), "--log-level", "ERROR"], spec, b, home)
    return kept_bytes(Layout(b))


def write_states(corpus: Path, out: Path, count: int = STATES) -> int:
    """`count` states of a simulated run over `corpus` (its token stream): 8 ranks of 16, then
    4 ranks from the middle state on, 1.5 epochs; returns the sequences in the corpus."""
    ds = Sequences(corpus, source="tokens")
    steps = int(1.5 * len(ds) / 128) + 1
    every = max(1, steps // count)
    ranks = [Batches(ds, 16, seed=3, rank=r, world_size=8, drop_last=True) for r in range(8)]
    iters = [iter(r) for r in ranks]
    saved = 0
    for step in range(1, steps * 2):
        try:
            for it in iters:
                next(it)
        except StopIteration:
            iters = [iter(r) for r in ranks]
            continue
        if step % every == 0 and saved < count:
            state = ranks[0].state_dict()
            (out / f"step-{step:06d}.json").write_text(json.dumps(state))
            saved += 1
            if saved == count // 2:  # the job restarts on 4 ranks
                ranks = [Batches(ds, 16, seed=3, rank=r, world_size=4, drop_last=True) for r in range(4)]
                for r in ranks:
                    r.load_state_dict(state)
                iters = [iter(r) for r in ranks]
    return len(ds)


def _warm(call: Any, repeat: int) -> float:
    call()  # the first: imports and caches
    return statistics.median(_timed(call) for _ in range(repeat))


def _timed(call: Any) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def bench_exposure(work: Path, repeat: int) -> dict[str, Any]:
    """The four targets' figures, fresh and warm, with one state beside 100 (the small input)
    and the diff of the two versions the rebuild left in one data dir."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    spec, a, b, home = _spec(work), work / "a", work / "b", work / "home"
    build_s = _run(["run", "--spec", str(spec), "--data-dir", str(a), "--log-level", "ERROR"], spec, a, home)
    states = work / "states"
    states.mkdir()
    sequences = write_states(a / "corpus" / "train", states)
    shutil.copytree(a, b)
    _edit(spec)
    rebuild_s = _run(["run", "--spec", str(spec), "--data-dir", str(b), "--log-level", "ERROR"], spec, b, home)
    loaded, layout = load_spec(spec), Layout(a)
    one = sorted(states.iterdir())[-1]
    exposure = Exposure(loaded, layout)
    first = pq.ParquetFile(a / "corpus" / "train" / DOCUMENTS).read_row_group(0)
    query = f"{first.column('source')[0]}:{first.column('file')[0]}"  # a document corpus/train holds
    old, new = (v.id[:12] for v in sorted(versions(Layout(b), "corpus/train"), key=lambda v: v.current))
    fresh = {
        "exposure_s": _run(["exposure", query, "--state", str(states)], spec, a, home),
        "exposure_one_s": _run(["exposure", query, "--state", str(one)], spec, a, home),
        "diet_s": _run(["exposure", "--state", str(one)], spec, a, home),
        "diff_s": _run(["diff", str(a), str(b)], spec, a, home),
        "diff_versions_s": _run(["diff", old, new], spec, b, home),
    }
    warm = {
        "exposure_s": _warm(lambda: exposure.exposure(query, read_states([str(states)])), repeat),
        "exposure_one_s": _warm(lambda: exposure.exposure(query, read_states([str(one)])), repeat),
        "diet_s": _warm(lambda: exposure.diet(read_states([str(one)])[0]), repeat),
        "diff_s": _warm(lambda: diff_data_dirs(a, b), repeat),
        "diff_versions_s": _warm(lambda: diff_versions(Layout(b), old, new), repeat),
    }
    outputs = sum(x.bytes for m in iter_manifests(layout) for x in m.outputs)
    one = kept_bytes(Layout(b))  # the first build's version of each corpus, kept by the rebuild
    facts = _versions_kept(spec, b, home, 10)  # and 9 more
    return {
        "build_s": round(build_s, 1),
        "rebuild_s": round(rebuild_s, 1),
        "sequences": sequences,
        "query": query,
        "states": len(list(states.iterdir())),
        "fresh": {k: round(v, 2) for k, v in fresh.items()},
        "warm": {k: round(v, 3) for k, v in warm.items()},
        "outputs_mb": round(outputs / 1e6, 1),
        "version_facts_mb": round(one / 1e6, 3),
        "ten_versions_mb": round(facts / 1e6, 3),
        "ten_versions_share_pct": round(100 * facts / outputs, 3),
    }

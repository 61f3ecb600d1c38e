"""The floor of a small spec: `albor run` on three sources of about 5 MB, as a new user runs it.

The sources are copies of stdlib packages (each run's own, so a file can be edited): one of
eight packages, `idlelib`, and `distutils` with `lib2to3`. The spec keeps the tokenizer
(`retrain: manual`), so an edit's rebuild is the mixes' and the corpora's. Each figure is a
fresh `albor run` process, timed whole: a cold build, then `repeat` runs with nothing
changed, then `repeat` one-file edits (a comment's letter, in a file whose document is in
`documents/train`), each followed by its rebuild. Where a nothing-changed run's time goes:
the imports it needs (timed as a process of their own) and what `albor run` reports of its
decision.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from bench.common import REPO
from bench.rebuild import edit_one_file

PACKAGES = {
    "a": ("email", "asyncio", "xml", "logging", "multiprocessing", "unittest", "importlib", "tkinter"),
    "b": ("idlelib",),
    "c": ("distutils", "lib2to3"),
}
IMPORTS = "import albor_pipeline.cli, albor_pipeline.definitions, albor_pipeline.defs.plan"


def _sources(dst: Path) -> dict[str, Path]:
    """Each source's copy of its stdlib packages (`.py` files; tests and caches aside)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    skip = shutil.ignore_patterns("__pycache__", "test", "tests", "idle_test", "*.pyc")
    roots = {}
    for name, packages in PACKAGES.items():
        roots[name] = dst / name
        for package in packages:
            if (stdlib / package).is_dir() and not (roots[name] / package).exists():
                shutil.copytree(stdlib / package, roots[name] / package, ignore=skip)
    return roots


def _spec(roots: dict[str, Path], path: Path) -> Path:
    spec = {
        "sources": [{"name": name, "kind": "code", "path": str(root)} for name, root in roots.items()],
        "holdout": {"val_fraction": 0.04, "test_fraction": 0.02},
        "mix": {
            "train": {"seed": 42, "weights": {"a": 0.5, "b": 0.3, "c": 0.2}},
            "val": {"seed": 123, "rows": 200, "upsample": False},
            "test": {"seed": 456, "rows": 100, "upsample": False},
        },
        "tokenizer": {"vocab_size": 8192, "retrain": "manual"},
        "corpus": {"seq_len": 2048, "formats": ["parquet", "megatron", "nanogpt"]},
    }
    path.write_text(yaml.safe_dump(spec))
    return path


def _albor_run(spec: Path, work: Path) -> tuple[float, str]:
    """One `albor run` as a process of its own: (wall seconds, what it wrote to stderr)."""
    env = {**os.environ, "DAGSTER_HOME": str(work / "home"), "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "albor_pipeline.cli", "run", "--spec", str(spec), "--data-dir", str(work / "out")]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return wall, proc.stderr


def _imports_s() -> float:
    """A process that imports what `albor run` needs, and exits."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", IMPORTS], check=True, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
    return time.perf_counter() - start


def _train_files(root: Path, out: Path) -> list[Path]:
    """Source `a`'s files whose documents are in `documents/train`."""
    table = pq.read_table(out / "documents" / "train", columns=["source", "file"])
    files = table.filter(pc.equal(table.column("source"), "a")).column("file").to_pylist()
    return sorted(p for p in (root / f for f in files) if p.is_file())


def bench_floor(work: Path, repeat: int = 3) -> dict[str, Any]:
    """Cold, nothing changed and one-file edits, each a fresh `albor run` (medians of `repeat`)."""
    shutil.rmtree(work, ignore_errors=True)
    roots = _sources(work / "sources")
    spec = _spec(roots, work / "spec.yaml")
    source_mb = sum(f.stat().st_size for r in roots.values() for f in r.rglob("*") if f.is_file()) / 1e6
    cold, _ = _albor_run(spec, work)
    unchanged, decided = [], []
    for _ in range(repeat):
        wall, err = _albor_run(spec, work)
        if "nothing changed" not in err:
            raise RuntimeError(f"a rerun with nothing changed started a run: {err[-2000:]}")
        unchanged.append(wall)
        decided += [float(m) for m in re.findall(r"no run was started \(([\d.]+)s\)", err)]
    files = _train_files(roots["a"], work / "out")
    edits = []
    for nth in range(repeat):
        edit_one_file(files, nth)
        wall, err = _albor_run(spec, work)
        if "tokenizer ok" in err:
            raise RuntimeError("the edit's rebuild retrained the tokenizer")
        edits.append(wall)
    nothing = statistics.median(unchanged)
    return {
        "source_mb": round(source_mb, 1),
        "cold_s": round(cold, 2),
        "unchanged_s": round(nothing, 2),
        "unchanged_runs_s": [round(w, 2) for w in unchanged],
        "unchanged_ratio": round(nothing / cold, 3),
        "decide_s": round(statistics.median(decided), 2) if decided else None,
        "imports_s": round(statistics.median(_imports_s() for _ in range(repeat)), 2),
        "edit_s": round(statistics.median(edits), 2),
        "edit_runs_s": [round(w, 2) for w in edits],
        "edit_vs_unchanged": round(statistics.median(edits) / nothing, 2),
    }

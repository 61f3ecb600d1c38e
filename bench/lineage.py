"""The document ledger's cost: the default spec's graph cold with the ledger (the default)
and without it (`audit.ledger: false`), alternating, in the same bench run; the ledger's
size against everything the build wrote; and what `albor trace` takes to answer.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from albor_pipeline.runtime.artifacts import iter_manifests
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.text.ledger import is_ledger
from bench.common import REPO
from bench.graph import run_graph, shipped_spec

ALBOR = str(Path(sys.executable).parent / "albor")


def bench_ledger(work: Path, repeat: int) -> dict[str, Any]:
    """Wall times with and without the ledger (medians), its bytes, and two traces' seconds."""
    work.mkdir(parents=True, exist_ok=True)
    specs = {}
    for name, ledger in (("with", True), ("without", False)):
        spec = shipped_spec()
        for src in spec["sources"]:  # the samples, read from the checkout wherever the spec is written
            if not src["path"].startswith("{"):
                src["path"] = str(REPO / "data" / src["path"])
        spec["audit"] = {"ledger": ledger}
        specs[name] = work / f"{name}.yaml"
        specs[name].write_text(yaml.safe_dump(spec))
    walls: dict[str, list[float]] = {"with": [], "without": []}
    for _ in range(repeat):
        for name in ("without", "with"):  # the ledger's build last: its data dir is traced below
            walls[name].append(run_graph(specs[name], work / name)["wall_s"])
    with_s, without_s = (statistics.median(walls[n]) for n in ("with", "without"))
    return {
        "wall_with_ledger_s": round(with_s, 2),
        "wall_without_ledger_s": round(without_s, 2),
        "ledger_cost_pct": round(100 * (with_s / without_s - 1), 1),
        **_ledger_size(work / "with" / "artifacts"),
        **_trace_seconds(specs["with"], work / "with" / "artifacts"),
    }


def _ledger_size(root: Path) -> dict[str, Any]:
    """The ledger's files and bytes, and their share of every recorded output's bytes."""
    outputs = [a for m in iter_manifests(Layout(root)) for a in m.outputs]
    ledger = [a for a in outputs if is_ledger(a.path)]
    total = sum(a.bytes for a in outputs)
    size = sum(a.bytes for a in ledger)
    return {
        "ledger_files": len(ledger),
        "ledger_mb": round(size / 1e6, 3),
        "outputs_mb": round(total / 1e6, 1),
        "ledger_share_pct": round(100 * size / total, 3) if total else 0.0,
    }


def _trace_seconds(spec: Path, root: Path) -> dict[str, float]:
    """`albor trace` of a stdlib file and of a train sequence, each as a user runs it."""
    out = {}
    for key, query in (("trace_file_s", "stdlib:json/decoder.py"), ("trace_sequence_s", "corpus/train:1000")):
        start = time.perf_counter()
        done = subprocess.run(
            [ALBOR, "trace", query, "--spec", str(spec), "--data-dir", str(root)], capture_output=True, text=True
        )
        out[key] = round(time.perf_counter() - start, 2)
        if done.returncode not in (0, 1):
            raise RuntimeError(f"albor trace {query}: {done.stderr[-2000:]}")
    return out

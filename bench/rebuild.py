"""Reruns that cost what changed: everything materialized again with nothing changed, a
one-file edit's rebuild and a killed run's resume, each against a cold build of the same spec
in the same bench run.

The sources are copies of this machine's (only the `.py` files), so a file can be edited;
the edited file is one whose document is in the cold build's `documents/train`, so the
edit reaches every stage down to the train corpus:
- the default spec, its two code sources copied (its sample sources as shipped);
- a seed-shaped spec: four code sources (the stdlib, and the installed packages cut into
  three groups by name), mixed 0.4 / 0.3 / 0.15 / 0.15 as seed 000's recipe.

A rebuild materializes what the automation would: the edited source's ingest and every
asset downstream of it, with the tokenizer retrained (`retrain: on_change`) or kept (the
selection leaves it out, as `retrain: manual` does). The resume kills a cold run when 90 %
of the `corpus/train` stage's tasks are done, then materializes every stage the killed run
did not commit (Dagster's re-execution from failure).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from bench.common import REPO, default_corpora
from bench.graph import graph_command, run_graph, shipped_spec

EDITED_SOURCE = "site_packages"  # the largest source of both specs


def copy_sources(corpora: list[Path], dst: Path) -> list[Path]:
    """Each corpus's `.py` files (tests and `__pycache__` aside) copied under `dst`."""
    copies = []
    for i, corpus in enumerate(corpora):
        target = dst / f"src{i}"
        if not target.exists():
            shutil.copytree(corpus, target, ignore=_not_python, symlinks=False, ignore_dangling_symlinks=True)
        copies.append(target)
    return copies


def _not_python(directory: str, names: list[str]) -> list[str]:
    skip = {"__pycache__", "test", "tests", "site-packages", "dist-packages"}
    return [n for n in names if n in skip or (not n.endswith(".py") and not os.path.isdir(os.path.join(directory, n)))]


def _over_copies(stdlib: Path, site: Path) -> dict[str, Any]:
    """The shipped spec over the copies; its sample sources' paths made absolute."""
    spec = shipped_spec()
    for src in spec["sources"]:
        if src["path"] in ("{stdlib}", "{site_packages}"):
            src["path"] = str(stdlib if src["path"] == "{stdlib}" else site)
        else:
            src["path"] = str(REPO / "data" / src["path"])
    return spec


def _default_spec(stdlib: Path, site: Path, path: Path) -> Path:
    path.write_text(yaml.safe_dump(_over_copies(stdlib, site)))
    return path


def _seed_spec(stdlib: Path, site: Path, path: Path) -> Path:
    """Four code sources: the stdlib and three groups of packages (cut by name at thirds of
    their bytes), weights 0.4 / 0.3 / 0.15 / 0.15."""
    spec = _over_copies(stdlib, site)
    sizes = {p.name: sum(f.stat().st_size for f in p.rglob("*.py")) for p in sorted(site.iterdir()) if p.is_dir()}
    groups: list[list[str]] = [[], [], []]
    total, held = sum(sizes.values()), 0
    for name, size in sizes.items():
        groups[min(2, int(3 * held / total))].append(f"{name}/**/*.py")
        held += size
    code: list[dict[str, Any]] = [{"name": "stdlib", "kind": "code", "path": str(stdlib)}]
    names = [EDITED_SOURCE, "packages_b", "packages_c"]
    code += [{"name": n, "kind": "code", "path": str(site), "include": g} for n, g in zip(names, groups, strict=True)]
    spec["sources"] = code + [s for s in spec["sources"] if s["kind"] not in ("code", "jsonl")]
    kept = {s["name"] for s in spec["sources"]}
    weights = {k: v for k, v in spec["mix"]["train"]["weights"].items() if k in kept}
    weights.update({EDITED_SOURCE: 0.4, "packages_b": 0.3, "packages_c": 0.15, "stdlib": 0.15})
    spec["mix"]["train"]["weights"] = weights
    path.write_text(yaml.safe_dump(spec))
    return path


def edit_one_file(files: list[Path], nth: int) -> Path:
    """A one-character edit (the case of a comment's first letter: the size stays) in one of
    `files` (sorted) about the middle of the list, the `nth` such file from there."""
    for path in files[len(files) // 2 :]:
        text = path.read_bytes()
        at = text.find(b"# ") + 2
        if at >= 2 and text[at : at + 1].isalpha():
            if nth == 0:
                path.write_bytes(text[:at] + text[at : at + 1].swapcase() + text[at + 1 :])
                return path
            nth -= 1
    raise RuntimeError("no file to edit")


def _train_files(spec: Path, artifacts: Path) -> list[Path]:
    """The edited source's files whose documents are in `documents/train` of a build: an edit
    of one reaches every stage down to the train corpus."""
    src = next(s for s in yaml.safe_load(spec.read_text())["sources"] if s["name"] == EDITED_SOURCE)
    table = pq.read_table(artifacts / "documents" / "train", columns=["source", "file"])
    files = table.filter(pc.equal(table.column("source"), EDITED_SOURCE)).column("file").to_pylist()
    return sorted(p for p in (Path(src["path"]) / f for f in files) if p.is_file())


def _keys(stages: list[str]) -> str:
    return " or ".join(f'key:"{s}"' for s in stages)


def _stages(artifacts: Path) -> list[str]:
    """The stages with a committed manifest in a data dir."""
    return sorted(json.loads(m.read_text())["stage"] for m in (artifacts / "manifests").glob("*.json"))


def _edits(spec: Path, work: Path, cold: dict[str, Any]) -> dict[str, Any]:
    """One-file edits rebuilt with the tokenizer retrained, then kept."""
    out: dict[str, Any] = {}
    files = _train_files(spec, work / "artifacts")
    downstream = f'key:"ingested/{EDITED_SOURCE}"+30'
    for nth, (name, select) in enumerate(
        (("retrained", downstream), ("kept", f'{downstream} and not key:"tokenizer"'))
    ):
        edited = edit_one_file(files, nth)
        run = run_graph(spec, work, select=select, cold=False)
        out[name] = {
            "edited": str(edited),
            "wall_s": run["wall_s"],
            "ratio": round(run["wall_s"] / cold["wall_s"], 3),
            "steps_s": run["steps_s"],
            "reused": {k: v.get("reused", 0) for k, v in run["tasks"].items()},
        }
    return out


def _unchanged(spec: Path, work: Path, cold: dict[str, Any]) -> dict[str, Any]:
    """Every asset materialized again with nothing changed (the UI's "Materialize all"): the
    sources are listed and ingested again (their tasks reused), every other stage keeps its
    outputs."""
    run = run_graph(spec, work, cold=False)
    return {"wall_s": run["wall_s"], "ratio": round(run["wall_s"] / cold["wall_s"], 3), "steps_s": run["steps_s"]}


def _resume(spec: Path, work: Path, cold: dict[str, Any]) -> dict[str, Any]:
    """A cold run SIGKILLed once 90 % of `corpus/train`'s tasks are done, then the stages it
    did not commit."""
    tasks = sum(int(v["tasks"]) for k, v in cold["tasks"].items() if k.startswith("corpus/train "))
    at = max(1, int(0.9 * tasks))
    every = _stages(work / "artifacts")
    cmd, env = graph_command(spec, work, cold=True)
    killed = subprocess.run(
        cmd, env={**env, "ALBOR_FAULT": f"task-done:{at}@corpus/train"}, capture_output=True, cwd=REPO
    )
    if killed.returncode == 0:
        raise RuntimeError("the run was not killed at the corpus stage")
    missing = sorted(set(every) - set(_stages(work / "artifacts")))
    run = run_graph(spec, work, select=_keys(missing), cold=False)
    return {
        "killed_after_tasks": f"{at}/{tasks}",
        "rerun_stages": len(missing),
        "wall_s": run["wall_s"],
        "ratio": round(run["wall_s"] / cold["wall_s"], 3),
        "reused": {k: v.get("reused", 0) for k, v in run["tasks"].items() if v.get("reused")},
    }


def bench_rebuild(corpora: list[Path] | None, work: Path) -> dict[str, Any]:
    """Both specs: a cold build, two one-file edits' rebuilds, and a killed run's resume."""
    stdlib, site = copy_sources(corpora or default_corpora(), work / "sources")
    results: dict[str, Any] = {}
    for name, make in (("default", _default_spec), ("seed_shaped", _seed_spec)):
        spec = make(stdlib, site, work / f"{name}.yaml")
        cold = run_graph(spec, work / name)
        results[name] = {"cold_wall_s": cold["wall_s"], "cold_steps_s": cold["steps_s"]}
        results[name]["unchanged"] = _unchanged(spec, work / name, cold)
        results[name].update(_edits(spec, work / name, cold))
        results[name]["resume"] = _resume(spec, work / name, cold)
    return results

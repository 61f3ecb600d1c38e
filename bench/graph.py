"""The whole graph: `dagster asset materialize` cold on a spec, under `bench/rss.py` (or
py-spy), and the figures its Dagster instance recorded (step seconds, per-shard task costs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from bench.common import REPO, code_sources, median_record

if TYPE_CHECKING:
    import dagster as dg

# The peak-RSS wrapper, run by path: the graph's cwd and PYTHONPATH may be another checkout.
RSS = Path(__file__).resolve().with_name("rss.py")

# Step-key prefixes by stage group, most specific first; a step's checks count with it.
GROUPS = (
    ("ingested__", "ingest"),
    ("filtered__", "hygiene"),
    ("documents", "documents"),
    ("mixed__", "mix"),
    ("fim__", "fim"),
    ("tokenizer", "tokenizer"),
    ("corpus__long_", "length staging"),
    ("corpus__", "corpus"),
    ("provenance", "provenance"),
    ("conversations", "chat, sft, eval"),
    ("chat_mixed__", "chat, sft, eval"),
    ("sft__", "chat, sft, eval"),
    ("eval__", "chat, sft, eval"),
)


def shipped_spec() -> dict[str, Any]:
    """The default spec with its own files (benchmarks, ranks) as absolute paths, so a copy
    written anywhere reads them; its sources as shipped."""
    spec: dict[str, Any] = yaml.safe_load((REPO / "data" / "pipeline.yaml").read_text())
    for bench in spec.get("decontaminate", {}).get("benchmarks", []):
        bench["path"] = str(REPO / "data" / bench["path"])
    ranks = spec.get("tokenizer", {}).get("openai_ranks") or {}
    spec.setdefault("tokenizer", {})["openai_ranks"] = {k: str(REPO / "data" / p) for k, p in ranks.items()}
    return spec


def write_spec(path: Path, corpora: list[Path]) -> Path:
    """The default spec with `corpora` as its only sources (code), written to `path`."""
    spec = shipped_spec()
    spec["sources"] = [
        {"name": s.name, "kind": "code", "path": str(s.path), "exclude": list(s.exclude)} for s in code_sources(corpora)
    ]
    spec["mix"]["train"] = {"seed": 42}
    path.write_text(yaml.safe_dump(spec))
    return path


def graph_command(
    spec: Path, work: Path, code: Path = REPO, select: str = "*", cold: bool = True
) -> tuple[list[str], dict[str, str]]:
    """(`dagster asset materialize` of `select` on `spec` into `work`, its environment); `cold`:
    an empty data dir and instance first, else the ones an earlier run left."""
    home = work / "dagster_home"
    if cold:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(work / "artifacts", ignore_errors=True)
    if not home.is_dir():
        home.mkdir(parents=True)
        shutil.copyfile(code / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "ALBOR_SPEC": str(spec), "ALBOR_DATA_DIR": str(work / "artifacts")}
    env["PYTHONPATH"] = str(code)  # ahead of the editable install, and `-m` adds the cwd too
    dagster = [str(Path(sys.executable).parent / "dagster"), "asset", "materialize"]
    return [*dagster, "-m", "albor_pipeline.definitions", "--select", select], env


def run_graph(
    spec: Path, work: Path, profile: bool = False, code: Path = REPO, select: str = "*", cold: bool = True
) -> dict[str, Any]:
    """`dagster asset materialize` of `select` (cold by default) on `spec`: wall, sum of step
    seconds, peak RSS; with `profile`, under py-spy (all processes, 100 Hz), summarised by
    `profile_summary`. `code` is the checkout whose `albor_pipeline` the graph runs (another
    commit for `--before`)."""
    dagster, env = graph_command(spec, work, code, select, cold)
    home = Path(env["DAGSTER_HOME"])
    cmd = [sys.executable, str(RSS), *dagster]
    raw = work / "pyspy.txt"
    if profile:  # py-spy starts the graph itself: no attach, no ptrace permission needed
        cmd = [str(Path(sys.executable).parent / "py-spy"), "record", "--subprocesses", "--format", "raw"]
        cmd += ["--rate", "100", "--nonblocking", "-o", str(raw), "--", sys.executable, str(RSS), *dagster]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=code)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    if profile:
        return {"wall_s": round(wall, 2), **profile_summary(raw)}
    rss = json.loads(proc.stdout.strip().splitlines()[-1])
    step_s, tasks = run_steps(home)
    stage_s = sum(step_s.values())
    ingested = (work / "artifacts" / "ingested").rglob("*.parquet")  # shard sets (files before them)
    source_bytes = sum(pc.sum(pc.binary_length(pq.read_table(p, columns=["text"]).column(0))).as_py() for p in ingested)
    return {
        "wall_s": round(wall, 2),
        "stages_s": round(stage_s, 2),
        "overhead_pct": round(100 * (wall - stage_s) / wall, 1),
        "tokenizer_s": round(step_s.get("tokenizer", 0.0), 2),
        "peak_rss_mb": round(rss["maxrss_kb"] / 1024, 1),
        # shared pages counted once; None where the kernel gives no PSS
        "peak_pss_mb": round(rss["maxpss_kb"] / 1024, 1) if rss.get("maxpss_kb") is not None else None,
        "peak_process_rss_mb": round(rss["process_maxrss_kb"] / 1024, 1),
        "peak_process_private_mb": round(rss.get("process_max_anon_kb", 0) / 1024, 1),  # its RssAnon
        "peak_process": rss["process"],  # which process that was (its command line)
        "command_rss_mb": round(rss.get("command_maxrss_kb", 0) / 1024, 1),  # the run's own process
        "others_rss_mb": round(rss.get("others_maxrss_kb", 0) / 1024, 1),  # the largest of the rest
        "command_cpu_s": rss.get("command_cpu_s", 0.0),  # the run's process's own CPU seconds
        "source_mb": round(source_bytes / 1e6, 1),
        "steps_s": {k: round(v, 2) for k, v in sorted(step_s.items(), key=lambda kv: -kv[1])},
        "tasks": tasks,
        "task_s": round(sum(t["total_s"] for t in tasks.values()), 2),
        "groups_s": step_groups(step_s),
    }


def run_steps(home: Path) -> tuple[dict[str, float], dict[str, Any]]:
    """The latest run of the instance in `home`: seconds of each step (its STEP_SUCCESS
    duration), and its tasks (`run_tasks`)."""
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(home)
    with dg.DagsterInstance.get() as instance:
        run_id = instance.get_run_records(limit=1)[0].dagster_run.run_id
        step_s: dict[str, float] = {}
        for record in instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_SUCCESS).records:
            entry = record.event_log_entry
            if entry.step_key and entry.dagster_event:
                step_s[entry.step_key] = entry.dagster_event.step_success_data.duration_ms / 1000
        return step_s, run_tasks(instance, run_id)


def run_tasks(instance: dg.DagsterInstance, run_id: str) -> dict[str, Any]:
    """The per-shard task costs the run's stages and checks reported (their `tasks` metadata:
    seconds of each task where it ran, by task function), keyed "asset task" or
    "asset:check task". What a cluster plan scales."""
    import dagster as dg

    out: dict[str, Any] = {}
    of_type = dg.DagsterEventType.ASSET_MATERIALIZATION
    for record in instance.get_records_for_run(run_id, of_type=of_type).records:
        mat = record.event_log_entry.asset_materialization
        if mat is not None and "tasks" in mat.metadata:
            tasks: Any = mat.metadata["tasks"].value  # {task function: its stats}, as JSON
            for fn, stats in tasks.items():
                out[f"{mat.asset_key.to_user_string()} {fn}"] = stats
    of_type = dg.DagsterEventType.ASSET_CHECK_EVALUATION
    for record in instance.get_records_for_run(run_id, of_type=of_type).records:
        ev = record.event_log_entry.asset_check_evaluation
        if ev is not None and "tasks" in ev.metadata:
            tasks = ev.metadata["tasks"].value
            for fn, stats in tasks.items():
                out[f"{ev.asset_key.to_user_string()}:{ev.check_name} {fn}"] = stats
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["total_s"]))


def step_groups(step_s: dict[str, float]) -> dict[str, float]:
    """Step seconds summed by stage group (`GROUPS`); an unknown prefix is its own group."""
    out: dict[str, float] = {}
    for step, sec in step_s.items():
        group = next((g for prefix, g in GROUPS if step.startswith(prefix)), step)
        out[group] = out.get(group, 0.0) + sec
    return {g: round(s, 2) for g, s in sorted(out.items(), key=lambda kv: -kv[1])}


def run_before(rev: str, work: Path, repeat: int, profile: bool) -> dict[str, Any]:
    """The graph on the code of `rev` (a git worktree) and on this checkout, both on `rev`'s
    shipped spec and samples (a spec both can read), for before/after figures from one bench
    run where only the code differs; this checkout's run is under `now`."""
    tree = work / "before_code"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev], check=True)
    try:
        commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True)
        spec = tree / "data" / "pipeline.yaml"
        runs = [run_graph(spec, work / "e2e_before", code=tree) for _ in range(repeat)]
        now = [run_graph(_as_now(spec), work / "e2e_before_now") for _ in range(repeat)]
        res: dict[str, Any] = {"commit": commit.stdout.strip(), **median_record(runs), "now": median_record(now)}
        if profile:
            res["profile"] = run_graph(spec, work / "e2e_before", True, code=tree)
        return res
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)


def _as_now(spec: Path) -> Path:
    """An earlier spec with the keys renamed since spelled as this checkout reads them (beside
    it, so its relative paths hold): `tokenizer.gpt2_ranks` is now `openai_ranks.gpt2`."""
    raw = yaml.safe_load(spec.read_text())
    tok = raw.get("tokenizer", {})
    if "gpt2_ranks" in tok:
        tok["openai_ranks"] = {"gpt2": tok.pop("gpt2_ranks")}
    out = spec.with_name("pipeline.now.yaml")
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def profile_summary(raw: Path, top: int = 12) -> dict[str, Any]:
    """Where the samples fall: by the innermost frame in our code (a core module when one is
    on the stack, or `dagster / interpreter` when none of ours is) and by innermost function."""
    by_module: Counter[str] = Counter()
    by_function: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        ours = [f for f in frames if "albor_pipeline/stages/" in f or "albor_pipeline/runtime/" in f] or [
            f for f in frames if "albor_pipeline/" in f
        ]
        module = ours[-1].split("albor_pipeline/")[1].split(".py")[0] if ours else "dagster / interpreter"
        by_module[module] += int(count)
        by_function[frames[-1].split(" (")[0] + " (" + frames[-1].rsplit("/", 1)[-1]] += int(count)
    total = sum(by_module.values())
    return {
        "samples": total,
        "by_module_pct": {m: round(100 * n / total, 1) for m, n in by_module.most_common(top)},
        "by_function_pct": {f: round(100 * n / total, 1) for f, n in by_function.most_common(top)},
    }

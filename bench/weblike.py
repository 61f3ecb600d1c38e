"""The whole graph on a corpus that looks like the web: many short documents, exact copies,
and templated near-copies in clusters of 2 to 10,000.

Generated from real prose nobody here wrote: the reST sources of Python's documentation that
Debian's `python3-doc` ships. A unique document is lines drawn one by one from them (so two
rarely share a 5-gram), its size drawn from a power law between 100 B and 10 KB. Of the
documents, `NEAR_SHARE` are members of near-duplicate clusters whose sizes follow a power
law (P(k) ~ k^-2, 2 <= k <= 10,000): each member is its cluster's template (at least 500 B)
with one word in a hundred replaced by a word of its own, so two members' Jaccard is about
0.8-0.9. `EXACT_SHARE` are exact copies of an earlier document. The documents go to
Parquet files of a `parquet` source, in order, with the prose presets off, so dedup sees
them all (the prose signals are still computed).

The graph runs cold at `documents` and at twice as many, with the same distributions, under
`bench/rss.py`. Per size: task-seconds and the run's own seconds per MB, the run process's
peak RSS per million documents, the largest other process's (a worker's tasks), and the
documents stage's seconds; then the two doublings' ratios.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from bench.graph import run_graph, run_steps, shipped_spec

PROSE = Path("/usr/share/doc/python3-doc/html/_sources")
EXACT_SHARE = 0.3
NEAR_SHARE = 0.15
FILE_DOCUMENTS = 100_000
WORKERS = 2


def _lines() -> list[str]:
    """The prose lines (over 20 characters) of the Python docs' reST sources, in path order."""
    if not PROSE.is_dir():
        raise SystemExit(f"weblike: {PROSE} is missing (Debian's python3-doc: make system-deps)")
    lines: list[str] = []
    for path in sorted(PROSE.rglob("*.txt")):
        lines += [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if len(line) > 20]
    return lines


def _size(rng: random.Random, low: int) -> int:
    """A document size from a power law (Pareto, alpha 1.5) between `low` and 10 KB."""
    return min(10_000, int(low * (1.0 - rng.random()) ** (-1 / 1.5)))


def _unique(rng: random.Random, lines: list[str], low: int = 100) -> str:
    size, out, n = _size(rng, low), [], 0
    while n < size:
        out.append(rng.choice(lines))
        n += len(out[-1]) + 1
    return "\n".join(out)


def _cluster_slots(rng: random.Random, members: int) -> list[int]:
    """Each near-duplicate member's cluster, clusters sized by P(k) ~ k^-2 on [2, 10,000]."""
    sizes = list(range(2, 10_001))
    weights = [1 / (k * k) for k in sizes]
    slots: list[int] = []
    cluster = 0
    while len(slots) < members:
        slots += [cluster] * rng.choices(sizes, weights)[0]
        cluster += 1
    slots = slots[:members]
    rng.shuffle(slots)
    return slots


def _member(rng: random.Random, words: list[str], nth: int) -> str:
    """A cluster member: its template's words, one in a hundred replaced by a word of its own."""
    out = list(words)
    for k in rng.sample(range(len(out)), max(1, len(out) // 100)):
        out[k] = f"v{nth}x{k}"
    return " ".join(out)


def write_corpus(documents: int, root: Path, seed: int = 0) -> int:
    """`documents` documents in Parquet files under `root`; their text bytes."""
    rng, lines = random.Random(seed), _lines()
    slots = iter(_cluster_slots(rng, int(documents * NEAR_SHARE)))
    templates: dict[int, list[str]] = {}
    texts: list[str] = []
    kinds = rng.choices(
        ("exact", "near", "unique"), (EXACT_SHARE, NEAR_SHARE, 1 - EXACT_SHARE - NEAR_SHARE), k=documents
    )
    total, part = 0, 0
    root.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    for k, kind in enumerate(kinds):
        if kind == "exact" and written:
            text = written[rng.randrange(len(written))]
        elif kind == "near" and (cluster := next(slots, None)) is not None:
            words = templates.setdefault(cluster, _unique(rng, lines, 500).split(" "))
            text = _member(rng, words, k)
        else:
            text = _unique(rng, lines)
        texts.append(text)
        if kind != "exact" and rng.random() < 0.05:  # what later copies copy: a sample, so memory stays small
            written.append(text)
        total += len(text.encode())
        if len(texts) == FILE_DOCUMENTS or k == documents - 1:
            pq.write_table(pa.table({"text": texts}), root / f"part-{part:05d}.parquet", row_group_size=8192)
            texts, part = [], part + 1
    return total


def _spec(corpus: Path, path: Path) -> Path:
    spec = shipped_spec()
    spec["sources"] = [
        {
            "name": "web",
            "kind": "parquet",
            "path": str(corpus),
            "text_field": "text",
            "hygiene": {"rules": {"gopher_quality": None, "gopher_repetition": None, "fineweb": None}},
        }
    ]
    spec["mix"]["train"] = {"seed": 42}
    path.write_text(yaml.safe_dump(spec))
    return path


def _one(documents: int, work: Path) -> dict[str, Any]:
    text_bytes = write_corpus(documents, work / "corpus")
    try:
        run = run_graph(_spec(work / "corpus", work / "spec.yaml"), work)
    except RuntimeError as err:  # a blocking check that did not pass: what it said
        steps, _ = run_steps(work / "dagster_home")
        return {
            "documents": documents,
            "text_mb": round(text_bytes / 1e6, 1),
            "failed": _failed_checks(work / "dagster_home") or [str(err)[-300:]],
            "documents_s": round(steps.get("documents", 0.0), 2),
        }
    mb = run["source_mb"]
    return {
        "documents": documents,
        "text_mb": round(text_bytes / 1e6, 1),
        "source_mb": mb,
        "wall_s": run["wall_s"],
        "task_s_per_mb": round(run["task_s"] / mb, 4),
        "own_s": round(run["stages_s"] - run["task_s"] / WORKERS, 2),  # with the workers' idle time
        "run_cpu_s": run["command_cpu_s"],  # the run process's own work alone
        "run_peak_rss_mb": run["command_rss_mb"],
        "run_peak_rss_mb_per_million": round(run["command_rss_mb"] / (documents / 1e6), 1),
        "largest_other_rss_mb": run["others_rss_mb"],
        "documents_s": round(run["steps_s"].get("documents", 0.0), 2),
        "steps_s": dict(list(run["steps_s"].items())[:8]),
    }


def _failed_checks(home: Path) -> list[str]:
    """What each check that did not pass in the latest run of the instance in `home` said."""
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(home)
    with dg.DagsterInstance.get() as instance:
        run_id = instance.get_run_records(limit=1)[0].dagster_run.run_id
        kind = dg.DagsterEventType.ASSET_CHECK_EVALUATION
        evaluations = [
            r.event_log_entry.asset_check_evaluation for r in instance.get_records_for_run(run_id, of_type=kind).records
        ]
    return [f"{e.check_name}: {e.description}" for e in evaluations if e is not None and not e.passed]


def bench_weblike(work: Path, documents: int) -> dict[str, Any]:
    """The graph at `documents` and twice as many; the doublings' ratios."""
    shutil.rmtree(work, ignore_errors=True)
    sizes = []
    for n in (documents, 2 * documents):
        sizes.append(_one(n, work / str(n)))
        shutil.rmtree(work / str(n), ignore_errors=True)
        if "failed" in sizes[-1]:
            break
    if len(sizes) < 2 or "failed" in sizes[1]:
        return {"exact_share": EXACT_SHARE, "near_share": NEAR_SHARE, "sizes": sizes}
    one, two = sizes
    own_per_mb = (two["own_s"] - one["own_s"]) / (two["source_mb"] - one["source_mb"])
    return {
        "exact_share": EXACT_SHARE,
        "near_share": NEAR_SHARE,
        "sizes": sizes,
        "own_s_per_mb_added": round(own_per_mb, 4),
        "run_cpu_s_per_mb_added": round(
            (two["run_cpu_s"] - one["run_cpu_s"]) / (two["source_mb"] - one["source_mb"]), 4
        ),
        "documents_ratio": round(two["documents_s"] / one["documents_s"], 2),
        "run_rss_ratio": round(two["run_peak_rss_mb"] / one["run_peak_rss_mb"], 2),
    }

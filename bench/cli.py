"""Benchmarks (not tests): stage throughput against bare libraries, end to end, scaling.

    python bench/run.py [--corpus DIR ...] [--repeat 3] [--quick]

Every figure is the median of `--repeat` runs; every comparison is a ratio of two
medians measured in this same run on the same documents. Writes bench/results.json
and, beside it, RESULTS.md (a table per section, under the command, date, machine and
Python that measured it), and prints that. Default corpus: this machine's standard
library and installed packages' Python sources.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
from datetime import date
from pathlib import Path
from typing import Any

from bench.common import REPO, default_corpora, median_record
from bench.exposure import bench_exposure
from bench.firststep import bench_first_step
from bench.floor import bench_floor
from bench.graph import run_before, run_graph
from bench.hygiene import bench_hygiene
from bench.lineage import bench_ledger
from bench.loader import bench_loader
from bench.quality import bench_quality
from bench.rebuild import bench_rebuild
from bench.recall import bench_recall
from bench.report import markdown, write_markdown
from bench.scale import bench_scale, bench_scaling, pretokenize_once
from bench.stages import bench_stages
from bench.state import bench_state
from bench.web import bench_web
from bench.weblike import bench_weblike

SECTIONS = (
    "stages",
    "hygiene",
    "quality",
    "e2e",
    "ledger",
    "exposure",
    "rebuild",
    "floor",
    "scaling",
    "loader",
    "scale",
    "web",
    "recall",
    "state",
    "firststep",
    "weblike",
)
FULL_ONLY = ("rebuild", "floor", "scaling", "scale", "weblike")  # sections `--quick` skips
# The keys of results.json a run keeps from `--out` when `--only` runs one section.
RESULTS = (
    "stages",
    "hygiene",
    "quality",
    "end_to_end",
    "end_to_end_before",
    "profile",
    "ledger",
    "exposure",
    "rebuild",
    "floor",
    "scaling",
    "loader",
    "scale",
    "web",
    "recall",
    "state",
    "firststep",
    "weblike",
    "measured",  # each section's command, date, machine and Python
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", action="append", type=Path, help="a directory of Python sources (repeatable)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tok-chars", type=int, default=30_000_000, help="chars to train the benched tokenizer on")
    parser.add_argument("--quick", action="store_true", help="one repeat; no rebuild, scaling or scale runs")
    parser.add_argument("--only", choices=SECTIONS, help="run one section (others kept from --out)")
    parser.add_argument("--profile", action="store_true", help="with the e2e section: one more run under py-spy")
    parser.add_argument("--prose-mb", type=float, default=50, help="the quality section's prose (MB of text)")
    parser.add_argument(
        "--web-copies", type=int, default=2, help="the web section's large crawl: python3-doc this many times"
    )
    parser.add_argument(
        "--web-docs", type=int, default=10_000_000, help="the weblike section's smaller corpus (documents)"
    )
    parser.add_argument("--scale-mb", type=int, default=1000, help="the scale section's corpus size (MB of sources)")
    parser.add_argument("--before", metavar="COMMIT", help="with the e2e section: also run the graph on COMMIT's code")
    parser.add_argument("--report", action="store_true", help="only rewrite RESULTS.md from --out (no bench runs)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results.json")
    parser.add_argument("--pretokenize", type=Path, help=argparse.SUPPRESS)  # internal: one isolated run
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.pretokenize:
        return pretokenize_once(args.pretokenize)
    report = args.out.with_name("RESULTS.md")
    if args.report:
        write_markdown(json.loads(args.out.read_text()), report)
        print(f"report: {report}", file=sys.stderr)
        return 0
    corpora = [p.resolve() for p in (args.corpus or default_corpora())]
    repeat = 1 if args.quick else args.repeat
    previous = json.loads(args.out.read_text()) if args.only and args.out.exists() else {}
    results: dict[str, Any] = {k: v for k, v in previous.items() if k in RESULTS}
    stamp = {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "command": " ".join(["python", "bench/run.py", *(sys.argv[1:] if argv is None else argv)]),
        "corpora": [str(p) for p in corpora],
        "repeat": repeat,
    }
    with tempfile.TemporaryDirectory(prefix="albor-bench-") as tmp:
        ran = run_sections(args, corpora, repeat, Path(tmp), results)
    results.setdefault("measured", {}).update(dict.fromkeys(ran, stamp))
    results["self_rusage_maxrss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)  # an hour's figures are not lost to a path
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    write_markdown(results, report)
    print(markdown(results))
    print(f"\nresults: {args.out}, {report}", file=sys.stderr)
    return 0


def run_sections(args: argparse.Namespace, corpora: list[Path], repeat: int, work: Path, results: dict) -> list[str]:
    """Each section `args` asks for (all, or `--only`'s; `FULL_ONLY` not with `--quick`), its
    figures into `results`; returns the sections run."""
    run = {s: args.only in (None, s) and not (args.quick and s in FULL_ONLY) for s in SECTIONS}
    if run["stages"]:
        print("stages ...", file=sys.stderr)
        results["stages"] = bench_stages(corpora, work / "stages", repeat, args.tok_chars)
    if run["hygiene"]:
        print("hygiene and near dedup ...", file=sys.stderr)
        results["hygiene"] = bench_hygiene(corpora, work / "hygiene", repeat)
    if run["quality"]:
        print(
            f"quality: prose signals against datatrove (~{args.prose_mb} MB), threshold changes, whatif",
            file=sys.stderr,
        )
        results["quality"] = bench_quality(corpora, work / "quality", args.prose_mb)
    if run["e2e"]:
        run_e2e(args, work, repeat, results)
    if run["ledger"]:
        print("ledger: the default graph with and without the document ledger ...", file=sys.stderr)
        results["ledger"] = bench_ledger(work / "ledger", repeat)
    if run["exposure"]:
        print("exposure: albor exposure, a diet and albor diff on the default spec, version facts ...", file=sys.stderr)
        results["exposure"] = bench_exposure(work / "exposure", repeat)
    if run["rebuild"]:
        print("rebuild: one-file edits and a killed run's resume, default and seed-shaped specs ...", file=sys.stderr)
        results["rebuild"] = bench_rebuild(args.corpus, work / "rebuild")
    if run["floor"]:
        print("floor: albor run on a 3-source 5 MB spec, cold, nothing changed, one-file edits ...", file=sys.stderr)
        results["floor"] = bench_floor(work / "floor", repeat)
    if run["scaling"]:
        print("scaling 1x / 2x ...", file=sys.stderr)
        results["scaling"] = bench_scaling(corpora, work / "scaling", repeat)
    if run["scale"]:
        print(f"scale: ~{args.scale_mb} MB and twice that, local and ray ...", file=sys.stderr)
        results["scale"] = bench_scale(corpora, work / "scale", args.scale_mb)
    if run["web"]:
        print("web: extraction against bare Resiliparse, the recipe against datatrove ...", file=sys.stderr)
        results["web"] = bench_web(work / "web", args.web_copies, repeat)
    if run["recall"]:
        print("recall: near dedup against exact all-pairs Jaccard, per cluster size ...", file=sys.stderr)
        results["recall"] = bench_recall()
    if run["state"]:
        print("state: the documents stage's run process, bytes per document ...", file=sys.stderr)
        results["state"] = bench_state(work / "state")
    if run["firststep"]:
        print("firststep: a run's first corpus step against the same work on a warm pool ...", file=sys.stderr)
        results["firststep"] = bench_first_step(work / "firststep", repeat)
    if run["weblike"]:
        print(f"weblike: the graph on {args.web_docs:,} web-like documents and twice as many ...", file=sys.stderr)
        results["weblike"] = bench_weblike(work / "weblike", args.web_docs)
    if run["loader"]:
        print("loader ...", file=sys.stderr)
        results["loader"] = bench_loader(corpora, work / "loader", repeat)
    return [s for s, on in run.items() if on]


def run_e2e(args: argparse.Namespace, work: Path, repeat: int, results: dict) -> None:
    """The default spec's graph cold, `repeat` times (with `--profile` once more under py-spy,
    with `--before` also on that commit's code)."""
    print("end to end (default spec) ...", file=sys.stderr)
    runs = [run_graph(REPO / "data" / "pipeline.yaml", work / "e2e") for _ in range(repeat)]
    results["end_to_end"] = median_record(runs)
    if args.profile:
        results["profile"] = run_graph(REPO / "data" / "pipeline.yaml", work / "e2e", profile=True)
    results.pop("end_to_end_before", None)  # never pair this run with an older one
    if not args.profile:
        results.pop("profile", None)
    if args.before:
        print(f"end to end on {args.before} ...", file=sys.stderr)
        results["end_to_end_before"] = run_before(args.before, work, repeat, args.profile)

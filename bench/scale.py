"""Scaling: the graph and the pretokenize stage on the corpus and on twice it (`scaling`), and
the graph on ~`--scale-mb` of replicated sources and twice that, local against Ray (`scale`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from albor_pipeline.runtime.executor import cpu_count
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import CorpusSpec
from albor_pipeline.stages.corpus.corpus import build_corpus
from albor_pipeline.stages.ingest.ingest import source_files
from bench.common import LOCAL, REPO, code_sources, median_record
from bench.graph import RSS, run_graph, write_spec

IDENTIFIER = re.compile(rb"\b([A-Za-z_][A-Za-z0-9_]*)\b")
SCALE_TOKENIZER_CHARS = 250_000_000  # the scale graphs' `tokenizer.max_chars`
CLI = REPO / "bench" / "run.py"  # `--pretokenize ART` runs `pretokenize_once` in a fresh process


def _write_copy(root: Path, dst: Path, k: int) -> None:
    """Copy k of `root`'s source files into `dst` (once): a marker line and every identifier
    suffixed `_k`, so it is unique for exact dedup and far from the original for near dedup
    (a marker line alone leaves a copy at Jaccard ~0.98, so near dedup would drop it and the
    "doubled" corpus would not double past `documents`)."""
    if dst.exists():
        return
    for rel in source_files(code_sources([root])[0]).files:
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            text = IDENTIFIER.sub(rb"\1_%d" % k, (root / rel).read_bytes())
            target.write_bytes(f"# albor bench copy {k}\n".encode() + text)
        except OSError:
            continue


def replicated_corpus(corpora: list[Path], work: Path, copies: int) -> list[Path]:
    """`corpora` plus `copies` copies of every source file, each copy a corpus of its own."""
    out = list(corpora)
    for k in range(copies):
        for i, root in enumerate(corpora):
            _write_copy(root, work / f"copy{k}_{i}", k)
            out.append(work / f"copy{k}_{i}")
    return out


def grouped_copies(corpora: list[Path], work: Path, copies: int) -> list[Path]:
    """Per corpus, one directory holding its copies 0..copies-1 (`copies_i/copyK/`): a source
    per corpus however many copies it reads, so per-source step overhead stays out of the
    per-MB growth (a source reads fewer copies by excluding `copyK/**`)."""
    for k in range(copies):
        for i, root in enumerate(corpora):
            _write_copy(root, work / f"copies_{i}" / f"copy{k}", k)
    return [work / f"copies_{i}" for i in range(len(corpora))]


def doubled_corpus(corpora: list[Path], work: Path) -> list[Path]:
    return replicated_corpus(corpora, work, 1)


def bench_scale(corpora: list[Path], work: Path, target_mb: int) -> dict[str, Any]:
    """The whole graph on ~`target_mb` of replicated sources and on twice that, with
    `execution.backend` local and ray at the same worker count (one per CPU): wall time,
    peak RSS of the process tree and of its largest process, Ray's overhead."""
    source_mb = (
        sum((root / rel).stat().st_size for root in corpora for rel in source_files(code_sources([root])[0]).files)
        / 1e6
    )
    copies = max(0, round(target_mb / source_mb) - 1)
    most = 2 * copies + 1
    # The same sources at both sizes (each corpus, and one source of its copies): the 2x
    # corpus doubles the bytes, not the number of sources and their steps.
    roots = [*corpora, *grouped_copies(corpora, work, most)]
    sizes = {"1x": copies, "2x": most}
    res: dict[str, Any] = {"workers": cpu_count(), "sources": len(roots)}
    for label, used in sizes.items():
        for backend in ("local", "ray"):
            spec = write_spec(work / f"scale_{label}_{backend}.yaml", roots)
            raw = yaml.safe_load(spec.read_text())
            for src in raw["sources"][len(corpora) :]:
                src["exclude"] = [*src["exclude"], *(f"copy{k}/**" for k in range(used, most))]
            raw["execution"] = {"backend": backend, "workers": cpu_count()}
            # A corpus past one machine trains its BPE on a sample, as nanochat does: without a
            # cap the tokenizer's word counts (and its time) grow with the corpus by design.
            raw["tokenizer"]["max_chars"] = SCALE_TOKENIZER_CHARS
            # Shards sized for GBs (the spec's default, 32 MB), not the shipped spec's 8 MB for
            # a few hundred: at 0.8 and 1.6 GB, 8 MB shards made 4x the tasks and the run 20-30 % slower.
            raw.pop("shard_mb", None)
            spec.write_text(yaml.safe_dump(raw))
            res[f"{label}_{backend}"] = run_graph(spec, work / f"scale_{label}_{backend}")
        local, ray = res[f"{label}_local"], res[f"{label}_ray"]
        res[f"{label}_ray_overhead_pct"] = round(100 * (ray["wall_s"] - local["wall_s"]) / ray["wall_s"], 1)
    for backend in ("local", "ray"):
        one, two = res[f"1x_{backend}"], res[f"2x_{backend}"]
        res[f"{backend}_wall_ratio"] = round(two["wall_s"] / one["wall_s"], 2)
        res[f"{backend}_process_rss_ratio"] = round(two["peak_process_rss_mb"] / one["peak_process_rss_mb"], 2)
        res[f"{backend}_process_private_ratio"] = round(
            two["peak_process_private_mb"] / max(one["peak_process_private_mb"], 1e-9), 2
        )
    return res


def bench_scaling(corpora: list[Path], work: Path, repeat: int) -> dict[str, Any]:
    """The graph and the pretokenize stage at 1x and 2x, interleaved, medians of `repeat`."""
    res: dict[str, Any] = {}
    specs = {
        label: write_spec(work / f"spec_{label}.yaml", roots)
        for label, roots in (("1x", corpora), ("2x", doubled_corpus(corpora, work)))
    }
    graphs: dict[str, list] = {"1x": [], "2x": []}
    stages: dict[str, list] = {"1x": [], "2x": []}
    for _ in range(repeat):
        for label, spec in specs.items():
            graphs[label].append(run_graph(spec, work / f"graph_{label}"))
            stages[label].append(pretokenize_isolated(work / f"graph_{label}" / "artifacts"))
    for label in specs:
        res[f"graph_{label}"] = median_record(graphs[label])
        res[f"pretokenize_{label}"] = median_record(stages[label])
    res["graph_wall_ratio"] = round(res["graph_2x"]["wall_s"] / res["graph_1x"]["wall_s"], 2)
    # The copies repeat every word, so BPE training (tokenizers' own code) sees the same
    # vocabulary twice as often: report the graph without that step as well.
    no_tok = [res[f"graph_{x}"]["wall_s"] - res[f"graph_{x}"]["tokenizer_s"] for x in ("1x", "2x")]
    res["graph_wall_ratio_without_tokenizer"] = round(no_tok[1] / no_tok[0], 2)
    res["graph_rss_ratio"] = round(res["graph_2x"]["peak_rss_mb"] / res["graph_1x"]["peak_rss_mb"], 2)
    res["pretokenize_wall_ratio"] = round(res["pretokenize_2x"]["s"] / res["pretokenize_1x"]["s"], 2)
    res["pretokenize_rss_ratio"] = round(res["pretokenize_2x"]["peak_rss_mb"] / res["pretokenize_1x"]["peak_rss_mb"], 2)
    return res


def pretokenize_isolated(art: Path) -> dict[str, float]:
    """`pretokenize_once` on a graph's artifacts dir, in a fresh process under `bench/rss.py`:
    its seconds and the peak RSS of its process tree."""
    cmd = [sys.executable, str(RSS), sys.executable, str(CLI), "--pretokenize", str(art)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    out = json.loads(proc.stderr.strip().splitlines()[-1]) | json.loads(proc.stdout.strip().splitlines()[-1])
    return {"s": out["s"], "peak_rss_mb": out["maxrss_kb"] / 1024}


def pretokenize_once(art: Path) -> int:
    """One pretokenize run of an artifacts dir in a fresh process; prints its seconds as JSON (to stderr,
    since the RSS wrapper owns stdout)."""
    start = time.perf_counter()
    build_corpus(
        art / "fim" / "train",
        art / "tokenizer/tokenizer.json",
        CorpusSpec(),
        art / "bench_corpus",
        StageIO(art, LOCAL),
    )
    print(json.dumps({"s": time.perf_counter() - start}), file=sys.stderr)
    return 0

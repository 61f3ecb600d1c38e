"""Benchmarks (not tests): stage throughput against bare libraries, end to end, scaling.

    python bench/run.py [--corpus DIR ...] [--repeat 3] [--quick]

Every figure is the median of `--repeat` runs; every comparison is a ratio of two
medians measured in this same run on the same documents. Writes bench/results.json
and prints a markdown table. Default corpus: this machine's standard library and
installed packages' Python sources.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import date
from functools import partial
from pathlib import Path
from typing import Any

import gigatoken
import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import tiktoken
import yaml
from tiktoken_ext.openai_public import r50k_pat_str
from tokenizers import Tokenizer

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from albor_pipeline.runtime.executor import cpu_count, make_executor  # noqa: E402
from albor_pipeline.spec import (  # noqa: E402
    CorpusSpec,
    ExecutionSpec,
    FimSpec,
    HoldoutSpec,
    HygieneSpec,
    NearDedupSpec,
    SourceSpec,
    SplitMixSpec,
    TokenizerSpec,
    path_variables,
)
from albor_pipeline.stages.corpus.corpus import build_corpus  # noqa: E402
from albor_pipeline.stages.dedup.documents import build_documents  # noqa: E402
from albor_pipeline.stages.fim.fim import apply_fim  # noqa: E402
from albor_pipeline.stages.hygiene.hygiene import clean_source  # noqa: E402
from albor_pipeline.stages.ingest.ingest import ingest_source, source_files  # noqa: E402
from albor_pipeline.stages.mix.mix import mix_documents  # noqa: E402
from albor_pipeline.stages.tokenizer.tokenizer import build_tokenizer, iter_texts, train_bpe  # noqa: E402
from albor_pipeline.text.encode import FAST_BYTELEVEL_PATTERN, GigatokenEncoder  # noqa: E402
from albor_pipeline.text.secrets import SecretScanner  # noqa: E402
from albor_pipeline.text.vocab import SPECIALS, added_tokens, plain_tokenizer, token_to_bytes  # noqa: E402

LOCAL = make_executor(ExecutionSpec())  # the default backend: a process pool, one worker per CPU


def median_time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def default_corpora() -> list[Path]:
    paths = path_variables()
    return [Path(paths["stdlib"]), Path(paths["site_packages"])]


def code_sources(corpora: list[Path]) -> list[SourceSpec]:
    excludes = ("site-packages/**", "dist-packages/**", "**/test/**", "**/tests/**")
    return [SourceSpec(name=f"c{i}", kind="code", path=p, exclude=excludes) for i, p in enumerate(corpora)]


def bench_stages(corpora: list[Path], work: Path, repeat: int, tok_chars: int) -> dict[str, Any]:
    """Stage throughput, tokenizer training vs bare, pretokenize vs bare HF / tiktoken."""
    res: dict[str, Any] = {}
    sec, (ingested, text_bytes) = median_time(lambda: ingest_code(corpora, work), repeat)
    res["corpus_mb"] = round(text_bytes / 1e6, 1)
    res["ingest_mb_s"] = round(text_bytes / 1e6 / sec, 1)
    holdout = HoldoutSpec(val_fraction=0.01, test_fraction=0.01)
    sec, _ = median_time(lambda: build_documents(ingested, holdout, work / "documents", work), repeat)
    res["documents_mb_s"] = round(text_bytes / 1e6 / sec, 1)
    names = [name for name, _ in ingested]
    sec, _ = median_time(
        lambda: mix_documents(work / "documents" / "train", SplitMixSpec(), names, work / "mixed", work),
        repeat,
    )
    mixed_bytes = sum(len(t.encode()) for b in iter_texts(work / "mixed") for t in b)
    res["mix_mb_s"] = round(mixed_bytes / 1e6 / sec, 1)
    sec, _ = median_time(lambda: apply_fim(work / "mixed", FimSpec(), work / "fim", work), repeat)
    res["fim_mb_s"] = round(mixed_bytes / 1e6 / sec, 1)

    # Tokenizer training: the asset's function vs a bare BpeTrainer on the same text.
    from tokenizers import decoders, models, pre_tokenizers, trainers

    spec = TokenizerSpec(vocab_size=32768, max_chars=tok_chars)
    texts = [t for b in iter_texts(work / "mixed", max_chars=tok_chars) for t in b]

    bare_tok: list[Tokenizer] = []

    def bare_train() -> None:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=32768,
            min_frequency=2,
            special_tokens=list(SPECIALS),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(texts, trainer=trainer)
        bare_tok[:] = [tok]

    ours, bare = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        result = build_tokenizer(work / "mixed", work / "documents" / "val", spec, work / "tok", work)
        ours.append(result.report["train_seconds"])  # training alone, as the bare run measures
        ours_total = time.perf_counter() - start
        bare.append(median_time(bare_train, 1)[0])
    res["tokenizer_train_chars"] = sum(map(len, texts))
    res["tokenizer_train_s"] = round(statistics.median(ours), 2)
    res["tokenizer_asset_total_s"] = round(ours_total, 2)
    res["tokenizer_bare_train_s"] = round(statistics.median(bare), 2)
    res["tokenizer_train_ratio"] = round(statistics.median(ours) / statistics.median(bare), 3)
    res["tokenizer_trainer"] = spec.trainer.value
    # Quality: bytes/token on the val documents, ours against the bare HF-trained tokenizer.
    val_texts = [t for b in iter_texts(work / "documents" / "val") for t in b]
    val_bytes = sum(len(t.encode()) for t in val_texts)
    for name, trained_tok in (
        ("ours", Tokenizer.from_file(str(work / "tok" / "tokenizer.json"))),
        ("bare", bare_tok[0]),
    ):
        n = sum(len(e.ids) for e in plain_tokenizer(trained_tok).encode_batch_fast(val_texts, add_special_tokens=False))
        res[f"tokenizer_{name}_val_bytes_per_token"] = round(val_bytes / n, 4)

    # Pretokenize: the whole stage (read, encode, pack, write) vs bare encoders on the same documents.
    tok_path = work / "tok" / "tokenizer.json"
    tok = Tokenizer.from_file(str(tok_path))
    fim_texts = pq.read_table(work / "fim", columns=["text"]).column(0).to_pylist()
    fim_bytes = sum(len(t.encode()) for t in fim_texts)
    plain = plain_tokenizer(tok)
    # Bare tiktoken as a user would set it up: the same ranks, GPT-2's pattern as tiktoken ships
    # it, and its faster spelling (FAST_BYTELEVEL_PATTERN); bare gigatoken: the engine the stage runs.
    tiktoken_enc = bare_tiktoken(tok, r50k_pat_str)
    tiktoken_fast = bare_tiktoken(tok, FAST_BYTELEVEL_PATTERN)
    gigatoken_enc = gigatoken.Tokenizer.from_json(plain.to_str())
    threads = cpu_count()
    hf_s, stage_s, tk_s, tkf_s, gt_s = [], [], [], [], []
    for _ in range(repeat):
        hf_s.append(median_time(lambda: plain.encode_batch_fast(fim_texts, add_special_tokens=False), 1)[0])
        tk_s.append(median_time(lambda: tiktoken_enc.encode_ordinary_batch(fim_texts, num_threads=threads), 1)[0])
        tkf_s.append(median_time(lambda: tiktoken_fast.encode_ordinary_batch(fim_texts, num_threads=threads), 1)[0])
        gt_s.append(median_time(lambda: gigatoken_enc.encode_batch(fim_texts, parallel=True), 1)[0])
        sec, corpus = median_time(
            lambda: build_corpus(work / "fim", tok_path, CorpusSpec(), work / "corpus", work, LOCAL), 1
        )
        stage_s.append(sec)
    res["pretokenize_encoder"] = corpus.encoder
    res["pretokenize_mb"] = round(fim_bytes / 1e6, 1)
    res["pretokenize_stage_mb_s"] = round(fim_bytes / 1e6 / statistics.median(stage_s), 2)
    for key, times in (("hf_encode_batch_fast", hf_s), ("tiktoken", tk_s), ("tiktoken_fast_pattern", tkf_s)):
        res[f"bare_{key}_mb_s"] = round(fim_bytes / 1e6 / statistics.median(times), 2)
    res["bare_gigatoken_mb_s"] = round(fim_bytes / 1e6 / statistics.median(gt_s), 2)
    res["pretokenize_vs_hf"] = round(statistics.median(hf_s) / statistics.median(stage_s), 2)
    res["pretokenize_vs_tiktoken"] = round(statistics.median(tk_s) / statistics.median(stage_s), 2)
    res["pretokenize_vs_tiktoken_fast_pattern"] = round(statistics.median(tkf_s) / statistics.median(stage_s), 2)
    res["pretokenize_vs_gigatoken"] = round(statistics.median(gt_s) / statistics.median(stage_s), 2)
    res["adversarial"] = bench_adversarial(corpora, tok, repeat)
    res.update(bench_datatrove(work, tok_path, fim_texts, statistics.median(stage_s), repeat))
    return res


def bare_tiktoken(tok: Tokenizer, pattern: str) -> tiktoken.Encoding:
    """tiktoken on the tokenizer's own ranks (ids = HF ids: no specials, ByteLevel ranks)."""
    specials = set(added_tokens(tok))
    vocab = tok.get_vocab(with_added_tokens=False)
    ranks = {token_to_bytes(t): i for t, i in vocab.items() if t not in specials}
    return tiktoken.Encoding(name="bare", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})


def bench_adversarial(corpora: list[Path], tok: Tokenizer, repeat: int) -> dict[str, Any]:
    """One long run against a code file of the same size, for encoding and tokenizer training.

    Encoding: the stage's encoder (gigatoken, one thread) and bare tiktoken on the file alone.
    Training: `train_bpe` (vocab 8,192) on 1 MB of code plus the file, so the file is half the
    text. Target: a run costs at most 3x the code file."""
    code = "".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(corpora[0].glob("*.py")))
    base = code[-1_000_000:]
    ours = GigatokenEncoder(tok, threads=1)
    tk = bare_tiktoken(tok, FAST_BYTELEVEL_PATTERN)
    spec = TokenizerSpec(vocab_size=8192)
    res: dict[str, Any] = {}
    for size in (100_000, 1_000_000):
        inputs = {"code": code[:size], "letter run": "a" * size, "space run": " " * size, "'=' run": "=" * size}
        loops = 10 if size < 1_000_000 else 2
        for name, text in inputs.items():
            row: dict[str, Any] = {}
            encode = partial(lambda t, n: [ours.encode_flat([t]) for _ in range(n)], text, loops)
            row["encode_s"] = median_time(encode, repeat)[0] / loops
            try:
                row["tiktoken_s"] = median_time(partial(tk.encode_ordinary, text), repeat)[0]
            except BaseException as exc:  # pyo3's PanicException: fancy_regex's stack overflows
                row["tiktoken_s"] = f"failed: {type(exc).__name__}"
            row["train_s"] = median_time(lambda t=text: train_bpe(iter([[base, t]]), spec), repeat)[0]
            res[f"{size // 1000} kB {name}"] = row
        for name in list(inputs)[1:]:
            row, ref = res[f"{size // 1000} kB {name}"], res[f"{size // 1000} kB code"]
            row["encode_vs_code"] = round(row["encode_s"] / ref["encode_s"], 2)
            row["train_vs_code"] = round(row["train_s"] / ref["train_s"], 2)
    return res


def ingest_code(corpora: list[Path], work: Path) -> tuple[list[tuple[str, Path]], int]:
    """The corpora ingested as code sources: (name, shard) of every shard, as `documents` reads
    them, and their text bytes."""
    ingested, total = [], 0
    for src in code_sources(corpora):
        out = work / "ingested" / src.name
        result = ingest_source(src, out, work)
        total += result.text_bytes
        ingested += [(src.name, work / a.path) for a in result.artifacts]
    return ingested, total


def bench_hygiene(corpora: list[Path], work: Path, repeat: int) -> dict[str, Any]:
    """Filters + redaction as the filtered/<source> stages run them, redaction alone, and
    near dedup against datatrove's MinHash."""
    ingested, text_bytes = ingest_code(corpora, work)
    res: dict[str, Any] = {"corpus_mb": round(text_bytes / 1e6, 1)}
    sec, results = median_time(
        lambda: [
            clean_source(work / "ingested" / n, HygieneSpec(), work / "filtered" / n, work, None, LOCAL)
            for n in dict(ingested)
        ],
        repeat,
    )
    res["hygiene_mb_s"] = round(text_bytes / 1e6 / sec, 1)
    res["hygiene_findings"] = dict(sum((Counter(r.findings) for r in results), Counter()))
    # Redaction alone: the scanner and the rewrite in one process over every document.
    scanner = SecretScanner()
    texts = [t for _, out in ingested for b in iter_texts(out) for t in b]
    sec, _ = median_time(lambda: [scanner.scan(t).redact(t) for t in texts], repeat)
    res["redaction_1proc_mb_s"] = round(text_bytes / 1e6 / sec, 1)
    res.update(bench_near_dedup(ingested, work, repeat))
    return res


def bench_near_dedup(ingested: list[tuple[str, Path]], work: Path, repeat: int) -> dict[str, Any]:
    """The documents stage with near dedup (exact + MinHash LSH + verification + writing the
    splits) against datatrove's four MinHash steps (signature, buckets, cluster, filter with a
    Parquet writer), same documents, 5-grams, 14 bands x 8 rows, one process each."""
    holdout = HoldoutSpec(val_fraction=0.01, test_fraction=0.01)
    near = NearDedupSpec()
    ours_s, result = median_time(
        lambda: build_documents(ingested, holdout, work / "near_documents", work, near=near), repeat
    )
    exact_s, _ = median_time(lambda: build_documents(ingested, holdout, work / "exact_documents", work), repeat)
    docs = sum(pq.ParquetFile(p).metadata.num_rows for _, p in ingested)
    kept = sum(sum(r.values()) for r in result.rows.values())
    res: dict[str, Any] = {
        "near_dedup_documents": docs,
        "near_dedup_s": round(ours_s, 2),
        "near_dedup_only_s": round(ours_s - exact_s, 2),
        "near_dedup_removed": docs - kept,
    }
    try:
        from datatrove.executor import LocalPipelineExecutor
        from datatrove.pipeline.dedup import (
            MinhashDedupBuckets,
            MinhashDedupCluster,
            MinhashDedupFilter,
            MinhashDedupSignature,
        )
        from datatrove.pipeline.dedup.minhash import MinhashConfig
        from datatrove.pipeline.readers import ParquetReader
        from datatrove.pipeline.writers import ParquetWriter
        from datatrove.utils.hashing import HashConfig
    except ImportError:
        return {**res, "datatrove_minhash": "not installed (pip install -e '.[bench]')"}
    config = MinhashConfig(
        n_grams=near.ngram,
        num_buckets=near.bands,
        hashes_per_bucket=near.num_perm // near.bands,
        # sha1: datatrove's xxhash path passes str, which xxhash 4 rejects.
        hash_config=HashConfig(precision=64, hash_fc="sha1"),
    )
    folder = work / "ingested"
    base = work / "datatrove_minhash"

    def run() -> None:
        shutil.rmtree(base, ignore_errors=True)

        def reader() -> ParquetReader:
            return ParquetReader(str(folder), glob_pattern="*/part-*.parquet", text_key="text", id_key="sha256")

        sigs, buckets, ids = str(base / "sigs"), str(base / "buckets"), str(base / "ids")
        steps: list[tuple[list[Any], int]] = [
            ([reader(), MinhashDedupSignature(output_folder=sigs, config=config)], 1),
            ([MinhashDedupBuckets(input_folder=sigs, output_folder=buckets, config=config)], config.num_buckets),
            ([MinhashDedupCluster(input_folder=buckets, output_folder=ids, config=config)], 1),
            ([reader(), MinhashDedupFilter(input_folder=ids), ParquetWriter(str(base / "out"))], 1),
        ]
        for i, (pipeline, tasks) in enumerate(steps):
            LocalPipelineExecutor(
                pipeline, tasks=tasks, workers=1, logging_dir=str(base / f"logs{i}"), skip_completed=False
            ).run()

    dt_s, _ = median_time(run, repeat)
    dt_kept = sum(pq.ParquetFile(p).metadata.num_rows for p in (base / "out").rglob("*.parquet"))
    return {
        **res,
        "datatrove_minhash_s": round(dt_s, 2),
        "datatrove_minhash_removed": docs - dt_kept,
        "near_dedup_vs_datatrove": round(dt_s / ours_s, 2),
    }


def bench_datatrove(work: Path, tok_path: Path, texts: list[str], stage_s: float, repeat: int) -> dict[str, Any]:
    """datatrove's DocumentTokenizer on the same documents, when datatrove is installed."""
    try:
        from datatrove.data import Document
        from datatrove.pipeline.tokens import DocumentTokenizer
    except ImportError:
        return {"datatrove": "not installed (pip install -e '.[bench]')"}

    def run() -> None:
        out = work / "datatrove"
        shutil.rmtree(out, ignore_errors=True)
        step = DocumentTokenizer(
            str(out), tokenizer_name_or_path=str(tok_path), eos_token="</s>", shuffle_documents=False
        )
        docs = (Document(text=t, id=str(i)) for i, t in enumerate(texts))
        step.run(docs, rank=0, world_size=1)

    sec = median_time(run, repeat)[0]
    return {"datatrove_s": round(sec, 2), "pretokenize_vs_datatrove": round(sec / stage_s, 2)}


def write_spec(path: Path, corpora: list[Path], data_samples: bool = True) -> Path:
    spec = yaml.safe_load((REPO / "data" / "pipeline.yaml").read_text())
    # The default spec's own files, wherever this spec is written.
    for bench in spec.get("decontaminate", {}).get("benchmarks", []):
        bench["path"] = str(REPO / "data" / bench["path"])
    if spec.get("tokenizer", {}).get("gpt2_ranks"):
        spec["tokenizer"]["gpt2_ranks"] = str(REPO / "data" / spec["tokenizer"]["gpt2_ranks"])
    spec["sources"] = [
        {"name": s.name, "kind": "code", "path": str(s.path), "exclude": list(s.exclude)} for s in code_sources(corpora)
    ]
    spec["mix"]["train"] = {"seed": 42}
    path.write_text(yaml.safe_dump(spec))
    return path


def run_tasks(instance: Any, run_id: str) -> dict[str, Any]:
    """The per-shard task costs the run's stages and checks reported (their `tasks` metadata:
    seconds of each task where it ran, by task function), keyed "asset task" or
    "asset:check task". What a cluster plan scales."""
    from dagster._core.events import DagsterEventType

    out: dict[str, Any] = {}
    for e in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION):
        mat = e.dagster_event.event_specific_data.materialization
        for fn, stats in (mat.metadata["tasks"].value if "tasks" in mat.metadata else {}).items():
            out[f"{mat.asset_key.to_user_string()} {fn}"] = stats
    for e in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION):
        ev = e.dagster_event.event_specific_data
        for fn, stats in (ev.metadata["tasks"].value if "tasks" in ev.metadata else {}).items():
            out[f"{ev.asset_key.to_user_string()}:{ev.check_name} {fn}"] = stats
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["total_s"]))


def run_graph(spec: Path, work: Path, profile: bool = False, code: Path = REPO) -> dict[str, Any]:
    """`dagster asset materialize` cold on `spec`: wall, sum of step seconds, peak RSS; with
    `profile`, under py-spy (all processes, 100 Hz), summarised by `profile_summary`. `code`
    is the checkout whose `albor_pipeline` the graph runs (another commit for `--before`)."""
    import dagster as dg
    from dagster._core.events import DagsterEventType

    home = work / "dagster_home"
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(work / "artifacts", ignore_errors=True)
    home.mkdir(parents=True)
    shutil.copyfile(code / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "ALBOR_SPEC": str(spec), "ALBOR_DATA_DIR": str(work / "artifacts")}
    env["PYTHONPATH"] = str(code)  # ahead of the editable install, and `-m` adds the cwd too
    cmd = cmd_graph = [
        sys.executable,
        "-c",
        RSS_WRAPPER,
        str(Path(sys.executable).parent / "dagster"),
        "asset",
        "materialize",
        "-m",
        "albor_pipeline.definitions",
        "--select",
        "*",
    ]
    raw = work / "pyspy.txt"
    if profile:  # py-spy starts the graph itself: no attach, no ptrace permission needed
        cmd = [str(Path(sys.executable).parent / "py-spy"), "record", "--subprocesses", "--format", "raw"]
        cmd += ["--rate", "100", "--nonblocking", "-o", str(raw), "--", sys.executable, *cmd_graph[1:]]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=code)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    if profile:
        return {"wall_s": round(wall, 2), **profile_summary(raw)}
    rss = json.loads(proc.stdout.strip().splitlines()[-1])
    peak_kb = rss["maxrss_kb"]
    os.environ["DAGSTER_HOME"] = str(home)
    with dg.DagsterInstance.get() as instance:
        run = instance.get_runs(limit=1)[0]
        steps = instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_SUCCESS)
        step_s = {e.step_key: e.dagster_event.event_specific_data.duration_ms / 1000 for e in steps}
        stage_s = sum(step_s.values())
        tasks = run_tasks(instance, run.run_id)
    ingested = (work / "artifacts" / "ingested").rglob("*.parquet")  # shard sets (files before them)
    source_bytes = sum(pc.sum(pc.binary_length(pq.read_table(p, columns=["text"]).column(0))).as_py() for p in ingested)
    return {
        "wall_s": round(wall, 2),
        "stages_s": round(stage_s, 2),
        "overhead_pct": round(100 * (wall - stage_s) / wall, 1),
        "tokenizer_s": round(step_s.get("tokenizer", 0.0), 2),
        "peak_rss_mb": round(peak_kb / 1024, 1),
        "peak_process_rss_mb": round(rss["process_maxrss_kb"] / 1024, 1),
        "peak_process_private_mb": round(rss.get("process_max_anon_kb", 0) / 1024, 1),  # its RssAnon
        "peak_process": rss["process"],  # which process that was (its command line)
        "source_mb": round(source_bytes / 1e6, 1),
        "steps_s": {k: round(v, 2) for k, v in sorted(step_s.items(), key=lambda kv: -kv[1])},
        "tasks": tasks,
        "task_s": round(sum(t["total_s"] for t in tasks.values()), 2),
        "groups_s": step_groups(step_s),
    }


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


def step_groups(step_s: dict[str, float]) -> dict[str, float]:
    """Step seconds summed by stage group (`GROUPS`); an unknown prefix is its own group."""
    out: dict[str, float] = {}
    for step, sec in step_s.items():
        group = next((g for prefix, g in GROUPS if step.startswith(prefix)), step)
        out[group] = out.get(group, 0.0) + sec
    return {g: round(s, 2) for g, s in sorted(out.items(), key=lambda kv: -kv[1])}


def run_before(rev: str, work: Path, repeat: int, profile: bool) -> dict[str, Any]:
    """The same graph and spec on the code of `rev` (a git worktree), for before/after
    figures from one bench run: the spec is this checkout's, so only the code differs."""
    tree = work / "before_code"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev], check=True)
    try:
        commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True)
        runs = [run_graph(REPO / "data" / "pipeline.yaml", work / "e2e_before", code=tree) for _ in range(repeat)]
        res: dict[str, Any] = {"commit": commit.stdout.strip(), **median_record(runs)}
        if profile:
            res["profile"] = run_graph(REPO / "data" / "pipeline.yaml", work / "e2e_before", True, code=tree)
        return res
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)


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


# Runs a command and prints the peak, over time, of the summed RSS of it and all its
# descendants (encode workers included), sampled from /proc every 50 ms. (ru_maxrss
# would be wrong here: Linux carries it over fork+exec from a large parent.)
RSS_WRAPPER = """
import json, os, subprocess, sys, time
def tree(pid):
    pids = [pid]
    for p in pids:
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                pids += [int(c) for c in open(f"/proc/{p}/task/{task}/children").read().split()]
        except OSError:
            pass
    return pids
def rss(pid):
    # (resident kB, of which private: RssAnon). Shared memory a process maps (Ray's object
    # store) counts in its VmRSS, but not in its RssAnon.
    out = {}
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(("VmRSS:", "RssAnon:")):
                out[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        pass
    return out.get("VmRSS", 0), out.get("RssAnon", 0)
def name(pid):
    try:  # the command line: every pool worker's comm is just "python3"
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode(errors="replace")[:160]
    except OSError:
        return "?"
proc = subprocess.Popen(sys.argv[1:], stdout=sys.stderr)
peak, each, anon, names = 0, {}, {}, {}
while proc.poll() is None:
    sizes = {p: rss(p) for p in tree(proc.pid)}
    peak = max(peak, sum(kb for kb, _ in sizes.values()))
    for p, (kb, private) in sizes.items():
        if kb > each.get(p, 0):
            each[p], names[p] = kb, name(p)
        anon[p] = max(anon.get(p, 0), private)
    time.sleep(0.05)
top = max(each, key=each.get) if each else None
print(json.dumps({
    "maxrss_kb": peak, "process_maxrss_kb": each.get(top, 0), "process": names.get(top, ""),
    "process_max_anon_kb": anon.get(top, 0),
}))
sys.exit(proc.returncode)
"""


IDENTIFIER = re.compile(rb"\b([A-Za-z_][A-Za-z0-9_]*)\b")


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


SCALE_TOKENIZER_CHARS = 250_000_000  # the scale graphs' `tokenizer.max_chars`


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


def median_record(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-key medians; nested dicts (step seconds) key by key."""
    out: dict[str, Any] = {}
    for k, v in records[0].items():
        if isinstance(v, dict):
            med = median_record([r[k] for r in records if k in r])
            out[k] = dict(sorted(med.items(), key=lambda kv: -kv[1]))
        else:
            out[k] = round(statistics.median(r[k] for r in records), 2)
    return out


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
            art = work / f"graph_{label}" / "artifacts"
            cmd = [sys.executable, "-c", RSS_WRAPPER, sys.executable, __file__, "--pretokenize", str(art)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
            out = json.loads(proc.stderr.strip().splitlines()[-1]) | json.loads(proc.stdout.strip().splitlines()[-1])
            stages[label].append({"s": out["s"], "peak_rss_mb": out["maxrss_kb"] / 1024})
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


def bench_loader(corpora: list[Path], work: Path, repeat: int) -> dict[str, Any]:
    """`albor_pipeline.dataset` against a bare `np.memmap` reader of the same token file:
    sequential and shuffled sequences/s, a torch DataLoader with 2 workers, and resume cost."""
    from albor_pipeline.dataset import Batches, Sequences

    src = code_sources(corpora[:1])[0]
    shards = ingest_source(src, work / "ingested", work).artifacts
    build_documents([(src.name, work / a.path) for a in shards], HoldoutSpec(), work / "documents", work)
    mix_documents(work / "documents" / "train", SplitMixSpec(), [src.name], work / "mixed", work)
    apply_fim(work / "mixed", FimSpec(), work / "fim", work)
    tok_spec = TokenizerSpec(vocab_size=32768, max_chars=5_000_000)
    build_tokenizer(work / "mixed", work / "documents" / "val", tok_spec, work / "tok", work)
    spec = CorpusSpec(formats=["parquet", "nanogpt"])
    corpus = work / "corpus"
    build_corpus(work / "fim", work / "tok/tokenizer.json", spec, corpus, work, LOCAL)
    seq_len = spec.seq_len
    tokens = np.memmap(corpus / "tokens.bin", dtype=np.uint16, mode="r")
    n = len(tokens) // seq_len
    order = np.random.default_rng(0).permutation(n)

    def bare(indices: np.ndarray) -> None:
        for i in indices:
            np.asarray(tokens[i * seq_len : (i + 1) * seq_len], dtype=np.int64)

    def ours(source: str, shuffle: bool) -> None:
        for _ in Batches(Sequences(corpus, source=source, xy=True), 8, shuffle=shuffle):
            pass

    res: dict[str, Any] = {"loader_sequences": n, "loader_seq_len": seq_len}
    timings = {
        "bare_memmap_sequential": lambda: bare(np.arange(n)),
        "bare_memmap_shuffled": lambda: bare(order),
        "parquet_sequential": lambda: ours("parquet", False),
        "parquet_shuffled": lambda: ours("parquet", True),
        "tokens_sequential": lambda: ours("tokens", False),
        "tokens_shuffled": lambda: ours("tokens", True),
    }
    for name, fn in timings.items():
        res[f"{name}_seq_s"] = round(n / median_time(fn, repeat)[0])
    for name in ("parquet_sequential", "parquet_shuffled", "tokens_sequential", "tokens_shuffled"):
        bare_name = "bare_memmap_" + name.split("_")[1]
        res[f"{name}_vs_bare"] = round(res[f"{name}_seq_s"] / res[f"{bare_name}_seq_s"], 3)
    try:
        import torch.utils.data as tud
    except ImportError:
        res["torch"] = "not installed (pip install torch)"
        return res

    class Bare:  # the plain map-style dataset a user would write over the same file
        def __len__(self) -> int:
            return n

        def __getitem__(self, i: int) -> np.ndarray:
            return np.asarray(tokens[i * seq_len : (i + 1) * seq_len], dtype=np.int64)

    def bare_loader() -> None:
        dataset: Any = Bare()
        for _ in tud.DataLoader(dataset, batch_size=8, shuffle=True, num_workers=2):
            pass

    def our_loader(source: str) -> None:
        for _ in Batches(Sequences(corpus, source=source, xy=True), 8).loader(num_workers=2):
            pass

    res["dataloader_2_workers_bare_seq_s"] = round(n / median_time(bare_loader, repeat)[0])
    for source in ("parquet", "tokens"):
        res[f"dataloader_2_workers_{source}_seq_s"] = round(n / median_time(partial(our_loader, source), repeat)[0])
        res[f"dataloader_2_workers_{source}_vs_bare"] = round(
            res[f"dataloader_2_workers_{source}_seq_s"] / res["dataloader_2_workers_bare_seq_s"], 3
        )

    # Resume: the first batch after load_state_dict at mid-epoch vs the first batch of a fresh epoch.
    def first_batch(state: dict[str, Any] | None) -> None:
        batches = Batches(Sequences(corpus, xy=True), 8)
        if state:
            batches.load_state_dict(state)
        next(iter(batches))

    mid = {**Batches(Sequences(corpus), 8).state_dict(), "batch": n // 16}
    res["resume_first_batch_ms"] = round(1000 * median_time(lambda: first_batch(mid), repeat)[0], 2)
    res["fresh_first_batch_ms"] = round(1000 * median_time(lambda: first_batch(None), repeat)[0], 2)
    return res


def pretokenize_once(art: Path) -> int:
    """One pretokenize run of an artifacts dir in a fresh process; prints its seconds as JSON (to stderr,
    since the RSS wrapper owns stdout)."""
    start = time.perf_counter()
    build_corpus(
        art / "fim/train.parquet", art / "tokenizer/tokenizer.json", CorpusSpec(), art / "bench_corpus", art, LOCAL
    )
    print(json.dumps({"s": time.perf_counter() - start}), file=sys.stderr)
    return 0


def table(results: dict[str, Any]) -> str:
    s, e, sc = results.get("stages", {}), results.get("end_to_end", {}), results.get("scaling", {})
    rows = []
    if s:  # each section may be absent after `--only` without an earlier full run in --out
        rows += _stage_rows(s)
    if h := results.get("hygiene"):
        rows += _hygiene_rows(h)
    if e:
        rows += [
            ("end to end wall s (default spec)", e["wall_s"], ""),
            ("  sum of stage compute s", e["stages_s"], ""),
            ("  orchestration overhead", f"{e['overhead_pct']} %", "<= 10 %"),
            ("  peak RSS MB", e["peak_rss_mb"], "<= 1536"),
        ]
        mb = e.get("source_mb")
        if mb:
            rows.append(("  source text MB / whole graph MB/s", f"{mb} / {mb / e['wall_s']:.2f}", ""))
        for step, sec in e.get("steps_s", {}).items():
            rows.append((f"  step {step} s", f"{sec} ({mb / sec:.1f} MB/s)" if mb and sec else sec, ""))
    if sc:
        rows += [
            ("scaling 2x/1x: graph wall", sc["graph_wall_ratio"], "~2.0"),
            ("scaling 2x/1x: graph wall without tokenizer training", sc["graph_wall_ratio_without_tokenizer"], "~2.0"),
            ("scaling 2x/1x: graph peak RSS", sc["graph_rss_ratio"], "<= 1.3 (tokenizer aside)"),
            ("scaling 2x/1x: pretokenize wall", sc["pretokenize_wall_ratio"], "~2.0"),
            ("scaling 2x/1x: pretokenize peak RSS", sc["pretokenize_rss_ratio"], "<= 1.3"),
        ]
    if (b := results.get("end_to_end_before")) and e:
        rows += _before_rows(b, e)
    if pr := results.get("profile"):
        rows.append((f"py-spy profile of the graph ({pr['samples']:,} samples, all processes)", "", ""))
        rows += [(f"  {m}", f"{pct} %", "") for m, pct in pr["by_module_pct"].items()]
    if lo := results.get("loader"):
        rows += _loader_rows(lo)
    if sc2 := results.get("scale"):
        rows += _scale_rows(sc2)
    lines = ["| figure | value | target |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def _before_rows(b: dict[str, Any], e: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """The graph on the `--before` commit against this checkout's, group by group."""
    rows: list[tuple[str, Any, str]] = [
        (f"graph on {b['commit'][:10]} / this checkout: wall s", f"{b['wall_s']} / {e['wall_s']}", ""),
        ("  ratio (now / before)", round(e["wall_s"] / b["wall_s"], 2), ""),
        ("  orchestration overhead before", f"{b['overhead_pct']} %", ""),
        ("  peak RSS MB before", b["peak_rss_mb"], ""),
    ]
    for group, sec in b["groups_s"].items():
        now = e["groups_s"].get(group, 0.0)
        rows.append((f"  group {group} s (before / now)", f"{sec} / {now} = {now / sec:.2f}x" if sec else now, ""))
    if pr := b.get("profile"):
        rows.append((f"py-spy profile before ({pr['samples']:,} samples)", "", ""))
        rows += [(f"  {m}", f"{pct} %", "") for m, pct in pr["by_module_pct"].items()]
    return rows


def _scale_rows(sc: dict[str, Any]) -> list[tuple[str, Any, str]]:
    rows: list[tuple[str, Any, str]] = []
    for label in ("1x", "2x"):
        local, ray = sc[f"{label}_local"], sc[f"{label}_ray"]
        rows.append((f"scale {label}: {local['source_mb']} MB, {sc['workers']} workers", "", ""))
        for name, r in (("local", local), ("ray", ray)):
            rows.append(
                (
                    f"  {name}: wall s / tree peak RSS MB / largest process MB (private)",
                    f"{r['wall_s']} / {r['peak_rss_mb']} / {r['peak_process_rss_mb']} ({r['peak_process_private_mb']})",
                    "",
                )
            )
        rows.append(("  Ray overhead (wall)", f"{sc[f'{label}_ray_overhead_pct']} %", "<= 15 %"))
    for label in ("1x", "2x"):
        local = sc[f"{label}_local"]
        rows.append((f"scale {label} local: task s / step s", f"{local['task_s']} / {local['stages_s']}", ""))
    for where, t in sc["1x_local"]["tasks"].items():
        rows.append(
            (
                f"tasks 1x {where}: n / p50 / p90 / max s / total s",
                f"{t['tasks']} / {t['p50_s']} / {t['p90_s']} / {t['max_s']} / {t['total_s']}",
                "",
            )
        )
    for name in ("local", "ray"):
        rows.append((f"scale 2x/1x {name}: wall", sc[f"{name}_wall_ratio"], "<= 2.1"))
        rows.append((f"scale 2x/1x {name}: largest process RSS", sc[f"{name}_process_rss_ratio"], "~1.0"))
        rows.append((f"scale 2x/1x {name}: its private memory (RssAnon)", sc[f"{name}_process_private_ratio"], "~1.0"))
    return rows


def _loader_rows(lo: dict[str, Any]) -> list[tuple[str, Any, str]]:
    rows: list[tuple[str, Any, str]] = [
        (f"loader: {lo['loader_sequences']:,} sequences of {lo['loader_seq_len']}", "", ""),
        (
            "  bare np.memmap seq/s (sequential / shuffled)",
            f"{lo['bare_memmap_sequential_seq_s']:,} / {lo['bare_memmap_shuffled_seq_s']:,}",
            "",
        ),
    ]
    for source in ("parquet", "tokens"):
        rows.append(
            (
                f"  Batches over {source} seq/s (sequential / shuffled)",
                f"{lo[f'{source}_sequential_seq_s']:,} / {lo[f'{source}_shuffled_seq_s']:,} "
                f"= {lo[f'{source}_sequential_vs_bare']}x / {lo[f'{source}_shuffled_vs_bare']}x bare",
                "",
            )
        )
    if "dataloader_2_workers_bare_seq_s" in lo:
        rows.append(
            (
                "  torch DataLoader, 2 workers, bare memmap dataset seq/s",
                f"{lo['dataloader_2_workers_bare_seq_s']:,}",
                "",
            )
        )
        for source in ("parquet", "tokens"):
            rows.append(
                (
                    f"  torch DataLoader, 2 workers, Batches over {source} seq/s",
                    f"{lo[f'dataloader_2_workers_{source}_seq_s']:,} "
                    f"= {lo[f'dataloader_2_workers_{source}_vs_bare']}x bare",
                    "",
                )
            )
    rows.append(
        (
            "  first batch after resume at mid-epoch / fresh (ms)",
            f"{lo['resume_first_batch_ms']} / {lo['fresh_first_batch_ms']}",
            "",
        )
    )
    return rows


def _hygiene_rows(h: dict[str, Any]) -> list[tuple[str, Any, str]]:
    return [
        ("hygiene corpus (text MB)", h["corpus_mb"], ""),
        ("filters + redaction stage MB/s (2 processes)", h["hygiene_mb_s"], ""),
        ("redaction alone MB/s (1 process)", h["redaction_1proc_mb_s"], ""),
        (
            "documents with near dedup s (ours / datatrove MinHash)",
            f"{h['near_dedup_s']} / {h['datatrove_minhash_s']} = {h['near_dedup_vs_datatrove']}x faster"
            if "datatrove_minhash_s" in h
            else h.get("datatrove_minhash"),
            ">= 1.5x",
        ),
        (
            "  documents removed (ours exact + near / datatrove)",
            f"{h['near_dedup_removed']} / {h.get('datatrove_minhash_removed', '-')} of {h['near_dedup_documents']}",
            "",
        ),
    ]


def _adversarial_rows(adv: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """One long run vs a code file of the same size: encoding alone, and training on 1 MB code + it."""
    rows: list[tuple[str, Any, str]] = []
    for name, r in adv.items():
        if "encode_vs_code" not in r:
            continue
        tk = r["tiktoken_s"] if isinstance(r["tiktoken_s"], str) else f"{r['tiktoken_s'] * 1e3:.1f} ms"
        encode = f"{r['encode_vs_code']}x ({r['encode_s'] * 1e3:.2f} ms; bare tiktoken {tk})"
        rows.append((f"adversarial {name}: encode vs code", encode, "<= 3x"))
        rows.append((f"adversarial {name}: training vs code", f"{r['train_vs_code']}x ({r['train_s']:.2f} s)", "<= 3x"))
    return rows


def _stage_rows(s: dict[str, Any]) -> list[tuple[str, Any, str]]:
    return [
        ("corpus (text MB)", s["corpus_mb"], ""),
        ("ingest MB/s", s["ingest_mb_s"], ""),
        ("documents (dedup + holdout) MB/s", s["documents_mb_s"], ""),
        ("mix MB/s", s["mix_mb_s"], ""),
        ("FIM MB/s", s["fim_mb_s"], ""),
        (
            f"tokenizer training s (ours: {s.get('tokenizer_trainer', 'hf')} / bare HF BpeTrainer)",
            f"{s['tokenizer_train_s']} / {s['tokenizer_bare_train_s']} = {s['tokenizer_train_ratio']}x",
            "<= 0.5",
        ),
        (
            "  val bytes/token (ours / bare HF BpeTrainer)",
            f"{s.get('tokenizer_ours_val_bytes_per_token')} / {s.get('tokenizer_bare_val_bytes_per_token')}",
            "within 1 %",
        ),
        (
            f"pretokenize stage MB/s (encoder: {s.get('pretokenize_encoder', 'tiktoken')})",
            s["pretokenize_stage_mb_s"],
            "",
        ),
        (
            "  vs bare HF encode_batch_fast",
            f"{s['pretokenize_vs_hf']}x ({s['bare_hf_encode_batch_fast_mb_s']} MB/s)",
            ">= 2.0x",
        ),
        (
            "  vs bare tiktoken (GPT-2 pattern as tiktoken ships it)",
            f"{s['pretokenize_vs_tiktoken']}x ({s['bare_tiktoken_mb_s']} MB/s)",
            "",
        ),
        (
            "  vs bare tiktoken with the faster pattern spelling",
            f"{s['pretokenize_vs_tiktoken_fast_pattern']}x ({s['bare_tiktoken_fast_pattern_mb_s']} MB/s)",
            ">= 1.3x",
        ),
        (
            "  vs bare gigatoken (encode only)",
            f"{s['pretokenize_vs_gigatoken']}x ({s['bare_gigatoken_mb_s']} MB/s)" if "bare_gigatoken_mb_s" in s else "",
            "",
        ),
        (
            "  vs datatrove DocumentTokenizer",
            f"{s['pretokenize_vs_datatrove']}x ({s['datatrove_s']} s)" if "datatrove_s" in s else s.get("datatrove"),
            ">= 4x",
        ),
        *_adversarial_rows(s.get("adversarial", {})),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", action="append", type=Path, help="a directory of Python sources (repeatable)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tok-chars", type=int, default=30_000_000, help="chars to train the benched tokenizer on")
    parser.add_argument("--quick", action="store_true", help="one repeat, no scaling runs")
    parser.add_argument(
        "--only",
        choices=["stages", "hygiene", "e2e", "scaling", "loader", "scale"],
        help="run one section (others kept from --out)",
    )
    parser.add_argument("--profile", action="store_true", help="with the e2e section: one more run under py-spy")
    parser.add_argument("--scale-mb", type=int, default=1000, help="the scale section's corpus size (MB of sources)")
    parser.add_argument("--before", metavar="REV", help="with the e2e section: also run the graph on commit REV")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results.json")
    parser.add_argument("--pretokenize", type=Path, help=argparse.SUPPRESS)  # internal: one isolated run
    args = parser.parse_args()
    if args.pretokenize:
        return pretokenize_once(args.pretokenize)
    corpora = [p.resolve() for p in (args.corpus or default_corpora())]
    repeat = 1 if args.quick else args.repeat
    previous = json.loads(args.out.read_text()) if args.only and args.out.exists() else {}
    run = {s: args.only in (None, s) for s in ("stages", "hygiene", "e2e", "scaling", "loader", "scale")}
    run["scaling"] = run["scaling"] and not args.quick
    run["scale"] = run["scale"] and not args.quick
    with tempfile.TemporaryDirectory(prefix="albor-bench-") as tmp:
        work = Path(tmp)
        results: dict[str, Any] = {
            "date": date.today().isoformat(),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
            "command": " ".join(["python", "bench/run.py", *sys.argv[1:]]),
            "corpora": [str(p) for p in corpora],
            "repeat": repeat,
        }
        sections = ("stages", "hygiene", "end_to_end", "end_to_end_before", "profile", "scaling", "loader", "scale")
        results.update({k: v for k, v in previous.items() if k in sections})
        if run["stages"]:
            print("stages ...", file=sys.stderr)
            results["stages"] = bench_stages(corpora, work / "stages", repeat, args.tok_chars)
        if run["hygiene"]:
            print("hygiene and near dedup ...", file=sys.stderr)
            results["hygiene"] = bench_hygiene(corpora, work / "hygiene", repeat)
        if run["e2e"]:
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
        if run["scaling"]:
            print("scaling 1x / 2x ...", file=sys.stderr)
            results["scaling"] = bench_scaling(corpora, work / "scaling", repeat)
        if run["scale"]:
            print(f"scale: ~{args.scale_mb} MB and twice that, local and ray ...", file=sys.stderr)
            results["scale"] = bench_scale(corpora, work / "scale", args.scale_mb)
        if run["loader"]:
            print("loader ...", file=sys.stderr)
            results["loader"] = bench_loader(corpora, work / "loader", repeat)
    results["self_rusage_maxrss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    print(f"\nresults: {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

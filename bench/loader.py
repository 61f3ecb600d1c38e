"""The loader: `albor_pipeline.dataset` against a bare `np.memmap` reader of the same token file."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from albor_pipeline.dataset import Batches, Sequences
from albor_pipeline.runtime.artifacts import StageManifest, record
from albor_pipeline.runtime.bucket import Bucket
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import CorpusSpec, FimSpec, HoldoutSpec, SplitMixSpec, TokenizerSpec
from albor_pipeline.stages.corpus.corpus import build_corpus
from albor_pipeline.stages.documents.documents import build_documents
from albor_pipeline.stages.fim.fim import apply_fim
from albor_pipeline.stages.ingest.ingest import ingest_source
from albor_pipeline.stages.mix.mix import mix_documents
from albor_pipeline.stages.tokenizer.tokenizer import build_tokenizer
from bench.common import LOCAL, code_sources, median_time


def bench_loader(corpora: list[Path], work: Path, repeat: int) -> dict[str, Any]:
    """`albor_pipeline.dataset` against a bare `np.memmap` reader of the same token file:
    sequential and shuffled sequences/s, a torch DataLoader with 2 workers, and resume cost."""
    corpus, seq_len = build_loader_corpus(corpora, work)
    tokens = np.memmap(corpus / "tokens.bin", dtype=np.uint16, mode="r")
    n = len(tokens) // seq_len
    res: dict[str, Any] = {"loader_sequences": n, "loader_seq_len": seq_len}
    res.update(_read_timings(corpus, tokens, seq_len, repeat))
    res.update(_bucket_timings(corpus, work, repeat))
    try:
        from torch.utils.data import DataLoader
    except ImportError:
        res["torch"] = "not installed (pip install torch)"
        return res
    res.update(_dataloader_timings(DataLoader, corpus, tokens, seq_len, repeat))
    res.update(_resume_timings(corpus, n, repeat))
    return res


def build_loader_corpus(corpora: list[Path], work: Path) -> tuple[Path, int]:
    """The first corpus through every stage to a `parquet` + `nanogpt` corpus: its dir, seq_len."""
    src = code_sources(corpora[:1])[0]
    shards = ingest_source(src, work / "ingested", StageIO(work)).artifacts
    build_documents([(src.name, work / a.path) for a in shards], HoldoutSpec(), work / "documents", StageIO(work))
    mix_documents(work / "documents" / "train", SplitMixSpec(), [src.name], work / "mixed", StageIO(work))
    apply_fim(work / "mixed", FimSpec(), work / "fim", StageIO(work))
    tok_spec = TokenizerSpec(vocab_size=32768, max_chars=5_000_000)
    build_tokenizer(work / "mixed", work / "documents" / "val", tok_spec, work / "tok", StageIO(work))
    spec = CorpusSpec(formats=["parquet", "nanogpt"])
    corpus = work / "corpus"
    build_corpus(work / "fim", work / "tok/tokenizer.json", spec, corpus, StageIO(work, LOCAL))
    return corpus, spec.seq_len


def _read_timings(corpus: Path, tokens: np.memmap, seq_len: int, repeat: int) -> dict[str, Any]:
    """Sequences/s of `Batches` (batch 8, `xy=True`) over each source, sequential and
    shuffled, and of a bare memmap slice, in this process."""
    n = len(tokens) // seq_len
    order = np.random.default_rng(0).permutation(n)

    def bare(indices: np.ndarray) -> None:
        for i in indices:
            np.asarray(tokens[i * seq_len : (i + 1) * seq_len], dtype=np.int64)

    def ours(source: str, shuffle: bool) -> None:
        for _ in Batches(Sequences(corpus, source=source, xy=True), 8, shuffle=shuffle):
            pass

    res: dict[str, Any] = {}
    timings: dict[str, Callable[[], None]] = {
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
    return res


def _dataloader_timings(data_loader: Any, corpus: Path, tokens: np.memmap, seq_len: int, repeat: int) -> dict[str, Any]:
    """Sequences/s through a torch DataLoader (`data_loader`) with 2 workers: a bare map-style
    memmap dataset against `Batches.loader()` over each source."""
    n = len(tokens) // seq_len

    class Bare:  # the plain map-style dataset a user would write over the same file
        def __len__(self) -> int:
            return n

        def __getitem__(self, i: int) -> np.ndarray:
            return np.asarray(tokens[i * seq_len : (i + 1) * seq_len], dtype=np.int64)

    def bare_loader() -> None:
        dataset: Any = Bare()
        for _ in data_loader(dataset, batch_size=8, shuffle=True, num_workers=2):
            pass

    def our_loader(source: str) -> None:
        for _ in Batches(Sequences(corpus, source=source, xy=True), 8).loader(num_workers=2):
            pass

    res: dict[str, Any] = {"dataloader_2_workers_bare_seq_s": round(n / median_time(bare_loader, repeat)[0])}
    for source in ("parquet", "tokens"):
        res[f"dataloader_2_workers_{source}_seq_s"] = round(n / median_time(partial(our_loader, source), repeat)[0])
        res[f"dataloader_2_workers_{source}_vs_bare"] = round(
            res[f"dataloader_2_workers_{source}_seq_s"] / res["dataloader_2_workers_bare_seq_s"], 3
        )
    return res


def _resume_timings(corpus: Path, n: int, repeat: int) -> dict[str, Any]:
    """The first batch after load_state_dict at mid-epoch vs the first batch of a fresh epoch."""

    def first_batch(state: dict[str, Any] | None) -> None:
        batches = Batches(Sequences(corpus, xy=True), 8)
        if state:
            batches.load_state_dict(state)
        next(iter(batches))

    mid = {**Batches(Sequences(corpus), 8).state_dict(), "batch": n // 16, "consumed": 8 * (n // 16)}
    return {
        "resume_first_batch_ms": round(1000 * median_time(lambda: first_batch(mid), repeat)[0], 2),
        "fresh_first_batch_ms": round(1000 * median_time(lambda: first_batch(None), repeat)[0], 2),
    }


@contextmanager
def _s3_server() -> Iterator[str]:
    """moto's S3 server on loopback (the test extra), with the AWS settings pointing at it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}
    os.environ.update({**env, "AWS_DEFAULT_REGION": "us-east-1"})
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(endpoint, timeout=1).close()
                break
            except OSError:
                time.sleep(0.25)
        yield endpoint
    finally:
        server.terminate()
        server.wait()


def _bucket_timings(corpus: Path, work: Path, repeat: int) -> dict[str, Any]:
    """Sequences/s of `Batches` over the Parquet shards read from a bucket (moto on loopback)
    through the read cache, cold (every shard fetched and hashed) and warm, against local reads."""
    if shutil.which("moto_server", path=str(Path(sys.executable).parent)) is None:
        return {"bucket": "moto[server] not installed (pip install -e '.[test]')"}
    import boto3

    layout = Layout(work / "bucket_copy")
    shutil.rmtree(layout.root, ignore_errors=True)
    shutil.copytree(corpus, layout.root / "corpus" / "train")
    files = sorted(p for p in (layout.root / "corpus" / "train").iterdir() if p.is_file())
    cache = work / "read_cache"
    with _s3_server() as endpoint:
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
        uri = "s3://bench/run"
        manifest = StageManifest(stage="corpus/train", outputs=[record(p, layout.root) for p in files])
        Bucket(uri, layout).publish(manifest)

        def read(where: str | Path, cold: bool) -> None:
            if cold:
                shutil.rmtree(cache, ignore_errors=True)
            for _ in Batches(Sequences(where, xy=True, cache_dir=cache), 8, shuffle=False):
                pass

        n = len(Sequences(corpus))
        local = n / median_time(lambda: read(corpus, False), repeat)[0]
        cold = n / median_time(lambda: read(f"{uri}/corpus/train", True), repeat)[0]
        warm = n / median_time(lambda: read(f"{uri}/corpus/train", False), repeat)[0]
    mb = sum(p.stat().st_size for p in files) / 1e6
    return {
        "bucket_corpus_mb": round(mb, 1),
        "bucket_cold_seq_s": round(cold),
        "bucket_warm_seq_s": round(warm),
        "bucket_local_seq_s": round(local),
        "bucket_cold_vs_local": round(cold / local, 3),
        "bucket_warm_vs_local": round(warm / local, 3),
    }

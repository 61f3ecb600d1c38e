"""The loader: `albor_pipeline.dataset` against a bare `np.memmap` reader of the same token file."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from albor_pipeline.dataset import Batches, Sequences
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import CorpusSpec, FimSpec, HoldoutSpec, SplitMixSpec, TokenizerSpec
from albor_pipeline.stages.corpus.corpus import build_corpus
from albor_pipeline.stages.dedup.documents import build_documents
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

    mid = {**Batches(Sequences(corpus), 8).state_dict(), "batch": n // 16}
    return {
        "resume_first_batch_ms": round(1000 * median_time(lambda: first_batch(mid), repeat)[0], 2),
        "fresh_first_batch_ms": round(1000 * median_time(lambda: first_batch(None), repeat)[0], 2),
    }

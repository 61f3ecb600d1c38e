"""Stage throughput against bare libraries: ingest, documents, mix and FIM; tokenizer training
against a bare `BpeTrainer`; the pretokenize stage against bare HF, tiktoken, gigatoken and
datatrove encoders; long runs against a code file of the same size."""

from __future__ import annotations

import shutil
import statistics
import time
from functools import partial
from pathlib import Path
from typing import Any

import gigatoken
import pyarrow.compute as pc
import pyarrow.parquet as pq
import tiktoken
from tiktoken_ext.openai_public import r50k_pat_str
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from albor_pipeline.runtime.executor import LocalExecutor, WorkerPool, cpu_count
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import CorpusSpec, FimSpec, HoldoutSpec, SplitMixSpec, TokenizerSpec
from albor_pipeline.stages.corpus.corpus import build_corpus
from albor_pipeline.stages.documents.documents import build_documents
from albor_pipeline.stages.fim.fim import apply_fim
from albor_pipeline.stages.mix.mix import mix_documents
from albor_pipeline.stages.tokenizer.tokenizer import build_tokenizer, iter_texts, train_bpe
from albor_pipeline.text.encode import FAST_BYTELEVEL_PATTERN, GigatokenEncoder
from albor_pipeline.text.vocab import SPECIALS, added_tokens, plain_tokenizer, token_to_bytes
from bench.common import DATATROVE_MISSING, ingest_code, median_time


def bench_stages(corpora: list[Path], work: Path, repeat: int, tok_chars: int) -> dict[str, Any]:
    """Stage throughput, tokenizer training vs bare, pretokenize vs bare HF / tiktoken."""
    res = _data_stages(corpora, work, repeat)
    training, bare_tok = _tokenizer_training(work, repeat, tok_chars)
    res.update(training)
    res.update(_tokenizer_quality(work, bare_tok))
    tok_path = work / "tok" / "tokenizer.json"
    tok = Tokenizer.from_file(str(tok_path))
    pool = WorkerPool(cpu_count())  # the run's workers, started by an earlier stage of a run
    list(LocalExecutor(cpu_count(), pool=pool).map(abs, range(cpu_count())))
    try:
        small = _head_split(work / "fim", work / "fim_60mb", SMALL_SPLIT_BYTES)
        res["pretokenize_60mb"] = _pretokenize(work, tok, small, _texts(small), repeat, pool)[0]
        full = _head_split(work / "fim", work / "fim_250mb", FULL_SPLIT_BYTES)
        fim_texts = _texts(full)
        pretokenize, stage_s = _pretokenize(work, tok, full, fim_texts, repeat, pool)
    finally:
        pool.close()
    res.update(pretokenize)
    res["adversarial"] = bench_adversarial(corpora, tok, repeat)
    res.update(bench_datatrove(work, tok_path, fim_texts, stage_s, repeat))
    return res


def _data_stages(corpora: list[Path], work: Path, repeat: int) -> dict[str, Any]:
    """Ingest, documents (exact dedup + holdout), mix and FIM: MB/s of their input text."""
    res: dict[str, Any] = {}
    sec, (ingested, text_bytes) = median_time(lambda: ingest_code(corpora, work), repeat)
    res["corpus_mb"] = round(text_bytes / 1e6, 1)
    res["ingest_mb_s"] = round(text_bytes / 1e6 / sec, 1)
    holdout = HoldoutSpec(val_fraction=0.01, test_fraction=0.01)
    sec, _ = median_time(lambda: build_documents(ingested, holdout, work / "documents", StageIO(work)), repeat)
    res["documents_mb_s"] = round(text_bytes / 1e6 / sec, 1)
    names = [name for name, _ in ingested]
    sec, _ = median_time(
        lambda: mix_documents(work / "documents" / "train", SplitMixSpec(), names, work / "mixed", StageIO(work)),
        repeat,
    )
    mixed_bytes = sum(len(t.encode()) for b in iter_texts(work / "mixed") for t in b)
    res["mix_mb_s"] = round(mixed_bytes / 1e6 / sec, 1)
    sec, _ = median_time(lambda: apply_fim(work / "mixed", FimSpec(), work / "fim", StageIO(work)), repeat)
    res["fim_mb_s"] = round(mixed_bytes / 1e6 / sec, 1)
    return res


def _tokenizer_training(work: Path, repeat: int, tok_chars: int) -> tuple[dict[str, Any], Tokenizer]:
    """Tokenizer training: the asset's function vs a bare BpeTrainer on the same text. Also
    returns the bare-trained tokenizer, for `_tokenizer_quality`."""
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
        result = build_tokenizer(work / "mixed", work / "documents" / "val", spec, work / "tok", StageIO(work))
        ours.append(result.timings["train_seconds"])  # training alone, as the bare run measures
        ours_total = time.perf_counter() - start
        bare.append(median_time(bare_train, 1)[0])
    res: dict[str, Any] = {
        "tokenizer_train_chars": sum(map(len, texts)),
        "tokenizer_train_s": round(statistics.median(ours), 2),
        "tokenizer_asset_total_s": round(ours_total, 2),
        "tokenizer_bare_train_s": round(statistics.median(bare), 2),
        "tokenizer_train_ratio": round(statistics.median(ours) / statistics.median(bare), 3),
        "tokenizer_trainer": spec.trainer.value,
    }
    return res, bare_tok[0]


def _tokenizer_quality(work: Path, bare_tok: Tokenizer) -> dict[str, Any]:
    """Quality: bytes/token on the val documents, ours against the bare HF-trained tokenizer."""
    res: dict[str, Any] = {}
    val_texts = [t for b in iter_texts(work / "documents" / "val") for t in b]
    val_bytes = sum(len(t.encode()) for t in val_texts)
    for name, trained_tok in (
        ("ours", Tokenizer.from_file(str(work / "tok" / "tokenizer.json"))),
        ("bare", bare_tok),
    ):
        n = sum(len(e.ids) for e in plain_tokenizer(trained_tok).encode_batch_fast(val_texts, add_special_tokens=False))
        res[f"tokenizer_{name}_val_bytes_per_token"] = round(val_bytes / n, 4)
    return res


SMALL_SPLIT_BYTES = 60_000_000  # issue 33's size: a split where fixed costs show
# The large size, at most: the bare baselines hold every text's ids in memory (tiktoken's
# lists, ~40 bytes a token), so a larger corpus is measured on its first 250 MB.
FULL_SPLIT_BYTES = 250_000_000


def _head_split(fim: Path, out: Path, text_bytes: int) -> Path:
    """The first row groups of the FIM'd split holding `text_bytes` of text, as shards of
    their own (the stage's tasks are row groups, as on the whole split)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    total, k = 0, 0
    for path in sorted(fim.glob("*.parquet")):
        shard = pq.ParquetFile(path)
        for g in range(shard.num_row_groups):
            table = shard.read_row_group(g)
            pq.write_table(table, out / f"part-{k:05d}-0000.parquet", row_group_size=max(1, len(table)))
            total, k = total + (pc.sum(pc.binary_length(table.column("text"))).as_py() or 0), k + 1
            if total >= text_bytes:
                return out
    return out


def _texts(fim: Path) -> list[str]:
    return pq.read_table(fim, columns=["text"]).column(0).to_pylist()


def _pretokenize(
    work: Path, tok: Tokenizer, fim: Path, fim_texts: list[str], repeat: int, pool: WorkerPool
) -> tuple[dict[str, Any], float]:
    """The whole stage (read, encode, pack, write) of split `fim` (whose texts are `fim_texts`)
    on the run's started workers, as a run runs it, vs bare encoders on the same documents;
    also the stage's median seconds."""
    tok_path = work / "tok" / "tokenizer.json"
    fim_bytes = sum(len(t.encode()) for t in fim_texts)
    plain = plain_tokenizer(tok)
    # Bare tiktoken as a user would set it up: the same ranks, GPT-2's pattern as tiktoken ships
    # it, and its faster spelling (FAST_BYTELEVEL_PATTERN); bare gigatoken: the engine the stage runs.
    tiktoken_enc = bare_tiktoken(tok, r50k_pat_str)
    tiktoken_fast = bare_tiktoken(tok, FAST_BYTELEVEL_PATTERN)
    gigatoken_enc = gigatoken.Tokenizer.from_json(plain.to_str())
    threads = cpu_count()
    executor = LocalExecutor(threads, pool=pool)
    hf_s, stage_s, tk_s, tkf_s, gt_s = [], [], [], [], []
    out = work / "corpus"
    for _ in range(repeat):
        hf_s.append(median_time(lambda: _hf_batches(plain, fim_texts), 1)[0])
        tk_s.append(median_time(lambda: tiktoken_enc.encode_ordinary_batch(fim_texts, num_threads=threads), 1)[0])
        tkf_s.append(median_time(lambda: tiktoken_fast.encode_ordinary_batch(fim_texts, num_threads=threads), 1)[0])
        gt_s.append(median_time(lambda: gigatoken_enc.encode_batch(fim_texts, parallel=True), 1)[0])
        shutil.rmtree(out, ignore_errors=True)  # a cold build's corpus
        sec, corpus = median_time(lambda: build_corpus(fim, tok_path, CorpusSpec(), out, StageIO(work, executor)), 1)
        stage_s.append(sec)
    stage = statistics.median(stage_s)
    res: dict[str, Any] = {
        "pretokenize_encoder": corpus.encoder,
        "pretokenize_mb": round(fim_bytes / 1e6, 1),
        "pretokenize_stage_mb_s": round(fim_bytes / 1e6 / stage, 2),
    }
    for key, times in (("hf_encode_batch_fast", hf_s), ("tiktoken", tk_s), ("tiktoken_fast_pattern", tkf_s)):
        res[f"bare_{key}_mb_s"] = round(fim_bytes / 1e6 / statistics.median(times), 2)
    res["bare_gigatoken_mb_s"] = round(fim_bytes / 1e6 / statistics.median(gt_s), 2)
    res["pretokenize_vs_hf"] = round(statistics.median(hf_s) / stage, 2)
    res["pretokenize_vs_tiktoken"] = round(statistics.median(tk_s) / stage, 2)
    res["pretokenize_vs_tiktoken_fast_pattern"] = round(statistics.median(tkf_s) / stage, 2)
    res["pretokenize_vs_gigatoken"] = round(statistics.median(gt_s) / stage, 3)
    return res, stage


HF_BATCH = 2048


def _hf_batches(tok: Tokenizer, texts: list[str]) -> None:
    """HF's `encode_batch_fast` a slice at a time: its `Encoding` objects take ~200 bytes a
    token, so one call over the whole split would hold ~12 GB at 230 MB of text."""
    for i in range(0, len(texts), HF_BATCH):
        tok.encode_batch_fast(texts[i : i + HF_BATCH], add_special_tokens=False)


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
            row["train_s"] = median_time(partial(_train_on, base, text, spec), repeat)[0]
            res[f"{size // 1000} kB {name}"] = row
        for name in list(inputs)[1:]:
            row, ref = res[f"{size // 1000} kB {name}"], res[f"{size // 1000} kB code"]
            row["encode_vs_code"] = round(row["encode_s"] / ref["encode_s"], 2)
            row["train_vs_code"] = round(row["train_s"] / ref["train_s"], 2)
    return res


def _train_on(base: str, text: str, spec: TokenizerSpec) -> Tokenizer:
    """`train_bpe` on one batch: `base` and `text`."""
    return train_bpe(iter([[base, text]]), spec)


def bench_datatrove(work: Path, tok_path: Path, texts: list[str], stage_s: float, repeat: int) -> dict[str, Any]:
    """datatrove's DocumentTokenizer on the same documents, when datatrove is installed."""
    try:
        from datatrove.data import Document
        from datatrove.pipeline.tokens import DocumentTokenizer
    except ImportError:
        return {"datatrove": DATATROVE_MISSING}

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

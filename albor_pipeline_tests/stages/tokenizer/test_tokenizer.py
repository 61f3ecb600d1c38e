from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from albor_pipeline.runtime.artifacts import sha256_file
from albor_pipeline.runtime.executor import TASKS
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.taskstore import TaskStore, reusing
from albor_pipeline.spec import REPO_ROOT, ChatTokens, OpenAIBaseline, TokenizerSpec
from albor_pipeline.stages.tokenizer.checks import check_tiktoken_ids
from albor_pipeline.stages.tokenizer.tokenizer import (
    CL100K_PATTERN,
    FIRST_MISSES,
    O200K_PATTERN,
    TokenizerError,
    build_tokenizer,
    consumer_tokenizer,
    evaluate,
    openai_counter,
    openai_encoding,
    tiktoken_encoding,
    token_bytes_pt,
    tokenizer_from_merges,
)
from albor_pipeline.summaries.tokenizer import card_tokenizer
from albor_pipeline.text.vocab import FIM_TOKENS, plain_tokenizer, token_to_bytes
from albor_pipeline_tests.support import LITERAL, STDLIB, write_docs


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("tok")
    files = sorted((STDLIB / "email").rglob("*.py")) + sorted((STDLIB / "asyncio").rglob("*.py"))
    texts = [p.read_text(encoding="utf-8") for p in files]
    texts.append(LITERAL * 200)  # literal special-token strings, many times over
    val = [p.read_text(encoding="utf-8") for p in sorted((STDLIB / "json").rglob("*.py"))] + [LITERAL, "é🐍\r\n\t"]
    return write_docs(tmp / "train.parquet", texts), write_docs(tmp / "val.parquet", val)


@pytest.fixture(scope="module")
def trained(corpus_files, tmp_path_factory):
    out = tmp_path_factory.mktemp("tokout")
    result = build_tokenizer(*corpus_files, TokenizerSpec(vocab_size=2000), out / "tokenizer", StageIO(out))
    return out / "tokenizer", result


def test_tokenizer_layout_specials_and_files(trained):
    out, result = trained
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert [tok.token_to_id(t) for t in ("<unk>", "<s>", "</s>", "<pad>")] == [0, 1, 2, 3]
    assert [tok.token_to_id(t) for t in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")] == [2000, 2001, 2002]
    assert tok.get_vocab_size() == 2003
    vocab = json.loads((out / "vocab.json").read_text(encoding="utf-8"))
    assert len(vocab) == 2000 and vocab["</s>"] == 2
    merges = (out / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert merges[0].startswith("#version") and all(len(m.split(" ")) == 2 for m in merges[1:])
    assert len(merges) - 1 == result.summary.merges == 2000 - 4 - 256
    lengths = np.load(out / "token_bytes.npy")
    assert lengths.shape == (2003,) and lengths[:4].tolist() == [0, 0, 0, 0] and lengths[2000:].tolist() == [0, 0, 0]
    for token, idx in list(vocab.items())[4:50]:
        assert lengths[idx] == len(token_to_bytes(token))
    # literal special strings were never learned as (parts of) a single token
    learned = [t for t, i in vocab.items() if i >= 4]
    assert not any(s in token_to_bytes(t) for t in learned for s in (b"</s>", b"<|fim", b"<pad>", b"<s>"))


def test_report_roundtrips_every_val_document(trained):
    _, result = trained
    report = result.summary
    assert report.val_documents == report.roundtrip_ok > 5
    assert report.keywords_single_token == sum(report.keyword_coverage.values())
    assert report.keyword_coverage[" def"] and report.keyword_coverage[" return"]
    assert 2.0 < report.bytes_per_token < 6.0


def test_transformers_loads_tokenizer_json(trained):
    import transformers

    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(trained[0] / "tokenizer.json"))
    assert fast.convert_tokens_to_ids("</s>") == 2
    assert fast.convert_tokens_to_ids("<|fim_middle|>") == 2002
    text = "def f(self):\n    return 'é🐍'\n"
    assert fast.decode(fast(text)["input_ids"]) == text


def test_baseline_tokenizers_are_compared(trained, corpus_files, tmp_path):
    out, _ = trained
    baseline = str(out / "tokenizer.json")
    spec = TokenizerSpec(vocab_size=1000, baselines=(out / "tokenizer.json",))
    small = build_tokenizer(*corpus_files, spec, tmp_path / "t", StageIO(tmp_path)).summary
    rows = {r["text"]: r for r in small.comparison}
    assert set(rows) == {"s", "all"} and rows["all"]["bytes"] == small.val_bytes
    assert rows["all"]["ours_tokens"] == small.val_tokens
    # a smaller vocabulary needs more tokens than the 2000-token baseline: a negative difference
    assert rows["all"][f"{baseline}_tokens"] < rows["all"]["ours_tokens"] and rows["all"][f"{baseline}_diff_pct"] < 0


def openai_ranks() -> dict[OpenAIBaseline, Path]:
    """OpenAI's ranks as `make install` fetches them (PyPI's openai-whisper sdist, bpe-openai wheel)."""
    base = REPO_ROOT / "data" / "baselines"
    ranks = {
        OpenAIBaseline.gpt2: base / "gpt2.tiktoken",
        OpenAIBaseline.gpt4: base / "cl100k_base.tiktoken",
        OpenAIBaseline.gpt4o: base / "o200k_base.tiktoken",
    }
    if not all(p.exists() for p in ranks.values()):
        subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "fetch_ranks.py"), str(base)], check=True)
    if not all(p.exists() for p in ranks.values()):
        pytest.fail(f"{base}: the ranks could not be fetched from PyPI (see scripts/fetch_ranks.py)")
    return ranks


def test_openai_baselines_are_the_models_own(monkeypatch):
    """Each ranks file with its split pattern gives the model's ids, and the patterns are the
    ones tiktoken builds (its functions would fetch the ranks: they get an empty table here)."""
    import tiktoken_ext.openai_public as public

    ranks = openai_ranks()
    code = "def f(x):\n    return x"
    expected = {
        OpenAIBaseline.gpt2: [4299, 277, 7, 87, 2599, 198, 220, 220, 220, 1441, 2124],
        OpenAIBaseline.gpt4: [755, 282, 2120, 997, 262, 471, 865],
        OpenAIBaseline.gpt4o: [1314, 285, 4061, 1883, 271, 622, 1215],
    }
    for name, path in ranks.items():
        assert openai_encoding(name, path).encode_ordinary(code) == expected[name], name
    monkeypatch.setattr(public, "load_tiktoken_bpe", lambda *a, **k: {})
    assert public.cl100k_base()["pat_str"] == CL100K_PATTERN
    assert public.o200k_base()["pat_str"] == O200K_PATTERN


def test_openai_baselines_are_compared_per_source(corpus_files, tmp_path):
    ranks = openai_ranks()
    for name, path in ranks.items():
        counter = openai_counter(name, path)
        assert not isinstance(counter, str) and counter(["Hello world", ""]) == [2, 0]
    train, val = corpus_files
    mixed_val = tmp_path / "val.parquet"
    table = pq.read_table(val)
    sources = ["json" if i % 2 else "other" for i in range(table.num_rows)]
    pq.write_table(table.set_column(1, "source", pa.array(sources)), mixed_val)
    report = build_tokenizer(
        train, mixed_val, TokenizerSpec(vocab_size=2000, openai_ranks=ranks), tmp_path / "t", StageIO(tmp_path)
    ).summary
    rows = {r["text"]: r for r in report.comparison}
    assert list(rows) == ["json", "other", "all"] and report.comparison_notes == []
    texts = table.column("text").to_pylist()
    for name, path in ranks.items():
        enc = openai_encoding(name, path)
        assert (
            rows["json"][f"{name.value}_tokens"] + rows["other"][f"{name.value}_tokens"]
            == rows["all"][f"{name.value}_tokens"]
        )
        assert rows["all"][f"{name.value}_tokens"] == sum(len(enc.encode_ordinary(t)) for t in texts)
        assert rows["all"][f"{name.value}_bytes_per_token"] == round(
            rows["all"]["bytes"] / rows["all"][f"{name.value}_tokens"], 3
        )
    card = {row["tokenizer"]: row for row in card_tokenizer(report)}  # the dataset card's table
    assert list(card) == ["ours", "gpt2", "gpt4", "gpt4o"]
    for name in ("gpt2", "gpt4", "gpt4o"):
        diff = rows["all"][f"{name}_diff_pct"]
        assert card[name]["ours against it"] == f"{abs(diff)} % {'fewer' if diff >= 0 else 'more'} tokens"
    # Each baseline counts in a task of its own, reused while the val text and its file stay
    # the same: a retrained tokenizer (another vocabulary) counts only its own tokens again.
    store = TaskStore(str(Layout(tmp_path / "data").task_store), 10**9)

    def retrained(vocab: int) -> tuple[list[dict[str, Any]], tuple[int, int]]:
        mark = TASKS.mark()
        with reusing(store, "tokenizer"):
            spec = TokenizerSpec(vocab_size=vocab, openai_ranks=ranks)
            built = build_tokenizer(train, mixed_val, spec, tmp_path / f"v{vocab}", StageIO(tmp_path)).summary
        seen = TASKS.since(mark)["_baseline_tokens"]
        return built.comparison, (int(seen["tasks"]), int(seen["reused"]))

    first, (tasks, reused) = retrained(2000)
    assert first == report.comparison and (tasks, reused) == (3, 0)
    again, (tasks, reused) = retrained(1500)
    assert (tasks, reused) == (3, 3) and [r["ours_tokens"] for r in again] != [r["ours_tokens"] for r in first]
    theirs = [{k: v for k, v in r.items() if k.startswith(("gpt", "bytes")) and "diff" not in k} for r in again]
    assert theirs == [{k: v for k, v in r.items() if k.startswith(("gpt", "bytes")) and "diff" not in k} for r in first]
    # A missing ranks file, or one of another model, skips that baseline with a note; the build goes on.
    wrong = {OpenAIBaseline.gpt2: tmp_path / "nope.tiktoken", OpenAIBaseline.gpt4o: ranks[OpenAIBaseline.gpt4]}
    report = build_tokenizer(
        train, mixed_val, TokenizerSpec(vocab_size=2000, openai_ranks=wrong), tmp_path / "t2", StageIO(tmp_path)
    ).summary
    assert not {"gpt2_tokens", "gpt4o_tokens"} & set(report.comparison[-1])
    assert "not found" in report.comparison_notes[0] and "'Hello world' as [9906, 1917]" in report.comparison_notes[1]


TRAIN_SCRIPT = """
import sys
from pathlib import Path
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.stages.tokenizer.tokenizer import build_tokenizer
from albor_pipeline.spec import REPO_ROOT, TokenizerSpec
out = Path(sys.argv[3])
build_tokenizer(Path(sys.argv[1]), Path(sys.argv[2]), TokenizerSpec(vocab_size=2000), out, StageIO(out))
"""


@pytest.mark.parametrize("threads", ["1", "2"])
def test_training_is_byte_identical_across_runs_and_thread_counts(trained, corpus_files, tmp_path, threads):
    env = {**os.environ, "RAYON_NUM_THREADS": threads}
    subprocess.run([sys.executable, "-c", TRAIN_SCRIPT, *map(str, corpus_files), str(tmp_path)], check=True, env=env)
    names = ("tokenizer.json", "vocab.json", "merges.txt", "token_bytes.npy", "tokenizer.pkl", "token_bytes.pt")
    for name in (*names, "report.json"):
        assert (tmp_path / name).read_bytes() == (trained[0] / name).read_bytes(), name


def test_the_feed_is_one_serial_pass_and_a_rebuild_writes_only_edited_row_groups(corpus_files, tmp_path):
    """The trainer's text, written a task per row group, is byte for byte what one serial pass
    over the split writes (`iter_texts` with the same cap and budget, every part followed by
    the separator), the budget ending inside a row group included (the row groups past it
    never read); with a task store, an edited
    document's row group is the only one written again, and the tokenizer equals a cold one."""
    from albor_pipeline.stages.tokenizer.feed import feed_files, text_bytes
    from albor_pipeline.stages.tokenizer.tokenizer import iter_texts, train_bpe, train_from_files

    table = pq.read_table(corpus_files[0])
    split = tmp_path / "train"
    split.mkdir()
    for i, part in enumerate((table.slice(0, 40), table.slice(40))):
        pq.write_table(part, split / f"part-{i:05d}-0000.parquet", row_group_size=9)
    groups = sum(pq.ParquetFile(f).num_row_groups for f in split.iterdir())
    total = sum(len(t[:3000]) for t in table.column("text").to_pylist())
    for cap, budget in ((None, None), (3000, None), (3000, total // 2), (None, 10**12), (None, 7)):
        feed = feed_files(split, tmp_path / f"spool-{cap}-{budget}", StageIO(tmp_path), cap, budget)
        serial = [t for batch in iter_texts(split, budget, cap) for t in batch]
        assert b"".join(f.read_bytes() for f in feed.files) == text_bytes(serial), (cap, budget)
        assert (feed.docs, feed.chars) == (len(serial), sum(map(len, serial)))
    # A budget spent exactly at a document's end: the empty documents after it are not fed.
    for texts, rows in ((["abc", "de", "", "xyz", "q"], 3), (["abc", "de", "", "", "", "xyz"], 2)):
        exact = tmp_path / f"exact{rows}"
        exact.mkdir()
        pq.write_table(pa.table({"text": texts}), exact / "part-00000-0000.parquet", row_group_size=rows)
        feed = feed_files(exact, tmp_path / f"spool-exact{rows}", StageIO(tmp_path), None, 5)
        assert b"".join(f.read_bytes() for f in feed.files) == b"abc\xffde\xff" and feed.docs == 2
    mark = TASKS.mark()  # under a budget, the row groups past it are never read
    assert 0 < len(feed_files(split, tmp_path / "half", StageIO(tmp_path), 3000, total // 2).files) < groups
    assert TASKS.since(mark)["train_text"]["tasks"] < groups

    store = TaskStore(str(Layout(tmp_path / "data").task_store), 10**9)
    spec = TokenizerSpec(vocab_size=1000)

    def trained(name: str) -> tuple[str, int]:
        mark = TASKS.mark()
        with reusing(store, "tokenizer"):
            feed = feed_files(split, tmp_path / name, StageIO(tmp_path / "data"), None, None)
        seen = TASKS.since(mark)["train_text"]
        return train_from_files(feed.files, spec).to_str(), int(seen["tasks"] - seen["reused"])

    assert trained("first")[1] == groups
    texts = table.column("text").to_pylist()
    texts[50] = texts[50].replace("def ", "def  ", 1)
    pq.write_table(
        table.set_column(0, "text", pa.array(texts)).slice(40), split / "part-00001-0000.parquet", row_group_size=9
    )
    tok, ran = trained("edited")
    assert ran == 1
    assert tok == train_bpe(iter([texts]), spec).to_str()


def test_empty_train_split_is_a_clear_error(corpus_files, tmp_path):
    empty = write_docs(tmp_path / "empty.parquet", [])
    with pytest.raises(TokenizerError, match="train split is empty"):
        build_tokenizer(empty, corpus_files[1], TokenizerSpec(vocab_size=1000), tmp_path / "t", StageIO(tmp_path))
    assert not (tmp_path / "t" / "tokenizer.json").exists()


def test_gigatoken_trainer_learns_the_hf_trainers_merges(corpus_files):
    """The default trainer is gigatoken's: on real code it learns exactly the merges, in the
    same order, that tokenizers' BpeTrainer learns from the same text, so both tokenizers
    encode every val document to the same tokens (ids differ only by vocabulary order)."""
    import json

    from albor_pipeline.stages.tokenizer.tokenizer import train_bpe
    from albor_pipeline.text.vocab import plain_tokenizer

    train = pq.read_table(corpus_files[0]).column("text").to_pylist()
    val = pq.read_table(corpus_files[1]).column("text").to_pylist()
    toks = {
        kind: train_bpe(iter([train]), TokenizerSpec(vocab_size=3000, trainer=kind, min_frequency=0))
        for kind in ("gigatoken", "hf")
    }
    merges = {kind: json.loads(tok.to_str())["model"]["merges"] for kind, tok in toks.items()}
    assert len(merges["gigatoken"]) == 3000 - 4 - 256
    assert merges["gigatoken"] == merges["hf"]
    for kind, tok in toks.items():
        toks[kind] = plain_tokenizer(tok)
    for text in val:
        ours, hf = (toks[k].encode(text, add_special_tokens=False).tokens for k in ("gigatoken", "hf"))
        assert ours == hf


def test_long_runs_reach_the_trainer_cut_into_bounded_parts():
    """Adversarial input (one 1 MB run of a letter, a long base64-like blob, a run of
    newlines, multi-byte characters): the parts rejoin to the text, none holds a run over
    the limit, cuts fall on character starts, and ordinary code comes back whole."""
    import re

    from albor_pipeline.stages.tokenizer.feed import LONG_RUN, split_long_runs
    from albor_pipeline.stages.tokenizer.tokenizer import train_bpe

    code = (STDLIB / "json" / "decoder.py").read_text(encoding="utf-8")
    assert split_long_runs(code) == [code]
    blob = "x = '" + "QUJD" * 20_000 + "'\n"
    for text in ("a" * 1_000_000, code + blob + code, "\n" * 5000 + code, "é🐍" * 3000, "x" * 999 + "é" * 2):
        parts = split_long_runs(text)
        assert "".join(parts) == text
        for part in parts:
            runs = re.findall(r"[ \t\n\r\x0b\x0c]+|[^ \t\n\r\x0b\x0c]+", part)
            assert max(len(r.encode("utf-8")) for r in runs) <= LONG_RUN, (text[:20], len(part))
    assert len(split_long_runs("a" * 1_000_000)) == 1000
    # Training on a 1 MB run finishes like ordinary text (untimed here; bench/ times it),
    # and no learned token is longer than the limit.
    tok = train_bpe(iter([[code, "a" * 1_000_000]]), TokenizerSpec(vocab_size=600))
    assert max(len(token_to_bytes(t)) for t in tok.get_vocab(with_added_tokens=False)) <= LONG_RUN


CHAT_TOKENS = tuple(ChatTokens().model_dump().values())  # nanochat's names
# Text that stresses the split pattern: contractions, digits, whitespace runs (up to 100 kB:
# ~1 MB before other text overflows tiktoken's regex stack), scripts, emoji, literal specials.
EDGE_TEXTS = [
    "Hello world! This is a test.\nNumbers: 123, 4567, 89\nContractions: I'm, you're, it's\n"
    "Special chars: @#$%^&*()\nUnicode: 你好世界 🌍",  # nanochat's tok_train check
    "it's IT'S we'll WE'LL they've 'd 's 't x''s 3.14e-10 1_000_000 0x1F",
    "Привет, мир! مرحبا بالعالم नमस्ते दुनिया こんにちは 한국어 ἀρχή e\u0301 👩‍💻🐍\u200d",
    "x   \n\n\t  \r\n  y  ",
    " " * 100_000 + "x",
    "\n" * 100_000 + "x",
    "a" * 100_000,
    "<|bos|> <|user_start|>hi<|user_end|> </s><s><pad><unk> <|fim_prefix|>",
    LITERAL,
    "é🐍\r\n\t",
    "",
]


def real_documents() -> list[str]:
    """Every top-level stdlib module, every other stdlib file holding non-ASCII text (a few
    are not UTF-8: replaced characters are text too), and EDGE_TEXTS."""
    files = sorted(STDLIB.glob("*.py"))
    nested = (p for p in STDLIB.rglob("*.py") if p.parent != STDLIB and "site-packages" not in p.parts)
    files += sorted(p for p in nested if not p.read_bytes().isascii())
    return [p.read_bytes().decode("utf-8", errors="replace") for p in files] + EDGE_TEXTS


@pytest.fixture(scope="module", params=["gigatoken", "hf"])
def nanochat_dir(request, corpus_files, tmp_path_factory) -> Path:
    """A folder built with each trainer and nanochat's chat tokens, as the Dagster stage builds it."""
    out = tmp_path_factory.mktemp(f"nanochat-{request.param}")
    spec = TokenizerSpec(vocab_size=4000, trainer=request.param)
    build_tokenizer(*corpus_files, spec, out / "tokenizer", StageIO(out), appended=(*FIM_TOKENS, *CHAT_TOKENS))
    return out / "tokenizer"


def _first_difference(texts: list[str], ours: list[list[int]], ref: list[list[int]]) -> str:
    i = next(i for i, (a, b) in enumerate(zip(ours, ref)) if a != b)
    at = next((k for k, (a, b) in enumerate(zip(ours[i], ref[i])) if a != b), min(len(ours[i]), len(ref[i])))
    return f"doc {i} ({texts[i][:40]!r}) token {at}: pkl {ours[i][at : at + 4]}, json {ref[i][at : at + 4]}"


def test_nanochat_loads_the_folder_and_encodes_like_tokenizer_json(nanochat_dir):
    """nanochat's `RustBPETokenizer.from_directory` and `get_token_bytes`, step by step: the
    unpickled Encoding gives every real document tokenizer.json's ids (tiktoken merges by the
    rank of a pair's result, HF by its merge list: they must agree), `<|bos|>` is `<s>` and the
    chat tokens keep their ids, and token_bytes.pt is token_bytes.npy, as tok_train derives it."""
    import torch

    with open(nanochat_dir / "tokenizer.pkl", "rb") as fh:
        enc = pickle.load(fh)
    tok = Tokenizer.from_file(str(nanochat_dir / "tokenizer.json"))
    assert enc.n_vocab == tok.get_vocab_size() == 4000 + len(FIM_TOKENS) + len(CHAT_TOKENS)
    assert enc.encode_single_token("<|bos|>") == tok.token_to_id("<s>") == 1
    for name in (*CHAT_TOKENS, *FIM_TOKENS, "<unk>", "</s>", "<pad>"):
        assert enc.encode_single_token(name) == tok.token_to_id(name), name
    texts = real_documents()
    ours = [enc.encode_ordinary(text) for text in texts]  # nanochat's encode(str)
    ref = [e.ids for e in plain_tokenizer(tok).encode_batch_fast(texts, add_special_tokens=False)]
    assert len(texts) > 250 and sum(map(len, ref)) > 1_000_000
    differ = [i for i, (a, b) in enumerate(zip(ours, ref)) if a != b]
    assert not differ, f"{len(differ)}/{len(texts)} documents differ; first: {_first_difference(texts, ours, ref)}"
    assert enc.encode_ordinary_batch(texts[:50], num_threads=2) == ref[:50]  # nanochat's encode(list)
    assert all(enc.decode(ids) == text for ids, text in zip(ours, texts))
    with open(nanochat_dir / "token_bytes.pt", "rb") as fh:
        token_bytes = torch.load(fh, map_location="cpu")
    assert token_bytes.dtype == torch.int32
    assert token_bytes.tolist() == np.load(nanochat_dir / "token_bytes.npy").tolist()
    special = {enc.encode_single_token(s) for s in enc.special_tokens_set}
    derived = [0 if i in special else len(enc.decode_single_token_bytes(i)) for i in range(enc.n_vocab)]
    assert token_bytes.tolist() == derived
    report = json.loads((nanochat_dir / "report.json").read_text(encoding="utf-8"))
    assert report["tiktoken_ids_equal"] == report["val_documents"] and "note" not in report


def test_nanochat_files_are_recorded_artifacts(trained):
    out, result = trained
    recorded = {Path(a.path).name: a.sha256 for a in result.artifacts}
    for name in ("tokenizer.pkl", "token_bytes.pt"):
        assert recorded[name] == sha256_file(out / name), name
    with open(out / "tokenizer.pkl", "rb") as fh:
        enc = pickle.load(fh)
    assert enc.name == "albor" and enc.special_tokens_set == {"<unk>", "<|bos|>", "</s>", "<pad>", *FIM_TOKENS}


def test_token_bytes_pt_is_written_without_torch_and_torch_loads_it(corpus_files, tmp_path, monkeypatch):
    """token_bytes.pt needs no torch to write (its import costs 0.7 s of a retraining): torch
    loads it as it loads its own `torch.save` (weights-only, and memory-mapped), at every size
    of the pickle's integer; and the bytes are what `torch.save` would hold."""
    import torch

    with monkeypatch.context() as patched:
        patched.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
        out = tmp_path / "t"
        result = build_tokenizer(*corpus_files, TokenizerSpec(vocab_size=600), out, StageIO(tmp_path))
    assert "token_bytes.pt" in {Path(a.path).name for a in result.artifacts}
    expected = np.load(out / "token_bytes.npy")
    for loaded in (
        torch.load(out / "token_bytes.pt", weights_only=True),
        torch.load(out / "token_bytes.pt", mmap=True),
    ):
        assert loaded.dtype == torch.int32 and loaded.tolist() == expected.tolist()
    for n in (0, 1, 255, 256, 65535, 65536, 200_019):  # the pickle's 1-, 2- and 4-byte integers
        lengths = np.arange(n, dtype=np.int64) % 23
        loaded = torch.load(io.BytesIO(token_bytes_pt(lengths)), weights_only=True)
        saved = io.BytesIO()
        torch.save(torch.tensor(lengths, dtype=torch.int32), saved)
        assert torch.equal(loaded, torch.tensor(lengths, dtype=torch.int32)), n
        theirs = zipfile.ZipFile(saved)
        ours = zipfile.ZipFile(io.BytesIO(token_bytes_pt(lengths)))
        assert all(ours.read(n_) == theirs.read(n_) for n_ in ours.namelist()), n  # torch's own records


def test_a_tiktoken_disagreement_is_reported(tmp_path):
    """Merges HF and tiktoken read differently: `abc` is learned as (ab, c) but `bc` merges
    first, so HF ends `abc` as [a, bc] where tiktoken takes the whole piece `abc`; a
    whitespace run of 1 MB before text makes tiktoken panic. Both count as mismatches, and
    the check fails on them."""
    tok = tokenizer_from_merges([(b"b", b"c"), (b"a", b"b"), (b"ab", b"c")])
    tok.add_special_tokens(list(FIM_TOKENS))
    enc = tiktoken_encoding(tok)
    assert enc.encode_single_token("<|bos|>") == 1 and enc.encode_ordinary("abc") == [262]
    assert plain_tokenizer(tok).encode("abc").ids == [4 + ord("a"), 260]
    tok.save(str(tmp_path / "tokenizer.json"))
    report = evaluate(
        tok, iter([["abc", " " * 1_000_000 + "x", "abx"]]), enc, consumer_tokenizer(tmp_path / "tokenizer.json")
    ).report
    assert report["tiktoken_ids_equal"] == 1 and report["tiktoken_mismatches_first"] == [0, 1]
    (tmp_path / "r.json").write_text(json.dumps({**report, "val_documents": 3}), encoding="utf-8")
    outcome = check_tiktoken_ids(tmp_path / "r.json")
    assert not outcome.passed and "1/3" in outcome.description


def test_mismatches_are_counted_and_the_first_20_named(tmp_path):
    """Every mismatching val document is counted, across batches; the report names the first
    FIRST_MISSES (`abc` is one, as in the test above)."""
    tok = tokenizer_from_merges([(b"b", b"c"), (b"a", b"b"), (b"ab", b"c")])
    tok.add_special_tokens(list(FIM_TOKENS))
    tok.save(str(tmp_path / "tokenizer.json"))
    batches = iter([["abc"] * 15, ["abx", *["abc"] * 15]])
    report = evaluate(tok, batches, tiktoken_encoding(tok), consumer_tokenizer(tmp_path / "tokenizer.json")).report
    assert report["val_documents"] == 31 and report["tiktoken_ids_equal"] == 1
    assert report["tiktoken_mismatches_first"] == [*range(15), *range(16, 16 + FIRST_MISSES - 15)]
    assert report["roundtrip_ok"] == report["json_ids_equal"] == 31 and report["json_mismatches_first"] == []


def test_the_ids_check_loads_tokenizer_json_as_a_user_does(trained, corpus_files, tmp_path):
    """The build compares the corpus's ids with tokenizer.json loaded as a raw `tokenizers` user
    loads it (docs/outputs.md): `from_file`, `encode_special_tokens = True`, no added specials.
    The val text holds literal `</s>`, `<s>`, `<pad>` and `<|fim_prefix|>`; loaded without the
    setting, the file turns them into special ids, and the check fails on that document."""
    out, result = trained
    assert result.summary.json_ids_equal == result.summary.val_documents
    assert check_tiktoken_ids(out / "report.json").passed
    user = Tokenizer.from_file(str(out / "tokenizer.json"))
    user.encode_special_tokens = True
    corpus = plain_tokenizer(user)  # the corpus stage's reference encoder
    assert user.encode(LITERAL, add_special_tokens=False).ids == corpus.encode(LITERAL, add_special_tokens=False).ids
    with open(out / "tokenizer.pkl", "rb") as fh:
        enc = pickle.load(fh)
    val = [LITERAL, "def f():\n    return 1\n"]
    unset = Tokenizer.from_file(str(out / "tokenizer.json"))  # encode_special_tokens left False
    report = evaluate(unset, iter([val]), enc, unset).report
    assert report["json_ids_equal"] == 1 and report["json_mismatches_first"] == [0]
    (tmp_path / "r.json").write_text(json.dumps({**report, "val_documents": 2}), encoding="utf-8")
    outcome = check_tiktoken_ids(tmp_path / "r.json")
    assert not outcome.passed and "1/2" in outcome.description

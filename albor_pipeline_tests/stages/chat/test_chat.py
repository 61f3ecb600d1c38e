"""The chat/SFT branch on real text: conversations cleaned, rendered with nanochat's
semantics, exported, checked; eval sets; synthetic tasks; the pretraining ids untouched."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import REPO_ROOT, ChatSpec, ChatTokens, CorpusSpec, SourceSpec, SyntheticTask, TokenizerSpec
from albor_pipeline.stages.chat.checks import check_choice_ids, check_max_tokens, check_sft_mask, check_sft_structure
from albor_pipeline.stages.chat.sft import build_eval, build_sft
from albor_pipeline.stages.corpus.corpus import build_corpus
from albor_pipeline.stages.ingest.ingest import ingest_source
from albor_pipeline.stages.ingest.synthetic import generate, read_words
from albor_pipeline.stages.tokenizer.tokenizer import build_tokenizer
from albor_pipeline.text.chat import ChatError, ChatIds, calculator_parts, clean_conversation, conversation_json
from albor_pipeline.text.datafiles import IngestError
from albor_pipeline.text.documents import DOC_SCHEMA, text_sha256
from albor_pipeline.text.vocab import FIM_TOKENS, plain_tokenizer
from albor_pipeline_tests.support import STDLIB, small_spec_dict, write_docs, write_spec

SAMPLES = REPO_ROOT / "data" / "samples"
TOKENS = ChatTokens()
CHAT_TOKENS = tuple(TOKENS.model_dump().values())


@pytest.fixture(scope="module")
def chat_tok(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tokenizer with the chat tokens, trained on real stdlib code; and one without them."""
    tmp = tmp_path_factory.mktemp("chat_tok")
    texts = [p.read_text(encoding="utf-8") for p in sorted((STDLIB / "asyncio").rglob("*.py"))]
    train = write_docs(tmp / "train.parquet", texts)
    val = write_docs(tmp / "val.parquet", texts[:3])
    spec = TokenizerSpec(vocab_size=1500)
    build_tokenizer(train, val, spec, tmp / "with_chat", StageIO(tmp), appended=(*FIM_TOKENS, *CHAT_TOKENS))
    build_tokenizer(train, val, spec, tmp / "fim_only", StageIO(tmp))
    return tmp / "with_chat" / "tokenizer.json", tmp / "fim_only" / "tokenizer.json"


def _conversations_file(path: Path, conversations: list[list[dict]], source: str = "chat") -> Path:
    texts = [conversation_json(c) for c in conversations]
    table = pa.table(
        {
            "text": texts,
            "source": [source] * len(texts),
            "file": ["f"] * len(texts),
            "sha256": list(map(text_sha256, texts)),
        },
        schema=DOC_SCHEMA,
    )
    pq.write_table(table, path)
    return path


def _rendered(tok_path: Path, tmp: Path, conversations: list[list[dict]], **chat: object) -> list[dict]:
    mixed = _conversations_file(tmp / "mixed.parquet", conversations)
    build_sft(mixed, tok_path, ChatSpec(**chat), "auto", tmp / "sft", StageIO(tmp))
    return pq.read_table(tmp / "sft" / "part-00000.parquet").to_pylist()


def test_render_follows_nanochat(chat_tok, tmp_path):
    tok_path, _ = chat_tok
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_path))
    ids = ChatIds.of(tok, TOKENS)
    plain = plain_tokenizer(tok)

    def enc(text: str) -> list[int]:
        return plain.encode(text, add_special_tokens=False).ids

    cleanup: Counter[str] = Counter()
    raw = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "How many r in strawberry?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "python", "text": "'strawberry'.count('r')"},
                {"type": "python_output", "text": "3"},
                {"type": "text", "text": " It is 3."},
            ],
        },
        {"role": "user", "content": "And in 'berry'?"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "Thanks"},  # unanswered: trimmed
    ]
    messages = clean_conversation(raw, calculator=False, cleanup=cleanup)
    assert cleanup == {"folded_system": 1, "trimmed_trailing_user": 1}
    assert messages is not None and messages[0]["content"] == "Be brief.\n\nHow many r in strawberry?"
    (row,) = _rendered(tok_path, tmp_path, [messages])
    expected: list[tuple[int, int]] = [(ids.bos, 0), (ids.user_start, 0)]
    expected += [(i, 0) for i in enc("Be brief.\n\nHow many r in strawberry?")]
    expected += [(ids.user_end, 0), (ids.assistant_start, 0)]
    expected += [(i, 1) for i in enc("Let me check.")]
    expected += [(ids.python_start, 1), *[(i, 1) for i in enc("'strawberry'.count('r')")], (ids.python_end, 1)]
    expected += [(ids.output_start, 0), *[(i, 0) for i in enc("3")], (ids.output_end, 0)]
    expected += [(i, 1) for i in enc(" It is 3.")] + [(ids.assistant_end, 1)]
    expected += [(ids.user_start, 0), *[(i, 0) for i in enc("And in 'berry'?")], (ids.user_end, 0)]
    expected += [(ids.assistant_start, 0), *[(i, 1) for i in enc("2")], (ids.assistant_end, 1)]
    assert list(zip(row["input_ids"], row["loss_mask"])) == expected
    # the chat tokens come right after the FIM sentinels: no existing id moved
    fim = [tok.token_to_id(t) for t in FIM_TOKENS]
    assert [tok.token_to_id(t) for t in CHAT_TOKENS] == list(range(fim[-1] + 1, fim[-1] + 9))


def test_literal_specials_non_ascii_and_an_empty_turn_render_as_text(chat_tok, tmp_path):
    tok_path, _ = chat_tok
    literal = "Is <|assistant_start|> or </s> or <|python_start|> special? Ünïcödé 🐍 中文"
    rows = _rendered(
        tok_path,
        tmp_path,
        [
            [{"role": "user", "content": literal}, {"role": "assistant", "content": literal}],
            [{"role": "user", "content": "Say nothing."}, {"role": "assistant", "content": ""}],
        ],
    )
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_path))
    ids = ChatIds.of(tok, TOKENS)
    first = rows[0]["input_ids"]
    specials = [i for i in first if i in ids.structural or i == tok.token_to_id("</s>")]
    assert specials == [ids.bos, ids.user_start, ids.user_end, ids.assistant_start, ids.assistant_end]
    trained = [i for i, m in zip(first, rows[0]["loss_mask"]) if m and i not in ids.structural]
    assert tok.decode(trained, skip_special_tokens=False) == literal
    assert rows[1]["input_ids"][-2:] == [ids.assistant_start, ids.assistant_end]
    assert rows[1]["loss_mask"][-2:] == [0, 1]
    paths = [tmp_path / "sft" / "part-00000.parquet"]
    assert check_sft_mask(paths, tok_path, TOKENS, 2048).passed
    assert check_sft_structure(paths, tok_path, TOKENS, 2048).passed


@pytest.mark.parametrize("overlong", ["skip", "truncate"])
def test_overlong_conversations_are_skipped_or_truncated(chat_tok, tmp_path, overlong):
    tok_path, _ = chat_tok
    code = (STDLIB / "json" / "decoder.py").read_text(encoding="utf-8")
    long = [{"role": "user", "content": "Explain this."}, {"role": "assistant", "content": code}]
    short = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]
    mixed = _conversations_file(tmp_path / "mixed.parquet", [long, short])
    result = build_sft(
        mixed, tok_path, ChatSpec(max_tokens=256, overlong=overlong), "auto", tmp_path / "sft", StageIO(tmp_path)
    )
    rows = pq.read_table(tmp_path / "sft" / "part-00000.parquet").to_pylist()
    paths = [tmp_path / "sft" / "part-00000.parquet"]
    if overlong == "skip":
        assert result.summary.skipped_overlong == 1 and result.summary.truncated == 0 and len(rows) == 1
    else:
        assert result.summary.truncated == 1 and len(rows) == 2 and len(rows[0]["input_ids"]) == 256
    assert check_max_tokens(paths, 256).passed
    assert check_sft_mask(paths, tok_path, TOKENS, 256).passed  # truncated: a prefix of the assistant text
    assert check_sft_structure(paths, tok_path, TOKENS, 256).passed


def test_checks_catch_a_wrong_mask_and_a_misplaced_special(chat_tok, tmp_path):
    tok_path, _ = chat_tok
    convo = [{"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "Seven is prime."}]
    _rendered(tok_path, tmp_path, [convo, [*convo[:1], {"role": "assistant", "content": "Two."}]])
    path = tmp_path / "sft" / "part-00000.parquet"
    table = pq.read_table(path)
    rows = table.to_pylist()
    rows[0]["loss_mask"][2] = 1  # a user token trained on
    rows[1]["input_ids"].insert(3, rows[1]["input_ids"][-1])  # assistant_end inside the user turn
    rows[1]["loss_mask"].insert(3, 1)  # with its own mask: only the structure check sees it
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), bad)
    mask = check_sft_mask([bad], tok_path, TOKENS, 2048)
    structure = check_sft_structure([bad], tok_path, TOKENS, 2048)
    assert not mask.passed and mask.metadata["mismatched"] == 1
    assert not structure.passed and structure.metadata["bad"] == 1


def test_sft_export_is_deterministic_and_matches_the_parquet_rows(chat_tok, tmp_path):
    tok_path, _ = chat_tok
    words = read_words((SAMPLES / "words.txt").read_text(encoding="utf-8"))
    conversations = list(generate(SyntheticTask.spelling_bee, words, 50, seed=3))
    mixed = _conversations_file(tmp_path / "mixed.parquet", conversations)
    spec = ChatSpec(shard_tokens=2000)  # several .bin shards
    a = build_sft(mixed, tok_path, spec, "auto", tmp_path / "a", StageIO(tmp_path))
    b = build_sft(mixed, tok_path, spec, "hf", tmp_path / "b", StageIO(tmp_path))  # other encoder, same ids
    assert [x.sha256 for x in a.artifacts] == [x.sha256 for x in b.artifacts]
    side = json.loads((tmp_path / "a" / "sft.json").read_text())
    assert len(side["shards"]) > 1 and side["conversations"] == 50 and side["dtype"] == "uint16"
    ids = np.concatenate([np.fromfile(tmp_path / "a" / s["file"], dtype=np.uint16) for s in side["shards"]])
    mask = np.concatenate([np.fromfile(tmp_path / "a" / s["mask"], dtype=np.uint8) for s in side["shards"]])
    table = pq.read_table(tmp_path / "a" / "part-00000.parquet")
    assert ids.tolist() == [i for row in table.column("input_ids").to_pylist() for i in row]
    assert mask.tolist() == [m for row in table.column("loss_mask").to_pylist() for m in row]
    assert side["tokens"] == len(ids) == a.summary.tokens and 0.5 < a.summary.trained_fraction < 1


def test_chat_ingestion_cleans_counts_and_names_bad_rows(tmp_path):
    good = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}
    lines = [
        good,
        {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]},  # no assistant
        {"messages": [*good["messages"], {"role": "user", "content": "bye"}]},  # trailing user
        {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "<<2+2=4>>4"}]},
    ]
    path = tmp_path / "c" / "chat.jsonl.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress("".join(json.dumps(x) + "\n" for x in lines).encode()))
    src = SourceSpec(name="c", kind="chat", path=path.parent, calculator=True)
    result = ingest_source(src, tmp_path / "out", StageIO(tmp_path))
    texts = pq.read_table(tmp_path / "out").column("text").to_pylist()
    assert result.summary.documents == 3 and result.summary.cleanup == {
        "folded_system": 1,
        "no_assistant": 1,
        "trimmed_trailing_user": 1,
    }
    assert json.loads(texts[2])[1]["content"] == [
        {"type": "python", "text": "2+2"},
        {"type": "python_output", "text": "4"},
        {"type": "text", "text": "4"},
    ]
    bad_rows = [
        ({"messages": [{"role": "robot", "content": "x"}]}, "message 0: unknown role 'robot'"),
        ({"messages": [{"role": "user", "content": 3}]}, r"message 0 \(user\): content must be a string"),
        ({"messages": [{"role": "user"}]}, "message 0: missing content"),
        (
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": [{"type": "image"}]}]},
            "message 1 part 0: type must be one of",
        ),
        ({"messages": [{"role": "assistant", "content": "a"}]}, "message 0: assistant where user is expected"),
        ({"conversation": []}, "missing field 'messages'"),
    ]
    for i, (row, message) in enumerate(bad_rows):
        bad = tmp_path / f"bad{i}" / "chat.jsonl"
        bad.parent.mkdir()
        bad.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
        with pytest.raises(IngestError, match=rf"chat.jsonl:2: {message}"):
            ingest_source(SourceSpec(name="b", kind="chat", path=bad.parent), tmp_path / "b", StageIO(tmp_path))
        if "messages" in row:  # on_error: skip counts it instead (a missing field stays an error)
            skip = SourceSpec(name="b", kind="chat", path=bad.parent, on_error="skip")
            counted = ingest_source(skip, tmp_path / "b", StageIO(tmp_path))
            assert counted.summary.skipped == {"malformed": 1} and counted.summary.documents == 1
    # Parquet chat files: messages as a list of structs
    pq.write_table(pa.Table.from_pylist([good, good | {"id": 2}]), tmp_path / "p.parquet")
    assert (
        ingest_source(
            SourceSpec(name="p", kind="chat", path=tmp_path / "p.parquet"), tmp_path / "po", StageIO(tmp_path)
        ).summary.documents
        == 2
    )


def test_calculator_parts_split_like_nanochat_gsm8k():
    text = "She has 3*4=<<3*4=12>>12 apples, then <<12+1=13>>13."
    assert calculator_parts(text) == [
        {"type": "text", "text": "She has 3*4="},
        {"type": "python", "text": "3*4"},
        {"type": "python_output", "text": "12"},
        {"type": "text", "text": "12 apples, then "},
        {"type": "python", "text": "12+1"},
        {"type": "python_output", "text": "13"},
        {"type": "text", "text": "13."},
    ]
    with pytest.raises(ChatError, match="a system message must be followed by a user message"):
        clean_conversation(
            [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}], False, Counter()
        )


def test_synthetic_tasks_are_seeded_and_correct():
    words = read_words((SAMPLES / "words.txt").read_text(encoding="utf-8"))
    assert len(words) > 1000
    first = list(generate(SyntheticTask.spelling_bee, words, 200, seed=0))
    assert first == list(generate(SyntheticTask.spelling_bee, words, 200, seed=0))
    assert first[:50] == list(generate(SyntheticTask.spelling_bee, words, 50, seed=0))  # growing keeps the past
    assert first != list(generate(SyntheticTask.spelling_bee, words, 200, seed=1))
    for messages in first:
        parts = messages[1]["content"]
        call = next(p["text"] for p in parts if p["type"] == "python")
        output = next(p["text"] for p in parts if p["type"] == "python_output")
        assert str(eval(call)) == output  # the tool output is what the call returns
        assert parts[-1]["text"].endswith(f"#### {output}")
    spelled = next(generate(SyntheticTask.simple_spelling, words, 1, seed=0))[1]["content"]
    word, letters = spelled.split(":")
    assert letters.split(",") == list(word)


def test_eval_set_renders_for_completion(chat_tok, tmp_path):
    tok_path, _ = chat_tok
    src = SourceSpec(name="mc", kind="mc", path=SAMPLES / "python_mc.jsonl")
    ingest_source(src, tmp_path / "mc", StageIO(tmp_path))
    result = build_eval(tmp_path / "mc", tok_path, TOKENS, "auto", tmp_path / "eval.parquet", StageIO(tmp_path))
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_path))
    rows = pq.read_table(tmp_path / "eval.parquet").to_pylist()
    assert result.summary.items == len(rows) == 152
    letters = [tok.token_to_id(x) for x in "ABCD"]
    raw = [json.loads(line) for line in (SAMPLES / "python_mc.jsonl").read_text().splitlines()]
    for row, item in zip(rows, raw):
        assert row["input_ids"][0] == tok.token_to_id("<s>") and row["input_ids"][-1] == tok.token_to_id(
            TOKENS.assistant_start
        )
        assert row["choice_token_ids"] == letters
        answer = item["answer"] if isinstance(item["answer"], int) else "ABCD".index(item["answer"])
        assert row["answer"] == answer
        prompt = tok.decode(row["input_ids"][2:-3], skip_special_tokens=False)
        assert prompt.startswith("Multiple Choice question: ") and f"- {item['choices'][0]}=A\n" in prompt
    assert check_choice_ids(tmp_path / "eval.parquet").passed
    bad = tmp_path / "bad_mc.jsonl"
    bad.write_text(json.dumps({"question": "q", "choices": ["a", "b"], "answer": 5}) + "\n")
    with pytest.raises(IngestError, match=r"bad_mc.jsonl:1: answer must be a choice index"):
        ingest_source(SourceSpec(name="m", kind="mc", path=bad), tmp_path / "m", StageIO(tmp_path))


def test_eval_items_keep_their_own_labels_and_prompts_are_cut_at_max_tokens(chat_tok, tmp_path):
    """nanochat parity: an ARC item answers with its own labels ("1".."4"), and a prompt longer
    than `max_tokens` is cut there before `<|assistant_start|>`, as render_for_completion cuts."""
    from tokenizers import Tokenizer

    tok_path, _ = chat_tok
    tok = Tokenizer.from_file(str(tok_path))
    items = [
        {"question": "Which is a list?", "choices": ["[1]", "(1,)", "{1}", "1"], "labels": list("1234"), "answer": "1"},
        {"question": "Which keyword defines a function? " * 60, "choices": ["def", "fun"], "answer": "A"},
    ]
    src = tmp_path / "mc.jsonl"
    src.write_text("".join(json.dumps(i) + "\n" for i in items))
    ingest_source(SourceSpec(name="mc", kind="mc", path=src), tmp_path / "mc", StageIO(tmp_path))
    out = tmp_path / "eval.parquet"
    result = build_eval(tmp_path / "mc", tok_path, TOKENS, "auto", out, StageIO(tmp_path), max_tokens=120)
    arc, long = pq.read_table(out).to_pylist()
    assert arc["choice_token_ids"] == [tok.token_to_id(x) for x in "1234"] and arc["answer"] == 0
    assert "- [1]=1\n- (1,)=2\n" in tok.decode(arc["input_ids"], skip_special_tokens=False)
    assert long["choice_token_ids"] == [tok.token_to_id(x) for x in "AB"]
    assert len(long["input_ids"]) == 121 and long["input_ids"][-1] == tok.token_to_id(TOKENS.assistant_start)
    assert result.summary.truncated == 1 and len(arc["input_ids"]) <= 121
    assert check_choice_ids(out).passed
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**items[0], "labels": ["1", "1", "2", "3"]}) + "\n")
    with pytest.raises(IngestError, match=r"bad.jsonl:1: labels must be distinct"):
        ingest_source(SourceSpec(name="b", kind="mc", path=bad), tmp_path / "b", StageIO(tmp_path))


def test_chat_tokens_move_no_pretraining_id(chat_tok, pipeline, tmp_path):
    """A tokenizer with chat tokens appended encodes the pretraining corpus to the same ids
    (byte-identical shards) and has the same merges as one without them."""
    with_chat, fim_only = chat_tok
    assert (with_chat.parent / "merges.txt").read_bytes() == (fim_only.parent / "merges.txt").read_bytes()
    fim = pipeline[0] / "fim"
    spec = CorpusSpec(seq_len=128, formats=["parquet", "nanogpt"])
    a = build_corpus(fim, with_chat, spec, tmp_path / "a", StageIO(tmp_path))
    b = build_corpus(fim, fim_only, spec, tmp_path / "b", StageIO(tmp_path))
    shards = [x for x in zip(a.artifacts, b.artifacts) if x[0].path.endswith((".parquet", ".bin"))]
    assert shards and all(x.sha256 == y.sha256 for x, y in shards)


def _megatron_documents(folder: Path) -> list[list[int]]:
    """Each document's ids in a corpus's Megatron export (uint16: a small vocab)."""
    raw = (folder / "megatron.idx").read_bytes()
    n = int(np.frombuffer(raw[18:26], "<u8")[0])
    ends = np.cumsum(np.frombuffer(raw, "<i4", count=n, offset=34))
    return [doc.tolist() for doc in np.split(np.fromfile(folder / "megatron.bin", np.uint16), ends[:-1])]


@pytest.mark.slow
@pytest.mark.graph
def test_chat_branch_builds_in_the_graph_and_leaves_the_corpus_alone(reference, tmp_path, monkeypatch):
    """The small spec with chat sources and without (the session's reference build): every
    check passes, the pretraining artifacts are byte-identical but for the `<s>` each corpus
    document starts with (`corpus.bos` defaults on with chat sources), and a second build of
    the chat branch is byte-identical."""
    from albor_pipeline.runtime.artifacts import read_manifest
    from albor_pipeline.runtime.layout import Layout
    from albor_pipeline.spec import load_spec
    from albor_pipeline_tests.support import materialize_all

    chat_sources = [
        {"name": "python_chat", "kind": "chat", "path": str(SAMPLES / "python_chat.jsonl")},
        {"name": "bee", "kind": "synthetic", "task": "spelling_bee", "path": str(SAMPLES / "words.txt"), "rows": 300},
        {"name": "python_mc", "kind": "mc", "path": str(SAMPLES / "python_mc.jsonl")},
    ]
    chat = load_spec(write_spec(tmp_path / "chat.yaml", small_spec_dict(chat_sources)))
    builds = {"plain": (reference.result, reference.out)}
    for name in ("chat", "chat_again"):
        builds[name] = (materialize_all(chat, tmp_path / name), tmp_path / name)
    results = {}
    for name, (result, out) in builds.items():
        checks = result.get_asset_check_evaluations()
        assert all(c.passed for c in checks), [c.check_name for c in checks if not c.passed]
        results[name] = {
            stage: {a.path: a.sha256 for a in read_manifest(Layout(out), stage).outputs}
            for stage in (
                "documents",
                "mixed/train",
                "tokenizer",
                "corpus/train",
                "sft/train",
                "sft/val",
                "eval/python_mc",
            )
            if (out / "manifests").joinpath(stage.replace("/", "__") + ".json").exists()
        }
    for stage in ("documents", "mixed/train", "tokenizer"):
        assert results["plain"][stage] == results["chat"][stage], stage
    plain, with_bos = (_megatron_documents(out / "corpus" / "train") for out in (reference.out, tmp_path / "chat"))
    assert chat.corpus.bos and [[1, *doc] for doc in plain] == with_bos
    assert results["chat"] == results["chat_again"]
    assert {"sft/train", "sft/val", "eval/python_mc"} <= set(results["chat"])
    prov = (tmp_path / "chat" / "PROVENANCE.md").read_text()
    assert "## Chat" in prov and "trimmed_trailing_user" in prov
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    sft = datasets.load_dataset(str(tmp_path / "chat"), "sft", cache_dir=str(tmp_path / "hf"))
    rows = pq.read_table(tmp_path / "chat" / "sft" / "train" / "part-00000.parquet")
    assert (
        set(sft) == {"train", "validation"}
        and sft["train"]["loss_mask"][:2] == rows.column("loss_mask").to_pylist()[:2]
    )
    assert (
        datasets.load_dataset(str(tmp_path / "chat"), "eval_python_mc", cache_dir=str(tmp_path / "hf"))["test"].num_rows
        == 152
    )
    # Packed SFT in the graph: its blocking checks pass, the card's `sft` config loads the rows.
    raw = small_spec_dict(chat_sources)
    raw["chat"] = {"max_tokens": 1024, "packing": "best_fit"}
    packed = materialize_all(load_spec(write_spec(tmp_path / "packed.yaml", raw)), tmp_path / "packed")
    checks = {c.check_name: c.passed for c in packed.get_asset_check_evaluations() if c.asset_key.path[0] == "sft"}
    assert checks["packed_rows"] and checks["loss_mask"] and all(checks.values()), checks
    rows = pq.read_table(tmp_path / "packed" / "sft" / "train" / "part-00000.parquet")
    sft = datasets.load_dataset(str(tmp_path / "packed"), "sft", cache_dir=str(tmp_path / "hf"))
    assert sft["train"]["doc_lens"] == rows.column("doc_lens").to_pylist() and len(rows[0][0]) == 1024
    assert "rows of 1,024 tokens" in (tmp_path / "packed" / "PROVENANCE.md").read_text()

"""Packed SFT (`chat.packing: best_fit`): nanochat's packer, with the loss mask kept exact."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from albor_pipeline.dataset import IGNORE_INDEX, Sequences
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import ChatSpec, SyntheticTask
from albor_pipeline.stages.chat.checks import check_max_tokens, check_packed_rows, check_sft_mask, check_sft_structure
from albor_pipeline.stages.chat.pack import Conversation, best_fit
from albor_pipeline.stages.chat.sft import build_sft
from albor_pipeline.stages.ingest.synthetic import generate, read_words
from albor_pipeline.text.chat import clean_conversation

from .test_chat import SAMPLES, TOKENS, _conversations_file, chat_tok  # noqa: F401  (the module's fixture)


def _nanochat_rows(lengths: list[int], capacity: int, window: int) -> list[list[int]]:
    """nanochat's `sft_data_generator_bos_bestfit` row filling (chat_sft.py), one pass with no
    epoch wrap-around: the oracle `best_fit` is held to."""
    pending = list(enumerate(lengths))
    buffer: list[tuple[int, int]] = []
    rows: list[list[int]] = []
    while pending or buffer:
        row, used = [], 0
        while True:
            while len(buffer) < window and pending:
                buffer.append(pending.pop(0))
            best_idx, best_len = -1, 0
            for i, (_, n) in enumerate(buffer):
                if n <= capacity - used and n > best_len:
                    best_idx, best_len = i, n
            if best_idx < 0:
                break
            k, n = buffer.pop(best_idx)
            row.append(k)
            used += n
        rows.append(row)
    return rows


def test_best_fit_packs_as_nanochat_does():
    rng = random.Random(7)
    for capacity, window, n in ((64, 4, 200), (512, 100, 2000), (100, 1, 50)):
        lengths = [rng.randint(1, capacity) for _ in range(n)]
        convs = [
            Conversation(np.zeros(k, np.uint32), np.ones(k, np.uint8), "s", str(i), "") for i, k in enumerate(lengths)
        ]
        ours = [[int(c.sha256) for c in row] for row in best_fit(convs, capacity, window)]
        assert ours == _nanochat_rows(lengths, capacity, window)
        assert sorted(k for row in ours for k in row) == list(range(n))  # every conversation once


def _real_conversations() -> list[list[dict]]:
    """The shipped Python chat sample (cleaned) and seeded spelling conversations."""
    out = []
    for line in (SAMPLES / "python_chat.jsonl").read_text(encoding="utf-8").splitlines():
        messages = clean_conversation(json.loads(line)["messages"], False, Counter())
        if messages:
            out.append(messages)
    words = read_words((SAMPLES / "words.txt").read_text(encoding="utf-8"))
    return out + list(generate(SyntheticTask.spelling_bee, words, 300, seed=1))


@pytest.fixture(scope="module")
def packed(chat_tok, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, object]:  # noqa: F811
    """(packed dir, unpacked dir, packed result) of the same real conversations."""
    tmp = tmp_path_factory.mktemp("packed")
    mixed = _conversations_file(tmp / "mixed.parquet", _real_conversations())
    spec = ChatSpec(max_tokens=512, overlong="truncate", packing="best_fit", shard_tokens=20_000)
    result = build_sft(mixed, chat_tok[0], spec, "auto", tmp / "packed", StageIO(tmp))
    rows = ChatSpec(**{**spec.model_dump(), "packing": "none"})
    build_sft(mixed, chat_tok[0], rows, "auto", tmp / "rows", StageIO(tmp))
    return tmp / "packed", tmp / "rows", result


def test_packed_rows_hold_every_conversation_exactly(chat_tok, packed):  # noqa: F811
    out, rows_dir, result = packed
    summary = result.summary
    table = pq.read_table(out / "part-00000.parquet").to_pylist()
    unpacked = {r["sha256"]: r for r in pq.read_table(rows_dir / "part-00000.parquet").to_pylist()}
    assert summary.packed is not None and summary.packed.rows == len(table) < summary.conversations
    assert all(len(r["input_ids"]) == 512 and len(r["loss_mask"]) == 512 for r in table)
    seen = []
    for row in table:
        start = 0
        for length, sha in zip(row["doc_lens"], row["sha256"]):
            piece = unpacked[sha]
            if piece["loss_mask"].count(1) == 0:
                continue  # dropped from packing (counted as untrained)
            assert row["input_ids"][start : start + length] == piece["input_ids"]
            assert row["loss_mask"][start : start + length] == piece["loss_mask"]
            seen.append(sha)
            start += length
    trained = [s for s, r in unpacked.items() if 1 in r["loss_mask"]]
    assert sorted(seen) == sorted(trained) and len(unpacked) - len(trained) == summary.untrained
    pad = sum(512 - sum(r["doc_lens"]) for r in table)
    assert summary.packed.padding_tokens == pad and summary.packed.fill == round(1 - pad / (512 * len(table)), 4)
    assert summary.packed.fill > 0.9  # best-fit over a window of 100 leaves little padding
    # The checks pass: per row, and per conversation inside the rows
    paths = [out / "part-00000.parquet"]
    assert check_packed_rows(paths, chat_tok[0], 512).passed
    assert check_sft_mask(paths, chat_tok[0], TOKENS, 512).passed
    assert check_sft_structure(paths, chat_tok[0], TOKENS, 512).passed
    # the nanochat export is the packed rows, row after row
    side = json.loads((out / "sft.json").read_text())
    ids = np.concatenate([np.fromfile(out / s["file"], dtype=side["dtype"]) for s in side["shards"]])
    mask = np.concatenate([np.fromfile(out / s["mask"], dtype=np.uint8) for s in side["shards"]])
    assert side["packing"] == "best_fit" and side["rows"] == len(table) and len(side["shards"]) > 1
    assert ids.tolist() == [i for r in table for i in r["input_ids"]]
    assert mask.tolist() == [m for r in table for m in r["loss_mask"]]


def test_a_flipped_mask_bit_or_trained_padding_fails_the_checks(chat_tok, packed, tmp_path):  # noqa: F811
    out, _, _ = packed
    table = pq.read_table(out / "part-00000.parquet")
    rows = table.to_pylist()
    row = next(r for r in rows if len(r["doc_lens"]) > 1)
    for flip in (row["doc_lens"][0] + 5, 1):  # a token of the second conversation, then the first's prompt
        broken = [dict(r) for r in rows]
        target = broken[rows.index(row)]
        target["loss_mask"] = list(target["loss_mask"])
        target["loss_mask"][flip] ^= 1
        path = tmp_path / f"flip{flip}.parquet"
        pq.write_table(type(table).from_pylist(broken, schema=table.schema), path)
        assert not check_sft_mask([path], chat_tok[0], TOKENS, 512).passed
    padded = next(r for r in rows if sum(r["doc_lens"]) < 512)
    broken = [dict(r) for r in rows]
    broken[rows.index(padded)]["loss_mask"] = [*padded["loss_mask"][:-1], 1]
    path = tmp_path / "padding.parquet"
    pq.write_table(type(table).from_pylist(broken, schema=table.schema), path)
    outcome = check_packed_rows([path], chat_tok[0], 512)
    assert not outcome.passed and "padding" in outcome.metadata["first_bad"][0]


def test_packed_rows_load_in_the_loader_and_in_datasets(packed, tmp_path):
    out, _, _ = packed
    table = pq.read_table(out / "part-00000.parquet").to_pylist()
    seqs = Sequences(out, xy=True)
    assert len(seqs) == len(table)
    for i in (0, len(table) // 2, len(table) - 1):
        item, row = seqs[i], table[i]
        assert item["input_ids"].tolist() == row["input_ids"] and item["loss_mask"].tolist() == row["loss_mask"]
        mask = np.array(row["loss_mask"])
        # nanochat's rule: a target counts where the mask at the target's position is 1
        expected = np.where(np.append(mask[1:], 0) == 1, np.append(row["input_ids"][1:], 0), IGNORE_INDEX)
        assert item["targets"].tolist() == expected.tolist()
        starts = np.flatnonzero(item["position_ids"] == 0).tolist()
        assert starts[: len(row["doc_lens"])] == (np.cumsum(row["doc_lens"]) - row["doc_lens"]).tolist()
    import datasets

    files = str(out / "part-*.parquet")
    loaded = datasets.load_dataset("parquet", data_files=files, cache_dir=str(tmp_path / "hf"))["train"]
    assert loaded.num_rows == len(table) and loaded[0]["doc_lens"] == table[0]["doc_lens"]


def test_packing_is_deterministic_and_overlong_never_clogs(chat_tok, tmp_path):  # noqa: F811
    conversations = _real_conversations()
    mixed = _conversations_file(tmp_path / "mixed.parquet", conversations)
    spec = ChatSpec(max_tokens=256, packing="best_fit", pack_window=8)  # overlong: skip
    a = build_sft(mixed, chat_tok[0], spec, "auto", tmp_path / "a", StageIO(tmp_path))
    b = build_sft(mixed, chat_tok[0], spec, "hf", tmp_path / "b", StageIO(tmp_path))
    assert [x.sha256 for x in a.artifacts] == [x.sha256 for x in b.artifacts]
    assert a.summary.skipped_overlong > 0 and a.summary.packed is not None
    assert check_packed_rows([tmp_path / "a" / "part-00000.parquet"], chat_tok[0], 256).passed


def test_pack_plus_one_packs_nanochat_s_rows(chat_tok, tmp_path):  # noqa: F811
    """`chat.pack_plus_one`: rows of `max_tokens + 1`, nanochat's `row_capacity = max_seq_len + 1`,
    so a row's inputs and targets are both `max_tokens` long; the conversations fill the rows as
    nanochat's packer fills rows of that capacity, and every check holds the rows to it."""
    mixed = _conversations_file(tmp_path / "mixed.parquet", _real_conversations())
    spec = ChatSpec(max_tokens=256, overlong="truncate", packing="best_fit", pack_plus_one=True)
    result = build_sft(mixed, chat_tok[0], spec, "auto", tmp_path / "packed", StageIO(tmp_path))
    rows = ChatSpec(**{**spec.model_dump(), "packing": "none", "pack_plus_one": False})
    build_sft(mixed, chat_tok[0], rows, "auto", tmp_path / "rows", StageIO(tmp_path))
    unpacked = pq.read_table(tmp_path / "rows" / "part-00000.parquet").to_pylist()
    lengths = [len(r["input_ids"]) for r in unpacked if 1 in r["loss_mask"]]
    table = pq.read_table(tmp_path / "packed" / "part-00000.parquet").to_pylist()
    assert all(len(r["input_ids"]) == len(r["loss_mask"]) == 257 for r in table)
    expected = [[lengths[k] for k in row] for row in _nanochat_rows(lengths, 257, spec.pack_window)]
    assert [r["doc_lens"] for r in table] == expected
    assert any(sum(r["doc_lens"]) == 257 for r in table)  # a row max_tokens rows could not hold
    paths = [tmp_path / "packed" / "part-00000.parquet"]
    assert check_packed_rows(paths, chat_tok[0], 257).passed and check_max_tokens(paths, 256).passed
    assert check_sft_mask(paths, chat_tok[0], TOKENS, 256).passed
    assert result.summary.packed is not None and result.summary.packed.row_tokens == 257
    side = json.loads((tmp_path / "packed" / "sft.json").read_text())
    assert side["row_tokens"] == 257 and len(Sequences(tmp_path / "packed")[0]["input_ids"]) == 257

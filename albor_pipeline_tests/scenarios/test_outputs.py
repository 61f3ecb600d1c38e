"""What a trainer's own code reads, on one small build: a split smaller than a sequence, the
card's counts, the vocabulary size to size a model from, nanoGPT's meta.pkl, the BOS convention."""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from albor_pipeline.runtime.artifacts import read_manifest
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.spec import REPO_ROOT
from albor_pipeline_tests.support import STDLIB, Build, build

SAMPLES = REPO_ROOT / "data" / "samples"

pytestmark = pytest.mark.graph


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Build]:
    """Issue 61's reproduction: one code source (stdlib's `email`), 2-row val and test mixes,
    16,384-token sequences, so corpus/val and corpus/test pack no sequence; an mc eval set, so
    the spec renders eval sequences (which start with `<s>`) and leaves `corpus.bos` unset."""
    raw = {
        "sources": [
            {"name": "email", "kind": "code", "path": str(STDLIB), "include": ["email/**/*.py"]},
            {"name": "python_mc", "kind": "mc", "path": str(SAMPLES / "python_mc.jsonl")},
        ],
        "holdout": {"val_fraction": 0.1, "test_fraction": 0.1, "seed": 0},
        "mix": {
            "train": {"seed": 42},
            "val": {"seed": 123, "rows": 2, "upsample": False},
            "test": {"seed": 456, "rows": 2, "upsample": False},
        },
        "tokenizer": {"vocab_size": 600},
        "corpus": {"seq_len": 16384, "formats": ["parquet", "megatron", "nanogpt"]},
    }
    yield build(tmp_path_factory.mktemp("outputs"), raw)


def _corpus(out: Path, split: str) -> list[Path]:
    return sorted((out / "corpus" / split).glob("part-*.parquet"))


def _card_configs(out: Path) -> dict[tuple[str, str], dict[str, str]]:
    """The card's Configs table, by (config, split)."""
    lines = (out / "README.md").read_text(encoding="utf-8").split("## Configs", 1)[1].splitlines()
    table = [line for line in lines[1 : lines.index("", 2)] if line.startswith("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in table[2:]]
    return {(r["config"], r["split"]): r for r in rows}


def test_a_split_smaller_than_a_sequence_is_an_empty_warned_corpus(small):
    """The build succeeds (`build` asserts it); corpus/val and corpus/test hold no sequence, their
    checks pass saying so, and their summaries warn."""
    checks = {(e.asset_key.to_user_string(), e.check_name): e for e in small.result.get_asset_check_evaluations()}
    for split in ("val", "test"):
        summary = read_manifest(Layout(small.out), f"corpus/{split}").summary
        assert summary["sequences"] == 0 and 0 < summary["tokens"] < small.spec.corpus.seq_len, split
        assert summary["warnings"][0].startswith("empty:"), split
        assert not _corpus(small.out, split)
        for name in ("schema", "sequences", "doc_lens"):
            check = checks[(f"corpus/{split}", name)]
            assert check.passed and check.description.startswith("empty:"), (split, name)
    assert read_manifest(Layout(small.out), "corpus/train").summary["sequences"] > 0
    assert all(e.passed for e in checks.values()), [k for k, e in checks.items() if not e.passed]


def test_the_card_counts_what_each_config_holds(small):
    """The `corpus` config's tokens are what its Parquet rows hold: `remainder: drop` cut a tail
    the streams keep, and the card says both."""
    rows = _card_configs(small.out)
    train = read_manifest(Layout(small.out), "corpus/train").summary
    assert train["dropped_tokens"] > 0  # the card's count would be the streams' otherwise
    table = pq.read_table(_corpus(small.out, "train"))
    held = int(pc.sum(pc.list_flatten(table.column("doc_lens"))).as_py())
    assert held == table.num_rows * small.spec.corpus.seq_len  # nothing padded: sequences x seq_len
    row = rows[("corpus", "train")]
    assert int(row["sequences"]) == table.num_rows and int(row["tokens"]) == held
    assert int(row["stream tokens"]) == len(np.fromfile(small.out / "corpus" / "train" / "tokens.bin", np.uint16))
    assert (int(rows[("corpus", "validation")]["sequences"]), int(rows[("corpus", "validation")]["tokens"])) == (0, 0)


def test_the_vocab_size_to_size_a_model_covers_every_id(small):
    """tokens.json's `vocab_size` (`len(tokenizer)`) is above every corpus id, where
    transformers' `vocab_size` leaves the added tokens out; its padded size is a multiple of 64."""
    meta = json.loads((small.out / "corpus" / "train" / "tokens.json").read_text(encoding="utf-8"))
    vocab, padded = meta["vocab_size"], meta["padded_vocab_size"]
    table = pq.read_table(_corpus(small.out, "train"), columns=["input_ids"])
    assert int(pc.max(pc.list_flatten(table.column(0))).as_py()) < vocab
    stream = np.fromfile(small.out / "corpus" / "train" / "tokens.bin", np.dtype(meta["dtype"]))
    learned = json.loads((small.out / "tokenizer" / "report.json").read_text(encoding="utf-8"))["learned_vocab_size"]
    assert int(stream.max()) < vocab and int(stream.max()) >= learned  # FIM sentinels reach past it
    assert padded % 64 == 0 and vocab <= padded < vocab + 64
    card = (small.out / "README.md").read_text(encoding="utf-8")
    assert f"from {vocab:,} ids: `len(tokenizer)`" in card and f"{padded:,} (`padded_vocab_size`" in card


def test_nanogpt_meta_pkl_holds_the_vocab_size(small):
    """nanoGPT's train.py sizes its model from `meta.pkl`'s `vocab_size`, beside the .bin files."""
    for split in ("train", "val", "test"):
        folder = small.out / "corpus" / split
        with open(folder / "meta.pkl", "rb") as fh:
            meta = pickle.load(fh)
        assert meta == {"vocab_size": json.loads((folder / "tokens.json").read_text())["vocab_size"]}
        recorded = {a.path for a in read_manifest(Layout(small.out), f"corpus/{split}").outputs}
        assert f"corpus/{split}/meta.pkl" in recorded


def test_corpus_documents_start_with_bos_as_eval_sequences_do(small):
    """`corpus.bos` unset in a spec with an eval set: every corpus document starts with `<s>`, as
    every eval sequence does, and the card says so."""
    assert small.spec.corpus.bos
    raw = (small.out / "corpus" / "train" / "megatron.idx").read_bytes()
    n = int(np.frombuffer(raw[18:26], "<u8")[0])
    lengths = np.frombuffer(raw, "<i4", count=n, offset=34).astype(np.int64)
    stream = np.fromfile(small.out / "corpus" / "train" / "megatron.bin", np.uint16)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    assert n > 10 and (stream[starts] == 1).all()
    evals = pq.read_table(small.out / "eval" / "python_mc.parquet", columns=["input_ids"]).column(0).to_pylist()
    assert evals and all(ids[0] == 1 for ids in evals)
    card = (small.out / "README.md").read_text(encoding="utf-8")
    assert "Every corpus document starts with `<s>` (`corpus.bos`) and ends with `</s>`, as every SFT and eval" in card

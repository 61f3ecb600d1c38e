"""The data checks fail on the defects they exist to catch (and pass on clean data)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from albor_pipeline.defs.corpus import stages as corpus_stages
from albor_pipeline.defs.stage import CheckContext
from albor_pipeline.runtime.artifacts import StageManifest
from albor_pipeline.runtime.checks import check_schema
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.spec import load_spec
from albor_pipeline.stages.corpus.checks import check_doc_lens, check_sequences
from albor_pipeline.stages.corpus.pack import sequences_batch
from albor_pipeline.stages.corpus.plan import Packed
from albor_pipeline.stages.documents.checks import check_no_leak
from albor_pipeline.stages.tokenizer.checks import check_roundtrip
from albor_pipeline.summaries.corpus import CorpusSummary
from albor_pipeline.text.documents import DOC_SCHEMA
from albor_pipeline.text.sequences import SEQ_SCHEMA
from albor_pipeline_tests.support import write_docs


def test_leak_check(tmp_path):
    train = write_docs(tmp_path / "train.parquet", ["a" * 60, "b" * 60])
    val = write_docs(tmp_path / "val.parquet", ["c" * 60])
    test = write_docs(tmp_path / "test.parquet", ["b" * 60])
    assert check_no_leak(train, val).passed
    outcome = check_no_leak(train, val, test)
    assert not outcome.passed and outcome.metadata["shared"] == {"val": 0, "test": 1}


def test_schema_check(tmp_path):
    good = write_docs(tmp_path / "good.parquet", ["x" * 60])
    assert check_schema([good], DOC_SCHEMA).passed
    pq.write_table(pa.table({"text": ["x"], "source": ["s"], "file": ["f"]}), tmp_path / "bad.parquet")
    outcome = check_schema([good, tmp_path / "bad.parquet"], DOC_SCHEMA)
    assert not outcome.passed and list(outcome.metadata["mismatched"]) == ["bad.parquet"]
    assert not check_schema([], DOC_SCHEMA).passed


def _packed(seqs: list[list[int]], doc_lens: list[list[int]]) -> pa.Table:
    return pa.table(
        {"input_ids": pa.array(seqs, pa.list_(pa.uint32())), "doc_lens": pa.array(doc_lens, pa.list_(pa.uint32()))},
        schema=SEQ_SCHEMA,
    )


def test_sequence_check(tmp_path):
    import numpy as np

    ids = np.arange(12, dtype=np.uint32).reshape(3, 4)
    packed = Packed(ids, np.full(3, 4, dtype=np.uint32), np.ones(3, dtype=np.int64))
    pq.write_table(pa.Table.from_batches([sequences_batch(packed)]), tmp_path / "ok.parquet")
    assert check_sequences([tmp_path / "ok.parquet"], seq_len=4, vocab_size=12).passed
    assert not check_sequences([tmp_path / "ok.parquet"], seq_len=4, vocab_size=11).passed  # id 11 >= vocab
    assert not check_sequences([tmp_path / "ok.parquet"], seq_len=5, vocab_size=100).passed
    ragged = _packed([[1, 2, 3, 4], [1, 2]], [[4], [2]])
    pq.write_table(ragged, tmp_path / "ragged.parquet")
    outcome = check_sequences([tmp_path / "ragged.parquet"], seq_len=4, vocab_size=100)
    assert not outcome.passed and outcome.metadata["wrong_length"] == 1
    pq.write_table(ragged.slice(0, 0), tmp_path / "empty.parquet")
    assert not check_sequences([tmp_path / "empty.parquet"], seq_len=4, vocab_size=100).passed


def test_doc_lens_check(tmp_path):
    eos, pad = 2, 3
    good = _packed([[5, 5, 2, 6], [6, 2, 7, 2], [8, 2, 3, 3]], [[3, 1], [2, 2], [2]])
    pq.write_table(good, tmp_path / "good.parquet")
    assert check_doc_lens([tmp_path / "good.parquet"], 4, eos, pad).passed
    for name, table in {
        "short": _packed([[5, 5, 2, 6]], [[3]]),  # pieces do not cover the sequence
        "moved": _packed([[5, 2, 5, 6]], [[3, 1]]),  # an EOS that is no piece end
        "merged": _packed([[5, 2, 6, 2]], [[4]]),  # two documents recorded as one piece
    }.items():
        pq.write_table(table, tmp_path / f"{name}.parquet")
        assert not check_doc_lens([tmp_path / f"{name}.parquet"], 4, eos, pad).passed, name


def test_roundtrip_check(tmp_path):
    report = {"roundtrip_ok": 9, "val_documents": 10, "roundtrip_failures_first": [3]}
    (tmp_path / "r.json").write_text(json.dumps(report))
    assert not check_roundtrip(tmp_path / "r.json").passed
    (tmp_path / "r.json").write_text(json.dumps({**report, "roundtrip_ok": 10, "roundtrip_failures_first": []}))
    assert check_roundtrip(tmp_path / "r.json").passed


def test_an_empty_corpus_fails_its_checks_in_train_only(tmp_path):
    """No full sequence: corpus/val (a split smaller than one sequence) and a long subset pass
    saying so; corpus/train fails every blocking check, naming the spec fields to look at."""
    empty = CorpusSummary(
        documents=3,
        sequences=0,
        tokens=900,
        dropped_tokens=900,
        padded_tokens=0,
        cut_documents=0,
        cut_fraction=0.0,
        pad_fraction=0.0,
        sources={},
    )
    stages = {stage.name: stage for stage in corpus_stages(load_spec())}
    for name in ("corpus/train", "corpus/val", "corpus/long_train"):
        manifest = StageManifest(stage=name, outputs=[], config={"seq_len": 2048}, summary=empty.model_dump())
        for check in stages[name].checks:
            outcome = check.run(CheckContext(Layout(tmp_path), manifest))
            if name == "corpus/train":
                assert check.blocking and not outcome.passed, check.name
                assert outcome.description.startswith("corpus/train is empty: 3 document(s), 900 tokens")
                assert "corpus.seq_len 2,048" in outcome.description and "mix.train" in outcome.description
            else:
                assert outcome.passed and outcome.description.startswith("empty:"), (name, check.name)

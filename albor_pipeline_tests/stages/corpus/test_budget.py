"""Budgets: `mix.<split>.chars` or `tokens` as a split's size; the corpus stage counts a token
budget with the trained tokenizer and cuts the split at it; epochs per source and the
warning past 4 of them."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from albor_pipeline.defs.mix import CHAT_POOL, DOCUMENT_POOL, MixConfig, mix_settings
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.shards import read_shards
from albor_pipeline.spec import MIX_SIZES, CorpusSpec, Packing, SourceSpec, SpecError, SplitMixSpec, load_spec
from albor_pipeline.stages.corpus.corpus import Budget, build_corpus
from albor_pipeline.stages.corpus.plan import budget_cut
from albor_pipeline.stages.ingest.ingest import ingest_source
from albor_pipeline.stages.mix.mix import mix_documents, plan_counts
from albor_pipeline.text.sequences import INDEX_FILE
from albor_pipeline_tests.support import STDLIB, build, materialize_all, recorded_outputs, tiny_spec, write_spec


def test_a_split_takes_one_size_and_a_run_s_size_replaces_the_spec_s(tmp_path):
    for a, b in combinations(MIX_SIZES, 2):
        raw = tiny_spec()
        raw["mix"]["train"].update({a: 1000, b: 2000})
        with pytest.raises(SpecError, match=rf"mix\.train: give one size \(rows, chars or tokens\), not {a} and {b}"):
            load_spec(write_spec(tmp_path / "bad.yaml", raw))
    raw = tiny_spec()
    raw["mix"]["train"]["tokens"] = 5000
    spec = load_spec(write_spec(tmp_path / "spec.yaml", raw))
    # The launchpad shows the spec's tokens; a run giving rows and leaving tokens empty mixes by rows.
    rows = mix_settings(spec, DOCUMENT_POOL, "train", MixConfig(rows=300))
    assert (rows.rows, rows.tokens) == (300, None)
    with pytest.raises(SpecError, match="not rows and tokens"):
        mix_settings(spec, DOCUMENT_POOL, "train", MixConfig(rows=300, tokens=5000))
    # A budget sizes the documents' mix; the chat mix of the split keeps its rows.
    assert mix_settings(spec, DOCUMENT_POOL, "train", MixConfig()).tokens == 5000
    assert mix_settings(spec, CHAT_POOL, "train", MixConfig()).tokens is None


def test_a_budget_gives_each_weighted_source_its_share_of_characters_after_the_repeats():
    counts, chars = {"a": 100, "b": 50, "r": 10}, {"a": 100_000, "b": 200_000, "r": 5_000}
    mix = SplitMixSpec(chars=120_000, weights={"a": 1, "b": 3}, repeat={"r": 2})
    plans, warnings = plan_counts(counts, mix, list(counts), chars)
    # r holds 2 x 5,000 characters of the budget; a and b share the other 110,000 1:3.
    assert [(p.source, p.target_chars, p.rule) for p in plans] == [
        ("a", 27_500, "weight 1 of the budget"),
        ("b", 82_500, "weight 3 of the budget"),
        ("r", None, "repeat 2x"),
    ]
    assert [p.output_rows for p in plans] == [28, 21, 20] and warnings == []
    tokens = SplitMixSpec(tokens=10_000, chars_per_token=4.0)
    assert tokens.budget_chars == 42_000  # 4 chars/token + the 5 % margin
    capped, warned = plan_counts(counts, SplitMixSpec(chars=900_000, upsample=False), list(counts), chars)
    assert [p.target_chars for p in capped] == [100_000, 200_000, 5_000] and len(warned) == 3


def _ingest(tmp_path: Path, packages: tuple[str, ...]) -> Path:
    """The stdlib `packages` ingested, a source each, as one split file in spec order."""
    tables = []
    for name in packages:
        src = SourceSpec(name=name, kind="code", path=STDLIB / name, exclude=["**/test*/**"])
        [shard] = ingest_source(src, tmp_path / "ingested" / name, StageIO(tmp_path)).artifacts
        tables.append(pq.read_table(tmp_path / shard.path))
    pq.write_table(pa.concat_tables(tables), tmp_path / "split.parquet")
    return tmp_path / "split.parquet"


def test_a_chars_budget_lands_within_one_percent_on_real_code_and_warns_past_four_epochs(tmp_path):
    packages = ("json", "email", "asyncio")
    split = _ingest(tmp_path, packages)
    mix = SplitMixSpec(seed=7, chars=600_000)  # equal weights: 200,000 characters each
    result = mix_documents(split, mix, list(packages), tmp_path / "mixed", StageIO(tmp_path))
    rows = read_shards(tmp_path / "mixed")
    held = {name: 0 for name in packages}
    for source, n in zip(rows.column("source").to_pylist(), pc.utf8_length(rows.column("text")).to_pylist()):
        held[source] += n
    assert abs(sum(held.values()) - 600_000) <= 6_000, held
    for name in packages:
        assert abs(held[name] - 200_000) <= 2_000, (name, held)
    plan = {p.source: p for p in result.summary.plan}
    assert {name: plan[name].output_chars for name in packages} == held
    # json's ~48k characters are drawn 4+ times; email and asyncio are downsampled.
    assert float(plan["json"].multiplier.rstrip("x")) > 4 > 1 > float(plan["email"].multiplier.rstrip("x"))
    [warning] = result.summary.warnings
    assert warning.startswith("json: ") and "Muennighoff" in warning
    assert result.summary.budget is not None and result.summary.budget.chars == sum(held.values())


def test_budget_cut_keeps_the_documents_nearest_the_budget():
    lengths = np.array([300, 500, 200, 900, 100], dtype=np.int64)  # ends 300 800 1000 1900 2000
    assert budget_cut(lengths, 1000, 256, whole_documents=True).__dict__ == {"documents": 3, "tokens": 1000}
    assert budget_cut(lengths, 1300, 256, whole_documents=True).__dict__ == {"documents": 3, "tokens": 1000}
    assert budget_cut(lengths, 1500, 256, whole_documents=True).__dict__ == {"documents": 4, "tokens": 1900}
    # concat: whole sequences (1000 / 256 = 3.9 -> 4 -> 1024 tokens, inside the fourth document)
    assert budget_cut(lengths, 1000, 256, whole_documents=False).__dict__ == {"documents": 4, "tokens": 1024}
    assert budget_cut(lengths, 2001, 256, whole_documents=False) is None  # the documents hold less


def _non_pad(out: Path, pad: int) -> int:
    ids = pq.read_table(sorted(out.glob("part-*.parquet")), columns=["input_ids"]).column(0).combine_chunks()
    return len(ids.values) - pc.sum(pc.equal(ids.values, pad)).as_py()


def test_the_corpus_cuts_a_token_budget_counted_with_the_trained_tokenizer(pipeline):
    tmp, _ = pipeline
    tokenizer, io = tmp / "tok" / "tokenizer.json", StageIO(tmp)
    spec = CorpusSpec(seq_len=128, formats=["parquet", "megatron", "nanogpt"])
    whole = build_corpus(tmp / "fim", tokenizer, spec, tmp / "budget_whole", io)
    budget = Budget(tokens=40_000, chars_per_token=3.0, mix_chars=400_000)
    cut = build_corpus(tmp / "fim", tokenizer, spec, tmp / "budget_concat", io, budget=budget)
    facts = cut.summary.budget
    assert facts is not None and cut.summary.warnings == []
    assert facts.packed_tokens == _non_pad(tmp / "budget_concat", 3) == 39_936  # 312 sequences of 128
    assert abs(facts.deviation) <= 0.01 and facts.mix_tokens == whole.summary.tokens
    assert cut.summary.documents < whole.summary.documents
    # The exports hold the kept documents: the whole corpus's stream up to the cut document's end.
    kept = np.fromfile(tmp / "budget_concat" / "tokens.bin", dtype=np.uint16)
    assert len(kept) == cut.summary.tokens >= 39_936
    assert np.array_equal(kept, np.fromfile(tmp / "budget_whole" / "tokens.bin", dtype=np.uint16)[: len(kept)])
    index = json.loads((tmp / "budget_concat" / INDEX_FILE).read_text())
    assert (index["documents"], index["parquet"]["sequences"]) == (cut.summary.documents, 312)

    fit = build_corpus(
        tmp / "fim", tokenizer, spec.model_copy(update={"packing": Packing.best_fit}), tmp / "fit", io, budget=budget
    )
    assert fit.summary.budget is not None
    ends = np.cumsum(_megatron_lengths(tmp / "budget_whole"))
    nearest = int(ends[np.argmin(np.abs(ends - 40_000))])  # best_fit keeps whole documents
    assert fit.summary.budget.packed_tokens == _non_pad(tmp / "fit", 3) == nearest

    short = build_corpus(tmp / "fim", tokenizer, spec, tmp / "budget_short", io, budget=Budget(10**6, 3.0, 400_000))
    assert short.summary.documents == whole.summary.documents
    assert "short of the 1,000,000-token budget" in short.summary.warnings[0]


def _megatron_lengths(out: Path) -> np.ndarray:
    raw = (out / "megatron.idx").read_bytes()
    n_seq = int(np.frombuffer(raw[18:26], "<u8")[0])
    return np.frombuffer(raw, "<i4", count=n_seq, offset=34)


BUDGET = 150_000


def _budget_spec(**corpus: object) -> dict:
    """The tiny spec with a train budget its json source (a tenth of the text) can fill only
    by repeating: equal weights of ~470k characters, at an estimate above what its 600-token
    vocabulary gives (~2.5 chars/token), so the mix holds more than the budget."""
    raw = tiny_spec()
    raw["mix"]["train"].update(tokens=BUDGET, chars_per_token=3.0)
    raw["corpus"].update(corpus)
    return raw


@pytest.mark.graph
def test_a_build_with_a_token_budget_lands_within_one_percent_and_reports_epochs(tmp_path):
    built = build(tmp_path, _budget_spec())
    out = built.out
    mixed = json.loads((out / "manifests" / "mixed__train.json").read_text())["summary"]
    assert "estimated at 3 chars/token" in mixed["budget"]["estimate"]
    corpus = json.loads((out / "manifests" / "corpus__train.json").read_text())["summary"]
    facts = corpus["budget"]
    packed = _non_pad(out / "corpus" / "train", 3)
    assert packed == facts["packed_tokens"] and abs(packed - BUDGET) <= BUDGET // 100, facts
    pool = {p["source"]: p["input rows"] for p in mixed["plan"]}
    for name, source in corpus["sources"].items():
        assert source["pool_documents"] == pool[name]
        assert source["epochs"] == round(source["documents"] / pool[name], 4)
    assert corpus["sources"]["stdlib_json_email"]["epochs"] > 4 > corpus["sources"]["stdlib_async"]["epochs"]
    assert [w.split(":")[0] for w in corpus["warnings"]] == ["stdlib_json_email"]
    provenance = (out / "PROVENANCE.md").read_text()
    assert "- train: budget 150,000 tokens, packed" in provenance and "pool documents" in provenance
    card = (out / "README.md").read_text()
    assert f"supports a model of about {packed / 20 / 1000:.3g}K parameters" in card
    assert "stdlib_json_email: " in card.split("## Size and epochs")[1]

    # The cut is a global step after the encoding tasks: a rebuild reusing them equals a cold build.
    shorter = load_spec(write_spec(tmp_path / "shorter.yaml", _budget_spec(seq_len=128)))
    result = materialize_all(shorter, out)
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey(["corpus", "train"])]
    assert event.materialization.metadata["tasks_reused"].value > 0
    assert event.materialization.metadata["budget_packed_tokens"].value % 128 == 0
    materialize_all(shorter, tmp_path / "cold")
    assert recorded_outputs(out) == recorded_outputs(tmp_path / "cold")

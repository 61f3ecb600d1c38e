from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from albor_pipeline.runtime.executor import INLINE
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.shards import read_shards, shard_name
from albor_pipeline.spec import SplitMixSpec
from albor_pipeline.stages.mix.mix import MixError, draw_indices, mix_documents, plan_counts, shard_bounds, shuffle
from albor_pipeline_tests.support import docs_file


def test_seed_000_arithmetic():
    counts = {"depyler": 1843, "hf": 11493, "jax": 2637, "vllm": 1100}
    mix = SplitMixSpec(seed=42, weights={"depyler": 0.4, "hf": 0.3, "jax": 0.15, "vllm": 0.15})
    plans, warnings = plan_counts(counts, mix, list(counts))
    assert [p.output_rows for p in plans] == [6829, 5121, 2560, 2560]
    assert sum(p.output_rows for p in plans) == 17070
    assert round(plans[0].multiplier, 1) == 3.7
    assert warnings == []


def test_weights_as_shares_of_characters():
    counts, chars = {"long": 100, "short": 100}, {"long": 100 * 1000, "short": 100 * 100}
    by_rows = SplitMixSpec(weights={"long": 0.5, "short": 0.5})
    assert [p.output_rows for p in plan_counts(counts, by_rows, list(counts))[0]] == [100, 100]
    by_chars = SplitMixSpec(weights={"long": 0.5, "short": 0.5}, unit="chars")
    plans, _ = plan_counts(counts, by_chars, list(counts), chars)
    # 200 rows at the split's mean of 550 chars = 110,000 chars, half per source
    assert [p.output_rows for p in plans] == [55, 550] and plans[0].rule == "weight 0.5 of chars"
    with pytest.raises(MixError, match="needs the characters"):
        plan_counts(counts, by_chars, list(counts))


def test_chars_mix_gives_each_source_its_share_of_text(tmp_path):
    texts = ["x" * 2000 + str(i) for i in range(40)] + [f"short {i:04d}" for i in range(200)]
    docs = docs_file(tmp_path, texts, ["long"] * 40 + ["short"] * 200)
    mix = SplitMixSpec(seed=3, weights={"long": 0.5, "short": 0.5}, unit="chars")
    result = mix_documents(docs, mix, ["long", "short"], tmp_path / "chars", StageIO(tmp_path))
    out = Counter()
    for row in read_shards(tmp_path / "chars").to_pylist():
        out[row["source"]] += len(row["text"])
    assert abs(out["long"] - out["short"]) <= 2010  # equal shares, within one long document
    assert {p.source: p.rule for p in result.summary.plan} == {
        "long": "weight 0.5 of chars",
        "short": "weight 0.5 of chars",
    }


def test_repeat_rows_and_no_upsample_cap():
    counts = {"tier1": 100, "tier2": 50}
    plans, _ = plan_counts(counts, SplitMixSpec(repeat={"tier1": 10}), list(counts))
    assert [(p.source, p.output_rows, p.rule) for p in plans] == [
        ("tier1", 1000, "repeat 10x"),
        ("tier2", 50, "repeat 1x"),
    ]
    plans, warnings = plan_counts(counts, SplitMixSpec(rows=500, upsample=False), list(counts))
    assert [p.output_rows for p in plans] == [100, 50]
    assert len(warnings) == 2 and "capped" in warnings[0]
    with pytest.raises(MixError, match="0 rows"):
        plan_counts({"a": 0}, SplitMixSpec(), ["a"])


def test_an_empty_split_says_why_and_what_to_change():
    """A held-out split no document reached said `mix draws 0 rows (input rows per source: {})`:
    neither why nor which setting to change."""
    with pytest.raises(MixError) as empty:
        plan_counts({}, SplitMixSpec(rows=2, upsample=False), ["code", "docs"])
    assert "no documents reached this split" in str(empty.value)
    assert "holdout.val_fraction" in str(empty.value) and "holdout.test_fraction" in str(empty.value)
    with pytest.raises(MixError) as unweighted:
        plan_counts({"code": 0, "docs": 3}, SplitMixSpec(weights={"code": 1.0}, repeat={"docs": 0.1}), ["code", "docs"])
    assert "{'code': 0, 'docs': 3}" in str(unweighted.value) and "mix.<split>.weights" in str(unweighted.value)


@pytest.mark.parametrize(("n_in", "n_out"), [(1843, 6829), (7, 7), (10, 3), (5, 23)])
def test_each_document_appears_floor_or_ceil_times(n_in, n_out):
    idx = draw_indices(n_in, n_out, np.random.default_rng(0))
    assert len(idx) == n_out
    counts = np.bincount(idx, minlength=n_in)
    lo, hi = n_out // n_in, -(-n_out // n_in)
    assert set(counts.tolist()) <= {lo, hi}
    assert (counts == hi).sum() == n_out % n_in or n_out % n_in == 0


def test_mix_output_counts_and_determinism(tmp_path, local2):
    texts = [f"doc {i}" for i in range(130)]
    sources = ["big"] * 100 + ["small"] * 30
    docs = docs_file(tmp_path, texts, sources)
    mix = SplitMixSpec(seed=9, weights={"big": 0.5, "small": 0.5})
    r1 = mix_documents(docs, mix, ["big", "small"], tmp_path / "m1", StageIO(tmp_path))
    r2 = mix_documents(docs, mix, ["big", "small"], tmp_path / "m2", StageIO(tmp_path, local2))
    assert [a.sha256 for a in r1.artifacts] == [a.sha256 for a in r2.artifacts]
    rows = read_shards(tmp_path / "m1").to_pylist()
    assert Counter(r["source"] for r in rows) == {"big": 65, "small": 65}
    small_counts = Counter(r["text"] for r in rows if r["source"] == "small")
    assert set(small_counts.values()) <= {2, 3} and len(small_counts) == 30
    assert len({r["text"] for r in rows if r["source"] == "big"}) == 65  # downsampled without replacement
    order = [r["text"] for r in rows]
    assert order != sorted(order, key=lambda t: int(t.split()[1]))  # shuffled globally
    r3 = mix_documents(
        docs, SplitMixSpec(seed=10, weights=mix.weights), ["big", "small"], tmp_path / "m3", StageIO(tmp_path)
    )
    assert [a.sha256 for a in r3.artifacts] != [a.sha256 for a in r1.artifacts]


def test_shard_bounds_cut_by_cumulative_bytes():
    sizes = np.array([40, 70, 10, 300, 5, 5, 90, 1])
    # first bytes at 0, 40, 110, 120, 420, 425, 430, 520: in 100-byte shards 0, 0, 1, 1, 4, 4, 4, 5
    assert shard_bounds(sizes, 100).tolist() == [0, 2, 4, 7, 8]
    assert shard_bounds(sizes, 10**6).tolist() == [0, 8]


def test_external_shuffle_equals_in_memory_take(tmp_path, local2):
    """Scatter and gather tasks over 4 input shards into shards of 97 rows (rows of every
    input in every output shard, some twice) give exactly the in-memory take, on any executor."""
    docs = docs_file(tmp_path, [f"doc {i} " * (i % 7 + 1) for i in range(1000)], ["s"] * 1000)
    shards = tmp_path / "in"
    shards.mkdir()
    table = pq.read_table(docs)
    for k, (a, b) in enumerate([(0, 300), (300, 310), (310, 600), (600, 1000)]):  # 4+: a local pool runs them
        pq.write_table(table.slice(a, b - a), shards / shard_name(k))
    rng = np.random.default_rng(3)
    order = rng.permutation(np.concatenate([np.arange(1000), np.arange(1000), rng.choice(1000, 300, replace=False)]))
    for name, executor in (("inline", INLINE), ("local2", local2)):
        out = tmp_path / name
        out.mkdir()
        written = shuffle(shards, order, out, np.array([*range(0, 2300, 97), 2300]), StageIO(tmp_path, executor))
        assert [s.rows for s in written] == [97] * 23 + [2300 - 97 * 23]
        assert read_shards(out).equals(table.take(order)), name
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # scatter files removed


def test_a_shard_drawn_many_times_over_is_scattered_an_output_shard_at_a_time(tmp_path):
    """A small source with a large weight repeats its rows: an input shard drawn 40 times
    over, into 40 output shards, holds one output shard's copies at a time. Arrow's peak
    stays within a few times the shard's own size, not its 40 copies' (the copies all at
    once made a scatter task's memory grow with the other sources)."""
    texts = [f"{i} " + "x" * 2000 for i in range(500)]
    docs = docs_file(tmp_path, texts, ["s"] * 500)
    table = pq.read_table(docs)
    shards, out = tmp_path / "in", tmp_path / "out"
    shards.mkdir()
    out.mkdir()
    pq.write_table(table, shards / shard_name(0))
    order = np.tile(np.arange(500), 40)
    previous, pool = pa.default_memory_pool(), pa.proxy_memory_pool(pa.default_memory_pool())
    pa.set_memory_pool(pool)
    try:
        shuffle(shards, order, out, np.arange(0, 20_001, 500), StageIO(tmp_path))
    finally:
        pa.set_memory_pool(previous)
    assert 0 < pool.max_memory() < 6 * table.nbytes, (pool.max_memory(), table.nbytes)
    assert read_shards(out).equals(table.take(order))

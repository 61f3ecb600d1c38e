from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from albor_pipeline.runtime.executor import INLINE
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.shards import read_shards, shard_name
from albor_pipeline.spec import FimSpec, HoldoutSpec, SourceSpec, SplitMixSpec
from albor_pipeline.stages.documents.documents import build_documents, exact_dedup, split_of
from albor_pipeline.stages.fim.fim import apply_fim, fim_batch
from albor_pipeline.stages.ingest.ingest import ingest_source
from albor_pipeline.stages.mix.mix import MixError, draw_indices, mix_documents, plan_counts, shard_bounds, shuffle
from albor_pipeline.text.documents import DOC_SCHEMA, text_sha256
from albor_pipeline.text.vocab import FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX

from .support import STDLIB


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
    docs = _docs_file(tmp_path, texts, ["long"] * 40 + ["short"] * 200)
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


def _ingest_stdlib(tmp_path: Path, name: str, package: str) -> Path:
    """The one shard of a stdlib package, ingested."""
    src = SourceSpec(name=name, kind="code", path=STDLIB / package)
    out = tmp_path / "ingested" / name
    [shard] = ingest_source(src, out, StageIO(tmp_path)).artifacts
    return tmp_path / shard.path


def test_documents_dedup_first_source_wins_and_splits_are_disjoint(tmp_path):
    a = _ingest_stdlib(tmp_path, "a", "email")
    b = _ingest_stdlib(tmp_path, "b", "email")  # the same files again: all duplicates
    c = _ingest_stdlib(tmp_path, "c", "json")
    holdout = HoldoutSpec(val_fraction=0.2, test_fraction=0.1, seed=7)
    result = build_documents([("a", a), ("b", b), ("c", c)], holdout, tmp_path / "documents", StageIO(tmp_path))
    n_a = pq.read_metadata(a).num_rows
    assert result.summary.duplicates == {"a <- b": n_a}
    tables = {s: pq.read_table(tmp_path / "documents" / s) for s in ("train", "val", "test")}
    hashes = {s: set(t.column("sha256").to_pylist()) for s, t in tables.items()}
    assert (
        not (hashes["train"] & hashes["val"])
        and not (hashes["train"] & hashes["test"])
        and not (hashes["val"] & hashes["test"])
    )
    assert sum(len(h) for h in hashes.values()) == n_a + pq.read_metadata(c).num_rows
    assert all(set(t.column("source").to_pylist()) <= {"a", "c"} for t in tables.values())
    for split, hs in hashes.items():
        assert all(split_of(h, holdout) == split for h in hs)
    assert len(hashes["val"]) > 0 and len(hashes["test"]) > 0


@pytest.mark.parametrize("partition_bytes", [None, 24 * 8])
def test_hash_partitioned_exact_dedup_equals_a_dict_of_every_hash(tmp_path, monkeypatch, partition_bytes, local2):
    """`exact_dedup` (128-bit keys hash-partitioned over tasks) against the obvious dict loop,
    on real files ingested twice and a third package, in two orders; with one partition
    inline, and with partitions of 8 keys on two processes."""
    from albor_pipeline.runtime import hashpart
    from albor_pipeline.stages.documents.documents import DROPPED, SPLIT_CODES

    executor = INLINE
    if partition_bytes:
        monkeypatch.setattr(hashpart, "PARTITION_BYTES", partition_bytes)
        executor = local2
    holdout = HoldoutSpec(val_fraction=0.2, test_fraction=0.1)
    shards = [_ingest_stdlib(tmp_path, n, p) for n, p in (("a", "email"), ("b", "json"), ("c", "email"))]
    for paths in (shards, shards[::-1]):
        exact = exact_dedup(paths, holdout, tmp_path, StageIO(tmp_path, executor))
        seen: dict[str, int] = {}
        want_codes, want_repeats, want_inputs, doc, owner = [], [], [], 0, []
        for i, path in enumerate(paths):
            codes = []
            for sha in pq.read_table(path, columns=["sha256"]).column(0).to_pylist():
                if sha in seen:
                    want_repeats.append([doc, seen[sha]])
                    want_inputs.append([i, owner[seen[sha]]])
                owner.append(i)
                codes.append(DROPPED if sha in seen else SPLIT_CODES[split_of(sha, holdout)])
                seen.setdefault(sha, doc)
                doc += 1
            want_codes.append(codes)
        assert [c.tolist() for c in exact.codes] == want_codes
        assert exact.repeats.tolist() == want_repeats and 0 < len(want_repeats) < doc
        assert exact.firsts[-1] == doc
        assert exact.input_of(exact.repeats).tolist() == want_inputs
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # key spool removed
    if partition_bytes:
        assert hashpart.partition_count(doc, 24) > 4


def test_document_keeps_its_split_when_sources_grow(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    for p in sorted((STDLIB / "json").glob("*.py")):
        (root / p.name).write_text(p.read_text(encoding="utf-8"), encoding="utf-8")
    holdout = HoldoutSpec(val_fraction=0.3, test_fraction=0.2)
    src = SourceSpec(name="r", kind="code", path=root)

    def splits(run: str) -> dict[str, str]:
        out = tmp_path / run
        [shard] = ingest_source(src, out / "ingested" / "r", StageIO(out)).artifacts
        build_documents([("r", out / shard.path)], holdout, out / "documents", StageIO(out))
        return {
            row["file"]: s
            for s in ("train", "val", "test")
            for row in pq.read_table(out / "documents" / s, columns=["file"]).to_pylist()
        }

    before = splits("before")
    for p in sorted((STDLIB / "email").glob("*.py")):
        (root / f"email_{p.name}").write_text(p.read_text(encoding="utf-8"), encoding="utf-8")
    (root / "__init__.py").unlink()
    after = splits("after")
    assert len(after) > len(before)
    assert all(after[f] == s for f, s in before.items() if f != "__init__.py")


def _docs_file(tmp_path: Path, texts: list[str], sources: list[str]) -> Path:
    path = tmp_path / "docs.parquet"
    pq.write_table(
        pa.table(
            {
                "text": texts,
                "source": sources,
                "file": [f"f{i}" for i in range(len(texts))],
                "sha256": [text_sha256(t) for t in texts],
            },
            schema=DOC_SCHEMA,
        ),
        path,
    )
    return path


def test_mix_output_counts_and_determinism(tmp_path, local2):
    texts = [f"doc {i}" for i in range(130)]
    sources = ["big"] * 100 + ["small"] * 30
    docs = _docs_file(tmp_path, texts, sources)
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
    docs = _docs_file(tmp_path, [f"doc {i} " * (i % 7 + 1) for i in range(1000)], ["s"] * 1000)
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
    docs = _docs_file(tmp_path, texts, ["s"] * 500)
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


SENTINELS = [FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, "</s>", "<s>"]
fim_text = st.lists(
    st.one_of(st.text(min_size=0, max_size=40), st.sampled_from(["\r\n", "𝔘𝔫𝔦", "🐍", "é", *SENTINELS])),
    max_size=12,
).map("".join)


def _undo(fmt: str | None, text: str, prefix: str | None, middle: str | None, suffix: str | None) -> str:
    return text if fmt is None else prefix + middle + suffix  # type: ignore[operator]


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(fim_text, min_size=1, max_size=20),
    seed=st.integers(0, 2**32),
    fmt=st.sampled_from(["psm", "spm", "mixed"]),
    first=st.integers(0, 10**6),
)
def test_undoing_fim_restores_the_exact_text(texts, seed, fmt, first):
    spec = FimSpec(rate=0.7, format=fmt, seed=seed, min_chars=0)
    cols = fim_batch(texts, first, spec)
    for i, original in enumerate(texts):
        f = cols["fim_format"][i]
        assert (
            _undo(f, cols["text"][i], cols["fim_prefix"][i], cols["fim_middle"][i], cols["fim_suffix"][i]) == original
        )
        if f == "psm":
            expected = (
                FIM_PREFIX
                + cols["fim_prefix"][i]
                + FIM_SUFFIX
                + cols["fim_suffix"][i]
                + FIM_MIDDLE
                + cols["fim_middle"][i]
            )
            assert cols["text"][i] == expected
        elif f == "spm":
            assert cols["text"][i].startswith(FIM_SUFFIX + cols["fim_suffix"][i] + FIM_PREFIX)


def _fim_input(tmp_path: Path) -> Path:
    texts = [p.read_text(encoding="utf-8") for p in sorted((STDLIB / "email").rglob("*.py"))]
    texts = (texts * 80)[:4000]
    texts[5] = "short"
    return _docs_file(tmp_path, texts, ["email"] * len(texts))


def test_fim_rate_bounds_batch_independence_and_determinism(tmp_path, local2):
    src = _fim_input(tmp_path)
    spec = FimSpec(rate=0.5, format="mixed", spm_rate=0.3, seed=42)
    regrouped = tmp_path / "regrouped.parquet"  # other row groups: other tasks
    pq.write_table(pq.read_table(src), regrouped, row_group_size=333)
    a = apply_fim(src, spec, tmp_path / "a", StageIO(tmp_path))
    b = apply_fim(regrouped, spec, tmp_path / "b", StageIO(tmp_path))
    c = apply_fim(src, spec, tmp_path / "c", StageIO(tmp_path, local2))
    assert [x.artifacts[0].sha256 for x in (a, b, c)] == [a.artifacts[0].sha256] * 3
    split = tmp_path / "split"  # other shards: other tasks, the same rows
    split.mkdir()
    for k, (lo, hi) in enumerate([(0, 1000), (1000, 2500), (2500, 2600), (2600, 4000)]):
        pq.write_table(pq.read_table(src).slice(lo, hi - lo), split / shard_name(k))
    apply_fim(split, spec, tmp_path / "split_fim", StageIO(tmp_path, local2))
    assert read_shards(tmp_path / "split_fim").equals(read_shards(tmp_path / "a"))
    n = a.summary.rows
    sigma = (n * 0.25) ** 0.5
    assert abs(a.summary.transformed - 0.5 * n) < 4 * sigma, a.summary.transformed
    assert abs(a.summary.spm - 0.3 * a.summary.transformed) < 4 * (a.summary.transformed * 0.21) ** 0.5, a.summary.spm
    out = read_shards(tmp_path / "a").to_pylist()
    original = pq.read_table(src).column("text").to_pylist()
    assert out[5]["fim_format"] is None and out[5]["text"] == "short"  # under min_chars: untouched
    for row, text in zip(out, original):
        assert _undo(row["fim_format"], row["text"], row["fim_prefix"], row["fim_middle"], row["fim_suffix"]) == text
    other = apply_fim(src, FimSpec(rate=0.5, seed=43), tmp_path / "d", StageIO(tmp_path))
    assert other.artifacts[0].sha256 != a.artifacts[0].sha256
    off = apply_fim(src, spec, tmp_path / "e", StageIO(tmp_path), enabled=False)
    assert off.summary.transformed == 0
    assert read_shards(tmp_path / "e").column("text").to_pylist() == original

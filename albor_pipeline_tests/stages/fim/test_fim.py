from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.shards import read_shards, shard_name
from albor_pipeline.spec import FimSpec
from albor_pipeline.stages.fim.checks import check_fim_rate
from albor_pipeline.stages.fim.fim import apply_fim, fim_batch
from albor_pipeline.text.vocab import FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX
from albor_pipeline_tests.support import STDLIB, docs_file

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
    return docs_file(tmp_path, texts, ["email"] * len(texts))


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


def test_fim_rate_check(tmp_path):
    def fim_file(n_fim: int, n: int):
        path = tmp_path / f"fim_{n_fim}.parquet"
        pq.write_table(pa.table({"fim_format": pa.array(["psm"] * n_fim + [None] * (n - n_fim), pa.string())}), path)
        return path

    assert check_fim_rate([fim_file(500, 1000)], 0.5).passed
    assert not check_fim_rate([fim_file(0, 1000)], 0.5).passed
    assert not check_fim_rate([fim_file(900, 1000)], 0.5).passed
    assert check_fim_rate([fim_file(0, 1000)], 0.0).passed
    low, high = fim_file(100, 500), fim_file(400, 500)  # 500 of 1,000 over two shards; neither alone passes
    assert check_fim_rate([low, high], 0.5).passed
    assert not check_fim_rate([low], 0.5).passed and not check_fim_rate([high], 0.5).passed

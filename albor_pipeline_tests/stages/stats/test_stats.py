"""The statistics stage on a real build: its numbers against independent counts of the same
data, its charts as valid PNGs linked from the card and PROVENANCE.md, byte-identical reruns."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
from collections import defaultdict
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from albor_pipeline.definitions import build_definitions
from albor_pipeline.defs.automation import BUILD_JOB
from albor_pipeline.runtime.artifacts import read_manifest, sha256_file
from albor_pipeline.runtime.distribution import QUANTILES, ValueCounts
from albor_pipeline.runtime.layout import STATS, Layout, filtered_stage
from albor_pipeline.runtime.shards import read_shards
from albor_pipeline.spec import DOCUMENT_KINDS, SPLITS
from albor_pipeline.stages.stats.charts import render
from albor_pipeline.stages.stats.facts import CHARTS, Statistics, chart_input
from albor_pipeline.summaries.hygiene import HygieneSummary
from albor_pipeline.summaries.stats import StatsSummary
from albor_pipeline_tests.support import STDLIB

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_value_counts_give_numpys_quantiles_and_histogram_on_real_lengths() -> None:
    """Lengths of real standard-library files, counted a chunk at a time."""
    lengths = np.array([len(p.read_text(encoding="utf-8")) for p in sorted(STDLIB.glob("*.py"))], dtype=np.int64)
    assert len(lengths) > 100
    counts = ValueCounts()
    for chunk in np.array_split(lengths, 7):
        counts.add(chunk)
    d = counts.distribution(digits=6)
    assert d is not None and d.count == len(lengths) and d.total == int(lengths.sum())
    assert (d.min, d.max) == (int(lengths.min()), int(lengths.max()))
    assert counts.quantiles(list(QUANTILES.values())) == list(np.quantile(lengths, list(QUANTILES.values())))
    assert d.bins == list(np.histogram(lengths, bins=d.edges())[0]) and sum(d.bins) == len(lengths)
    assert d.edges()[1] > lengths.min() >= d.edges()[0] and d.edges()[-2] <= lengths.max() < d.edges()[-1]


def _stats(out: Path) -> tuple[Statistics, StatsSummary]:
    stats = Statistics.model_validate_json((out / STATS / "stats.json").read_text())
    return stats, StatsSummary.model_validate(read_manifest(Layout(out), STATS).summary)


def _megatron_lengths(corpus: Path) -> np.ndarray:
    """Each document's tokens, as the corpus's Megatron index records them (in FIM row order)."""
    raw = (corpus / "megatron.idx").read_bytes()
    return np.frombuffer(raw, "<i4", count=int(np.frombuffer(raw[18:26], "<u8")[0]), offset=34)


def _quantiles(values: list[int] | np.ndarray) -> dict[str, float]:
    return dict(zip(QUANTILES, np.quantile(np.asarray(values), list(QUANTILES.values()))))


def test_lengths_count_every_document_with_numpys_quantiles(reference):
    out = reference.out
    stats, _ = _stats(out)
    for split in SPLITS:
        # Independently of the FIM text the stage read: the mix's own text, and the corpus's Megatron index.
        mixed = read_shards(out / "mixed" / split, ["text", "source"])
        fim = read_shards(out / "fim" / split, ["source", "fim_format"])
        assert fim.column("source").to_pylist() == mixed.column("source").to_pylist()  # one row per mixed row
        tokens = _megatron_lengths(out / "corpus" / split)
        assert len(tokens) == mixed.num_rows
        chars, toks, fimmed = defaultdict(list), defaultdict(list), defaultdict(int)
        for text, source, n, fmt in zip(
            mixed.column("text").to_pylist(),
            mixed.column("source").to_pylist(),
            tokens,
            fim.column("fim_format").to_pylist(),
        ):
            chars[source].append(len(text))
            toks[source].append(int(n))
            fimmed[source] += fmt is not None
        lengths = stats.lengths[split]
        assert set(lengths.sources) == set(chars) and lengths.all.documents == mixed.num_rows
        for source, facts in lengths.sources.items():
            assert facts.documents == len(chars[source]) == sum(facts.chars.bins) == sum(facts.tokens.bins)
            assert facts.chars.quantiles == pytest.approx(_quantiles(chars[source]), abs=0.005)
            assert facts.tokens.quantiles == pytest.approx(_quantiles(toks[source]), abs=0.005)
            assert facts.chars.total == sum(chars[source]) and facts.tokens.total == sum(toks[source])
            assert facts.fim_documents == fimmed[source]
            assert stats.fim[split].sources[source] == pytest.approx(fimmed[source] / len(chars[source]), abs=1e-6)
            counted, _ = np.histogram(chars[source], bins=facts.chars.edges())
            assert list(counted) == facts.chars.bins
        assert lengths.all.tokens.quantiles == pytest.approx(_quantiles(tokens), abs=0.005)
        assert sum(lengths.all.chars.bins) == mixed.num_rows


def test_funnel_is_what_hygiene_and_the_holdout_counted(reference):
    out = reference.out
    stats, summary = _stats(out)
    layout = Layout(out)
    documents = read_manifest(layout, "documents").summary
    assert set(stats.funnel) == {s.name for s in reference.spec.sources_of(*DOCUMENT_KINDS)}
    for source, funnel in stats.funnel.items():
        hygiene = HygieneSummary.model_validate(read_manifest(layout, filtered_stage(source)).summary)
        assert (funnel.ingested, funnel.kept, funnel.removed) == (hygiene.documents_in, hygiene.kept, hygiene.removed)
        assert funnel.ingested - sum(funnel.removed.values()) == funnel.kept
        assert funnel.splits == {split: documents["rows"][split][source] for split in SPLITS}
        # Every document hygiene kept is a duplicate, a near duplicate, contaminated or in a split.
        removed = funnel.exact_duplicates + funnel.near_duplicates + funnel.decontaminated
        assert funnel.kept - removed == sum(funnel.splits.values())
    rows = sum(pq.ParquetFile(p).metadata.num_rows for p in (out / "documents").glob("*/part-*.parquet"))
    assert rows == sum(sum(f.splits.values()) for f in stats.funnel.values())
    kept = sum(f.kept for f in stats.funnel.values()) / sum(f.ingested for f in stats.funnel.values())
    assert summary.hygiene_kept == pytest.approx(kept, abs=1e-6)
    findings = sum(sum(r.hygiene.values()) + sum(r.at_ingest.values()) for r in stats.redactions.values())
    assert summary.redactions == findings > 0  # the e-mail addresses in email/ and json/'s headers


def test_sequence_fill_counts_the_non_pad_tokens(reference):
    out = reference.out
    stats, _ = _stats(out)
    pad = json.loads((out / "tokenizer" / "report.json").read_text())["special_ids"]["<pad>"]
    for name, facts in stats.sequences.items():
        ids = read_shards(out / "corpus" / name, ["input_ids"]).column("input_ids").to_pylist()
        filled = [sum(i != pad for i in seq) for seq in ids]
        assert facts.sequences == len(ids) == facts.fill.count
        assert facts.fill.quantiles == pytest.approx(_quantiles(filled), abs=0.005)


def test_charts_are_pngs_linked_from_the_card_and_provenance_and_plotted(reference):
    out = reference.out
    stats, summary = _stats(out)
    # The signals chart's input: each code source's StarCoder rules, every document in a histogram.
    hygiene = {s: read_manifest(Layout(out), f"filtered/{s}").summary for s in stats.signals}
    assert stats.signals and {h.rule for hs in stats.signals.values() for h in hs} >= {"long_line", "low_alnum"}
    assert all(sum(h.counts) == hygiene[s]["documents_in"] for s, hs in stats.signals.items() for h in hs)
    manifest = read_manifest(Layout(out), STATS)
    recorded = {a.path: a.sha256 for a in manifest.outputs}
    card, provenance = (out / "README.md").read_text(), (out / "PROVENANCE.md").read_text()
    assert len(summary.charts) == len(CHARTS) == 8
    for chart in summary.charts:
        data = (out / chart.path).read_bytes()
        assert data.startswith(PNG_MAGIC) and recorded[chart.path] == sha256_file(out / chart.path)
        with Image.open(io.BytesIO(data)) as image:
            image.verify()
            assert image.format == "PNG" and image.size[0] >= 800 and image.size[1] >= 100
        assert b"tEXt" not in data and b"Software" not in data  # nothing that differs between builds
        assert f"![{chart.title}]({chart.path})" in card  # shown in the card, relative to it
        assert f"- [{chart.title}]({chart.path})" in provenance
    assert recorded["stats/stats.json"] == sha256_file(out / "stats" / "stats.json")
    assert all(re.search(rf"`{re.escape(p)}` \| `{sha}`", provenance) for p, sha in recorded.items())
    materialized = {
        e.asset_key: e.step_materialization_data.materialization.metadata
        for e in reference.result.get_asset_materialization_events()
    }
    metadata = materialized[dg.AssetKey([STATS])]
    assert isinstance(metadata["train_tokens_p50"], dg.FloatMetadataValue)
    assert metadata["train_tokens_p50"].value == summary.splits["train"].tokens_p50 > 0
    assert isinstance(metadata["redactions"], dg.IntMetadataValue) and metadata["redactions"].value > 0


EMBEDDED_PNG = re.compile(r"!\[[^\]]+\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)")


def test_the_asset_page_shows_each_chart_as_an_embedded_png(reference):
    """Each chart is markdown metadata holding the PNG itself, the charts first: the page
    shows the pictures, not paths."""
    out = reference.out
    _, summary = _stats(out)
    metadata = {
        e.asset_key: e.step_materialization_data.materialization.metadata
        for e in reference.result.get_asset_materialization_events()
    }[dg.AssetKey([STATS])]
    names = [Path(c.path).name for c in summary.charts]
    assert list(metadata)[: len(names)] == names
    sizes = {}
    for chart, name in zip(summary.charts, names):
        value = metadata[name]
        assert isinstance(value, dg.MarkdownMetadataValue) and chart.title in value.md_str
        found = EMBEDDED_PNG.search(value.md_str)
        assert found, name
        png = base64.b64decode(found.group(1), validate=True)
        assert png == (out / chart.path).read_bytes(), name
        with Image.open(io.BytesIO(png)) as image:
            image.verify()
        sizes[name] = len(value.md_str)
    print(f"embedded chart markdown, characters: {sizes}, total {sum(sizes.values())}")
    # One materialization event holds them all: 256-colour PNGs keep it near 210 KB (RGBA at 120 dpi: 670 KB).
    assert sum(sizes.values()) < 600_000


def test_each_chart_is_drawn_from_the_figures_it_declares(reference):
    # A chart's task is reused while its declared figures stay the same: drawn from them
    # alone, every chart is the one drawn from all the figures, and a figure it does not read
    # leaves its input as is.
    stats, _ = _stats(reference.out)
    for chart in CHARTS:
        mine = chart_input(stats, chart)
        assert render(chart.name, mine) == render(chart.name, stats), chart.name
        for name in set(Statistics.model_fields) - set(chart.draws):
            assert getattr(mine, name) in ({}, None), (chart.name, name)
    moved = stats.model_copy(update={"near_duplicate_clusters": {"2": 1}})
    changed = {c.name for c in CHARTS if chart_input(moved, c) != chart_input(stats, c)}
    assert changed == {"near_duplicates.png"}


def test_a_rerun_writes_the_same_bytes(reference, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(reference.out, out)  # the shared build stays as it was
    before = {p.name: sha256_file(p) for p in sorted((out / STATS).iterdir())}
    job = build_definitions(reference.spec, out).resolve_job_def(BUILD_JOB)
    with dg.DagsterInstance.ephemeral() as instance:
        result = job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey([STATS])])
        assert [e.asset_key for e in result.get_asset_materialization_events()] == [dg.AssetKey([STATS])]
    after = {p.name: sha256_file(p) for p in sorted((out / STATS).iterdir())}
    assert after == before and len(after) == len(CHARTS) + 1  # the charts and stats.json

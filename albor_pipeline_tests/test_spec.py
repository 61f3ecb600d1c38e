from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from albor_pipeline.spec import DEFAULT_SPEC, SpecError, data_dir, load_spec, parse_spec
from albor_pipeline_tests.support import SHIPPED_SOURCES, small_spec_dict, write_spec


def test_default_spec_loads_and_resolves_placeholders():
    spec = load_spec(DEFAULT_SPEC)
    names = [s.name for s in spec.sources]
    assert names == list(SHIPPED_SOURCES)
    for src in spec.sources[2:]:  # the shipped samples
        assert src.path.exists() and src.path.is_relative_to(DEFAULT_SPEC.parent / "samples"), src.name
    assert spec.source("stdlib").path == Path(sysconfig.get_paths()["stdlib"])
    assert spec.source("pydoc_topics").path == DEFAULT_SPEC.parent / "samples" / "pydoc_topics.jsonl"
    assert spec.source("pydoc_topics").path.exists()
    assert spec.mix.val.rows == 500 and spec.mix.val.seed == 123
    assert spec.mix.test.rows == 200 and spec.mix.test.seed == 456


def test_env_selects_spec_and_data_dir(tmp_path, monkeypatch):
    path = write_spec(tmp_path / "other.yaml", small_spec_dict())
    monkeypatch.setenv("ALBOR_SPEC", str(path))
    monkeypatch.setenv("ALBOR_DATA_DIR", str(tmp_path / "out"))
    assert [s.name for s in load_spec().sources] == ["stdlib_json_email", "stdlib_async"]
    assert data_dir() == tmp_path / "out"


def test_relative_path_resolves_against_spec_file(tmp_path):
    (tmp_path / "sub").mkdir()
    raw = small_spec_dict([{"name": "rel", "kind": "jsonl", "path": "sub/x.jsonl"}])
    spec = parse_spec(raw, tmp_path)
    assert spec.source("rel").path == tmp_path / "sub" / "x.jsonl"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda r: r["mix"]["train"].update(weights={"stdlib_json_email": 0, "stdlib_async": 1}),
            "mix.train.weights: stdlib_json_email: must be > 0",
        ),
        (lambda r: r["mix"]["train"].update(weights={"nope": 1.0}), "mix.train.weights.nope: unknown source"),
        (
            lambda r: r["mix"]["train"].update(weights={"stdlib_json_email": 1.0}),
            "mix.train.weights: no weight or repeat given for source(s) ['stdlib_async']",
        ),
        (
            lambda r: r["holdout"].update(val_fraction=0.6, test_fraction=0.4),
            "holdout: val_fraction + test_fraction must be < 1",
        ),
        (lambda r: r["sources"][1].update(kind="xml"), "sources[1].kind"),
        (
            lambda r: r.update(tokenizer={"vocab_size": 200}),
            "tokenizer.vocab_size: Input should be greater than or equal to 260",
        ),
        (lambda r: r["sources"][1].update(min_chars=10, max_chars=5), "sources[1]: min_chars must be <= max_chars"),
        (lambda r: r["sources"].append(dict(r["sources"][0])), "sources: duplicate name(s) ['stdlib_json_email']"),
        (lambda r: r["sources"][0].update(path="{nowhere}/x"), "sources[0].path: unknown placeholder"),
        (
            lambda r: (
                r["fim"].__setitem__("splits", ["train", "dev"]) if "fim" in r else r.update(fim={"splits": ["dev"]})
            ),
            "fim.splits: unknown split(s) ['dev']",
        ),
        (lambda r: r["corpus"].update(remainder="wrap"), "corpus.remainder"),
        (
            lambda r: r.update(automation={"observe_cron": "every hour"}),
            "automation.observe_cron: must be a 5-field cron string",
        ),
        (lambda r: r.update(automation={"sensor_interval_seconds": 1}), "automation.sensor_interval_seconds"),
        (
            lambda r: r["sources"][0].update(hygiene={"rules": {"languages": ["en"]}}),
            "sources[0]: hygiene.rules.languages: for text sources (jsonl, csv, parquet, web) only",
        ),
        (
            lambda r: r["sources"][0].update(hygiene={"filters": {"max_line_length": 500}}),
            "hygiene.filters is now hygiene.rules: its thresholds under hygiene.rules.starcoder",
        ),
        (
            lambda r: r.update(corpus={"packing": "best_fit", "long": {"min_chars": 100}}, audit={"ledger": False}),
            "corpus.long with packing: best_fit needs audit.ledger: true",
        ),
    ],
)
def test_bad_spec_names_the_key(tmp_path, mutate, message):
    raw = small_spec_dict()
    mutate(raw)
    with pytest.raises(SpecError) as err:
        load_spec(write_spec(tmp_path / "bad.yaml", raw))
    assert message in str(err.value)
    assert str(tmp_path / "bad.yaml") in str(err.value)


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(SpecError, match="spec file not found"):
        load_spec(tmp_path / "missing.yaml")
    (tmp_path / "broken.yaml").write_text("sources: [\n", encoding="utf-8")
    with pytest.raises(SpecError, match="invalid YAML"):
        load_spec(tmp_path / "broken.yaml")


def test_corpus_bos_defaults_on_when_the_spec_renders_sft_or_eval_sets(tmp_path):
    """SFT and eval sequences start with `<s>`: a spec that renders them pretrains with `<s>`
    before every document unless it says otherwise (nanochat prepends it to every document)."""
    assert load_spec(DEFAULT_SPEC).corpus.bos
    assert not parse_spec(small_spec_dict(), tmp_path).corpus.bos  # documents only: nothing to agree with
    rendered = {
        "chat": {},
        "synthetic": {"task": "spelling_bee"},
        "mc": {},
        "base_eval": {"task_type": "language_modeling"},
    }
    for kind, fields in rendered.items():
        raw = small_spec_dict([{"name": "x", "kind": kind, "path": "x.jsonl", **fields}])
        assert parse_spec(raw, tmp_path).corpus.bos, kind
        raw["corpus"]["bos"] = False
        assert not parse_spec(raw, tmp_path).corpus.bos, kind

"""A stage's summary is its own typed model: written once into the manifest, read back by it.

The JSON keeps the keys the dicts had (provenance.json's hashes do not move): an absent fact
stays absent or `{}` as before, a key with a space stays one; an unknown key fails loudly.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from albor_pipeline.stages.mix.mix import SourcePlan
from albor_pipeline.summaries.documents import DocumentsSummary, NearDuplicates
from albor_pipeline.summaries.mix import MixSummary, PlanRow
from albor_pipeline.summaries.tokenizer import TokenizerSummary

ROWS = {"train": {"a": 3}, "val": {}, "test": {}}


def test_documents_without_near_dedup_or_benchmarks_write_empty_objects() -> None:
    summary = DocumentsSummary(rows=ROWS, duplicates={})
    written = {"rows": ROWS, "duplicates": {}, "near_duplicates": {}, "decontaminated": {}}
    assert summary.to_json() == written  # no `redaction` key unless a chat source has one
    assert DocumentsSummary.model_validate(written) == summary


def test_near_duplicates_round_trip() -> None:
    near = {
        "removed": {"a": 1},
        "clusters": 1,
        "cluster_sizes": {"2": 1},
        "candidate_pairs": 4,
        "verified_pairs": 1,
        "examples": [["x.py", "y.py", 0.9]],
    }
    summary = DocumentsSummary.model_validate({"rows": ROWS, "duplicates": {}, "near_duplicates": near})
    assert isinstance(summary.near_duplicates, NearDuplicates)
    assert summary.to_json()["near_duplicates"] == near


def test_mix_plan_keeps_its_column_names() -> None:
    row = PlanRow.of(SourcePlan("a", 4, 10, "weight 1", input_chars=400, output_chars=1000))
    written = MixSummary(plan=[row], warnings=[]).to_json()
    assert written["plan"] == [
        {
            "source": "a",
            "rule": "weight 1",
            "input rows": 4,
            "output rows": 10,
            "multiplier": "2.50x",
            "input chars": 400,
            "output chars": 1000,
        }
    ]
    assert MixSummary.model_validate(written).plan[0].output_rows == 10
    # A summary written before characters and budgets were recorded still reads.
    del written["budget"], written["plan"][0]["input chars"], written["plan"][0]["output chars"]
    assert MixSummary.model_validate(written).plan[0].input_chars is None


def _report(**extra: object) -> dict[str, object]:
    return {
        "vocab_size": 300,
        "learned_vocab_size": 289,
        "requested_vocab_size": 289,
        "merges": 29,
        "special_ids": {"<unk>": 0},
        "train_documents": 5,
        "train_chars": 900,
        "train_seconds": 0.5,  # timings are metadata, never in the summary
        "train_mb_per_s": 0.1,
        "val_documents": 1,
        "roundtrip_ok": 1,
        "roundtrip_failures_first": [],
        "tiktoken_ids_equal": 1,
        "tiktoken_mismatches_first": [],
        "keyword_coverage": {"def": True},
        "keywords_single_token": 1,
        "val_bytes": 10,
        "val_tokens": 4,
        "bytes_per_token": None,
        "comparison": [{"text": "all", "bytes": 10, "ours_tokens": 4, "ours_bytes_per_token": 2.5}],
        "comparison_notes": [],
        **extra,
    }


def test_tokenizer_warning_is_written_only_when_there_is_one() -> None:
    plain = TokenizerSummary.of(_report()).to_json()
    assert "warning" not in plain and "train_seconds" not in plain and plain["bytes_per_token"] is None
    assert TokenizerSummary.of(_report(warning="few tokens")).to_json()["warning"] == "few tokens"


def test_an_unknown_key_fails_where_it_is_read() -> None:
    with pytest.raises(ValidationError, match="candidate_pair"):
        NearDuplicates.model_validate(
            {
                "removed": {},
                "clusters": 0,
                "cluster_sizes": {},
                "candidate_pair": 0,
                "verified_pairs": 0,
                "examples": [],
            }
        )

"""The tokenizer round-trips its evaluation texts, and nanochat's tokenizer.pkl gives them the same ids."""

from __future__ import annotations

import json
from pathlib import Path

from albor_pipeline.runtime.checks import CheckOutcome


def check_roundtrip(report_path: Path) -> CheckOutcome:
    report = json.loads(report_path.read_text(encoding="utf-8"))
    ok = report["roundtrip_ok"] == report["val_documents"]
    return CheckOutcome(
        ok,
        f"{report['roundtrip_ok']}/{report['val_documents']} val documents round-trip exactly",
        {"failures_first": report["roundtrip_failures_first"]},
    )


def check_tiktoken_ids(report_path: Path) -> CheckOutcome:
    """tokenizer.pkl, what nanochat encodes with, gives every val document tokenizer.json's ids.
    tiktoken merges by the rank of a pair's result, HF by its list of merges: they can disagree
    (a token reachable from two pairs), so the build encodes the val text with both."""
    report = json.loads(report_path.read_text(encoding="utf-8"))
    same, docs = report["tiktoken_ids_equal"], report["val_documents"]
    return CheckOutcome(
        same == docs,
        f"{same}/{docs} val documents: tokenizer.pkl ids = tokenizer.json ids",
        {"mismatches_first": report["tiktoken_mismatches_first"]},
    )

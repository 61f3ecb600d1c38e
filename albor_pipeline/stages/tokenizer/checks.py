"""The tokenizer round-trips its evaluation texts, and tokenizer.json (as users load it) and nanochat's
tokenizer.pkl give them the corpus's ids."""

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
    """tokenizer.json, loaded as a user loads it (`Tokenizer.from_file` with
    `encode_special_tokens`), gives every val document the corpus's ids, and tokenizer.pkl (what
    nanochat encodes with) gives it the same. tiktoken merges by the rank of a pair's result, HF by
    its list of merges: they can disagree (a token reachable from two pairs), so the build encodes
    the val text with each."""
    report = json.loads(report_path.read_text(encoding="utf-8"))
    docs, users, same = report["val_documents"], report.get("json_ids_equal"), report["tiktoken_ids_equal"]
    return CheckOutcome(
        users == docs and same == docs,
        f"{users}/{docs} val documents: tokenizer.json ids (from_file, encode_special_tokens) = corpus ids; "
        f"{same}/{docs}: tokenizer.pkl ids = tokenizer.json ids",
        {
            "json_mismatches_first": report.get("json_mismatches_first", []),
            "mismatches_first": report["tiktoken_mismatches_first"],
        },
    )

"""The tokenizer round-trips its evaluation texts."""

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

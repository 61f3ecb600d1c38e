"""What the tokenizer records (its manifest's `summary`: `report.json` without the timings),
and the `## Tokenizer` section of PROVENANCE.md."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from albor_pipeline.runtime.layout import TOKENIZER
from albor_pipeline.runtime.markdown import markdown_table
from albor_pipeline.runtime.report import Report
from albor_pipeline.summaries.provenance import Built
from albor_pipeline.text.vocab import padded_vocab_size

PYTHON_KEYWORDS = (" def", " return", " self", " import", " class", " for", " if", " in")
TIMING = ("train_seconds", "train_mb_per_s")  # vary run to run: metadata only, never in the summary


class TokenizerSummary(Report):
    vocab_size: int  # with the FIM and chat tokens
    learned_vocab_size: int
    requested_vocab_size: int
    merges: int
    special_ids: dict[str, int]
    train_documents: int
    train_chars: int
    # Only when the text supports fewer tokens than requested.
    warning: str | None = Field(None, exclude_if=lambda v: v is None)
    val_documents: int
    roundtrip_ok: int
    roundtrip_failures_first: list[int]
    # Val documents tokenizer.pkl (nanochat's tiktoken) encodes to tokenizer.json's ids; None in
    # a tokenizer built before tokenizer.pkl existed (its data dir still reads).
    tiktoken_ids_equal: int | None = None
    tiktoken_mismatches_first: list[int] = []
    # Val documents tokenizer.json, loaded as a user loads it (`Tokenizer.from_file`,
    # `encode_special_tokens`), encodes to the corpus's ids; None in an older report.
    json_ids_equal: int | None = None
    json_mismatches_first: list[int] = []
    keyword_coverage: dict[str, bool]
    keywords_single_token: int
    val_bytes: int
    val_tokens: int
    bytes_per_token: float | None  # None without val text
    # Per source and "all": bytes, and ours and each baseline's tokens, bytes/token, diff.
    comparison: list[dict[str, str | int | float | None]]
    comparison_notes: list[str]

    @classmethod
    def of(cls, report: dict[str, Any]) -> TokenizerSummary:
        """The summary of `build_tokenizer`'s report (the timings left out)."""
        return cls.model_validate({k: v for k, v in report.items() if k not in TIMING})


def provenance_section(built: Built) -> list[str]:
    """`## Tokenizer`: its report's facts, and the comparison with the baselines."""
    summary = built.summary(TOKENIZER, TokenizerSummary)
    if summary is None:
        return []
    lines = ["## Tokenizer", "", markdown_table(report_rows(summary.to_json())), ""]
    if summary.comparison:
        lines += [
            "Bytes per token on the val text, ours against each baseline (diff: fewer tokens than the "
            "baseline is positive):",
            "",
            comparison_table(summary.comparison),
            "",
        ]
    return lines


def report_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report as (fact, value) rows: one table for the asset page and PROVENANCE.md."""
    rows = [
        ("vocab size (with FIM and chat tokens)", report["vocab_size"]),
        ("merges", report["merges"]),
        ("special ids", ", ".join(f"`{k}`={v}" for k, v in report["special_ids"].items())),
        ("val round-trip", f"{report['roundtrip_ok']}/{report['val_documents']}"),
        ("tokenizer.json ids = corpus ids (val)", f"{report.get('json_ids_equal')}/{report['val_documents']}"),
        ("tokenizer.pkl ids = tokenizer.json ids (val)", f"{report['tiktoken_ids_equal']}/{report['val_documents']}"),
        ("keywords single-token", f"{report['keywords_single_token']}/{len(PYTHON_KEYWORDS)}"),
        ("bytes/token (val)", report["bytes_per_token"]),
        ("train documents", report["train_documents"]),
        *(("comparison", note) for note in report.get("comparison_notes", [])),
        *((f"training {k}", report[f"train_{k}"]) for k in ("seconds", "mb_per_s") if f"train_{k}" in report),
    ]
    return [{"fact": fact, "value": value} for fact, value in rows]


def comparison_table(rows: list[dict[str, Any]]) -> str:
    """The comparison as markdown, columns in reading order (stored JSON sorts its keys)."""
    first = ["text", "bytes", "ours_tokens", "ours_bytes_per_token"]
    rest = sorted({k for row in rows for k in row} - set(first))
    return markdown_table([{k: row.get(k, "") for k in first + rest} for row in rows])


def card_tokenizer(summary: TokenizerSummary | None) -> list[dict[str, Any]]:
    """Bytes per token on the whole val text: ours, then each baseline (GPT-2, GPT-4, GPT-4o,
    the spec's files) and how many tokens ours needs against it."""
    total = next((row for row in summary.comparison if row["text"] == "all"), None) if summary else None
    if total is None:
        return []
    names = sorted(k.removesuffix("_bytes_per_token") for k in total if k.endswith("_bytes_per_token"))
    rows = [{"tokenizer": "ours", "bytes per token": total["ours_bytes_per_token"], "ours against it": ""}]
    for name in (n for n in names if n != "ours"):
        diff = total.get(f"{name}_diff_pct")
        pct = float(diff) if isinstance(diff, (int, float)) else None
        against = "" if pct is None else f"{abs(pct)} % {'fewer' if pct >= 0 else 'more'} tokens"
        rows.append(
            {"tokenizer": name, "bytes per token": total[f"{name}_bytes_per_token"], "ours against it": against}
        )
    return rows


def card_vocab(summary: TokenizerSummary | None) -> list[str]:
    """Which vocabulary size sizes a model: `len(tokenizer)`, not transformers' `vocab_size`."""
    if summary is None:
        return []
    return [
        f"Size a model's embedding from {summary.vocab_size:,} ids: `len(tokenizer)`, `vocab_size` in "
        f"`tokens.json` and `meta.pkl`, the learned tokens with the FIM and chat tokens. `AutoTokenizer`'s "
        f"`vocab_size` ({summary.learned_vocab_size:,}) leaves the added tokens out, and corpus ids reach past it. "
        f"Padded to a multiple of 64 (as nanoGPT pads GPT-2's): {padded_vocab_size(summary.vocab_size):,} "
        "(`padded_vocab_size` in `tokens.json`).",
        "",
    ]

"""bench/RESULTS.md: the bench's figures as a table per section, each under the command,
date, machine and Python that measured it, with the targets beside the figures. Runs the
generator on small made-up results; no bench runs here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import cli
from bench.report import SECTIONS, markdown

LEDGER_RUN = {
    "date": "2026-11-28",
    "machine": "x86_64, 2 CPUs",
    "python": "3.11.7",
    "command": "python bench/run.py --only ledger --repeat 1",
}
REBUILD_RUN = {**LEDGER_RUN, "date": "2026-11-26", "command": "python bench/run.py --only rebuild"}
LEDGER = {
    "wall_with_ledger_s": 40.1,
    "wall_without_ledger_s": 40.9,
    "ledger_cost_pct": -2.0,
    "ledger_files": 34,
    "ledger_mb": 0.605,
    "ledger_share_pct": 0.09,
    "trace_file_s": 1.32,
    "trace_sequence_s": 1.94,
}
REBUILD = {
    "default": {
        "cold_wall_s": 33.0,
        "cold_steps_s": {"documents": 5.2},
        "unchanged": {"wall_s": 4.3, "ratio": 0.13},
        "kept": {"wall_s": 7.3, "ratio": 0.22},
        "retrained": {"wall_s": 15.2, "ratio": 0.46},
        "resume": {"killed_after_tasks": 9, "wall_s": 8.3, "ratio": 0.25},
    }
}
RESULTS: dict[str, Any] = {
    "measured": {"ledger": LEDGER_RUN, "rebuild": REBUILD_RUN},
    "ledger": LEDGER,
    "rebuild": REBUILD,
}


def sections(text: str) -> dict[str, str]:
    """{title: the section's text after its heading} of a RESULTS.md."""
    parts = text.split("\n## ")[1:]
    return {part.partition("\n")[0]: part.partition("\n")[2].strip() for part in parts}


def test_a_table_per_section_under_the_run_that_measured_it() -> None:
    text = markdown(RESULTS)
    assert text.startswith("# Bench results\n")
    found = sections(text)
    assert list(found) == ["The document ledger", "Rebuilds and resume against a cold build"]
    ledger, rebuild = found.values()
    assert ledger.startswith(
        "`python bench/run.py --only ledger --repeat 1` on 2026-11-28, x86_64, 2 CPUs, Python 3.11.7\n\n"
        "| figure | value | target |\n|---|---|---|\n"
    )
    assert "|   ledger cost | -2.0 % | <= 10 % |" in ledger
    assert rebuild.startswith("`python bench/run.py --only rebuild` on 2026-11-26,")
    assert "| rebuild (default spec): cold build wall s | 33.0 |  |" in rebuild
    assert "|   one-file edit, tokenizer retrained: wall s / ratio | 15.2 / 0.46 | <= 0.5 |" in rebuild
    assert "|   killed at 9 corpus/train tasks, the rest: wall s / ratio | 8.3 / 0.25 | <= 0.3 |" in rebuild


def test_results_without_a_record_per_section_name_the_files_run() -> None:
    """A results.json written before sections kept their own record: the file's top-level one."""
    old = {
        "date": "2026-11-22",
        "machine": "x86_64, 2 CPUs, Python 3.11.7",
        "command": "python bench/run.py",
        "ledger": LEDGER,
    }
    (ledger,) = sections(markdown(old)).values()
    assert ledger.startswith("`python bench/run.py` on 2026-11-22, x86_64, 2 CPUs, Python 3.11.7\n")


def test_report_rewrites_results_md_beside_the_results(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    out.write_text(json.dumps(RESULTS))
    assert cli.main(["--report", "--out", str(out)]) == 0
    assert (tmp_path / "RESULTS.md").read_text() == markdown(RESULTS)


def test_every_reported_section_is_kept_and_stamped_by_a_bench_section() -> None:
    """A section `--only` runs keeps the others' figures and their records; each figure's
    section names the `--only` choice that measures it."""
    for key, _, section, _ in SECTIONS:
        assert key in cli.RESULTS, f"{key}: not kept from --out by `--only` runs"
        assert section in cli.SECTIONS, f"{key}: measured by no bench section ({section})"
    assert "measured" in cli.RESULTS
    assert {section for _, _, section, _ in SECTIONS} == set(cli.SECTIONS)

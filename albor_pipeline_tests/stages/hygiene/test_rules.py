"""Rules over stored signals: a threshold change scores no text and equals a cold build, and
`whatif` predicts exactly what the rebuild removes (real prose: Python's pydoc topics)."""

from __future__ import annotations

import json
from pathlib import Path
from pydoc_data.topics import topics
from typing import Any

import pyarrow.parquet as pq
import pytest

from albor_pipeline.runtime.executor import TASKS
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.shards import shard_files
from albor_pipeline.runtime.taskstore import TaskStore, reusing
from albor_pipeline.spec import GopherQuality, GopherRepetition, HygieneRules, HygieneSpec, SourceKind, SourceSpec
from albor_pipeline.stages.hygiene.hygiene import HygieneResult, clean_source
from albor_pipeline.stages.hygiene.whatif import compare
from albor_pipeline.stages.ingest.ingest import ingest_source
from albor_pipeline.text.ledger import SIGNALS, TEXTS
from albor_pipeline_tests.support import STDLIB

TEXT = SourceKind.jsonl


def _topics(tmp_path: Path) -> Path:
    """The pydoc topics as an ingested JSONL source."""
    path = tmp_path / "topics.jsonl"
    path.write_text("".join(json.dumps({"text": text}) + "\n" for _, text in sorted(topics.items())))
    ingest_source(SourceSpec(name="topics", kind=TEXT, path=path), tmp_path / "in", StageIO(tmp_path))
    return tmp_path / "in"


def _artifacts(result: HygieneResult) -> list[tuple[str, str]]:
    return [(a.path.split("/", 1)[1], a.sha256) for a in result.artifacts]


def test_a_threshold_change_scores_no_text_equals_a_cold_build_and_whatif_predicted_it(tmp_path: Path) -> None:
    ingested = _topics(tmp_path)
    store = TaskStore(str(Layout(tmp_path / "data").task_store), 10**9)
    current = HygieneSpec().for_kind(TEXT)
    proposed = HygieneSpec(
        rules=HygieneRules(
            gopher_quality=GopherQuality(max_non_alpha_words_ratio=0.6),
            gopher_repetition=GopherRepetition(top_4_gram_frac=0.3),
        )
    ).for_kind(TEXT)

    used: list[set[str]] = []  # per build, the identities its stage refers to (`albor gc` keeps them)

    def clean(spec: HygieneSpec, out: Path) -> tuple[HygieneResult, dict[str, Any]]:
        mark = TASKS.mark()
        with reusing(store) as session:
            result = clean_source(ingested, spec, out, StageIO(tmp_path), kind=TEXT)
        assert session is not None
        used.append(set(session.keys))
        return result, TASKS.since(mark)["_clean_shard"]

    first, tasks = clean(current, tmp_path / "first")
    # Cold: every part ran (each shard's texts and signals, and theirs per row group) but the
    # signals' findings, which the shard of texts had just made.
    groups = sum(pq.ParquetFile(p).num_row_groups for p in shard_files(ingested))
    assert first.summary.scanned == first.summary.documents_in == len(topics) and tasks["parts_reused"] == groups
    assert sum(first.summary.removed.values()) > 10  # web-text rules drop much of a reference manual
    predicted = compare(tmp_path / "first", ingested, current, proposed, examples=2)
    rebuilt, tasks = clean(proposed, tmp_path / "rebuilt")
    # The rebuild ran its tasks (their identity holds the thresholds) but reused every part: no text scored.
    assert tasks["tasks"] >= 1 and tasks["reused"] == 0 and tasks["parts_reused"] == tasks["parts"] > 0
    assert rebuilt.summary.scanned == 0
    # It still refers to every part it reused, those inside the signals too: only the tasks' own identities changed.
    assert len(used[0] - used[1]) == len(used[1] - used[0]) == len(shard_files(ingested))

    def inodes(out: str) -> list[int]:
        return [
            (tmp_path / out / sub / p.name).stat().st_ino for p in shard_files(ingested) for sub in (TEXTS, SIGNALS)
        ]

    assert inodes("first") == inodes("rebuilt")  # shards of texts and signals linked from the store, not written
    cold = clean_source(ingested, proposed, tmp_path / "cold", StageIO(tmp_path), kind=TEXT)  # no store
    assert _artifacts(rebuilt) == _artifacts(cold) and rebuilt.summary == cold.summary.model_copy(update={"scanned": 0})
    # whatif's answer is what the rebuild then removed, exactly.
    assert predicted.kept_now == first.summary.kept and predicted.kept_after == rebuilt.summary.kept
    assert predicted.removed_after == rebuilt.summary.removed
    restored = sum(e.restored.documents for e in predicted.rules) - sum(e.removed.documents for e in predicted.rules)
    assert restored == rebuilt.summary.kept - first.summary.kept > 0
    # The examples sit on either side of the changed threshold.
    rule = "gopher_quality.max_non_alpha_words_ratio"
    assert all(e.value < 0.6 for e in predicted.past[rule]) and all(e.value >= 0.6 for e in predicted.inside[rule])
    assert len(predicted.past[rule]) == 2 and all(e.excerpt for e in predicted.past[rule])


def test_a_redaction_change_alone_is_counted_as_scored(tmp_path: Path) -> None:
    """Scanning for secrets again (ingestion no longer redacted them) rewrites the shards of
    texts while every signal is reused: the documents it scanned count as scored now."""
    ingested = _topics(tmp_path)
    store = TaskStore(str(Layout(tmp_path / "data").task_store), 10**9)
    with reusing(store):
        first = clean_source(ingested, HygieneSpec(), tmp_path / "a", StageIO(tmp_path), kind=TEXT, scan_secrets=False)
        again = clean_source(ingested, HygieneSpec(), tmp_path / "b", StageIO(tmp_path), kind=TEXT, scan_secrets=True)
    assert first.summary.scanned == again.summary.scanned == len(topics)


def test_a_plain_rule_drops_what_its_signal_says_and_the_ledger_names_the_value(tmp_path: Path) -> None:
    """`drop_if: comment_frac > 0.2` on real code: the dropped are exactly the documents whose
    stored signal exceeds it, and each ledger row gives the value against the threshold."""
    source = SourceSpec(name="s", kind="code", path=STDLIB / "email")
    ingest_source(source, tmp_path / "in", StageIO(tmp_path))
    spec = HygieneSpec(rules=HygieneRules(starcoder=None, drop_if=("comment_frac > 0.2",)))
    result = clean_source(tmp_path / "in", spec, tmp_path / "out", StageIO(tmp_path))
    signals = pq.read_table(tmp_path / "out" / SIGNALS).to_pylist()
    over = {s["sha256"] for s in signals if s["comment_frac"] > 0.2}
    assert 0 < len(over) < len(signals) and result.summary.removed == {"comment_frac > 0.2": len(over)}
    ledger = pq.read_table(tmp_path / "out" / "_ledger").to_pylist()
    assert {row["sha256"] for row in ledger if row["fate"] == "filtered"} == over
    assert all(r["detail"].startswith("comment_frac > 0.2: comment_frac=") for r in ledger if r["fate"] == "filtered")


def test_a_rule_on_a_signal_the_source_does_not_score_is_a_clear_error(tmp_path: Path) -> None:
    ingest_source(SourceSpec(name="s", kind="code", path=STDLIB / "json"), tmp_path / "in", StageIO(tmp_path))
    spec = HygieneSpec(rules=HygieneRules(drop_if=("no_such_signal > 1",)))
    with pytest.raises(ValueError, match=r"no signal no_such_signal for a code source; it scores .*comment_frac"):
        clean_source(tmp_path / "in", spec, tmp_path / "out", StageIO(tmp_path))

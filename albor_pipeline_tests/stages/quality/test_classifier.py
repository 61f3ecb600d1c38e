"""The quality classifier, trained here on real text nobody here wrote: Python's manual
(Debian's python3-doc, HTML reduced to text) against the READMEs under /usr/share/doc."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import ClassifierSpec, HygieneRules, HygieneSpec, SourceSpec
from albor_pipeline.stages.hygiene.hygiene import clean_source
from albor_pipeline.stages.ingest.ingest import ingest_source
from albor_pipeline.stages.quality.classifier import train_classifier
from albor_pipeline.text.classifier import WEIGHTS, ModelRef
from albor_pipeline.text.ledger import SIGNALS
from albor_pipeline_tests.stages.hygiene.test_signals import PYTHON_DOC, ROOT
from bench.signals import html_text

pytestmark = pytest.mark.slow  # a few hundred pages to read and vectorize


def _jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], set[str]]:
    """Ingested shard sets: manual pages (`manual`), READMEs (`readmes`), and a third source of
    pages and READMEs neither trained on (`unseen`)."""
    subprocess.run([ROOT / "scripts/system-deps", f"{PYTHON_DOC}/index.html:python3-doc"], check=True)
    root = tmp_path_factory.mktemp("classifier")
    pages = [html_text(p) for p in sorted(PYTHON_DOC.rglob("*.html"))]
    readmes = []
    for p in sorted(Path("/usr/share/doc").glob("*/README*")):
        if p.is_file():
            raw = p.read_bytes()
            readmes.append((gzip.decompress(raw) if p.suffix == ".gz" else raw).decode(errors="replace")[:20_000])
    out = {}
    for name, texts in (
        ("manual", pages[0::3]),
        ("readmes", readmes[0::2]),
        ("unseen", pages[1::9] + readmes[1::4]),
    ):
        src = SourceSpec(name=name, kind="jsonl", path=_jsonl(root / f"{name}.jsonl", texts), min_chars=200)
        ingest_source(src, root / "in" / name, StageIO(root))
        out[name] = root / "in" / name
    return out, set(pages[1::9])


def test_the_classifier_trains_deterministically_and_its_score_is_a_working_rule(
    sources: tuple[dict[str, Path], set[str]], tmp_path: Path
) -> None:
    ingested, unseen_pages = sources
    spec = ClassifierSpec(positive=("manual",), negative=("readmes",))
    one = train_classifier([ingested["manual"]], [ingested["readmes"]], spec, tmp_path / "one", tmp_path)
    two = train_classifier([ingested["manual"]], [ingested["readmes"]], spec, tmp_path / "two", tmp_path)
    assert [a.sha256 for a in one.artifacts] == [a.sha256 for a in two.artifacts]  # same inputs, same bytes
    summary = one.summary
    assert summary.documents["positive"] > 100 and summary.documents["negative"] > 100 and summary.held_out > 40
    assert summary.auc is not None and summary.auc > 0.95 and summary.precision > 0.9 and summary.recall > 0.9
    # A capped class takes the documents of smallest SHA-256: fewer documents, other weights.
    capped = train_classifier(
        [ingested["manual"]],
        [ingested["readmes"]],
        spec.model_copy(update={"max_documents": 50}),
        tmp_path / "c",
        tmp_path,
    )
    assert capped.summary.documents == {"positive": 50, "negative": 50}
    assert capped.artifacts[0].sha256 != one.artifacts[0].sha256
    # Its score as a rule on a source it never saw: what it drops is what its stored score says.
    weights = next(a for a in one.artifacts if a.path.endswith(WEIGHTS))
    model = ModelRef(str(tmp_path / "one"), weights.sha256)
    off = {"gopher_repetition": None, "gopher_quality": None, "fineweb": None}  # the classifier's rule alone
    rules = HygieneSpec(rules=HygieneRules(**off, drop_if=("quality_score < 0.5",)))
    result = clean_source(ingested["unseen"], rules, tmp_path / "out", StageIO(tmp_path), kind="jsonl", model=model)
    signals = pq.read_table(tmp_path / "out" / SIGNALS, columns=["sha256", "quality_score"]).to_pylist()
    low = {s["sha256"] for s in signals if s["quality_score"] < 0.5}
    assert result.summary.removed == {"quality_score < 0.5": sum(s["quality_score"] < 0.5 for s in signals)}
    rows = pq.read_table(ingested["unseen"], columns=["sha256", "text"]).to_pylist()
    manual = {r["sha256"] for r in rows if r["text"] in unseen_pages}
    readmes = {r["sha256"] for r in rows} - manual
    assert len(manual) > 20 and len(readmes) > 20  # both classes, as the source was made
    assert len(manual & low) <= len(manual) // 10  # at most a tenth of the unseen manual pages dropped
    assert len(readmes & low) >= 0.8 * len(readmes)  # and most unseen READMEs


@pytest.mark.graph
def test_a_spec_with_a_classifier_builds_and_its_card_reports_it(tmp_path: Path) -> None:
    """The whole graph with `quality.classifier`: the classifier stage trains on the pydoc
    topics against /usr/share/doc's READMEs, a third source's hygiene reads its score, and
    PROVENANCE.md and the asset's metadata report the held-out figures."""
    from albor_pipeline.runtime.artifacts import read_manifest
    from albor_pipeline.runtime.layout import QUALITY_CLASSIFIER, Layout
    from albor_pipeline.spec import load_spec
    from albor_pipeline_tests.support import materialize_all, tiny_spec, write_spec

    readmes = [
        p.read_text(errors="replace")[:20_000] for p in sorted(Path("/usr/share/doc").glob("*/README")) if p.is_file()
    ]
    topics = [json.loads(line)["text"] for line in (ROOT / "data/samples/pydoc_topics.jsonl").open()]
    prose = {"rules": {"gopher_repetition": None, "gopher_quality": None, "fineweb": None}}
    raw = tiny_spec()
    raw["sources"] += [
        {"name": "topics", "kind": "jsonl", "path": str(_jsonl(tmp_path / "t.jsonl", topics[::2])), "hygiene": prose},
        {"name": "readmes", "kind": "jsonl", "path": str(_jsonl(tmp_path / "r.jsonl", readmes[::2])), "hygiene": prose},
        {
            "name": "mixed",
            "kind": "jsonl",
            "path": str(_jsonl(tmp_path / "m.jsonl", topics[1::2] + readmes[1::2])),
            "hygiene": {"rules": {**prose["rules"], "drop_if": ["quality_score < 0.5"]}},
        },
    ]
    raw["quality"] = {"classifier": {"positive": ["topics"], "negative": ["readmes"]}}
    spec = load_spec(write_spec(tmp_path / "spec.yaml", raw))
    out = tmp_path / "out"
    result = materialize_all(spec, out)
    layout = Layout(out)
    trained = read_manifest(layout, QUALITY_CLASSIFIER)
    assert trained.summary["auc"] > 0.9 and trained.summary["documents"]["positive"] > 20
    mixed = read_manifest(layout, "filtered/mixed").summary
    assert 0 < mixed["removed"]["quality_score < 0.5"] < mixed["documents_in"]
    meta = result.asset_materializations_for_node("quality_classifier")[0].metadata
    assert meta["auc"].value == trained.summary["auc"]
    assert "## Quality classifier" in (out / "PROVENANCE.md").read_text()

"""From a file to the checkpoints that trained on it: a simulated training loop over a real
build (the project's own `Batches`, ranks stepping together, states saved every k steps, a
resume on another world size, an epoch boundary crossed) records the items it served;
`albor exposure` must name the same documents, steps and sequences from the states alone,
after the corpus was rebuilt too."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow.parquet as pq
import pytest

from albor_pipeline.cli import main
from albor_pipeline.dataset import Batches, Sequences
from albor_pipeline.diff import diff_versions
from albor_pipeline.exposure import Exposure
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.spec import load_spec
from albor_pipeline.stages.corpus.exposure import read_states
from albor_pipeline.stages.corpus.versions import versions, versions_dir
from albor_pipeline_tests.support import (
    STDLIB,
    Build,
    build,
    materialize_all,
    run_into_bucket,
    tiny_spec,
    write_spec,
)

CHUNK = 128  # the loop reads 128-token chunks of the 256-token sequences: two items a sequence
BATCH, EVERY, RESUME_AT, STEPS = 8, 5, 10, 100


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """The tiny spec with its json source copied here, so a test can edit one of its files."""
    tmp = tmp_path_factory.mktemp("exposure")
    shutil.copytree(STDLIB / "json", tmp / "src" / "json")
    raw = tiny_spec()
    raw["sources"][0].update(path=str(tmp / "src"), include=["json/**/*.py"])
    return build(tmp, raw)


def _ranks(corpus: Path, world_size: int, state: dict | None = None) -> list[Batches]:
    ranks = [
        Batches(Sequences(corpus, chunk_len=CHUNK), BATCH, seed=11, rank=r, world_size=world_size, drop_last=True)
        for r in range(world_size)
    ]
    for rank in ranks:
        if state is not None:
            rank.load_state_dict(state)
    return ranks


def _train(corpus: Path, checkpoints: Path) -> list[tuple[int, list[int]]]:
    """Steps of 2 ranks, then (from the checkpoint at RESUME_AT) 3 ranks, through an epoch's
    end: (epoch, the items every rank's batch held) of each step, as the loop saw them."""
    ranks, log = _ranks(corpus, 2), []
    iters = [iter(r) for r in ranks]
    for step in range(STEPS):
        if step and step % EVERY == 0:
            state = ranks[0].state_dict()
            (checkpoints / f"step-{step:05d}").mkdir(parents=True)
            (checkpoints / f"step-{step:05d}" / "data_state.json").write_text(json.dumps(state))
            if step == RESUME_AT:  # the job restarts on 3 ranks from the checkpoint it just saved
                ranks = _ranks(corpus, 3, json.loads(json.dumps(state)))
                iters = [iter(r) for r in ranks]
        epoch = ranks[0].position.epoch
        try:
            batches = [next(it) for it in iters]
        except StopIteration:  # the epoch is over on every rank: the loop starts the next
            iters = [iter(r) for r in ranks]
            epoch = ranks[0].position.epoch
            batches = [next(it) for it in iters]
        log.append((epoch, [int(i) for b in batches for i in b["index"]]))
    return log


def _document_items(built: Build) -> dict[tuple[str, str], set[int]]:
    """Each document of corpus/train: the items (chunks) holding its pieces, from the pieces
    table `albor trace` reads and the FIM split's own rows (not the exposure code's tables)."""
    pieces = pq.read_table(built.out / "corpus" / "train" / "_ledger" / "pieces.parquet").to_pylist()
    fim = pq.read_table(sorted((built.out / "fim" / "train").glob("part-*.parquet")), columns=["source", "file"])
    who = list(zip(fim.column("source").to_pylist(), fim.column("file").to_pylist()))
    found: dict[tuple[str, str], set[int]] = {}
    for p in pieces:
        chunks = range(p["offset"] // CHUNK, (p["offset"] + p["length"] - 1) // CHUNK + 1)
        found.setdefault(who[p["row"]], set()).update(p["sequence"] * 2 + c for c in chunks)
    return found


def _expected(log: list[tuple[int, list[int]]], items: set[int], until: int) -> dict:
    """What the loop's own log says of a document with `items`, for a checkpoint at `until`."""
    steps = [s for s, (_, served) in enumerate(log[:until]) if items & set(served)]
    return {
        "served": bool(steps),
        "first_step": steps[0] if steps else None,
        "servings": sum(len(items & set(served)) for _, served in log[:until]),
        "epochs": sorted({log[s][0] for s in steps}),
    }


def test_exposure_equals_what_the_training_loop_served(built, tmp_path, monkeypatch, capsys):
    corpus = built.out / "corpus" / "train"
    log = _train(corpus, tmp_path / "ckpt")
    assert {epoch for epoch, _ in log} >= {0, 1, 2}, "the loop must cross epoch boundaries"
    states = read_states([str(tmp_path / "ckpt")])
    assert [s.step for s in states] == list(range(EVERY, STEPS, EVERY))
    docs = _document_items(built)
    exposure = Exposure(built.spec, Layout(built.out)).exposure("**", states)
    after_resume = 0
    for state, answer in zip(states, exposure):
        got = {(d.source, d.file): d for d in answer.documents}
        assert set(got) >= set(docs)
        for key, items in docs.items():
            want = _expected(log, items, state.step)
            d = got[key]
            assert (d.served, d.first_step, d.servings, d.epochs) == tuple(want.values()), (state.step, key)
            after_resume += state.step == STEPS - EVERY and d.first_step is not None and d.first_step > RESUME_AT
    assert after_resume > 0, "some document must be first served after the resume on 3 ranks"
    # The command line, one file and a directory of states, readable and JSON.
    monkeypatch.setenv("ALBOR_SPEC", str(built.spec_path))
    monkeypatch.setenv("ALBOR_DATA_DIR", str(built.out))
    source, file = sorted(docs)[0]
    assert main(["exposure", f"{source}:{file}", "--state", str(tmp_path / "ckpt"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [c["documents"][0]["first_step"] for c in printed] == [
        _expected(log, docs[(source, file)], s.step)["first_step"] for s in states
    ]
    assert main(["exposure", f"{source}:{file}", "--state", states[-1].path]) == 0
    assert f"{source}:{file}" in capsys.readouterr().out


def test_a_diet_counts_the_tokens_each_source_was_served(built, tmp_path):
    corpus = built.out / "corpus" / "train"
    log = _train(corpus, tmp_path / "ckpt")
    state = read_states([str(tmp_path / "ckpt" / "step-00090")])[0]
    diet = Exposure(built.spec, Layout(built.out)).diet(state)
    ds = Sequences(corpus, chunk_len=CHUNK)
    served = [i for _, items in log[:90] for i in items]
    assert diet.items_served == len(served)
    real_tokens = sum(int(ds.doc_lens(i).sum()) for i in served)  # the pieces' tokens, not padding
    assert diet.tokens == real_tokens
    assert {s.source for s in diet.sources} == {"stdlib_json_email", "stdlib_async"}
    assert all(0 < s.share_seen <= 1 and s.seen <= s.documents for s in diet.sources)


def test_a_rebuilt_corpus_keeps_the_old_versions_facts_and_refuses_old_states(built, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    shutil.copytree(built.out, out)
    corpus = out / "corpus" / "train"
    log = _train(corpus, tmp_path / "ckpt")
    states = read_states([str(tmp_path / "ckpt")])
    before = Exposure(built.spec, Layout(out)).exposure("**", states)
    old = Sequences(corpus).version
    edited = Path(built.spec.sources[0].path) / "json" / "decoder.py"
    copy = tmp_path / "src"
    shutil.copytree(Path(built.spec.sources[0].path), copy)
    (copy / "json" / "decoder.py").write_text(edited.read_text() + "\n\nEDITED = 'yes'\n")
    raw = tiny_spec()
    raw["sources"][0].update(path=str(copy), include=["json/**/*.py"])
    rebuilt = build_into(tmp_path, raw, out)
    assert Sequences(corpus).version != old
    # The corpus asset's page says what changed against the version it replaced.
    meta = next(
        e.step_materialization_data.materialization.metadata
        for e in rebuilt.result.get_asset_materialization_events()
        if e.asset_key == dg.AssetKey(["corpus", "train"])
    )
    changes = meta["changes"].value
    assert f"- against version {old[:12]} (this build: {Sequences(corpus).version[:12]})" in changes
    found = diff_versions(Layout(out), old, Sequences(corpus).version).corpora[0]
    assert f"- {found.sequences_changed:,} sequences changed (it had {found.sequences_a:,}" in changes
    rows = [f"| {s.source} | {s.added} | {s.removed} | {s.changed} |" for s in found.documents]
    assert rows and all(row in changes for row in rows)
    assert (versions_dir(Layout(out), "corpus/train") / old).is_dir()
    assert {v.id for v in versions(Layout(out), "corpus/train")} >= {old, Sequences(corpus).version}
    # Old states are answered from the kept version, as before the rebuild.
    assert Exposure(rebuilt.spec, Layout(out)).exposure("**", states) == before
    with pytest.raises(ValueError, match=r"at data version \w+; corpus/train is now version \w+ \(rebuilt since\)"):
        _ranks(corpus, 1, json.loads((tmp_path / "ckpt" / "step-00020" / "data_state.json").read_text()))
    assert len(log) == STEPS
    # albor verify re-hashes the kept facts: a changed chunk is named.
    monkeypatch.setenv("ALBOR_SPEC", str(rebuilt.spec_path))
    monkeypatch.setenv("ALBOR_DATA_DIR", str(out))
    assert main(["verify"]) == 0
    assert re.search(r"albor verify: [1-9]\d* kept corpus version\(s\), 0 fact\(s\) changed", capsys.readouterr().out)
    chunk = sorted((Layout(out).versions_dir / "objects").glob("*.parquet"))[0]
    good = chunk.read_bytes()
    chunk.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    assert main(["verify"]) == 1
    assert f"CHANGED: {chunk}: does not hash to its name" in capsys.readouterr().err
    chunk.write_bytes(good)
    # albor gc keeps the old version's facts and says how big they are, unless told to drop them.
    assert main(["gc"]) == 0
    assert re.search(r"kept the facts of \d+ corpus version\(s\), [\d.]+ MB; --drop-versions", capsys.readouterr().out)
    assert (versions_dir(Layout(out), "corpus/train") / old).is_dir()
    assert main(["gc", "--drop-versions"]) == 0
    assert "deleted the facts of" in capsys.readouterr().out
    assert not (versions_dir(Layout(out), "corpus/train") / old).exists()
    assert [v.current for v in versions(Layout(out), "corpus/train")] == [True]


def build_into(tmp: Path, raw: dict, out: Path) -> Build:
    """`raw` built into the existing data dir `out` (a rebuild)."""
    spec_path = write_spec(tmp / "spec2.yaml", raw)
    spec = load_spec(spec_path)
    return Build(spec_path, spec, out, materialize_all(spec, out))


def test_a_removal_request_names_the_checkpoints_that_saw_the_file(built, tmp_path, monkeypatch, capsys):
    """Train, then remove a file some checkpoints saw and earlier ones had not: the rebuild's
    report and PROVENANCE.md count it for exactly the checkpoints whose steps served it."""
    out = tmp_path / "out"
    shutil.copytree(built.out, out)
    log = _train(out / "corpus" / "train", tmp_path / "ckpt")
    steps = [s.step for s in read_states([str(tmp_path / "ckpt")])]
    docs = _document_items(built)
    first = {key: _expected(log, items, STEPS)["first_step"] for key, items in docs.items()}
    source, file = next(k for k, f in sorted(first.items()) if f is not None and steps[0] <= f < steps[-1])
    raw = tiny_spec()
    raw["sources"][0].update(path=str(built.spec.sources[0].path), include=["json/**/*.py"])
    raw["remove"] = {source: {"paths": [file]}}
    raw["audit"] = {"checkpoints": [str(tmp_path / "ckpt")]}
    rebuilt = build_into(tmp_path, raw, out)
    report = json.loads((out / "manifests" / "corpus__train.json").read_text())["summary"]["checkpoints"]
    assert [(r["step"], r["requested"], r["seen"]) for r in report] == [
        (s, 1, int(s > first[(source, file)])) for s in steps
    ]
    provenance = (out / "PROVENANCE.md").read_text()
    assert "## Checkpoints that saw removed documents" in provenance and file not in provenance
    # The file is gone from the new version; `albor exposure remove` still answers for the old one.
    assert not any(f == file for _, f in _document_items(rebuilt))
    monkeypatch.setenv("ALBOR_SPEC", str(rebuilt.spec_path))
    monkeypatch.setenv("ALBOR_DATA_DIR", str(out))
    assert main(["exposure", "remove", "--state", str(tmp_path / "ckpt"), "--json"]) == 0
    answers = json.loads(capsys.readouterr().out)
    assert [[d["file"] for d in a["documents"] if d["served"]] for a in answers] == [
        [file] if s > first[(source, file)] else [] for s in steps
    ]
    # The two versions' diff says where the file went, from the ledger each version kept.
    old, new = (v.id for v in sorted(versions(Layout(out), "corpus/train"), key=lambda v: v.current))
    assert main(["diff", old, new, "--json"]) == 0
    diff = json.loads(capsys.readouterr().out)
    named = [(st["stage"], s["source"], d) for st in diff["stages"] for s in st["sources"] for d in s["examples"]]
    assert (f"ingested/{source}", file, "removed", "removed: removal request") in [
        (stage, d["file"], d["change"], d["reason"]) for stage, src, d in named if src == source
    ]
    [corpus] = diff["corpora"]
    changes = {(s["source"], d["file"]): (d["change"], d["reason"]) for s in corpus["documents"] for d in s["examples"]}
    assert changes[(source, file)] == ("removed", f"ingested/{source} removed: removal request")


def _input_ids(corpus: Path) -> list[bytes]:
    """Each sequence's token ids, as bytes, in order."""
    table = pq.read_table(sorted(corpus.glob("part-*.parquet")), columns=["input_ids"])
    return [np.asarray(ids, dtype=np.int64).tobytes() for ids in table.column(0).to_pylist()]


def test_albor_diff_names_the_edited_document_and_exactly_the_sequences_that_changed(tmp_path, monkeypatch, capsys):
    """Two builds of a spec with a manual tokenizer, the second after a one-file edit: the
    diff names that document (changed, in every stage) and exactly the sequences whose
    tokens differ, read from both corpora."""
    shutil.copytree(STDLIB / "json", tmp_path / "src" / "json")
    raw = tiny_spec()
    raw["tokenizer"]["retrain"] = "manual"
    raw["sources"][0].update(path=str(tmp_path / "src"), include=["json/**/*.py"])
    spec = write_spec(tmp_path / "spec.yaml", raw)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["run", "--spec", str(spec), "--data-dir", str(a), "--log-level", "ERROR"]) == 0
    shutil.copytree(a, b)
    edited = tmp_path / "src" / "json" / "scanner.py"
    edited.write_text(edited.read_text().replace("import re", "import re  # an edit", 1))
    assert main(["run", "--spec", str(spec), "--data-dir", str(b), "--log-level", "ERROR"]) == 0
    capsys.readouterr()
    assert main(["diff", str(a), str(b), "--json"]) == 0
    diff = json.loads(capsys.readouterr().out)
    named = {
        (st["stage"], s["source"], d["file"], d["change"])
        for st in diff["stages"]
        for s in st["sources"]
        for d in s["examples"]
    }
    assert {(src, file, change) for _, src, file, change in named} == {
        ("stdlib_json_email", "json/scanner.py", "changed")
    }
    assert {stage for stage, *_ in named} == {"ingested/stdlib_json_email", "filtered/stdlib_json_email", "documents"}
    assert diff["tokenizer"]["changed"] is False
    ids_a, ids_b = _input_ids(a / "corpus" / "train"), _input_ids(b / "corpus" / "train")
    truth = [i for i in range(max(len(ids_a), len(ids_b))) if i >= min(len(ids_a), len(ids_b)) or ids_a[i] != ids_b[i]]
    train = next(c for c in diff["corpora"] if c["corpus"] == "corpus/train")
    assert truth and train["changed_sequences"] == truth and train["sequences_changed"] == len(truth)
    # The same from the two versions kept in b, and readable.
    assert main(["diff", train["version_a"], train["version_b"], "--data-dir", str(b)]) == 0
    printed = capsys.readouterr().out
    assert f"corpus/train {train['version_a']} -> {train['version_b']}: {len(truth):,} sequences changed" in printed


@pytest.mark.slow
def test_a_bucket_data_dir_keeps_its_versions_and_answers_from_any_machine(s3, tmp_path, monkeypatch, capsys):
    """Train on a build in a bucket, rebuild it after a one-file edit: the replaced version's
    facts are published with the rebuild, so another machine (a fresh working copy) answers
    `albor exposure` and `albor diff` as the machine that built it does; `albor gc
    --drop-versions` deletes them from the bucket, and the old states are then refused."""
    shutil.copytree(STDLIB / "json", tmp_path / "src" / "json")
    raw = tiny_spec()
    raw["sources"][0].update(path=str(tmp_path / "src"), include=["json/**/*.py"])
    spec = write_spec(tmp_path / "spec.yaml", raw)
    uri = run_into_bucket(s3, tmp_path, spec, monkeypatch, "albor-versions", "team/v")
    work = tmp_path / "work"
    _train(work / "corpus" / "train", tmp_path / "ckpt")
    edited = tmp_path / "src" / "json" / "scanner.py"
    edited.write_text(edited.read_text().replace("import re", "import re  # an edit", 1))
    assert main(["run", "--spec", str(spec), "--data-dir", uri, "--log-level", "ERROR"]) == 0
    stored = {o["Key"] for o in s3.list_objects_v2(Bucket="albor-versions", Prefix="team/v/versions/")["Contents"]}
    old, new = (v.id for v in sorted(versions(Layout(work), "corpus/train"), key=lambda v: v.current))
    assert f"team/v/versions/corpus__train/{old}/manifest.json" in stored
    assert not any(f"/{new}/" in key for key in stored)  # the current version's facts are the corpus's own

    def answers(data_dir: str, *argv: str) -> tuple[int, str]:
        code = main([*argv, "--spec", str(spec), "--data-dir", data_dir])
        return code, capsys.readouterr().out

    capsys.readouterr()
    exposure = ["exposure", "**", "--state", str(tmp_path / "ckpt"), "--json"]
    here = answers(str(work), *exposure)
    assert here[0] == 0 and json.loads(here[1])
    monkeypatch.setenv("ALBOR_WORK_DIR", str(tmp_path / "fresh"))
    assert answers(uri, *exposure) == here
    diff = ["diff", old[:12], new[:12], "--json"]
    assert answers(uri, *diff) == answers(str(work), *diff)
    assert answers(uri, "gc", "--drop-versions")[0] == 0
    listed = s3.list_objects_v2(Bucket="albor-versions", Prefix="team/v/versions/")
    assert [o["Key"] for o in listed.get("Contents", [])] == []
    monkeypatch.setenv("ALBOR_WORK_DIR", str(tmp_path / "third"))
    assert main([*exposure, "--spec", str(spec), "--data-dir", uri]) == 2
    assert f"corpus/train version {old[:12]} is not kept" in capsys.readouterr().err

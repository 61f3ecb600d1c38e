"""A stage's commit is atomic with its manifest: killed at every step of the commit path, a
stage leaves the whole old set or the whole new set under each final name, `albor verify`
passes (finishing or undoing the dead commit), and the next lock holder does the same.

A real stage process (`run_stage` over real Parquet and JSON writes) is killed by the
commit code's fault hook (`ALBOR_FAULT`), for a single file, a shard set, and a stage that
commits several directories and a file (as `documents` and the corpus do).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from albor_pipeline import cli
from albor_pipeline.dataset import Sequences
from albor_pipeline.runtime import commit
from albor_pipeline.runtime.artifacts import atomic_path, staged_dir
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.lock import data_dir_lock
from albor_pipeline.runtime.stagerun import StageOutput, run_stage
from albor_pipeline.stages.provenance.provenance import verify
from albor_pipeline_tests.runtime.commit_stage import KINDS, NO_EXCHANGE, run, shard_count, write_outputs
from albor_pipeline_tests.support import ALBOR, tiny_spec, write_spec

STEPS = ("commit-journaled", "commit-swapped", "commit-backed-up")


def _run_killed(root: Path, kind: str, version: str, fault: str | None, exchange: bool = True) -> int:
    env = {"PATH": "/usr/bin:/bin", **({commit.FAULT_ENV: fault} if fault else {})}
    env.update({} if exchange else {NO_EXCHANGE: "1"})
    cmd = [sys.executable, "-m", "albor_pipeline_tests.runtime.commit_stage", str(root), kind, version]
    return subprocess.run(cmd, env=env, cwd=Path(__file__).parents[2], timeout=120).returncode


def _version_seen(root: Path, rel: str, shape: str) -> str | None:
    """The one version a reader finds under a final name (None: absent); fails on a mix."""
    final = root / rel
    if not final.exists():
        return None
    if final.suffix == ".json":
        return str(json.loads(final.read_text())["version"])
    files = sorted(final.glob("part-*.parquet")) if shape == "dir" else [final]
    versions = {row.split("-")[0] for f in files for row in pq.read_table(f).column("text").to_pylist()}
    assert len(versions) == 1, f"{rel} mixes versions {versions}"
    version = versions.pop()
    if shape == "dir":
        assert len(files) == shard_count(version), f"{rel}: {len(files)} shards of {version}"
    return version


def _reader_view(root: Path, kind: str) -> dict[str, str | None]:
    return {rel: _version_seen(root, rel, shape) for rel, shape in KINDS[kind].items()}


def _points(kind: str) -> list[str]:
    """Every step of the commit path, at each output it replaces."""
    outputs = len(KINDS[kind])
    return [f"{step}:{n}" for step in STEPS for n in range(1, outputs + 1)] + [
        "commit-sealed",
        "commit-manifest-written",
    ]


@pytest.fixture(scope="module")
def committed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each kind's stage materialized once (v1), to copy before every kill."""
    built = {}
    for kind in KINDS:
        root = tmp_path_factory.mktemp(f"v1-{kind}")
        assert _run_killed(root, kind, "v1", None) == 0
        built[kind] = root
    return built


@pytest.mark.slow  # 42 stage processes killed (each step, each kind, both ways) and 42 more runs
@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_kill_at_every_commit_step_leaves_a_whole_set_and_verify_passes(
    kind, exchange, committed, tmp_path, monkeypatch
):
    """With RENAME_EXCHANGE, a reader never misses a name; without it (two renames), the name
    may be missing for a moment, but the committed set is never lost."""
    for point in _points(kind):
        root = tmp_path / point.replace(":", "-")
        shutil.copytree(committed[kind], root)
        assert _run_killed(root, kind, "v2", point, exchange) == -signal.SIGKILL, point
        view = _reader_view(root, kind)  # before any recovery: each name whole, old or new
        assert set(view.values()) <= ({"v1", "v2"} if exchange else {"v1", "v2", None}), (point, view)
        monkeypatch.setenv("ALBOR_DATA_DIR", str(root))
        assert cli.main(["verify", "--data-dir", str(root)]) == 0, point
        landed = point == "commit-manifest-written"
        assert set(_reader_view(root, kind).values()) == {"v2" if landed else "v1"}, point
        assert not Layout(root).pending_commits()
        assert not list(root.rglob(f"*{commit.BACKUP_SUFFIX}")), point
        assert _run_killed(root, kind, "v3", None) == 0  # and the next run builds on it
        assert not verify(root).failed


def test_the_next_lock_holder_undoes_a_dead_commit_before_removing_temps(committed, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(committed["multi"], root)
    assert _run_killed(root, "multi", "v2", "commit-swapped:2") == -signal.SIGKILL
    assert Layout(root).pending_commits()
    lines: list[str] = []
    with data_dir_lock(Layout(root), "test", log=lines.append):
        pass
    assert any("multi: rolled back 2 output(s)" in line for line in lines), lines
    assert set(_reader_view(root, "multi").values()) == {"v1"}
    assert not verify(root).failed and not verify(root).temps


RECOVER = """
import os, sys
from pathlib import Path
from albor_pipeline.runtime import commit
from albor_pipeline.runtime.layout import Layout
if os.environ.get("ALBOR_TEST_NO_EXCHANGE"):
    commit.exchange = lambda a, b: False
layout = Layout(Path(sys.argv[1]))
print(commit.recover_commits(layout.root, layout.pending_commits()))
"""


def test_a_roll_back_killed_halfway_is_finished_by_the_next_one(committed, tmp_path):
    """Recovery itself can be interrupted (a second kill, the hard time limit): the committed
    set is found by its inode, so a repeated roll-back never swaps the new set back in."""
    for exchange in (True, False):
        root = tmp_path / f"data-{exchange}"
        shutil.copytree(committed["multi"], root)
        assert _run_killed(root, "multi", "v2", "commit-backed-up:3", exchange) == -signal.SIGKILL
        env = {"PATH": "/usr/bin:/bin", commit.FAULT_ENV: "commit-rolled-back:2"}
        env.update({} if exchange else {NO_EXCHANGE: "1"})
        cmd = [sys.executable, "-c", RECOVER, str(root)]
        recovering = subprocess.run(cmd, env=env, cwd=Path(__file__).parents[2], timeout=120)
        assert recovering.returncode == -signal.SIGKILL  # mid-way: one output back, one not yet
        assert Layout(root).pending_commits()
        with data_dir_lock(Layout(root), "test", log=print):
            pass
        assert set(_reader_view(root, "multi").values()) == {"v1"}, exchange
        assert not verify(root).failed and not list(root.rglob(f"*{commit.BACKUP_SUFFIX}"))


def test_a_first_build_killed_mid_commit_leaves_no_output(tmp_path, monkeypatch):
    assert _run_killed(tmp_path, "multi", "v1", "commit-sealed") == -signal.SIGKILL
    monkeypatch.setenv("ALBOR_DATA_DIR", str(tmp_path))
    assert cli.main(["verify", "--data-dir", str(tmp_path)]) == 2  # nothing materialized yet
    with data_dir_lock(Layout(tmp_path), "test", log=print):
        pass
    assert set(_reader_view(tmp_path, "multi").values()) == {None}


def test_a_failing_stage_puts_back_what_it_replaced_even_without_exchange(tmp_path, monkeypatch):
    """A filesystem that cannot exchange names: two renames, still journaled and undone."""
    run(tmp_path, "multi", "v1")
    monkeypatch.setattr(commit, "exchange", lambda a, b: False)

    def failing(_inputs: object) -> StageOutput:
        write_outputs(tmp_path, "multi", "v2")
        raise RuntimeError("the stage fails after putting its outputs in place")

    with pytest.raises(RuntimeError, match="fails after"):
        run_stage(Layout(tmp_path), "multi", (), failing)
    assert set(_reader_view(tmp_path, "multi").values()) == {"v1"}
    assert not verify(tmp_path).failed and not Layout(tmp_path).pending_commits()


def test_verify_beside_a_run_reports_a_commit_under_way_not_a_change(committed, tmp_path, monkeypatch, capsys):
    """A run holds the lock and its commit is under way (files swapped, manifest not yet
    written): verify says so, and names no file CHANGED or MISSING."""
    root = tmp_path / "data"
    shutil.copytree(committed["shards"], root)
    assert _run_killed(root, "shards", "v2", "commit-backed-up") == -signal.SIGKILL
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl,sys,time; f=open(sys.argv[1],'w'); fcntl.flock(f, 2); print(1, flush=True); time.sleep(60)",
            str(Layout(root).lock_file),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline()
        monkeypatch.setenv("ALBOR_DATA_DIR", str(root))
        assert cli.main(["verify", "--data-dir", str(root)]) == 0
        out = capsys.readouterr().out
        assert "holds the data dir" in out and "committing" in out
        assert "CHANGED" not in out and "MISSING" not in out and "UNRECORDED" not in out
    finally:
        holder.kill()
        holder.wait()
    assert cli.main(["verify", "--data-dir", str(root)]) == 0  # now free: rolled back, all ok
    assert "rolled back" in capsys.readouterr().out


def test_verify_on_a_read_only_data_dir_checks_what_is_committed(committed, tmp_path, monkeypatch, capsys):
    """It cannot take the lock there (EROFS): it says so and verifies, instead of a traceback."""
    mount = tmp_path / "ro"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mount)]).returncode:
        pytest.skip("mounting a tmpfs needs root (CI and make test run as root)")
    try:
        shutil.copytree(committed["multi"], mount / "data")
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        monkeypatch.setenv("ALBOR_DATA_DIR", str(mount / "data"))
        assert cli.main(["verify", "--data-dir", str(mount / "data")]) == 0
        assert "read-only" in capsys.readouterr().out
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_put_in_place_outside_a_stage_and_inside_a_staging_dir_is_a_plain_rename(tmp_path):
    with atomic_path(tmp_path / "a.bin") as tmp:
        tmp.write_bytes(b"one")
    with staged_dir(tmp_path / "set") as staging, atomic_path(staging / "x.bin") as tmp:
        tmp.write_bytes(b"two")
    assert (tmp_path / "a.bin").read_bytes() == b"one" and (tmp_path / "set" / "x.bin").read_bytes() == b"two"
    assert not list(tmp_path.rglob(f"*{commit.BACKUP_SUFFIX}"))


@pytest.mark.slow
@pytest.mark.graph
def test_a_run_killed_inside_the_corpus_commit_keeps_the_committed_corpus(
    tiny_reference, tmp_path, monkeypatch, capsys
):
    """The whole graph through `albor run`, killed between the corpus's swap and its manifest:
    a trainer reading corpus/train meanwhile gets a whole set; verify puts the committed one back."""
    out = tmp_path / "out"
    shutil.copytree(tiny_reference.out, out)  # the first spec, built
    layout = Layout(out)
    committed = layout.manifest("corpus/train").read_bytes()
    assert len(Sequences(layout.corpus_dir("train"))[0]["input_ids"]) == 256
    changed = write_spec(tmp_path / "b.yaml", tiny_spec(corpus={"seq_len": 128, "formats": ["parquet", "megatron"]}))
    env = {
        **os.environ,
        "ALBOR_DATA_DIR": str(out),
        "DAGSTER_HOME": str(tmp_path / "home"),
        commit.FAULT_ENV: "commit-replaced@corpus/train",  # its first output it replaces: the set
    }
    killed = subprocess.run([ALBOR, "run", "--spec", str(changed)], env=env, capture_output=True, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    seen = Sequences(layout.corpus_dir("train"))  # the new set, whole: its index and shards agree
    assert {len(seen[i]["input_ids"]) for i in range(len(seen))} == {128}
    monkeypatch.setenv("ALBOR_DATA_DIR", str(out))
    assert cli.main(["verify", "--data-dir", str(out)]) == 0
    assert "corpus/train: rolled back" in capsys.readouterr().out
    assert layout.manifest("corpus/train").read_bytes() == committed
    assert len(Sequences(layout.corpus_dir("train"))[0]["input_ids"]) == 256
    del env[commit.FAULT_ENV]
    assert subprocess.run([ALBOR, "run", "--spec", str(changed)], env=env, capture_output=True).returncode == 0
    assert not verify(out).failed

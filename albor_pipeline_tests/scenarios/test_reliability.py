"""Faults that must never lose, corrupt or mix what was already materialized.

Full disks (a real tmpfs), concurrent runs on one data dir, killed runs, symlinks out of
a source, compressed and empty data files. Each case was a failure before the fix.
"""

from __future__ import annotations

import errno
import gzip
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from albor_pipeline.cli import main as albor
from albor_pipeline.cli import run_failures
from albor_pipeline.runtime.artifacts import TEMP_SUFFIX, read_manifest, sha256_file, write_array
from albor_pipeline.runtime.hashpart import scatter, spool_file
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.lock import DataDirBusy, data_dir_lock
from albor_pipeline.runtime.nodes import IN_PLACE
from albor_pipeline.runtime.shardmap import StageIO, TaskIO
from albor_pipeline.runtime.stagerun import MANIFEST_ROOM
from albor_pipeline.spec import REPO_ROOT, load_spec
from albor_pipeline.stages.ingest.ingest import ingest_source
from albor_pipeline.text.datafiles import IngestError
from albor_pipeline_tests.support import ALBOR, STDLIB, materialize_all, small_spec_dict, tiny_spec, write_spec


def artifact_bytes(root: Path) -> dict[str, str]:
    """SHA-256 of every non-hidden file under `root` (artifacts, manifests, caches) but the
    records runs keep of what they did: the identities stages were made under and checks took
    their outcomes under (a stage that runs again, here in a copy of the data dir, elsewhere,
    writes its record anew, whole), and the files' digests (a copy's files have new inodes)."""
    layout = Layout(root)
    records = (layout.stage_identity("x").parent, layout.check_outcome("x", "y").parent)
    return {
        p.relative_to(root).as_posix(): sha256_file(p)
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
        and not any(p.is_relative_to(r) for r in records)
        and p != layout.digests
    }


# --- 1. a full disk -----------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path):
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=30m", "tmpfs", str(mount)]).returncode:
        pytest.skip("mounting a 30 MB tmpfs needs root (CI and make test run as root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.graph
@pytest.mark.parametrize("left", [150_000, MANIFEST_ROOM + 150_000], ids=["150KB", "room-for-manifest-only"])
def test_full_disk_fails_naming_stage_and_file_and_keeps_earlier_artifacts(small_disk, tiny_reference, left, capsys):
    spec, out = tiny_reference.spec, small_disk / "out"
    shutil.copytree(tiny_reference.out, out)  # a committed build on the small disk
    before = artifact_bytes(out)
    st = os.statvfs(small_disk)
    with open(small_disk / "filler", "wb") as fh:
        os.posix_fallocate(fh.fileno(), 0, st.f_bavail * st.f_frsize - left)

    # Every stage does its work (none reuses the copied build's tasks), so the run must write.
    spec = spec.model_copy(update={"execution": spec.execution.model_copy(update={"reuse": False})})
    result = materialize_all(spec, out, raise_on_error=False)

    assert not result.success
    message = "\n".join(run_failures(result.all_events))
    assert "No space left on device" in message, message
    assert re.search(r"stage [\w/]+: cannot write " + re.escape(str(out)), message), message
    (small_disk / "filler").unlink()
    assert artifact_bytes(out) == before  # nothing earlier replaced, truncated or half-written
    assert albor(["verify", "--data-dir", str(out)]) == 0
    assert "0 failed" in capsys.readouterr().err


def test_a_full_disk_names_enospc_and_the_file_where_numpy_would_not(small_disk):
    """numpy's `tofile` and `np.save` (spool files of ids, signatures and hash partitions)
    report a full disk as `5000000 requested and 3670016 written`, with no errno: a rebuild
    failed saying only that. The spool writers now say ENOSPC and name the file."""
    records = np.arange(5_000_000, dtype=np.uint64)  # 40 MB on a 30 MB disk
    with pytest.raises(OSError) as npy:
        scatter(TaskIO(str(small_disk), IN_PLACE), str(small_disk), "keys", 0, records, records % 4, 4)
    with pytest.raises(OSError) as raw:
        write_array(small_disk / "tokens-000000.bin", records)
    for err, name in ((npy.value, spool_file(small_disk, "keys", 0)), (raw.value, small_disk / "tokens-000000.bin")):
        assert err.errno == errno.ENOSPC, err
        assert f"cannot write {name}: No space left on device" in str(err)


# --- 2. concurrent runs on one data dir ------------------------------------------------------


def _summary(stdout: str) -> dict[str, int]:
    found = re.search(r"corpus/train: ([\d,]+) sequences, ([\d,]+) tokens from ([\d,]+) documents", stdout)
    assert found, stdout
    sequences, tokens, documents = (int(g.replace(",", "")) for g in found.groups())
    return {"sequences": sequences, "tokens": tokens, "documents": documents}


@pytest.mark.graph
def test_concurrent_runs_on_one_data_dir_wait_or_fail_and_never_mix(tiny_reference, tmp_path):
    specs = {
        "a": tiny_reference.spec_path,
        "b": write_spec(tmp_path / "b.yaml", tiny_spec(fim={"rate": 0.9, "seed": 3})),
        "c": write_spec(tmp_path / "c.yaml", tiny_spec(locking={"on_busy": "fail"})),
    }
    out = tmp_path / "shared"
    env = {**os.environ, "ALBOR_DATA_DIR": str(out), "DAGSTER_HOME": str(tmp_path / "home")}
    logs = {name: tmp_path / f"{name}.err" for name in specs}

    def start(name: str) -> subprocess.Popen:
        with open(logs[name], "w") as err:
            cmd = [ALBOR, "run", "--spec", str(specs[name])]
            return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)

    # This test holds the data dir first, so both runs certainly overlap with a holder.
    with data_dir_lock(Layout(out), f"pid {os.getpid()}, run pytest"):
        runs = {name: start(name) for name in ("a", "b")}
        busy = start("c")
        assert busy.wait(timeout=120) == 1
        deadline = time.monotonic() + 120
        while not all("waiting for data dir" in logs[n].read_text() for n in runs) and time.monotonic() < deadline:
            time.sleep(0.1)
    printed = {name: run.communicate(timeout=300)[0] for name, run in runs.items()}

    assert f"is in use by pid {os.getpid()}, run pytest" in logs["c"].read_text()
    for name, run in runs.items():
        assert run.returncode == 0, logs[name].read_text()
        # Behind this test's hold, or behind the other run if it started after the hand-over.
        holders = {f"pid {os.getpid()}, run pytest", f"pid {runs['b' if name == 'a' else 'a'].pid}, run "}
        waited = re.search(
            rf"waiting for data dir {re.escape(str(out))}: in use by (pid \d+, run \S*)", logs[name].read_text()
        )
        assert waited and any(waited.group(1).startswith(h) for h in holders), logs[name].read_text()[:600]
    # Each run reports its own spec's corpus, and the data dir holds one whole run, not a mix.
    cold = {"a": tiny_reference.out, "b": tmp_path / "cold-b"}  # a: the shared build of the same spec
    materialize_all(load_spec(specs["b"]), cold["b"])
    for name in runs:
        summary = read_manifest(Layout(cold[name]), "corpus/train").summary
        assert _summary(printed[name]) == {k: summary[k] for k in ("sequences", "tokens", "documents")}
    final = artifact_bytes(out)
    assert any(
        all(final[path] == digest for path, digest in artifact_bytes(c).items() if not path.startswith("cache/"))
        for c in cold.values()
    )
    assert albor(["verify", "--data-dir", str(out)]) == 0


def test_a_deleted_lock_file_keeps_the_data_dir_locked(tmp_path, monkeypatch):
    """`.albor.lock` deleted while a run holds it: a second run's open created a new file,
    locked that and went in, removing the first run's temp file as left by a dead run;
    `albor gc` went in too. The data dir itself is locked as well, so both wait or refuse."""
    for name in ("ALBOR_DATA_DIR", "ALBOR_SPEC"):  # `albor gc --data-dir` sets them
        monkeypatch.setenv(name, "")
    layout = Layout(tmp_path / "data")
    writing = layout.root / "filtered" / f".part-00000.parquet.1234{TEMP_SUFFIX}"
    with data_dir_lock(layout, "pid 1, run first"):
        writing.parent.mkdir(parents=True)
        writing.write_bytes(b"half a shard")
        layout.lock_file.unlink()
        with pytest.raises(DataDirBusy), data_dir_lock(layout, "pid 2, run second", wait=False):
            pass
        assert albor(["gc", "--data-dir", str(layout.root)]) == 1
        held: list[str] = []
        waiter = threading.Thread(target=lambda: held.extend(map(str, _hold(layout))))
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive() and writing.exists()
    waiter.join(30)
    assert held == [str(writing)]  # the first run is gone: now its temp file is a dead run's


def _hold(layout: Layout) -> list[Path]:
    with data_dir_lock(layout, "pid 3, run third", log=lambda _: None) as removed:
        return removed


# --- 4. symlinks leaving the source root ---------------------------------------------------------


def test_file_symlink_outside_the_source_is_skipped_unless_followed(tmp_path, make_spec):
    code = tmp_path / "code"
    code.mkdir()
    (code / "real.py").write_text((STDLIB / "json" / "decoder.py").read_text())
    outside = tmp_path / "secret.py"
    outside.write_text("root:x:0:0:root:/root:/bin/bash\n" * 10)
    (code / "passwd.py").symlink_to(outside)
    (code / "alias.py").symlink_to(code / "real.py")  # inside the root: kept
    raw = small_spec_dict([{"name": "code", "kind": "code", "path": str(code)}])
    src = make_spec(raw).source("code")

    result = ingest_source(src, tmp_path / "a", StageIO(tmp_path))
    table = pa.parquet.read_table(tmp_path / "a")
    assert sorted(table.column("file").to_pylist()) == ["alias.py", "real.py"]
    assert result.summary.skipped == {"outside_root": 1}
    assert not any("root:x:0:0" in t for t in table.column("text").to_pylist())

    followed = src.model_copy(update={"follow_symlinks": True})
    ingest_source(followed, tmp_path / "b", StageIO(tmp_path))
    assert "passwd.py" in pa.parquet.read_table(tmp_path / "b").column("file").to_pylist()


# --- 5 and 6. a killed run: verify holds, stale stages named, temps removed by the next run ------


@pytest.mark.graph
def test_killed_run_after_a_spec_change_verifies_and_the_next_run_cleans_up(tiny_reference, tmp_path, capsys):
    out = tmp_path / "out"
    env = {**os.environ, "ALBOR_DATA_DIR": str(out), "DAGSTER_HOME": str(tmp_path / "home")}
    shutil.copytree(tiny_reference.out, out)  # the first spec, built
    changed = write_spec(tmp_path / "b.yaml", tiny_spec(mix={"train": {"seed": 7}, "val": {"rows": 30}}))
    mixed = Layout(out).manifest("mixed/train")
    recorded = mixed.read_bytes()
    run = subprocess.Popen([ALBOR, "run", "--spec", str(changed)], env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while mixed.read_bytes() == recorded and time.monotonic() < deadline:
        time.sleep(0.02)
    run.send_signal(signal.SIGKILL)  # mid-graph: mixed/* rebuilt, later stages not (yet)
    run.wait()
    (out / "fim" / ".mix-left-by-a-dead-run.tmp").mkdir()  # what a kill inside the mix leaves

    capsys.readouterr()
    assert albor(["verify", "--data-dir", str(out)]) == 0  # what the stages recorded still holds
    printed = capsys.readouterr()
    assert re.search(r"stale\s+provenance \(rebuilt after it: .*mixed/train", printed.out), printed.out
    assert "PROVENANCE.md describes the last complete build" in printed.err

    assert albor(["run", "--spec", str(changed), "--data-dir", str(out)]) == 0
    assert not [p for p in out.rglob("*.tmp")]  # the next run to hold the data dir removed them
    capsys.readouterr()
    assert albor(["verify", "--data-dir", str(out)]) == 0
    assert "0 failed, 0 stale" in capsys.readouterr().err


# --- 7. compressed and empty data files ----------------------------------------------------------


def test_compressed_jsonl_and_csv_are_read_transparently(tmp_path, make_spec):
    data = tmp_path / "data"
    data.mkdir()
    texts = [p.read_text() for p in sorted((STDLIB / "json").glob("*.py"))]
    lines = "".join(f'{{"text": {__import__("json").dumps(t)}}}\n' for t in texts)
    (data / "a.jsonl.gz").write_bytes(gzip.compress(lines.encode()))
    with pa.output_stream(str(data / "b.jsonl.zst"), compression="zstd") as fh:
        fh.write(lines.encode())
    (data / "empty.jsonl").write_bytes(b"")
    raw = small_spec_dict([{"name": "docs", "kind": "jsonl", "path": str(data)}])
    result = ingest_source(make_spec(raw).source("docs"), tmp_path / "docs", StageIO(tmp_path))
    table = pa.parquet.read_table(tmp_path / "docs")
    assert table.column("text").to_pylist() == texts + texts
    assert table.column("file").to_pylist()[0] == "a.jsonl.gz:1"
    assert result.summary.files == 3 and result.summary.skipped == {"empty_file": 1}

    csv_dir = tmp_path / "csv"
    csv_dir.mkdir()
    (csv_dir / "rows.csv.gz").write_bytes(gzip.compress(b'id,text\n1,"hello, world"\n2,second\n'))
    raw = small_spec_dict([{"name": "rows", "kind": "csv", "path": str(csv_dir), "min_chars": 1}])
    ingest_source(make_spec(raw, "csv.yaml").source("rows"), tmp_path / "rows", StageIO(tmp_path))
    assert pa.parquet.read_table(tmp_path / "rows").column("text").to_pylist() == ["hello, world", "second"]


def test_corrupt_compressed_and_empty_sources_say_why(tmp_path, make_spec):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.jsonl.gz").write_bytes(b"this is not gzip\n")
    raw = small_spec_dict([{"name": "bad", "kind": "jsonl", "path": str(bad)}])
    with pytest.raises(IngestError, match=r"x\.jsonl\.gz: not a readable gzip file"):
        ingest_source(make_spec(raw).source("bad"), tmp_path / "bad", StageIO(tmp_path))

    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    raw = small_spec_dict([{"name": "empty", "kind": "jsonl", "path": str(empty)}])
    with pytest.raises(IngestError, match=r"0 documents from 1 file\(s\) .*\(empty_file=1\)"):
        ingest_source(make_spec(raw, "e.yaml").source("empty"), tmp_path / "e", StageIO(tmp_path))
    assert not (tmp_path / "e").exists()


def test_repo_dagster_yaml_monitors_runs_with_a_worker_health_check(tmp_path, monkeypatch):
    import dagster as dg

    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_bytes((REPO_ROOT / "dagster.yaml").read_bytes())
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.run_monitoring_enabled
        assert instance.run_launcher.supports_check_run_worker_health
        assert instance.run_monitoring_settings["max_resume_run_attempts"] == 0


def test_the_repo_instance_logs_runs_in_sqlite_with_a_connection_kept_per_database(tmp_path, monkeypatch):
    """The repo's dagster.yaml keeps Dagster's SQLite event log where Dagster's default does, and
    another process's instance (the web UI's) reads a run's events back; its writer keeps one
    connection per database, at most LIVE_DATABASES of them."""
    import dagster as dg

    from albor_pipeline.defs.eventlog import LIVE_DATABASES, PooledSqliteEventLogStorage

    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_bytes((REPO_ROOT / "dagster.yaml").read_bytes())
    monkeypatch.setenv("DAGSTER_HOME", str(home))

    @dg.asset
    def lines():  # no annotation: Dagster cannot resolve a local string annotation
        return dg.MaterializeResult(metadata={"lines": len((STDLIB / "json" / "decoder.py").read_text().splitlines())})

    with dg.DagsterInstance.get() as instance:
        storage = instance.event_log_storage
        assert isinstance(storage, PooledSqliteEventLogStorage)
        runs = [dg.materialize([lines], instance=instance).run_id for _ in range(LIVE_DATABASES + 2)]
        assert len(storage.__dict__["_engines"]) == LIVE_DATABASES  # the index and the latest runs'
        with storage.run_connection(runs[-1]) as conn:  # write-ahead log, commits without an fsync
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    assert all((home / "history" / "runs" / f"{run}.db").is_file() for run in runs)
    reader = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, dagster as dg\n"
            "with dg.DagsterInstance.get() as i:\n"
            "    e = i.get_latest_materialization_event(dg.AssetKey('lines'))\n"
            "    print(e.run_id, e.asset_materialization.metadata['lines'].value, len(i.all_logs(sys.argv[1])))",
            runs[0],
        ],
        env={**os.environ, "DAGSTER_HOME": str(home)},
        capture_output=True,
        text=True,
    )
    assert reader.returncode == 0, reader.stderr[-2000:]
    run_id, count, events = reader.stdout.split()
    assert run_id == runs[-1] and int(count) == len((STDLIB / "json" / "decoder.py").read_text().splitlines())
    assert int(events) >= 8  # a whole run's log: start, step, materialization, success...

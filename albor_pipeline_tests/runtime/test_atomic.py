"""Atomic writes: a process killed mid-write leaves no partial file under the final name."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from albor_pipeline.runtime import artifacts
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.lock import data_dir_lock

WRITER = """
import os, sys, pyarrow as pa
from pathlib import Path
from albor_pipeline.runtime.artifacts import ParquetSink
from albor_pipeline.text.documents import DOC_SCHEMA
out = Path(sys.argv[1])
with ParquetSink(out, DOC_SCHEMA, row_group_size=64) as sink:
    while True:  # a large write that never finishes on its own
        texts = [os.urandom(2000).hex() for _ in range(64)]  # incompressible: the file grows as written
        sink.write(pa.RecordBatch.from_pydict(
            {"text": texts, "source": ["s"] * 64, "file": ["f"] * 64, "sha256": ["0" * 64] * 64},
            schema=DOC_SCHEMA))
"""


def _kill_mid_write(out: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(out)])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            temps = list(out.parent.glob(f".{out.name}.*.tmp"))
            if temps and temps[0].stat().st_size > 5_000_000:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the writer never got going")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


def test_sigkill_during_write_leaves_no_partial_file(tmp_path):
    out = tmp_path / "ingested" / "big.parquet"
    _kill_mid_write(out)
    assert not out.exists()
    leftovers = list(out.parent.glob(".*.tmp"))
    assert leftovers and all(not p.name.endswith(".parquet") for p in leftovers)


def test_sigkill_during_rewrite_keeps_previous_version(tmp_path):
    out = tmp_path / "ingested" / "big.parquet"
    import pyarrow as pa

    from albor_pipeline.runtime.artifacts import ParquetSink
    from albor_pipeline.text.documents import DOC_SCHEMA

    with ParquetSink(out, DOC_SCHEMA) as sink:
        sink.write(
            pa.RecordBatch.from_pydict(
                {"text": ["old"], "source": ["s"], "file": ["f"], "sha256": ["0" * 64]}, schema=DOC_SCHEMA
            )
        )
    before = out.read_bytes()
    _kill_mid_write(out)
    assert out.read_bytes() == before
    assert pq.read_table(out).column("text").to_pylist() == ["old"]
    leftover = list(out.parent.glob(".*.tmp"))
    assert leftover
    with ParquetSink(out, DOC_SCHEMA) as sink:  # another writer never touches a temp file it did not make
        sink.write(
            pa.RecordBatch.from_pydict(
                {"text": ["new"], "source": ["s"], "file": ["f"], "sha256": ["1" * 64]}, schema=DOC_SCHEMA
            )
        )
    assert all(p.exists() for p in leftover)
    with data_dir_lock(Layout(tmp_path), "test") as removed:  # the next lock holder removes it
        assert removed == leftover
    assert [p.name for p in out.parent.iterdir()] == ["big.parquet"]


def test_staged_dir_replaces_a_file_set_whole_or_not_at_all(tmp_path):
    from albor_pipeline.runtime.artifacts import staged_dir, write_bytes

    final = tmp_path / "corpus" / "train"
    with staged_dir(final) as stage:
        write_bytes(stage / "part-00000.parquet", b"old 0")
        write_bytes(stage / "part-00001.parquet", b"old 1")
    try:
        with staged_dir(final) as stage:
            write_bytes(stage / "part-00000.parquet", b"new 0")
            raise RuntimeError("the encoder died half way")
    except RuntimeError:
        pass
    assert {p.name: p.read_bytes() for p in final.iterdir()} == {
        "part-00000.parquet": b"old 0",
        "part-00001.parquet": b"old 1",
    }
    with staged_dir(final) as stage:  # a smaller new set: no stale shard survives
        write_bytes(stage / "part-00000.parquet", b"new 0")
    assert {p.name: p.read_bytes() for p in final.iterdir()} == {"part-00000.parquet": b"new 0"}
    assert sorted(p.name for p in final.parent.iterdir()) == ["train"]  # no staging or old dirs left
    assert final.stat().st_mode & 0o755 == 0o755  # readable by the team, like any directory


def test_a_file_is_hashed_again_only_when_it_changed_even_across_runs(tmp_path, monkeypatch):
    """The digests a run took are saved with the data dir (`save_digests`) and trusted by the
    next run while a file keeps its size, times and inode (git's index rule): a same-size edit
    (a new ctime) or a replaced file (a new inode) is hashed again."""
    root = tmp_path / "data"
    stdlib = Path(json.__file__).parent
    files = {name: root / name for name in ("decoder.py", "encoder.py", "scanner.py")}
    for name, path in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((stdlib / name).read_bytes())
    old = time.time_ns() - 10**10  # written seconds ago: out of the racy window
    for path in files.values():
        os.utime(path, ns=(old, old))
    time.sleep(0.2)  # the ctime too
    truth = {name: hashlib.sha256(p.read_bytes()).hexdigest() for name, p in files.items()}
    assert {name: artifacts.file_sha256(p) for name, p in files.items()} == truth
    record = Layout(root).digests
    artifacts.save_digests(record, root)
    artifacts._DIGESTS.clear()  # the next run's process
    hashed: list[Path] = []
    monkeypatch.setattr(artifacts, "sha256_file", lambda p: hashed.append(Path(p)) or _sha(Path(p)))
    artifacts.load_digests(record)
    edited = files["encoder.py"]
    edited.write_bytes(edited.read_bytes().replace(b"import", b"IMPORT", 1))  # the same size
    os.utime(edited, ns=(old, old))  # its mtime put back: its ctime still moved
    replaced = files["scanner.py"]
    copy = tmp_path / "copy"
    copy.write_bytes(replaced.read_bytes())
    os.utime(copy, ns=(old, old))
    copy.replace(replaced)  # the same bytes and times, another inode
    time.sleep(0.2)
    found = {name: artifacts.file_sha256(p) for name, p in files.items()}
    assert found["encoder.py"] == _sha(edited) != truth["encoder.py"]
    assert found["decoder.py"] == truth["decoder.py"] and found["scanner.py"] == truth["scanner.py"]
    assert sorted(p.name for p in hashed) == ["encoder.py", "scanner.py"]  # decoder.py: a stat


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_file_just_committed_is_verified_by_a_stat_and_an_unrecorded_fresh_file_is_hashed(tmp_path, monkeypatch):
    """`remember_digests` (a stage's commit) makes its files' digests known while they are
    racily fresh, so the checks right after it stat them; a fresh file no commit recorded is
    hashed at every look, and so is a committed one written again."""
    stdlib = Path(json.__file__).parent
    committed, fresh = tmp_path / "decoder.py", tmp_path / "encoder.py"
    for path in (committed, fresh):
        path.write_bytes((stdlib / path.name).read_bytes())
    hashed: list[str] = []
    monkeypatch.setattr(artifacts, "sha256_file", lambda p: hashed.append(Path(p).name) or _sha(Path(p)))
    for window in ("RACY_NS", "COARSE_RACY_NS"):  # both files stay fresh however slow the machine
        monkeypatch.setattr(artifacts, window, 10**12)
    record = artifacts.Artifact(path=committed.name, sha256=_sha(committed), bytes=committed.stat().st_size, rows=0)
    artifacts.remember_digests(tmp_path, [record])
    for _ in range(3):
        assert artifacts.file_sha256(committed) == record.sha256 and artifacts.file_sha256(fresh) == _sha(fresh)
    assert hashed == ["encoder.py"] * 3
    time.sleep(0.02)  # a later tick of the file system's clock: new times
    committed.write_bytes(committed.read_bytes().replace(b"import", b"IMPORT", 1))
    assert artifacts.file_sha256(committed) == _sha(committed) != record.sha256

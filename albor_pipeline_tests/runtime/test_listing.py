"""Hostile source trees (issue 37): FIFOs, sockets and devices, unreadable files and
directories, names that are not UTF-8 or hold a newline, symlink loops, empty Parquet files,
and edits that restore their mtime. Every case uses real files on disk.

What could hang (opening a FIFO, reading a device) or needs a user that file permissions
apply to (the tests run as root, which ignores them) runs in a child process with a timeout,
as `nobody` through `setpriv` when we are root.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from albor_pipeline.runtime import files as files_module
from albor_pipeline.runtime.files import fingerprint_files, list_source_files
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.shards import read_shards
from albor_pipeline.spec import REPO_ROOT, BenchmarkSpec, SourceSpec
from albor_pipeline.stages.documents.decontam import load_benchmark
from albor_pipeline.stages.ingest.ingest import Counts, ingest_source, iter_documents, source_fingerprint
from albor_pipeline.text.datafiles import IngestError

GOOD = "def f(x):\n    return x + 1\n" * 5
NOBODY = 65534
# Run in the child: ingest a source whole (listing, fingerprint, shards), or with a file list
# only read those files as ingestion and fingerprinting do (what a file swapped after listing meets).
CHILD = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # a device read whole fails here, not the machine
from collections import Counter
from pathlib import Path
from albor_pipeline.runtime.files import fingerprint_files, source_root
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.stages.ingest.ingest import Counts, ingest_source, iter_documents, source_fingerprint
from albor_pipeline.runtime.shards import read_shards
from albor_pipeline.spec import SourceSpec
src, out, files = SourceSpec(**json.loads(sys.argv[1])), Path(sys.argv[2]), json.loads(sys.argv[3])
if files is not None:
    counts = Counts()
    rows = [rel for rel, _ in iter_documents(src, files, counts)]
    fingerprint = fingerprint_files(source_root(src.path), files)[0]
    print(json.dumps({"rows": rows, "skipped": dict(counts.skipped), "fingerprint": fingerprint}))
    sys.exit()
fingerprint = source_fingerprint(src, out / "fingerprints.json").sha256
result = ingest_source(src, out / "ingested", StageIO(out))
rows = read_shards(out / "ingested").column("file").to_pylist()
print(json.dumps({"rows": rows, "skipped": result.summary.skipped, "first": result.first, "fingerprint": fingerprint}))
"""


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every user may read and write (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="albor-listing-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path)


def as_nobody() -> tuple[str, ...]:
    """The command prefix that drops root, whose reads ignore permission bits."""
    if os.geteuid() != 0:
        return ()
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: no user that permissions apply to")
    return ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups")


def child(src: dict[str, Any], out: Path, files: list[str] | None = None, prefix: tuple[str, ...] = ()) -> dict:
    """CHILD's report; a child still running after 60 s hung (killed, the test fails)."""
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    cmd = [*prefix, sys.executable, "-c", CHILD, json.dumps(src), str(out), json.dumps(files)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung for 60 s: {src}")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def special_files(root: Path) -> None:
    """A FIFO, a socket, a character device (/dev/zero's numbers) and a symlink to /dev/zero."""
    os.mkfifo(root / "fifo.py")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(root / "sock.py"))
    os.mknod(root / "zero.py", stat.S_IFCHR | 0o644, os.makedev(1, 5))
    (root / "devzero.py").symlink_to("/dev/zero")


def test_fifos_sockets_and_devices_are_skipped_as_not_regular_without_hanging(shared):
    code = shared / "code"
    code.mkdir()
    (code / "good.py").write_text(GOOD)
    special_files(code)
    src = {"name": "code", "kind": "code", "path": str(code), "follow_symlinks": True}
    report = child(src, shared / "out")
    assert report["rows"] == ["good.py"]
    assert report["skipped"] == {"not_regular": 4}
    assert report["first"] == {"not_regular": "devzero.py"}

    data = shared / "data"
    data.mkdir()
    (data / "good.jsonl").write_text(json.dumps({"text": GOOD}) + "\n")
    os.mkfifo(data / "fifo.jsonl")
    (data / "zero.jsonl.gz").symlink_to("/dev/zero")
    src = {"name": "data", "kind": "jsonl", "path": str(data), "follow_symlinks": True}
    report = child(src, shared / "data_out")
    assert report["rows"] == ["good.jsonl:1"] and report["skipped"] == {"not_regular": 2}


@pytest.mark.parametrize("kind", ["code", "jsonl", "parquet"])
def test_a_special_file_met_after_listing_is_never_opened_blocking(shared, kind):
    """A file listed as regular and swapped for a FIFO or a device before it is read."""
    root = shared / "src"
    root.mkdir()
    special_files(root)
    src = {"name": "s", "kind": kind, "path": str(root), "include": ["*"]}
    report = child(src, shared / "out", ["fifo.py", "zero.py", "devzero.py", "sock.py"])
    assert report["rows"] == [] and report["skipped"] == {"not_regular": 4}


def test_a_file_longer_than_max_chars_is_skipped_without_being_read_whole(tmp_path):
    root = tmp_path / "code"
    root.mkdir()
    (root / "good.py").write_text(GOOD)
    # Past UTF-8's widest 4 bytes a character lies a byte that is not UTF-8: read whole, the
    # file would count as not_utf8; read up to the bound, it is too long, as it is.
    (root / "long.py").write_bytes(b"x" * (4 * len(GOOD) + 1) + b"\xff")
    counts = Counts()
    src = SourceSpec(name="s", kind="code", path=root, min_chars=0, max_chars=len(GOOD))
    assert [rel for rel, _ in iter_documents(src, ["good.py", "long.py"], counts)] == ["good.py"]
    assert counts.skipped == {"too_long": 1}


def test_unreadable_files_and_directories_are_skipped_and_counted(shared):
    code = shared / "code"
    (code / "locked").mkdir(parents=True)
    (code / "good.py").write_text(GOOD)
    (code / "locked" / "inside.py").write_text(GOOD)
    (code / "secret_noperm.py").write_text(GOOD)
    (code / "secret_noperm.py").chmod(0)
    (code / "locked").chmod(0)
    data = shared / "data"
    data.mkdir()
    (data / "good.jsonl").write_text(json.dumps({"text": GOOD}) + "\n")
    (data / "secret.jsonl").write_text(json.dumps({"text": GOOD}) + "\n")
    (data / "secret.jsonl").chmod(0)

    report = child({"name": "code", "kind": "code", "path": str(code)}, shared / "out", prefix=as_nobody())
    assert report["rows"] == ["good.py"]
    assert report["skipped"] == {"unreadable": 1, "unreadable_dir": 1}
    assert report["first"] == {"unreadable_dir": "locked"}
    data_report = child({"name": "data", "kind": "jsonl", "path": str(data)}, shared / "data_out", prefix=as_nobody())
    assert data_report["rows"] == ["good.jsonl:1"] and data_report["skipped"] == {"unreadable": 1}

    (code / "secret_noperm.py").chmod(0o644)  # readable now: the source's data version moves
    again = child({"name": "code", "kind": "code", "path": str(code)}, shared / "again", prefix=as_nobody())
    assert again["rows"] == ["good.py", "secret_noperm.py"] and again["fingerprint"] != report["fingerprint"]


def test_names_that_are_not_utf8_are_skipped_and_named_escaped(tmp_path):
    root = tmp_path / "code"
    root.mkdir()
    (root / "good.py").write_text(GOOD)
    raw = os.fsencode(root)
    Path(os.fsdecode(raw + b"/caf\xe9.py")).write_text(GOOD)
    os.mkdir(raw + b"/d\xff")
    Path(os.fsdecode(raw + b"/d\xff/x.py")).write_text(GOOD)

    listing = list_source_files(root, ["**/*.py"])
    assert listing.files == ["good.py"]
    assert listing.skipped == {"not_utf8_name": 2}
    assert listing.first == {"not_utf8_name": "caf\\xe9.py"}  # its bytes escaped
    src = SourceSpec(name="s", kind="code", path=root)
    result = ingest_source(src, tmp_path / "out", StageIO(tmp_path))
    assert result.summary.skipped == {"not_utf8_name": 2} and result.summary.documents == 1
    assert source_fingerprint(src).rows == 1


def test_names_holding_a_newline_are_listed(tmp_path):
    root = tmp_path / "code"
    (root / "new\nline").mkdir(parents=True)
    (root / "new\nline" / "n.py").write_text(GOOD)
    (root / "a\nb.py").write_text(GOOD)
    assert list_source_files(root, ["**/*.py"]).files == ["a\nb.py", "new\nline/n.py"]
    result = ingest_source(SourceSpec(name="s", kind="code", path=root), tmp_path / "out", StageIO(tmp_path))
    assert read_shards(tmp_path / "out").column("file").to_pylist() == ["a\nb.py", "new\nline/n.py"]
    assert result.summary.skipped == {}


def test_symlink_loops_are_counted_as_such_in_code_and_data_sources(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "good.py").write_text(GOOD)
    (code / "self.py").symlink_to("self.py")
    assert list_source_files(code, ["*.py"]).skipped == {"symlink_loop": 1}

    data = tmp_path / "data"
    data.mkdir()
    (data / "good.jsonl").write_text(json.dumps({"text": GOOD}) + "\n")
    (data / "a.jsonl").symlink_to("b.jsonl")
    (data / "b.jsonl").symlink_to("a.jsonl")
    result = ingest_source(SourceSpec(name="s", kind="jsonl", path=data), tmp_path / "out", StageIO(tmp_path))
    assert result.summary.skipped == {"symlink_loop": 2} and result.summary.documents == 1


def test_an_empty_parquet_file_is_counted_as_empty_file(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(pa.table({"text": [GOOD]}), data / "good.parquet")
    (data / "zero_bytes.parquet").write_bytes(b"")
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), data / "zero_rows.parquet")
    result = ingest_source(SourceSpec(name="s", kind="parquet", path=data), tmp_path / "out", StageIO(tmp_path))
    assert result.summary.skipped == {"empty_file": 2} and result.summary.documents == 1
    with pytest.raises(IngestError, match=r"zero_bytes.parquet has no items \(empty_file\)"):
        load_benchmark(BenchmarkSpec(name="b", path=data / "zero_bytes.parquet", fields=("text",)), 13)


@pytest.mark.parametrize("racy_ns", [None, 0])
def test_a_same_size_edit_with_its_mtime_restored_changes_the_fingerprint(tmp_path, monkeypatch, racy_ns):
    """As `rsync -t` or an archive leaves it. With no racy window, only the (ctime, inode) key sees it."""
    if racy_ns is not None:
        monkeypatch.setattr(files_module, "RACY_NS", racy_ns)
    root = tmp_path / "code"
    root.mkdir()
    path = root / "a.py"
    path.write_text("a = 1\n")
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    cache = tmp_path / "cache.json"
    first = fingerprint_files(root, ["a.py"], cache)
    assert fingerprint_files(root, ["a.py"], cache) == first

    time.sleep(0.02)  # a later tick of a coarse filesystem clock
    path.write_text("a = 2\n")  # same size
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))  # mtime restored
    assert fingerprint_files(root, ["a.py"], cache) != first
    if racy_ns == 0:  # an unchanged file is served from the cache, keyed as git keys its index
        st = path.stat()
        assert json.loads(cache.read_text())["a.py"][:4] == [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]

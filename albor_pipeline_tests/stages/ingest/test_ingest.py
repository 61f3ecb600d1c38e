from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import os
import tracemalloc
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from albor_pipeline.runtime.files import fingerprint_files, list_source_files
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.shards import read_shards, shard_files
from albor_pipeline.spec import HoldoutSpec, SourceSpec, SplitMixSpec
from albor_pipeline.stages.documents.documents import build_documents
from albor_pipeline.stages.ingest.ingest import ingest_source, source_files, source_fingerprint
from albor_pipeline.stages.mix.mix import mix_documents
from albor_pipeline.text.datafiles import DATA_READERS, PIECE, IngestError
from albor_pipeline_tests.support import STDLIB


def ingest(tmp_path: Path, **kw) -> tuple:
    src = SourceSpec(**{"name": "s", **kw})
    out = tmp_path / "out" / "ingested" / "s"
    result = ingest_source(src, out, StageIO(tmp_path / "out"))
    return result, read_shards(out).to_pylist()


def test_real_stdlib_package_ingests_every_file(tmp_path):
    root = STDLIB / "json"
    result, rows = ingest(tmp_path, kind="code", path=root, min_chars=0)
    expected = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    assert [r["file"] for r in rows] == expected
    for row in rows:
        text = (root / row["file"]).read_text(encoding="utf-8")
        assert row["text"] == text
        assert row["sha256"] == hashlib.sha256(text.encode()).hexdigest()
        assert row["source"] == "s"
    assert result.summary.documents == len(rows) == result.summary.files
    [shard] = result.artifacts
    assert shard.path == "ingested/s/part-00000-0000.parquet"
    assert shard.sha256 == hashlib.sha256((tmp_path / "out" / shard.path).read_bytes()).hexdigest()


def test_code_source_skips_and_counts_bad_files(tmp_path):
    root = tmp_path / "repo"
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / ".hidden").mkdir()
    (root / "venv").mkdir()
    good = "def f(x):\n    return x + 1\n" * 5
    (root / "pkg" / "good.py").write_text(good, encoding="utf-8")
    (root / "pkg" / "latin1.py").write_bytes(("# caf\xe9\n" + good).encode("latin-1"))
    (root / "pkg" / "short.py").write_text("x = 1\n", encoding="utf-8")
    (root / "pkg" / "long.py").write_text("x = 1\n" * 50_000, encoding="utf-8")
    (root / "pkg" / "__pycache__" / "cached.py").write_text(good, encoding="utf-8")
    (root / ".hidden" / "h.py").write_text(good, encoding="utf-8")
    (root / "venv" / "v.py").write_text(good, encoding="utf-8")
    (root / "pkg" / "notes.txt").write_text(good, encoding="utf-8")
    os.symlink("loop_b.py", root / "pkg" / "loop_a.py")
    os.symlink("loop_a.py", root / "pkg" / "loop_b.py")
    (root / "pkg" / "locked.py").write_text(good, encoding="utf-8")
    os.chmod(root / "pkg" / "locked.py", 0)
    try:
        result, rows = ingest(tmp_path, kind="code", path=root)
    finally:
        os.chmod(root / "pkg" / "locked.py", 0o644)
    assert [r["file"] for r in rows] == ["pkg/good.py"] + (["pkg/locked.py"] if os.geteuid() == 0 else [])
    expected = {"not_utf8": 1, "too_short": 1, "too_long": 1, "symlink_loop": 2}
    if os.geteuid() != 0:  # root can read a 0000 file
        expected["unreadable"] = 1
    assert result.summary.skipped == expected


def test_jsonl_csv_parquet_sources(tmp_path):
    docs = [f"document number {i} " * 5 for i in range(5)]
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.jsonl").write_text("".join(json.dumps({"body": d, "id": i}) + "\n" for i, d in enumerate(docs)) + "\n")
    result, rows = ingest(tmp_path, kind="jsonl", path=data, text_field="body")
    assert [r["text"] for r in rows] == docs
    assert rows[2]["file"] == "a.jsonl:3"
    assert result.summary.skipped == {"blank_line": 1}

    with open(data / "b.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "content"])
        for i, d in enumerate(docs):
            writer.writerow([i, d + '\nwith, a "quoted" newline'])
    _, rows = ingest(tmp_path, kind="csv", path=data / "b.csv", text_field="content")
    assert [r["text"] for r in rows] == [d + '\nwith, a "quoted" newline' for d in docs]
    assert rows[1]["file"] == "b.csv:4"  # header on line 1, row 0 spans lines 2-3

    pq.write_table(pa.table({"t": [*docs, None]}), data / "c.parquet")
    result, rows = ingest(tmp_path, kind="parquet", path=data / "c.parquet", text_field="t")
    assert [r["text"] for r in rows] == docs
    assert result.summary.skipped == {"null_text": 1}


@pytest.mark.parametrize(
    ("kind", "name", "content", "message"),
    [
        ("jsonl", "x.jsonl", b'{"text": "' + b"a" * 60 + b'"}\n{"text": broken}\n', r"x.jsonl:2: malformed JSON"),
        ("jsonl", "x.jsonl", b'{"text": "' + b"a" * 60 + b'"}\n{"body": "b"}\n', r"x.jsonl:2: missing field 'text'"),
        ("jsonl", "x.jsonl", b'{"text": 5}\n', r"x.jsonl:1: field 'text' is int"),
        ("jsonl", "x.jsonl", b'["text"]\n', r"x.jsonl:1: expected a JSON object"),
        ("jsonl", "x.jsonl", b'{"text": "caf\xe9"}\n', r"x.jsonl:1: not valid UTF-8"),
        # Hostile but valid JSON: past the parser's recursion, Python's 4,300-digit integers, UTF-8.
        ("jsonl", "x.jsonl", b'{"text": ' + b"[" * 10**5 + b"]" * 10**5 + b"}\n", r"x.jsonl:1: .* nested too deeply"),
        ("jsonl", "x.jsonl", b'{"text": "t", "n": ' + b"7" * 5000 + b"}\n", r"x.jsonl:1: .* Exceeds the limit"),
        ("jsonl", "x.jsonl", b'{"text": "a\\ud83d\\ude00 \\ud800b"}\n', r"x.jsonl:1: .* a lone surrogate"),
        ("csv", "x.csv", b"id,body\n1,hello\n", r"x.csv:1: missing column 'text'"),
        ("csv", "x.csv", b"id,text\n1,hello\n2,a,b\n", r"x.csv:3: expected 2 fields, got 3"),
        ("csv", "x.csv", b'id,text\n1,"unterminated\n', r"x.csv:2: CSV parse error"),
        ("csv", "x.csv", b"id,text\n1,fine\n2,caf\xe9\n3,ok\n", r"x.csv:3: not valid UTF-8"),
        ("parquet", "x.parquet", None, r"x.parquet: missing column 'text'"),
        ("parquet", "x.parquet", b"not parquet at all", r"x.parquet: not a readable Parquet file"),
    ],
)
def test_bad_data_files_raise_naming_file_and_line(tmp_path, kind, name, content, message):
    data = tmp_path / "data"
    data.mkdir()
    if content is None:
        pq.write_table(pa.table({"body": ["x" * 80]}), data / name)
    else:
        (data / name).write_bytes(content)
    with pytest.raises(IngestError, match=message):
        ingest(tmp_path, kind=kind, path=data, min_chars=0)
    assert not (tmp_path / "out" / "ingested" / "s").exists()


def test_empty_source_is_an_error_and_keeps_previous_output(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.py").write_text("print('hello world')\n" * 10, encoding="utf-8")
    ingest(tmp_path, kind="code", path=root)
    out = tmp_path / "out" / "ingested" / "s" / "part-00000-0000.parquet"
    before = out.read_bytes()
    (root / "a.py").write_text("x = 1\n", encoding="utf-8")  # now too short: 0 documents
    with pytest.raises(IngestError, match=r"produced 0 documents from 1 file\(s\).*too_short=1"):
        ingest(tmp_path, kind="code", path=root)
    assert out.read_bytes() == before
    assert [p.name for p in out.parent.parent.iterdir()] == ["s"]  # no temp file or directory left behind
    assert [p.name for p in out.parent.iterdir()] == [out.name]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ingest(tmp_path, kind="code", path=tmp_path / "nowhere")


def test_ingestion_is_byte_identical_on_rerun(tmp_path):
    a, _ = ingest(tmp_path / "a", kind="code", path=STDLIB / "email")
    b, _ = ingest(tmp_path / "b", kind="code", path=STDLIB / "email")
    assert a.artifacts == b.artifacts and a.summary.documents > 10


def test_globs_and_fingerprint(tmp_path):
    root = tmp_path / "repo"
    (root / "pkg" / "tests").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("a = 1\n")
    (root / "pkg" / "tests" / "t.py").write_text("t = 1\n")
    (root / "b.py").write_text("b = 1\n")
    assert list_source_files(root, ["**/*.py"]).files == ["b.py", "pkg/a.py", "pkg/tests/t.py"]
    assert list_source_files(root, ["**/*.py"], ["**/tests/**"]).files == ["b.py", "pkg/a.py"]
    assert list_source_files(root, ["pkg/*.py"]).files == ["pkg/a.py"]
    src = SourceSpec(name="s", kind="code", path=root, exclude=("**/tests/**",))
    cache = tmp_path / "cache.json"
    first = fingerprint_files(root, source_files(src).files, cache)
    os.utime(root / "pkg" / "a.py", (1, 1))  # touched, same bytes
    assert fingerprint_files(root, source_files(src).files, cache) == first
    (root / "pkg" / "tests" / "t.py").write_text("t = 2\n")  # excluded file
    assert fingerprint_files(root, source_files(src).files, cache) == first
    (root / "pkg" / "a.py").write_text("a = 2\n")
    assert fingerprint_files(root, source_files(src).files, cache) != first
    assert source_fingerprint(src).sha256 == fingerprint_files(root, source_files(src).files)[0]
    assert (source_fingerprint(src).rows, source_fingerprint(src).bytes) == (2, 12)


def test_a_source_becomes_bounded_shards_the_same_on_any_executor(tmp_path, local2):
    """`shard_mb` bounds each shard; the shards, concatenated, are the unsharded documents
    in listing order, and a pool of two processes writes the very same files."""
    src = SourceSpec(name="s", kind="code", path=STDLIB / "email")
    whole = ingest_source(src, tmp_path / "whole", StageIO(tmp_path))
    small = ingest_source(src, tmp_path / "small", StageIO(tmp_path), shard_mb=0.05)
    pooled = ingest_source(src, tmp_path / "pooled", StageIO(tmp_path, local2), shard_mb=0.05)
    assert len(whole.artifacts) == 1 and len(small.artifacts) > 5
    assert [(a.sha256, a.rows) for a in pooled.artifacts] == [(a.sha256, a.rows) for a in small.artifacts]
    assert read_shards(tmp_path / "small").equals(read_shards(tmp_path / "whole"))
    # Downstream, shards are read in order: `documents` splits hold the same rows in the same
    # order (in as many shards as its input had), and the mix writes the very same bytes.
    mixed = []
    for name in ("whole", "small"):
        docs = tmp_path / f"d_{name}"
        built = build_documents(
            [("s", p) for p in shard_files(tmp_path / name)], HoldoutSpec(), docs, StageIO(tmp_path)
        )
        assert [len(built.artifacts[s]) for s in ("train", "val", "test")] == [len(shard_files(tmp_path / name))] * 3
        mixed.append(mix_documents(docs / "train", SplitMixSpec(), ["s"], tmp_path / f"m_{name}", StageIO(tmp_path)))
    assert read_shards(tmp_path / "d_whole" / "train").equals(read_shards(tmp_path / "d_small" / "train"))
    assert [a.sha256 for a in mixed[0].artifacts] == [a.sha256 for a in mixed[1].artifacts]
    assert sum(a.rows or 0 for a in mixed[0].artifacts) > 10
    for art in small.artifacts:  # a shard holds at most 0.05 MB of files, or one bigger file
        files = pq.read_table(tmp_path / art.path, columns=["file"]).column(0).to_pylist()
        assert sum((STDLIB / "email" / f).stat().st_size for f in files) <= 50_000 or len(files) == 1


def test_a_dist_info_without_its_metadata_counts_as_an_unknown_licence(tmp_path: Path) -> None:
    """A partial copy of site-packages (the `.py` files only) keeps the dist-info folders but
    not their METADATA: ingestion goes on, the licence is unknown."""
    import importlib_metadata  # noqa: F401 - its finder on sys.meta_path is what raised

    from albor_pipeline.stages.ingest.licences import detect_licences

    (tmp_path / "pkg-1.0.dist-info").mkdir()
    (tmp_path / "other-2.0.dist-info").mkdir()
    (tmp_path / "other-2.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: other\nLicense: MIT\n")
    assert detect_licences(tmp_path) == {"MIT": 1, "unknown": 1}


LONG_LINE_MB = 64  # a line far over its cap (12 x max_chars bytes), gzipped to ~64 KB


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_a_line_over_its_cap_is_too_long_and_never_held(tmp_path, kind):
    """A 64 MB line among short ones: counted as `too_long`, read past in pieces (the peak of
    Python's allocations stays far under the line), and the lines after it read as usual."""
    docs = [f"document number {i} " * 5 for i in range(4)]
    if kind == "jsonl":
        header, rows, long_line = "", [json.dumps({"text": d}) + "\n" for d in docs], (b'{"text": "', b'"}\n')
    else:
        header, rows, long_line = "id,text\n", [f"{i},{d}\n" for i, d in enumerate(docs)], (b"9,", b"\n")
    data = tmp_path / "data"
    data.mkdir()
    with gzip.open(data / f"x.{kind}.gz", "wb", compresslevel=1) as fh:
        fh.write((header + rows[0] + rows[1]).encode())
        fh.write(long_line[0])
        for _ in range(LONG_LINE_MB):
            fh.write(b"a" * (1 << 20))
        fh.write(long_line[1] + (rows[2] + rows[3]).encode())
    (tmp_path / f"warm.{kind}").write_text(header + "".join(rows))
    ingest(tmp_path / "warm", kind=kind, path=tmp_path / f"warm.{kind}")  # what a process builds once (the scanner)
    tracemalloc.start()
    try:
        result, out = ingest(tmp_path, kind=kind, path=data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"peak {peak / 2**20:.0f} MB of Python allocations"
    assert result.summary.skipped == {"too_long": 1}
    assert [r["text"] for r in out] == docs
    first = 1 if kind == "jsonl" else 2  # a CSV's header is line 1
    assert [r["file"] for r in out] == [f"x.{kind}.gz:{first + i}" for i in (0, 1, 3, 4)]


LONG = "y" * PIECE + '""' + "y" * 99  # far over a 1-character cap: read past in pieces, an escaped quote in the last


@pytest.mark.parametrize(
    "record",
    [
        f'"l1\n{LONG}\nab",2\n',  # the field's rest once read as a record of its own: 'ab"'
        f'"l1\n{LONG}\n"",2\nend",2\n',  # ... and as an empty one ('""' is an escaped quote)
        f'"{LONG}\nzz\n",2\n',  # ... and as a record of one field
    ],
)
def test_a_too_long_line_inside_a_quoted_csv_field_skips_the_whole_record(tmp_path, record):
    """A quoted field spans lines: past the cap, the record is read past to its real end (its
    quotes even at a line end), counted once as `too_long`, and the next record is read."""
    content = f'text,x\n{record}"ok",3\n'
    assert len(list(csv.reader(io.StringIO(content, newline="")))) == 3  # the header and two records
    (tmp_path / "a.csv").write_text(content, encoding="utf-8", newline="")
    skipped: Counter[str] = Counter()
    docs = list(DATA_READERS["csv"](tmp_path / "a.csv", "a.csv", "text", skipped, 1))
    assert docs == [(f"a.csv:{content.count(chr(10))}", "ok")] and skipped == {"too_long": 1}


@pytest.mark.parametrize("name", ["x.jsonl", "x.parquet"])
def test_out_of_memory_while_reading_names_the_file(tmp_path, monkeypatch, name):
    """Memory running out while a data file is read is an error naming it, never a bare MemoryError."""
    data = tmp_path / "data"
    data.mkdir()
    if name.endswith(".parquet"):
        pq.write_table(pa.table({"text": ["x" * 80]}), data / name)
    else:
        (data / name).write_text(json.dumps({"text": "x" * 80}) + "\n")

    def exhausted(*args, **kwargs):
        raise pa.ArrowMemoryError("malloc of size 4294967296 failed")

    monkeypatch.setattr(json, "loads", exhausted)
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", exhausted)
    with pytest.raises(IngestError, match=rf"{name}: out of memory while reading it"):
        ingest(tmp_path, kind=name.split(".")[1], path=data)


def test_hostile_json_is_skipped_and_counted_under_on_error_skip(tmp_path):
    """`on_error: skip` counts hostile lines as `malformed` like any malformed row; a surrogate
    pair written as escapes is ordinary text."""
    item = {"question": "q \U0001f600", "choices": ["a", "b"], "answer": 0}
    lines = [
        json.dumps(item),  # ensure_ascii: the emoji as an escaped surrogate pair
        '{"question": ' + "[" * 10**5 + "]" * 10**5 + "}",
        '{"question": "q", "choices": ["a", "b"], "answer": ' + "1" * 5000 + "}",
        '{"question": "q \\udc00", "choices": ["a", "b"], "answer": 0}',
        "{broken",
    ]
    path = tmp_path / "mc.jsonl"
    path.write_text("\n".join(lines) + "\n")
    src = SourceSpec(name="m", kind="mc", path=path, on_error="skip")
    result = ingest_source(src, tmp_path / "out", StageIO(tmp_path))
    assert result.summary.skipped == {"malformed": 4} and result.summary.documents == 1
    assert json.loads(read_shards(tmp_path / "out").column("text")[0].as_py())["question"] == item["question"]


def test_a_dictionary_encoded_parquet_text_column_is_text(tmp_path):
    """pyarrow writes a categorical string column dictionary-encoded; it is read as its strings."""
    docs = [f"document number {i} " * 5 for i in (0, 1, 0)]
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(pa.table({"text": pa.array([*docs, None]).dictionary_encode()}), data / "d.parquet")
    assert pa.types.is_dictionary(pq.read_schema(data / "d.parquet").field("text").type)
    result, rows = ingest(tmp_path, kind="parquet", path=data)
    assert [r["text"] for r in rows] == docs and result.summary.skipped == {"null_text": 1}

"""Sources on object storage: a real S3 API server (moto's standalone server) on 127.0.0.1,
read through pyarrow.fs exactly as a bucket on AWS would be."""

from __future__ import annotations

import gzip
import json
import threading
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow.parquet as pq
import pytest

from albor_pipeline.cli import main as albor
from albor_pipeline.definitions import build_definitions
from albor_pipeline.defs.automation import BUILD_JOB
from albor_pipeline.runtime import bucket as bucket_module
from albor_pipeline.runtime import lock
from albor_pipeline.runtime.artifacts import Artifact, StageManifest, iter_manifests, read_manifest, record
from albor_pipeline.runtime.bucket import Bucket, server_checksum
from albor_pipeline.runtime.executor import INLINE
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.lock import LEASE_SECONDS, DataDirBusy, DataDirLost, bucket_lock
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import REPO_ROOT, SourceSpec
from albor_pipeline.stages.ingest.ingest import ingest_source, source_fingerprint
from albor_pipeline.stages.ingest.licences import detect_licences
from albor_pipeline.text.datafiles import IngestError
from albor_pipeline.text.ledger import is_ledger
from albor_pipeline.text.removal import REMOVED
from albor_pipeline_tests.support import STDLIB, run_into_bucket

boto3 = pytest.importorskip("boto3", reason="moto[server] (dev extra) is not installed")


def _upload(client, bucket: str, root: Path, files: list[Path]) -> None:
    client.create_bucket(Bucket=bucket)
    for path in files:
        client.put_object(Bucket=bucket, Key=f"src/{path.relative_to(root).as_posix()}", Body=path.read_bytes())


def test_a_code_source_in_a_bucket_ingests_to_the_same_bytes_as_on_disk(s3, tmp_path, local2):
    """The email package uploaded as-is: listing (hidden and __pycache__ left out), reading,
    fingerprint and the Parquet file equal the local source's, inline and on 2 processes."""
    root = STDLIB / "email"
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    _upload(s3, "albor-code", root, files)
    s3.put_object(Bucket="albor-code", Key="src/.hidden/x.py", Body=b"print('hidden')\n" * 10)
    s3.put_object(Bucket="albor-code", Key="src/__pycache__/y.py", Body=b"print('cache')\n" * 10)
    s3.put_object(Bucket="albor-code", Key="src/latin1.py", Body="# caf\xe9\n".encode("latin-1") * 20)
    local = SourceSpec(name="email", kind="code", path=root)
    remote = SourceSpec(name="email", kind="code", path="s3://albor-code/src")
    expected = ingest_source(local, tmp_path / "local", StageIO(tmp_path))
    for name, executor in (("inline", INLINE), ("local2", local2)):
        got = ingest_source(remote, tmp_path / name, StageIO(tmp_path, executor))
        assert [a.sha256 for a in got.artifacts] == [a.sha256 for a in expected.artifacts], name
        assert got.summary.skipped == {**expected.summary.skipped, "not_utf8": 1}
    assert pq.read_table(tmp_path / "inline").num_rows == len(files) - sum(expected.summary.skipped.values())
    assert source_fingerprint(remote).sha256 != source_fingerprint(local).sha256  # latin1.py is a file too
    s3.delete_object(Bucket="albor-code", Key="src/latin1.py")
    assert source_fingerprint(remote).sha256 == source_fingerprint(local).sha256
    assert detect_licences("s3://albor-code/src") == {"unknown": 1}


def test_a_jsonl_source_in_a_bucket_reads_plain_and_gzip_and_names_a_bad_line(s3, tmp_path):
    rows = [{"text": p.read_text(encoding="utf-8")} for p in sorted((STDLIB / "json").glob("*.py"))]
    plain = "".join(json.dumps(r) + "\n" for r in rows[:3]).encode()
    packed = gzip.compress("".join(json.dumps(r) + "\n" for r in rows[3:]).encode(), mtime=0)
    s3.create_bucket(Bucket="albor-jsonl")
    s3.put_object(Bucket="albor-jsonl", Key="data/a.jsonl", Body=plain)
    s3.put_object(Bucket="albor-jsonl", Key="data/b.jsonl.gz", Body=packed)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.jsonl").write_bytes(plain)
    (tmp_path / "data" / "b.jsonl.gz").write_bytes(packed)
    spec = {"name": "j", "kind": "jsonl", "min_chars": 1}
    got = ingest_source(SourceSpec(**spec, path="s3://albor-jsonl/data"), tmp_path / "r", StageIO(tmp_path))
    want = ingest_source(SourceSpec(**spec, path=tmp_path / "data"), tmp_path / "l", StageIO(tmp_path))
    assert [a.sha256 for a in got.artifacts] == [a.sha256 for a in want.artifacts] and got.summary.documents == len(
        rows
    )
    assert pq.read_table(tmp_path / "r").column("file").to_pylist()[:2] == ["a.jsonl:1", "a.jsonl:2"]
    s3.put_object(Bucket="albor-jsonl", Key="data/c.jsonl", Body=b'{"text": "fine"}\n{"text": oops}\n')
    with pytest.raises(IngestError, match=r"s3://albor-jsonl/data/c\.jsonl:2: malformed JSON"):
        ingest_source(SourceSpec(**spec, path="s3://albor-jsonl/data"), tmp_path / "bad", StageIO(tmp_path))
    assert not (tmp_path / "bad").exists()
    with pytest.raises(FileNotFoundError, match="s3://albor-jsonl/nothing"):
        ingest_source(SourceSpec(**spec, path="s3://albor-jsonl/nothing"), tmp_path / "none", StageIO(tmp_path))


def _bucket_files(client, bucket: str, prefix: str) -> dict[str, bytes]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    # Not pyarrow's empty directory markers ("objects/ff/"), which it leaves when a delete
    # empties a "directory": no data, and listings through pyarrow see directories, not files.
    keys = [o["Key"] for page in pages for o in page.get("Contents", []) if not o["Key"].endswith("/")]
    return {k[len(prefix) :]: client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def _gc_collects_only_what_no_manifest_names(s3, uri: str, stored: dict, local: Path, capsys) -> None:
    """Objects no manifest names (an older version, a dead run's upload) go with `albor gc`,
    once older than its cutoff; everything a manifest names stays."""
    orphan = f"team/run/objects/ff/{'f' * 64}"
    s3.put_object(Bucket="albor-data", Key=orphan, Body=b"an older shard")
    capsys.readouterr()
    assert albor(["gc", "--data-dir", uri]) == 0
    out = capsys.readouterr().out
    assert "deleted 0 object(s)" in out and "kept 1 written in the last 24 h" in out
    with bucket_lock(uri, "a run on host-x"):  # never under a running run
        assert albor(["gc", "--data-dir", uri, "--older-than-hours", "0"]) == 1
    assert "in use by a run on host-x; collect when it is done; nothing deleted" in capsys.readouterr().err
    assert albor(["gc", "--data-dir", uri, "--older-than-hours", "0"]) == 0
    assert "deleted 1 object(s) no manifest names (0.0 MB); kept 0" in capsys.readouterr().out
    assert _bucket_files(s3, "albor-data", "team/run/") == stored
    assert albor(["gc", "--data-dir", str(local)]) == 0  # a local data dir: nothing to collect


@pytest.mark.graph
def test_a_whole_graph_with_its_data_dir_in_a_bucket(s3, reference, tmp_path, make_spec, monkeypatch, capsys):
    """Every stage commits to the bucket: its outputs as objects named by their SHA-256, then
    its manifest. The manifests equal a local data dir's (the session's reference build of
    the same spec) byte for byte; `albor verify` and `albor summary` work against the
    bucket; a fresh working copy rebuilds a stage from the bucket alone and uploads nothing
    new; a failed publish leaves the previous commit; a changed object is named by verify and
    refused by a stage that fetches it."""
    spec = make_spec()
    uri = run_into_bucket(s3, tmp_path, tmp_path / "spec.yaml", monkeypatch, "albor-data", "team/run")
    out = capsys.readouterr().out
    assert f"Artifacts: {uri}\nWorking copy: {tmp_path / 'work'}" in out and "corpus/train:" in out

    local = Layout(reference.out)
    stored = _bucket_files(s3, "albor-data", "team/run/")
    assert ".albor.lock" not in stored  # the run's lock in the bucket went with it
    manifests = {k: v for k, v in stored.items() if k.startswith("manifests/")}
    assert manifests == {f"manifests/{p.name}": p.read_bytes() for p in local.manifests_dir.glob("*.json")}
    outputs = {a.sha256: a for m in iter_manifests(local) for a in m.outputs}
    objects = {k.rsplit("/", 1)[1]: v for k, v in stored.items() if k.startswith("objects/")}
    assert set(objects) == set(outputs)  # one object per distinct output, nothing else
    for sha, art in outputs.items():
        assert objects[sha] == (local.root / art.path).read_bytes(), art.path

    capsys.readouterr()
    assert albor(["verify", "--data-dir", uri]) == 0
    err = capsys.readouterr().err
    paths = {(a.path, a.sha256) for m in iter_manifests(local) for a in m.outputs}
    assert f"{len(paths)} ok, 0 failed, 0 stale stage(s)" in err
    assert albor(["summary", "--data-dir", uri]) == 0
    assert "corpus/train:" in capsys.readouterr().out

    # `albor trace` reads the bucket through a working copy of its own, and answers as locally.
    monkeypatch.setenv("ALBOR_WORK_DIR", str(tmp_path / "tracing"))
    argv = ["trace", "corpus/train:3", "--json", "--spec", str(tmp_path / "spec.yaml")]
    assert albor([*argv, "--data-dir", uri]) == 0
    remote = json.loads(capsys.readouterr().out)
    assert albor([*argv, "--data-dir", str(reference.out)]) == 0
    assert remote and json.loads(capsys.readouterr().out) == remote

    # A fresh working copy (another machine): corpus/train alone, its inputs from the bucket.
    monkeypatch.setenv("ALBOR_WORK_DIR", str(tmp_path / "fresh"))
    corpus_train = dg.AssetKey(["corpus", "train"])
    job = build_definitions(spec, uri).resolve_job_def(BUILD_JOB)
    assert job.execute_in_process(asset_selection=[corpus_train]).success
    fresh = Layout(tmp_path / "fresh")
    fetched = {p.relative_to(fresh.root).as_posix() for p in fresh.root.rglob("*") if p.is_file()}
    needed = {
        a.path for stage in ("fim/train", "tokenizer", "corpus/train") for a in read_manifest(local, stage).outputs
    }
    assert needed <= fetched
    # Only what it reads: beside its inputs, the ledgers it keeps as its fates table.
    fates = {
        a.path
        for m in iter_manifests(local)
        if m.stage.startswith(("ingested/", "filtered/")) or m.stage == "documents"
        for a in m.outputs
        if is_ledger(a.path) or a.path.endswith(f"/{REMOVED}")
    }
    assert fates and {p for p in fetched if p.startswith(("documents/", "ingested/", "filtered/", "mixed/"))} == fates
    assert _bucket_files(s3, "albor-data", "team/run/") == stored  # same bytes: nothing new, same manifest

    # A publish that fails (an output vanished before upload) leaves the bucket's commit as it was.
    bucket = Bucket(uri, fresh)
    manifest = read_manifest(fresh, "corpus/train")
    gone = Artifact(path="corpus/train/gone.bin", sha256="0" * 64, bytes=5)
    with pytest.raises(FileNotFoundError):
        bucket.publish(manifest.model_copy(update={"outputs": [*manifest.outputs, gone]}))
    assert _bucket_files(s3, "albor-data", "team/run/") == stored

    _gc_collects_only_what_no_manifest_names(s3, uri, stored, reference.out, capsys)

    # An object changed behind the pipeline's back: verify names it, a stage refuses it.
    fim = read_manifest(local, "fim/train").outputs[0]
    s3.put_object(Bucket="albor-data", Key=f"team/run/objects/{fim.sha256[:2]}/{fim.sha256}", Body=b"not parquet")
    capsys.readouterr()
    assert albor(["verify", "--data-dir", uri]) == 1
    assert f"CHANGED: {fim.path}" in capsys.readouterr().err
    monkeypatch.setenv("ALBOR_WORK_DIR", str(tmp_path / "third"))
    job = build_definitions(spec, uri).resolve_job_def(BUILD_JOB)
    result = job.execute_in_process(asset_selection=[corpus_train], raise_on_error=False)
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert f"{fim.path}: object {uri}/objects/" in failure.step_failure_data.error.cause.message
    assert "hashes to" in failure.step_failure_data.error.cause.message


def test_a_bucket_data_dir_is_locked_in_the_bucket_for_runs_on_any_machine(s3, tmp_path, monkeypatch):
    """The lock is an object in the bucket, written only if absent and renewed by its holder:
    a second run (any machine: no working copy involved) fails or waits; a dead run's lock is
    taken over once the bucket's clock shows it unrenewed past its lease; a run whose lease
    was taken commits no manifest; the lock object goes when its holder ends."""
    monkeypatch.setattr(lock, "POLL_SECONDS", 0.2)
    s3.create_bucket(Bucket="albor-lock")
    uri, key = "s3://albor-lock/team/v1", "team/v1/.albor.lock"
    logs: list[str] = []
    with bucket_lock(uri, "run A on host-a", log=logs.append):
        assert b"run A on host-a" in s3.get_object(Bucket="albor-lock", Key=key)["Body"].read()
        with pytest.raises(DataDirBusy, match="in use by run A on host-a"), bucket_lock(uri, "B", wait=False):
            pass
        order: list[str] = []

        def second() -> None:
            with bucket_lock(uri, "run C on host-c", log=logs.append):
                order.append("C holds")

        waiter = threading.Thread(target=second)
        waiter.start()
        deadline = time.monotonic() + 30  # a loaded machine may take a while to start C's client
        while not logs and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # C polls meanwhile and must keep waiting
        order.append("A ends")
    waiter.join(30)
    assert order == ["A ends", "C holds"] and "waiting for data dir s3://albor-lock/team/v1: in use by run A" in logs[0]
    assert "Contents" not in s3.list_objects_v2(Bucket="albor-lock", Prefix=key)  # released

    # A run that died left its lock (1 s lease): the next run waits it out, then takes it over.
    dead = json.dumps({"holder": "run D (killed)", "lease_s": 1.0, "token": "d"}).encode()
    s3.put_object(Bucket="albor-lock", Key=key, Body=dead)
    logs.clear()
    with bucket_lock(uri, "run E", log=logs.append):
        pass
    assert any("took over the lock of run D (killed)" in line for line in logs), logs

    # Renewals that failed for a whole lease (the bucket unreachable) count as lost.
    with bucket_lock(uri, "run H", log=logs.append) as lease:
        lease.check()
        lease.renewed -= LEASE_SECONDS + 1
        with pytest.raises(DataDirLost, match="could not renew its lock"):
            lease.check()

    # A run that stalled past its lease and was taken over must not commit.
    with bucket_lock(uri, "run F", lease=0.8, log=logs.append) as lease:
        s3.put_object(Bucket="albor-lock", Key=key, Body=b'{"holder": "run G", "lease_s": 120, "token": "g"}')
        deadline = time.monotonic() + 10
        while lease.lost is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lease.lost and "another run took it" in lease.lost
        layout = Layout(tmp_path / "copy")
        out = layout.root / "x.bin"
        out.parent.mkdir(parents=True)
        out.write_bytes(b"x")
        manifest = StageManifest(stage="x", outputs=[record(out, layout.root)])
        with pytest.raises(DataDirLost):
            Bucket(uri, layout).publish(manifest, lease.check)
    assert "Contents" not in s3.list_objects_v2(Bucket="albor-lock", Prefix="team/v1/manifests/")
    assert b"run G" in s3.get_object(Bucket="albor-lock", Key=key)["Body"].read()  # G's lock is left alone


def _parts(s3, bucket: str, key: str) -> int:
    """The parts an object was uploaded in: its ETag ends in `-<parts>` after a multipart upload."""
    etag = s3.head_object(Bucket=bucket, Key=key)["ETag"].strip('"')
    return int(etag.rsplit("-", 1)[1]) if "-" in etag else 1


@pytest.mark.parametrize("parts", [1, 3], ids=["one-put", "multipart"])
def test_an_object_overwritten_with_its_metadata_copied_is_uploaded_again(s3, tmp_path, monkeypatch, parts):
    """Sync and restore tools copy an object's metadata onto whatever bytes they write, so a
    record of the SHA-256 in `x-amz-meta-sha256` proves nothing: a publish checks the
    server's own SHA-256 checksum. Before, other bytes under the original's metadata (with
    or without a checksum of their own) counted as sealed and were never replaced."""
    monkeypatch.setattr(bucket_module, "PART_BYTES", 5 << 20)  # S3's smallest part
    s3.create_bucket(Bucket=f"albor-sync-{parts}")
    uri = f"s3://albor-sync-{parts}/v1"
    layout = Layout(tmp_path / "copy")
    src = layout.root / "corpus" / "shard.bin"
    src.parent.mkdir(parents=True)
    src.write_bytes(bytes(range(256)) * ((2 * (5 << 20) + 1000) // 256 if parts > 1 else 4))
    art = record(src, layout.root)
    bucket = Bucket(uri, layout)
    bucket_name, key = bucket.object_key(art.sha256).split("/", 1)
    assert bucket.upload(src, art) == art.bytes
    assert _parts(s3, bucket_name, key) == parts
    assert bucket.upload(src, art) == 0  # sealed: nothing sent
    for checksum in ({}, {"ChecksumAlgorithm": "SHA256"}):  # the tool checksums its own bytes, or not
        head = s3.head_object(Bucket=bucket_name, Key=key)
        corrupt = bytearray(src.read_bytes())
        corrupt[len(corrupt) // 2] ^= 0xFF
        metadata = {**head["Metadata"], "sha256": art.sha256}  # as this package once recorded it
        s3.put_object(Bucket=bucket_name, Key=key, Body=bytes(corrupt), Metadata=metadata, **checksum)
        assert bucket.upload(src, art) == art.bytes, checksum
        assert _parts(s3, bucket_name, key) == parts, checksum
        assert s3.get_object(Bucket=bucket_name, Key=key)["Body"].read() == src.read_bytes()
        assert bucket.upload(src, art) == 0


def _flip_a_byte(client: Any, bucket: str, key: str) -> None:
    body = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    body[len(body) // 2] ^= 0xFF
    client.put_object(Bucket=bucket, Key=key, Body=bytes(body))  # same size, as a hand edit leaves it


def test_a_corrupted_object_in_a_bucket_is_replaced_by_the_next_run(s3, tmp_path, make_spec, monkeypatch, capsys):
    """A byte flipped in `fim/train`'s first shard (same size): `albor verify` names it, and the
    next run of the stage, from the same working copy or a fresh one, uploads it again, so
    verify passes. Before, a publish skipped any object of the right name and size."""
    spec = make_spec()
    uri = run_into_bucket(s3, tmp_path, tmp_path / "spec.yaml", monkeypatch, "albor-heal", "team/v1")
    shard = next(
        a
        for a in read_manifest(Layout(tmp_path / "work"), "fim/train").outputs
        if a.path.endswith("part-00000-0000.parquet")
    )
    key = f"team/v1/objects/{shard.sha256[:2]}/{shard.sha256}"
    head = s3.head_object(Bucket="albor-heal", Key=key, ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == server_checksum(tmp_path / "work" / shard.path, shard)
    fim_train = dg.AssetKey(["fim", "train"])
    for copy in ("work", "fresh"):
        _flip_a_byte(s3, "albor-heal", key)
        capsys.readouterr()
        assert albor(["verify", "--data-dir", uri]) == 1
        assert f"CHANGED: {shard.path}" in capsys.readouterr().err
        monkeypatch.setenv("ALBOR_WORK_DIR", str(tmp_path / copy))
        assert (
            build_definitions(spec, uri)
            .resolve_job_def(BUILD_JOB)
            .execute_in_process(asset_selection=[fim_train])
            .success
        )
        assert albor(["verify", "--data-dir", uri]) == 0, copy
        assert " 0 failed, 0 stale stage(s)" in capsys.readouterr().err

    # Another object's bytes copied over it, with its checksum.
    bucket, src = Bucket(uri, Layout(tmp_path / "fresh")), tmp_path / "fresh" / shard.path
    assert bucket.upload(src, shard) == 0  # sealed: one HEAD, nothing sent
    body = bytearray(src.read_bytes())
    body[0] ^= 0xFF
    s3.put_object(Bucket="albor-heal", Key=key, Body=bytes(body), ChecksumAlgorithm="SHA256")
    assert bucket.upload(src, shard) == shard.bytes
    assert s3.get_object(Bucket="albor-heal", Key=key)["Body"].read() == src.read_bytes()


def test_a_web_source_in_a_bucket_ingests_to_the_same_bytes_as_on_disk(s3, tmp_path):
    """The shipped crawl uploaded as-is: its WARC files are read through the bucket (opened
    for random access: FastWARC asks where it is), and the documents, pages and ledger equal
    the local source's."""
    sample = REPO_ROOT / "data" / "samples" / "web"
    s3.create_bucket(Bucket="albor-web")
    for path in sorted(sample.glob("*.warc.gz")):
        s3.put_object(Bucket="albor-web", Key=f"crawl/{path.name}", Body=path.read_bytes())
    expected = ingest_source(SourceSpec(name="w", kind="web", path=sample), tmp_path / "local", StageIO(tmp_path))
    remote = SourceSpec(name="w", kind="web", path="s3://albor-web/crawl")
    got = ingest_source(remote, tmp_path / "inline", StageIO(tmp_path, INLINE))
    assert [a.sha256 for a in got.artifacts] == [a.sha256 for a in expected.artifacts]
    assert got.summary.skipped == expected.summary.skipped and got.summary.documents > 200

"""Execution backends: per-shard work inline, on a local process pool and on a real Ray
cluster (started here on loopback with 2 CPUs) gives byte-identical artifacts."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from albor_pipeline.cli import main as albor
from albor_pipeline.definitions import build_definitions
from albor_pipeline.defs.automation import BUILD_JOB
from albor_pipeline.runtime import executor as executor_module
from albor_pipeline.runtime.artifacts import Artifact, iter_manifests, read_manifest, record
from albor_pipeline.runtime.bucket import Bucket
from albor_pipeline.runtime.executor import (
    INLINE,
    InlineExecutor,
    LocalExecutor,
    RayExecutor,
    TaskError,
    make_executor,
)
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.nodes import CACHE, NODE_FILE, Node, NodeError
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.shards import shard_files
from albor_pipeline.spec import (
    CorpusSpec,
    ExecutionSpec,
    FimSpec,
    HoldoutSpec,
    HygieneSpec,
    NearDedupSpec,
    SourceSpec,
    SpecError,
    SplitMixSpec,
    load_spec,
)
from albor_pipeline.stages.corpus.checks import check_min_chars
from albor_pipeline.stages.corpus.corpus import build_corpus
from albor_pipeline.stages.corpus.lineage import DOCUMENTS as DOCUMENT_TABLE
from albor_pipeline.stages.corpus.lineage import FATES, PIECES
from albor_pipeline.stages.documents import documents
from albor_pipeline.stages.documents.checks import check_no_near_leak
from albor_pipeline.stages.documents.documents import build_documents, signature_file
from albor_pipeline.stages.fim.fim import apply_fim
from albor_pipeline.stages.hygiene.hygiene import clean_source
from albor_pipeline.stages.ingest.ingest import ingest_source
from albor_pipeline.stages.mix.mix import mix_documents
from albor_pipeline.text.ledger import is_ledger, is_side
from albor_pipeline_tests.support import (
    STDLIB,
    STDLIB_PACKAGES,
    free_port,
    materialize_all,
    small_spec_dict,
    write_spec,
)

# Loopback only: Ray otherwise swaps 127.0.0.1 for the machine's address (read at import).
# Token auth with this session's own token, for the head, this process and the runs' local
# Rays alike (Ray otherwise turns auth on when ~/.ray/auth_token exists, which a first local
# Ray writes, and a later head and driver can disagree about it).
RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "token",
    "RAY_AUTH_TOKEN": secrets.token_hex(32),
}
os.environ.update(RAY_ENV)
ray = pytest.importorskip("ray", reason="the [ray] extra is not installed")


@pytest.fixture(scope="module")
def ray_head():
    """A real Ray head on 127.0.0.1 with 2 CPUs (its own temp dir: socket paths stay short);
    this process joins it, as a Dagster run with `execution.address` does. Its teardown's
    `ray stop --force` ends every Ray process of the machine: `make test` (`--dist loadfile`)
    runs this module's tests in one test process, so no other test's cluster is running."""
    temp = Path(f"/tmp/albor-ray-{os.getpid()}")
    port = free_port()
    ray_bin = str(Path(sys.executable).parent / "ray")
    env = {**os.environ, **RAY_ENV}
    head = [ray_bin, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2"]
    subprocess.run(
        [*head, "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"],
        check=True,
        env=env,
        capture_output=True,
    )
    address = f"127.0.0.1:{port}"
    try:
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        subprocess.run([ray_bin, "stop", "--force"], env=env, capture_output=True)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def joined(ray_head):
    ray.init(address=ray_head, log_to_driver=False)
    yield ray_head
    ray.shutdown()


def _first_line(path: str) -> str:
    """A per-shard step over real files: the first line of a stdlib module."""
    return Path(path).read_text(encoding="utf-8").splitlines()[0]


def test_every_backend_keeps_input_order_reports_progress_and_names_a_failed_item(joined, tmp_path, monkeypatch):
    files = [str(p) for p in sorted((STDLIB / "json").glob("*.py"))] + [str(STDLIB / "textwrap.py")]
    expected = [_first_line(f) for f in files]
    monkeypatch.setattr(executor_module, "PROGRESS_SECONDS", 0.0)  # a line per task collected
    for executor in (InlineExecutor(print), LocalExecutor(2, print), RayExecutor(2, progress=print)):
        told: list[str] = []
        executor.progress = told.append
        assert list(executor.map(_first_line, files)) == expected, executor.name
        n = len(files)
        assert told == [f"_first_line: {k}/{n} tasks done ({executor.name})" for k in range(1, n + 1)]
    bad = tmp_path / "latin1.py"
    bad.write_bytes("# caf\xe9\n".encode("latin-1"))
    for executor in (LocalExecutor(2), RayExecutor(2)):
        with pytest.raises(TaskError, match=rf"_first_line failed on '{bad}' \({executor.name}\): UnicodeDecodeError"):
            list(executor.map(_first_line, [*files, str(bad)]))


def test_every_per_shard_stage_is_byte_identical_on_every_backend_and_worker_count(
    joined, pipeline, run_pool, tmp_path, monkeypatch
):
    """Ingest (shards of file groups), hygiene (a shard each), documents (row groups), FIM and
    corpus encoding (row groups) on real stdlib code cut into many tasks: inline, 2 and 4
    local processes, 1, 2 and 4 Ray workers all write the same bytes."""
    monkeypatch.setattr(documents, "SCAN_MIN_GROUPS", 2)
    src = SourceSpec(name="s", kind="code", path=STDLIB, include=("*.py", *(f"{p}/**/*.py" for p in STDLIB_PACKAGES)))
    corpus_tmp, _ = pipeline
    fim_in, tok = tmp_path / "fim_in.parquet", corpus_tmp / "tok" / "tokenizer.json"
    pq.write_table(pq.read_table(corpus_tmp / "fim"), fim_in, row_group_size=7)  # many row groups
    executors = {
        "inline": INLINE,
        "local2": LocalExecutor(2, pool=run_pool(2)),
        "local4": LocalExecutor(4, pool=run_pool(4)),
        "ray1": RayExecutor(1),
        "ray2": RayExecutor(2),
        "ray4": RayExecutor(4),
    }
    outputs: dict[str, list[object]] = {}
    for name, ex in executors.items():
        ingested = ingest_source(src, tmp_path / f"i_{name}", StageIO(tmp_path, ex), shard_mb=0.5)
        cleaned = clean_source(tmp_path / f"i_{name}", HygieneSpec(), tmp_path / f"h_{name}", StageIO(tmp_path, ex))
        docs = build_documents(
            [("s", shard) for shard in shard_files(tmp_path / f"h_{name}")],
            HoldoutSpec(),
            tmp_path / f"d_{name}",
            StageIO(tmp_path, ex),
            near=NearDedupSpec(threshold=0.5),
        )
        mixed = mix_documents(
            tmp_path / f"d_{name}" / "train",
            SplitMixSpec(),
            ["s"],
            tmp_path / f"m_{name}",
            StageIO(tmp_path, ex),
            shard_mb=0.2,
        )
        fimmed = apply_fim(tmp_path / f"m_{name}", FimSpec(rate=0.5), tmp_path / f"f_{name}", StageIO(tmp_path, ex))
        corpus = build_corpus(fim_in, tok, CorpusSpec(seq_len=100), tmp_path / f"c_{name}", StageIO(tmp_path, ex))
        outputs[name] = [
            [a.sha256 for a in ingested.artifacts],
            ingested.summary.skipped,
            [a.sha256 for a in cleaned.artifacts],
            cleaned.summary.findings,
            [a.sha256 for split in docs.artifacts.values() for a in split],
            docs.summary.near_duplicates,
            [a.sha256 for a in mixed.artifacts],
            [a.sha256 for a in fimmed.artifacts],
            (fimmed.summary.transformed, fimmed.text_bytes),
            [a.sha256 for a in corpus.artifacts],
        ]
    assert len(outputs["inline"][0]) >= 4  # ingest and hygiene had several tasks
    assert len(outputs["inline"][6]) >= 4  # so did the mix's scatter and gather, and FIM
    assert all(out == outputs["inline"] for out in outputs.values()), outputs
    assert outputs["inline"][3].get("E-mail", 0) > 0  # the email package's authors: real work was done
    assert outputs["inline"][5].candidate_pairs > 0  # near dedup compared documents


@pytest.fixture(scope="module")
def far_ray(s3, tmp_path_factory):
    """A Ray cluster on loopback whose CPUs are all on a second node with its own work dir
    (`ALBOR_WORK_DIR`), as on another machine: the head has none, so every task runs there.
    Its nodes start after the S3 server, with its settings, as a remote machine's would be
    configured; started once for the module. Yields (address, the second node's work dir)."""
    from ray.cluster_utils import Cluster

    home = tmp_path_factory.mktemp("far") / "node-b"
    head = {"num_cpus": 0, "node_ip_address": "127.0.0.1", "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    try:
        cluster.add_node(num_cpus=2, node_ip_address="127.0.0.1", env_vars={"ALBOR_WORK_DIR": str(home)})
        yield cluster.address, home
    finally:
        cluster.shutdown()


@pytest.fixture
def far_cluster(far_ray):
    """`far_ray` with nothing in its second node's work dir, as on a machine new to each test."""
    address, home = far_ray
    shutil.rmtree(home, ignore_errors=True)
    return address, home


@pytest.fixture
def far_node(far_cluster):
    """`far_cluster`, joined by this process; yields the second node's work dir."""
    address, home = far_cluster
    ray.init(address=address, log_to_driver=False)
    try:
        yield home
    finally:
        ray.shutdown()


def _files(root: Path, *dirs: str) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for d in dirs
        for p in sorted((root / d).rglob("*"))
        if p.is_file()
    }


def _chain(src: SourceSpec, tok: Artifact, root: Path, executor_for, checks: list) -> list[list]:
    """Every per-shard stage and the fan-out checks, each stage's tasks on `executor_for(its inputs)`."""
    checks.clear()
    ingested = ingest_source(src, root / "ingested/s", StageIO(root, executor_for({})), shard_mb=0.1).artifacts
    filtered = clean_source(
        root / "ingested/s", HygieneSpec(), root / "filtered/s", StageIO(root, executor_for({"i": ingested}))
    ).artifacts
    documents = build_documents(
        [("s", shard) for shard in shard_files(root / "filtered/s")],
        HoldoutSpec(),
        root / "documents",
        StageIO(root, executor_for({"f": filtered})),
        near=NearDedupSpec(threshold=0.5),
    )
    split = [a for arts in documents.artifacts.values() for a in arts]
    checks.append(documents.summary.near_duplicates)
    checks.append(
        check_no_near_leak(
            {s: root / "documents" / s for s in ("train", "val", "test")},
            5,
            112,
            14,
            0.5,
            executor_for({"d": split}),
            root / "documents",
            stored=lambda shard: shard.parent.parent / signature_file(f"{shard.parent.name}/{shard.name}"),
        )
    )
    mixed = mix_documents(
        root / "documents/train",
        SplitMixSpec(),
        ["s"],
        root / "mixed/train",
        StageIO(root, executor_for({"d": split})),
        shard_mb=0.1,
    ).artifacts
    fim = apply_fim(
        root / "mixed/train", FimSpec(), root / "fim/train", StageIO(root, executor_for({"m": mixed}))
    ).artifacts
    corpus = build_corpus(
        root / "fim/train",
        root / "tokenizer/tokenizer.json",
        CorpusSpec(seq_len=64, shard_sequences=40),
        root / "corpus/train",
        StageIO(root, executor_for({"f": fim, "t": [tok]})),
    ).artifacts
    shards = [root / a.path for a in corpus if a.path.endswith(".parquet") and not is_ledger(a.path)]
    checks.append(check_min_chars(shards, root / tok.path, 50, executor_for({"c": corpus, "t": [tok]})))
    return [ingested, filtered, split, mixed, fim, corpus]


def test_tasks_on_a_node_without_the_working_copy_read_and_write_through_the_bucket(s3, far_node, pipeline, tmp_path):
    """Ingest, hygiene, documents (exact and near dedup), the mix's shuffle, FIM, the corpus
    (encoding, packing) and the checks that fan out (near leaks, min chars) on a node
    that does not share the run's working copy (no token file at the run's path there): each
    task fetches its inputs from the bucket into the node's cache by SHA-256 and uploads its
    shards and spool files (keys, signatures, shingles, scatter, token ids) as objects; the
    run lands the shards in its staging directory and the token files in its spool; the sets
    equal an inline run's byte for byte. A task there reading a file its stage did not
    record is refused."""
    s3.create_bucket(Bucket="albor-nodes")
    uri, run, local = "s3://albor-nodes/team", tmp_path / "run", tmp_path / "local"
    code = tmp_path / "code"  # real code, plus near-duplicates of three files for near dedup
    for pkg in ("json", "email"):
        shutil.copytree(STDLIB / pkg, code / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("decoder", "encoder", "scanner"):
        text = (code / "json" / f"{name}.py").read_text()
        (code / "json" / f"{name}_copy.py").write_text(text + "\n# vendored copy\n")
    src = SourceSpec(name="s", kind="code", path=code, include=("json/*.py", "email/*.py"))
    tokenizer = pipeline[0] / "tok" / "tokenizer.json"
    for root in (run, local):
        (root / "tokenizer").mkdir(parents=True)
        shutil.copy(tokenizer, root / "tokenizer" / "tokenizer.json")
    tok = record(run / "tokenizer" / "tokenizer.json", run)
    Bucket(uri, Layout(run)).upload(run / tok.path, tok)  # as the tokenizer stage published it

    checks: list = []
    far = _chain(src, tok, run, lambda inputs: RayExecutor(2, node=Node.of(run, uri, "run-1", inputs)), checks)
    far_checks = list(checks)
    assert _chain(src, tok, local, lambda _: INLINE, checks) == far and checks == far_checks
    assert min(len(far[0]), len(far[1]), len(far[4])) > 3 and len(far[5]) > 8  # many tasks
    near, leaks, long = far_checks
    assert near.candidate_pairs > 0 and leaks.passed and leaks.metadata["documents"] > 0
    assert (
        leaks.metadata["stored_signatures"] == len([a for a in far[2] if not is_ledger(a.path)]) // 2
    )  # read on the far node: each split shard's
    assert long.metadata["documents"] > 0
    sets = ("ingested/s", "filtered/s", *(f"documents/{s}" for s in ("train", "val", "test")), "mixed/train")
    sets += ("fim/train", "corpus/train")
    assert _files(run, *sets) == _files(local, *sets)

    # Node B fetched the stages' inputs and the spool files other tasks sent through the
    # bucket (dedup keys, signatures, band keys, shingles, scatter files, the corpus's plan
    # and token files), kept no output, and the bucket holds every shard as the object the
    # stage will publish.
    cached = {p.name.split(".")[0] for p in (far_node / CACHE).rglob("*") if p.is_file()}
    inputs = {a.sha256 for a in [*far[0], *far[1], *far[2], *far[3], *far[4], tok] if not is_side(a.path)}
    objects = set(Bucket(uri, Layout(run)).objects())
    spooled = cached - inputs
    fim_groups = sum(pq.ParquetFile(run / a.path).num_row_groups for a in far[4])
    filtered = [a for a in far[1] if not is_side(a.path)]  # its documents (not their ledger or signals)
    assert inputs < cached and spooled <= objects and len(spooled) > fim_groups + len(filtered)
    assert not [p for p in far_node.rglob("*") if p.is_file() and CACHE not in p.parts]
    tasks_wrote = {
        a.sha256
        for arts in far
        for a in arts
        if a.path.endswith(".parquet") and not a.path.endswith((PIECES, DOCUMENT_TABLE, FATES))
    }
    assert tasks_wrote <= objects  # the corpus's ledger (pieces, documents, fates) is written by the stage

    # On a node that does not share it, a task reads only its stage's recorded inputs.
    unrecorded = RayExecutor(2, node=Node.of(run, uri, "run-3", {}))
    with pytest.raises(NodeError, match=r"ingested/s/part-00000-0000.parquet: this node .*node-b.* recorded inputs"):
        clean_source(run / "ingested/s", HygieneSpec(), run / "filtered/u", StageIO(run, unrecorded))
    assert not (run / "filtered/u").exists()


@pytest.mark.slow
@pytest.mark.graph
def test_the_whole_graph_into_a_bucket_with_every_task_on_a_node_without_the_working_copy(
    s3, far_cluster, reference, tmp_path, monkeypatch, capsys
):
    """The whole default-shaped graph, its data dir in a bucket and `execution` pointing at a
    cluster whose only CPUs are on a node that does not share the run's working copy: every
    per-shard task ran there, reading and writing through the bucket, and the bucket's
    manifests equal a local data dir's (the session's reference build) byte for byte;
    `albor verify` passes against it."""
    address, home = far_cluster
    s3.create_bucket(Bucket="albor-far")
    uri = "s3://albor-far/team"
    monkeypatch.setenv("ALBOR_WORK_DIR", str(tmp_path / "work"))
    spec = load_spec(write_spec(tmp_path / "spec.yaml", small_spec_dict()))
    config = {"backend": "ray", "address": address, "workers": 2}
    with dg.DagsterInstance.ephemeral() as instance:
        job = build_definitions(spec, uri).resolve_job_def(BUILD_JOB)
        result = job.execute_in_process(instance=instance, run_config={"resources": {"execution": {"config": config}}})
        messages = [entry.user_message for entry in instance.all_logs(result.run_id)]
    assert result.success and any(f"per-shard tasks run on {address}" in m for m in messages)

    local = Layout(reference.out)
    bucket = Bucket(uri, Layout(tmp_path / "work"))
    assert [m.model_dump() for m in bucket.manifests()] == [m.model_dump() for m in iter_manifests(local)]
    assert albor(["verify", "--data-dir", uri]) == 0
    assert " 0 failed, 0 stale stage(s)" in capsys.readouterr().err
    # The far node read every per-shard stage's inputs from its own cache: the ingested shards
    # (hygiene), the FIM shards (the corpus) and the corpus shards (its checks), among others.
    cached = {p.name.split(".")[0] for p in (home / CACHE).rglob("*") if p.is_file()}
    for stage in ("ingested/stdlib_json_email", "fim/train", "corpus/train"):
        shards = [
            a.sha256
            for a in read_manifest(local, stage).outputs
            if a.path.endswith(".parquet") and not is_ledger(a.path)
        ]
        assert shards and set(shards) <= cached, stage


def test_a_node_works_in_place_only_in_the_run_s_own_copy(tmp_path, monkeypatch):
    """A node's work dir is `$ALBOR_WORK_DIR`, else the run's copy's path; it works in place
    only when that is the run's copy and holds this run's token (the same machine, or a
    mount); elsewhere its directory is its own, filled from the bucket. Without a bucket
    every node shares the data dir."""
    run = tmp_path / "run"
    run.mkdir()
    (run / NODE_FILE).write_text("run-1")
    node = Node(str(run), "s3://b/p", "run-1")
    monkeypatch.delenv("ALBOR_WORK_DIR", raising=False)
    assert node.shared()  # the run's machine: its copy's path, its token
    assert not Node(str(run), "s3://b/p", "run-0").shared()  # an earlier run's token
    assert not Node(str(tmp_path / "elsewhere"), "s3://b/p", "run-1").shared()  # the path is not there
    monkeypatch.setenv("ALBOR_WORK_DIR", str(tmp_path / "node-b"))
    assert not node.shared()  # the node's own work dir
    assert node.directory(run / "mixed/.staging") == tmp_path / "node-b/mixed/.staging"
    monkeypatch.setenv("ALBOR_WORK_DIR", str(run))
    assert node.shared() and node.directory(run / "x") == run / "x"
    assert Node(str(tmp_path / "elsewhere")).shared()  # no bucket: a shared data dir


def test_execution_spec_rules():
    assert make_executor(ExecutionSpec(workers=1)).name == INLINE.name
    assert isinstance(make_executor(ExecutionSpec(backend="ray", workers=2)), RayExecutor)
    with pytest.raises(ValueError, match=r"execution\.address is for backend: ray"):
        ExecutionSpec(address="127.0.0.1:6379")


@pytest.mark.slow
@pytest.mark.graph
def test_graph_on_ray_equals_the_local_graph(ray_head, reference, tmp_path):
    """The whole default-shaped graph with its per-shard work on the Ray cluster (set through
    the launchpad's resource config, as a user would) equals the local build (the session's
    reference), byte for byte, and the run log says where tasks ran."""
    spec = load_spec(write_spec(tmp_path / "spec.yaml", small_spec_dict()))
    ray_config = {"backend": "ray", "address": ray_head, "workers": 2}
    with dg.DagsterInstance.ephemeral() as instance:
        result = materialize_all(
            spec, tmp_path / "ray", instance, run_config={"resources": {"execution": {"config": ray_config}}}
        )
        messages = [entry.user_message for entry in instance.all_logs(result.run_id)]
    local = (reference.out / "provenance.json").read_bytes()
    assert (tmp_path / "ray" / "provenance.json").read_bytes() == local
    assert any(f"per-shard tasks run on {ray_head}" in m for m in messages)
    assert not ray.is_initialized()  # the run disconnected at its end


@pytest.mark.slow
@pytest.mark.graph
def test_without_an_address_the_run_starts_and_stops_its_own_local_ray(reference, tmp_path):
    """`backend: ray` with no address: the run starts a local Ray with `workers` CPUs the
    first time a stage fans out, and shuts it down at the end; the bytes equal local's (the
    session's reference build of the same spec)."""
    raw = small_spec_dict()
    ray_spec = load_spec(write_spec(tmp_path / "ray.yaml", {**raw, "execution": {"backend": "ray", "workers": 2}}))
    selection = [dg.AssetKey(["ingested", s["name"]]) for s in raw["sources"]]
    selection += [dg.AssetKey(["filtered", s["name"]]) for s in raw["sources"]]
    job = build_definitions(ray_spec, tmp_path / "ray").resolve_job_def(BUILD_JOB)
    with dg.DagsterInstance.ephemeral() as instance:
        result = job.execute_in_process(instance=instance, asset_selection=selection)
        assert result.success
        messages = [entry.user_message for entry in instance.all_logs(result.run_id)]
    assert any("per-shard tasks run on a local Ray with 2 CPUs" in m for m in messages)
    assert not ray.is_initialized()
    digests = {
        name: sorted(p.read_bytes() for p in (root / "filtered").glob("*/part-*.parquet"))
        for name, root in (("local", reference.out), ("ray", tmp_path / "ray"))
    }
    assert digests["ray"] == digests["local"] and len(digests["local"]) == 2


LOCAL_RAY = """
import os, sys, time
import dagster as dg
from albor_pipeline.defs.ray import run_ray
from albor_pipeline.spec import ExecutionSpec
with run_ray(ExecutionSpec(backend="ray", workers=1), dg.build_init_resource_context()):
    print("connected", os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"), flush=True)  # set only for ray.init
    time.sleep(120)
"""


@pytest.mark.slow
def test_a_run_s_local_ray_listens_on_loopback_and_its_agent_s_death_is_named(tmp_path):
    """The local Ray a run starts (no `execution.address`) listened on every interface, and
    when its dashboard agent died the raylet went with it and took the run process down
    (exit 1) without a word. Now every Ray server listens on 127.0.0.1 only (Ray's switch set
    in the environment only while Ray starts), and the death is logged, naming the process,
    before Ray ends the run."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    err = tmp_path / "err.log"
    with open(err, "w") as log:
        command = [sys.executable, "-c", LOCAL_RAY]
        run = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    tree: set[int] = set()
    try:
        assert run.stdout is not None and run.stdout.readline() == "connected None\n", err.read_text()[-2000:]
        tree = _descendants(run.pid)
        listening = _listening(tree | {run.pid})
        assert listening and all(map(_loopback, listening)), listening
        agent = next(pid for pid in tree if _command(pid) == "ray::DashboardAgent")
        os.kill(agent, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while "died" not in err.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert f"Ray's dashboard agent (pid {agent}) died" in err.read_text(), err.read_text()[-2000:]
    finally:
        run.terminate()  # Ray's SIGTERM handler exits, and its exit ends the local Ray
        with contextlib.suppress(subprocess.TimeoutExpired):
            run.wait(30)
        for pid in [run.pid, *tree]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        run.wait()


def _descendants(root: int) -> set[int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    tree, todo = set(), [root]
    while todo:
        parent = todo.pop()
        for pid in (p for p, pp in parents.items() if pp == parent):
            tree.add(pid)
            todo.append(pid)
    return tree


def _command(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    return ""


def _listening(pids: set[int]) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The addresses the TCP sockets of `pids` listen on (`/proc/net/tcp*`: 32-bit words in
    host order)."""
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    if (target := os.readlink(fd)).startswith("socket:["):
                        inodes.add(target[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                word = fields[1].split(":")[0]
                found.append(
                    ipaddress.ip_address(b"".join(bytes.fromhex(word[i : i + 8])[::-1] for i in range(0, len(word), 8)))
                )
    return found


def _loopback(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def test_a_bad_launchpad_backend_fails_before_any_stage(tmp_path):
    spec = load_spec(write_spec(tmp_path / "spec.yaml", small_spec_dict()))
    bad = {"resources": {"execution": {"config": {"backend": "spark"}}}}
    with pytest.raises(dg.DagsterResourceFunctionError) as failed:
        materialize_all(spec, tmp_path / "out", run_config=bad)
    assert isinstance(failed.value.__cause__, SpecError)
    assert "resources.execution: backend: Input should be 'local' or 'ray'" in str(failed.value.__cause__)
    assert not (tmp_path / "out" / "ingested").exists()


def test_a_ray_start_up_that_fails_before_connecting_cleans_up_with_its_own_error():
    """dagster-ray calls `cleanup` when start-up fails (e.g. `ray.init` twice in a process);
    before anything is watched, cleanup must leave that error to surface, not raise its own."""
    from dagster_ray.configs import Lifecycle

    from albor_pipeline.defs.ray import RayCluster

    RayCluster(lifecycle=Lifecycle(cleanup="never")).cleanup(dg.build_init_resource_context(), RuntimeError("init"))

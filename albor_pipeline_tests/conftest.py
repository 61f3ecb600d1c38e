"""Shared fixtures: real Python sources from this machine, small specs, the shared whole-graph
builds, `dagster dev`, an S3 server; and the markers that keep `make test-fast` fast."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from albor_pipeline.runtime.executor import LocalExecutor, WorkerPool
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import FimSpec, PipelineSpec, TokenizerSpec, load_spec
from albor_pipeline.stages.fim.fim import apply_fim
from albor_pipeline.stages.tokenizer.tokenizer import build_tokenizer
from albor_pipeline_tests.support import (
    LITERAL,
    STDLIB,
    Build,
    Server,
    build,
    free_port,
    small_spec_dict,
    start_dagster_dev,
    tiny_spec,
    tree_digest,
    wait_for,
    write_docs,
    write_spec,
)

# Fixtures that start a real server (S3, Ray, PostgreSQL, `dagster dev`): a test using one is
# marked `server`; one using a shared build is marked `graph`. `make test-fast` leaves both out.
SERVER_FIXTURES = {"s3", "dagster_dev", "postgres", "ray_head", "joined", "far_ray", "far_cluster", "far_node"}
BUILD_FIXTURES = {"reference", "tiny_reference"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & SERVER_FIXTURES:
            item.add_marker(pytest.mark.server)
        if used & BUILD_FIXTURES:
            item.add_marker(pytest.mark.graph)


@pytest.fixture(scope="session")
def stdlib_dir() -> Path:
    return STDLIB


@pytest.fixture
def make_spec(tmp_path: Path) -> Callable[..., PipelineSpec]:
    def _make(raw: dict[str, Any] | None = None, name: str = "spec.yaml") -> PipelineSpec:
        return load_spec(write_spec(tmp_path / name, raw or small_spec_dict()))

    return _make


def _shared_build(tmp_path_factory: pytest.TempPathFactory, name: str, raw: dict[str, Any]) -> Iterator[Build]:
    """`raw` built once for the session; at its end the build must be as it was made."""
    built = build(tmp_path_factory.mktemp(name), raw)
    made = tree_digest(built.out)
    yield built
    now = tree_digest(built.out)
    changed = sorted(k for k in made.keys() | now.keys() if made.get(k) != now.get(k))
    assert not changed, f"a test changed the shared build {built.out} (copy it first): {changed[:10]}"


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Build]:
    """`small_spec_dict()` built once, in process: what every test of that spec compares
    against ("equals the local run", "byte-identical"), instead of building it again.
    Read-only: a test that changes a data dir copies it first (`shutil.copytree`)."""
    yield from _shared_build(tmp_path_factory, "reference", small_spec_dict())


@pytest.fixture(scope="session")
def tiny_reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Build]:
    """`tiny_spec()` built once, in process: the committed build the fault tests start from
    (each copies it into its own data dir). Read-only, as `reference`."""
    yield from _shared_build(tmp_path_factory, "tiny", tiny_spec())


@pytest.fixture
def run_pool() -> Iterator[Callable[[int], WorkerPool]]:
    """`run_pool(workers)`: a run's local worker processes, kept for every map they are given
    (`LocalExecutor(workers, pool=...)`), as a run keeps them; closed with the test. A
    `LocalExecutor` without one starts a pool for each map (a second or two each)."""
    pools: list[WorkerPool] = []

    def _pool(workers: int) -> WorkerPool:
        pools.append(WorkerPool(workers))
        return pools[-1]

    yield _pool
    for pool in pools:
        pool.close()


@pytest.fixture(scope="session")
def _session_pool() -> Iterator[WorkerPool]:
    pool = WorkerPool(2)
    yield pool
    pool.close()


@pytest.fixture
def local2(_session_pool: WorkerPool) -> LocalExecutor:
    """Two local worker processes, shared by every test of the session (of each xdist
    process) that only needs "a pool": spawning a pool per map costs a second or two. A
    map that fails ends them and the next map starts new ones, as in a run."""
    return LocalExecutor(2, pool=_session_pool)


@pytest.fixture(scope="module")
def dagster_dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[Path, Path, Path], Server]]:
    """Starts `dagster dev` (spec, DAGSTER_HOME, data dir); every server stops with the module."""
    servers: list[Server] = []

    def _start(spec: Path, home: Path, data: Path) -> Server:
        log = tmp_path_factory.mktemp("dagster_dev") / "dagster_dev.log"
        servers.append(start_dagster_dev(spec, home, data, log))
        return servers[-1]

    yield _start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Tokenizer trained on real stdlib code; FIM'd documents ready to pretokenize."""
    tmp = tmp_path_factory.mktemp("corpus")
    train_texts = [p.read_text(encoding="utf-8") for p in sorted((STDLIB / "asyncio").rglob("*.py"))]
    docs = [p.read_text(encoding="utf-8") for p in sorted((STDLIB / "email").rglob("*.py"))]
    docs += [LITERAL, "<|fim_middle|>" + LITERAL + "</s>", "tiny"]
    train = write_docs(tmp / "train.parquet", train_texts)
    build_tokenizer(
        train, write_docs(tmp / "val.parquet", docs[:5]), TokenizerSpec(vocab_size=1500), tmp / "tok", StageIO(tmp)
    )
    src = write_docs(tmp / "docs.parquet", docs)
    apply_fim(src, FimSpec(rate=0.5, format="mixed", seed=1, min_chars=0), tmp / "fim", StageIO(tmp))
    return tmp, docs


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto's S3 server on loopback; the AWS SDK settings a user would export point at it."""
    boto3 = pytest.importorskip("boto3", reason="moto[server] (test extra) is not installed")
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "albor-test",
        "AWS_SECRET_ACCESS_KEY": "albor-test-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        wait_for(endpoint, 30, proc)
        yield boto3.client("s3", endpoint_url=endpoint)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        proc.terminate()
        proc.wait()

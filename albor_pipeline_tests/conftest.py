"""Shared fixtures: real Python sources from this machine, small specs, `dagster dev`, an S3 server."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import FimSpec, PipelineSpec, TokenizerSpec, load_spec
from albor_pipeline.stages.fim.fim import apply_fim
from albor_pipeline.stages.tokenizer.tokenizer import build_tokenizer

from .support import (
    LITERAL,
    STDLIB,
    Server,
    free_port,
    small_spec_dict,
    start_dagster_dev,
    wait_for,
    write_docs,
    write_spec,
)


@pytest.fixture(scope="session")
def stdlib_dir() -> Path:
    return STDLIB


@pytest.fixture
def make_spec(tmp_path: Path) -> Callable[..., PipelineSpec]:
    def _make(raw: dict[str, Any] | None = None, name: str = "spec.yaml") -> PipelineSpec:
        return load_spec(write_spec(tmp_path / name, raw or small_spec_dict()))

    return _make


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

"""Shared fixtures: real Python sources from this machine, small specs, `dagster dev`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from albor_pipeline.spec import PipelineSpec, load_spec

from .support import STDLIB, Server, small_spec_dict, start_dagster_dev, write_spec


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

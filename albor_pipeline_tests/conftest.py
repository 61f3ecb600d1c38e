"""Shared fixtures: real Python sources from this machine, and small specs over them."""

from __future__ import annotations

import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from albor_pipeline.spec import PipelineSpec, load_spec

STDLIB = Path(sysconfig.get_paths()["stdlib"])
# Real code nobody here wrote: a few standard-library packages, ~1-2 MB of Python.
STDLIB_PACKAGES = ("json", "email", "asyncio", "importlib", "concurrent", "logging", "urllib")


@pytest.fixture(scope="session")
def stdlib_dir() -> Path:
    return STDLIB


def write_spec(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def small_spec_dict(extra_sources: list[dict[str, Any]] | None = None, **overrides: Any) -> dict[str, Any]:
    """A spec over a slice of the stdlib, sized for tests (small vocab, short sequences)."""
    raw: dict[str, Any] = {
        "sources": [
            {
                "name": "stdlib_json_email",
                "kind": "code",
                "path": str(STDLIB),
                "include": [f"{p}/**/*.py" for p in STDLIB_PACKAGES[:2]],
                "exclude": ["**/test*/**"],
            },
            {
                "name": "stdlib_async",
                "kind": "code",
                "path": str(STDLIB),
                "include": [f"{p}/**/*.py" for p in STDLIB_PACKAGES[2:]],
                "exclude": ["**/test*/**"],
            },
            *(extra_sources or []),
        ],
        "holdout": {"val_fraction": 0.1, "test_fraction": 0.05, "seed": 0},
        "mix": {
            "train": {"seed": 42},
            "val": {"seed": 123, "rows": 40, "upsample": False},
            "test": {"seed": 456, "rows": 20, "upsample": False},
        },
        "tokenizer": {"vocab_size": 1024},
        "corpus": {"seq_len": 256, "formats": ["parquet", "megatron", "nanogpt"]},
    }
    for key, value in overrides.items():
        raw[key] = value
    return raw


@pytest.fixture
def make_spec(tmp_path: Path) -> Callable[..., PipelineSpec]:
    def _make(raw: dict[str, Any] | None = None, name: str = "spec.yaml") -> PipelineSpec:
        return load_spec(write_spec(tmp_path / name, raw or small_spec_dict()))

    return _make


def materialize_all(
    spec: PipelineSpec,
    out: Path,
    instance: dg.DagsterInstance | None = None,
    run_config: dict | None = None,
    raise_on_error: bool = True,
) -> dg.ExecuteInProcessResult:
    """Run the build job (every stage and its checks) of `spec` into `out`, in process."""
    from albor_pipeline.definitions import BUILD_JOB, build_definitions

    job = build_definitions(spec, out).resolve_job_def(BUILD_JOB)
    result = job.execute_in_process(instance=instance, run_config=run_config or {}, raise_on_error=raise_on_error)
    assert result.success or not raise_on_error
    return result

"""One way to declare a stage asset and one way to finish it (manifest, metadata, DataVersion)."""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import dagster as dg

from albor_pipeline.core.artifacts import Artifact, StageManifest, check_recorded, read_manifest, write_manifest
from albor_pipeline.defs.automation import on_upstream_change

CODE_VERSION = "1"

LIBRARIES = ("albor-pipeline", "dagster", "polars", "pyarrow", "tokenizers", "tiktoken", "numpy", "pydantic")


def stage_asset(
    key: dg.AssetKey,
    deps: list[dg.AssetKey],
    group: str,
    description: str,
    kinds: tuple[str, ...] = ("parquet",),
    automated: bool = True,
) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """`@dg.asset` with the house defaults: code version, kinds, rebuild on upstream data change."""
    return dg.asset(
        key=key,
        deps=deps,
        group_name=group,
        description=description,
        code_version=CODE_VERSION,
        kinds=set(kinds),
        automation_condition=on_upstream_change() if automated else None,
    )


def library_versions() -> dict[str, str]:
    versions = {}
    for lib in LIBRARIES:
        try:
            versions[lib] = importlib_metadata.version(lib)
        except importlib_metadata.PackageNotFoundError:
            versions[lib] = "not installed"
    return versions


def stage_name(key: dg.AssetKey) -> str:
    return "/".join(key.path)


def upstream_outputs(root: Path, *stages: str, suffix: str = "") -> list[Artifact]:
    """Input artifacts (paths ending in `suffix`) as their producers recorded them,
    checked against the files on disk. Call it before reading the inputs."""
    arts = [a for stage in stages for a in read_manifest(root, stage).outputs if a.path.endswith(suffix)]
    return check_recorded(root, arts)


def outputs_table(artifacts: list[Artifact]) -> dg.MetadataValue:
    return dg.MetadataValue.table(
        records=[
            dg.TableRecord({"path": a.path, "sha256": a.sha256, "bytes": a.bytes, "rows": a.rows or 0})
            for a in artifacts
        ],
        schema=dg.TableSchema(
            columns=[
                dg.TableColumn("path", "string"),
                dg.TableColumn("sha256", "string"),
                dg.TableColumn("bytes", "int"),
                dg.TableColumn("rows", "int"),
            ]
        ),
    )


def finish_stage(
    context: dg.AssetExecutionContext,
    root: Path,
    outputs: list[Artifact],
    inputs: list[Artifact],
    config: dict[str, Any],
    summary: dict[str, Any],
    extra: dict[str, Any] | None = None,
    row_count: int | None = None,
) -> dg.MaterializeResult:
    """Record the manifest (deterministic facts only) and build the materialization."""
    stage = stage_name(context.asset_key)
    manifest = StageManifest(stage=stage, outputs=outputs, inputs=inputs, config=config, summary=summary)
    write_manifest(root, manifest)
    rows = row_count if row_count is not None else sum(a.rows or 0 for a in outputs)
    meta: dict[str, Any] = {
        "dagster/row_count": rows,
        "dagster/uri": dg.MetadataValue.path(
            str(root / outputs[0].path) if len(outputs) == 1 else str((root / outputs[0].path).parent)
        ),
        "sha256": outputs[0].sha256 if len(outputs) == 1 else manifest.data_version,
        "bytes": sum(a.bytes for a in outputs),
        "outputs": outputs_table(outputs),
        "inputs": dg.MetadataValue.json({a.path: a.sha256 for a in inputs}),
        "config": dg.MetadataValue.json(json.loads(json.dumps(config, default=str))),
        "versions": dg.MetadataValue.json(library_versions()),
        **(extra or {}),
    }
    return dg.MaterializeResult(metadata=meta, data_version=dg.DataVersion(manifest.data_version))

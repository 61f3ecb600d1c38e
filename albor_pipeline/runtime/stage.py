"""Running one stage: verify its inputs, do the work, record the manifest.

Every stage, provenance included, goes through `run_stage`, so "what a stage read"
and "what it wrote" mean the same thing everywhere: lineage in the manifests,
`albor verify`, and the metadata the Dagster layer shows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from albor_pipeline.runtime.artifacts import (
    Artifact,
    StageManifest,
    check_recorded,
    json_bytes,
    read_manifest,
    reserved_write,
)
from albor_pipeline.runtime.commit import Journal, journaled, recover_journal
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.memory import release_memory
from albor_pipeline.runtime.report import Report
from albor_pipeline.runtime.taskstore import session

Progress = Callable[[str], None]
"""Receives human progress lines (rows, MB, rate) from long stages."""


@dataclass
class StageOutput:
    """What a stage's work returns: its files and the facts worth keeping."""

    artifacts: list[Artifact]
    config: dict[str, Any]  # the resolved settings, as JSON
    summary: Report | None = None  # deterministic facts, typed by the stage: manifest and provenance
    metadata: dict[str, Any] = field(default_factory=dict)  # extra facts for people (may vary run to run)
    inputs: list[Artifact] = field(default_factory=list)  # inputs that are no stage's outputs (a source)
    row_count: int | None = None  # default: the outputs' rows


MANIFEST_ROOM = 1 << 20  # disk taken for a stage's manifest before its work starts


class StageIOError(OSError):
    """An I/O failure (full disk, unreadable input) in a stage; the message names the stage."""


Inputs = Mapping[str, list[Artifact]]
"""Each upstream stage's outputs, as it recorded them and checked against the files."""


Fetch = Callable[[list[Artifact]], object]
"""Brings recorded files the working copy lacks from where the data dir lives (`runtime/bucket.py`)."""


def verified_inputs(layout: Layout, stages: Sequence[str], fetch: Fetch | None = None) -> dict[str, list[Artifact]]:
    """The recorded outputs of `stages`, each file re-hashed against its record first."""
    return {stage: check_recorded(layout.root, read_manifest(layout, stage).outputs, fetch) for stage in stages}


def run_stage(
    layout: Layout,
    stage: str,
    upstream: Sequence[str],
    work: Callable[[Inputs], StageOutput],
    fetch: Fetch | None = None,
) -> tuple[StageManifest, StageOutput]:
    """Verify `upstream`'s files, run `work` on them, then record the stage's manifest.

    The manifest's disk space is taken before the work and the manifest is written only
    after the work succeeded. Every output the work puts in place is journaled, so the
    outputs commit with the manifest: a failed or killed stage leaves its previous files
    and record (`runtime/commit.py`), and a stage whose outputs were committed is recorded.
    """
    journal = Journal.open(stage, layout.journal(stage), layout.root, layout.manifest(stage))
    try:
        with reserved_write(layout.manifest(stage), MANIFEST_ROOM) as record:
            inputs = verified_inputs(layout, upstream, fetch)
            with journaled(journal):
                out = work(inputs)
            manifest = StageManifest(
                stage=stage,
                outputs=out.artifacts,
                inputs=[*out.inputs, *(art for arts in inputs.values() for art in arts)],
                config=out.config,
                summary=out.summary.to_json() if out.summary is not None else {},
            )
            data = json_bytes(manifest.model_dump(mode="json"))
            journal.seal(data)
            record.append(data)
    except BaseException as err:
        if journal.path.exists():
            recover_journal(journal.path, layout.root, journal.manifest)
        if isinstance(err, OSError) and not isinstance(err, StageIOError):
            raise _stage_io_error(stage, err) from err
        raise
    finally:
        release_memory()  # what the stage freed, back to the system before the next one
    journal.finish()
    if (reuse := session()) is not None:
        reuse.store.refer(stage, reuse.keys)
        reuse.store.trim()
    return manifest, out


def _stage_io_error(stage: str, err: OSError) -> StageIOError:
    """`err` naming the stage (and the file, when the OS named one)."""
    if err.errno is None or err.strerror is None:
        return StageIOError(f"stage {stage}: {err}")
    where = f": {err.filename}" if err.filename else ""
    return StageIOError(err.errno, f"stage {stage}: {err.strerror}{where}")

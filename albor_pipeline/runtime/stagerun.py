"""Running one stage: verify its inputs, do the work, record the manifest.

Every stage, provenance included, goes through `run_stage`, so "what a stage read"
and "what it wrote" mean the same thing everywhere: lineage in the manifests,
`albor verify`, and the metadata the Dagster layer shows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from albor_pipeline.runtime.artifacts import (
    Artifact,
    StageManifest,
    check_recorded,
    json_bytes,
    read_manifest,
    recorded_intact,
    remember_digests,
    reserved_write,
    sha256_bytes,
    write_json,
)
from albor_pipeline.runtime.commit import Journal, journaled, recover_journal
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.memory import release_memory
from albor_pipeline.runtime.report import Report
from albor_pipeline.runtime.taskstore import NotReusable, identity, session

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


@dataclass(frozen=True)
class Settings:
    """What a stage's work depends on besides its upstream stages' outputs: its settings (any
    value, the files it names by content, as a task's job) and the manifests of the stages
    whose summaries it reads (`reads`). A stage whose identity (this, its upstream manifests and
    the code) is the one its current outputs were made under keeps them (`run_stage`)."""

    settings: Any
    reads: Sequence[str] = ()
    lineage: bool = False  # the work reads upstream manifests whole, their inputs too (provenance)
    # Whether what the stage reads outside the data dir (a source's files) still has the
    # content its manifest records among its inputs; None: it reads nothing else.
    current: Callable[[StageManifest], bool] | None = None


def stage_identity(layout: Layout, stage: str, upstream: Sequence[str], settings: Settings) -> str | None:
    """The stage's identity now: the code, its settings, and what it reads of every manifest it
    builds on; None when it has none (an upstream stage never ran, a setting with no stable
    description)."""
    manifests = {}
    for name in (*upstream, *settings.reads):
        try:
            manifests[name] = _as_read(read_manifest(layout, name), settings.lineage)
        except FileNotFoundError:
            return None
    try:
        # The data dir's place too: provenance names it.
        parts = {"stage": stage, "root": str(layout.root), "settings": settings.settings, "manifests": manifests}
        return identity(parts, str(layout.root))
    except NotReusable:
        return None


def _as_read(manifest: StageManifest, lineage: bool = False) -> str:
    """What a stage reads of an upstream stage's manifest: its outputs, settings and summary,
    not its own inputs (an upstream edit that left the stage's outputs as they were changes
    those alone, and must not rerun what the stage feeds); all of it with `lineage`."""
    return sha256_bytes(json_bytes(manifest.model_dump(mode="json", exclude=None if lineage else {"inputs"})))


def kept_manifest(
    layout: Layout, stage: str, key: str | None, current: Callable[[StageManifest], bool] | None = None
) -> StageManifest | None:
    """The stage's current manifest when it was made under identity `key`, every output it
    records is still there with its bytes and, with `current`, what it read outside the data
    dir is unchanged: a rerun would write the same files."""
    if key is None:
        return None
    try:
        record = json.loads(layout.stage_identity(stage).read_text())
        data = layout.manifest(stage).read_bytes()
    except (OSError, ValueError):
        return None
    if record != {"identity": key, "manifest": sha256_bytes(data)}:
        return None
    manifest = StageManifest.model_validate_json(data)
    if current is not None and not current(manifest):
        return None
    return manifest if recorded_intact(layout.root, manifest.outputs) else None


def run_stage(
    layout: Layout,
    stage: str,
    upstream: Sequence[str],
    work: Callable[[Inputs], StageOutput],
    fetch: Fetch | None = None,
    settings: Settings | None = None,
) -> tuple[StageManifest, StageOutput | None]:
    """Verify `upstream`'s files, run `work` on them, then record the stage's manifest.

    The manifest's disk space is taken before the work and the manifest is written only
    after the work succeeded. Every output the work puts in place is journaled, so the
    outputs commit with the manifest: a failed or killed stage leaves its previous files
    and record (`runtime/commit.py`), and a stage whose outputs were committed is recorded.

    With `settings` (a stage that reads nothing but its upstream stages and them), a stage
    whose identity is unchanged since its outputs were made keeps them: its manifest comes
    back with no `StageOutput`, nothing is written, and the work does not run.
    """
    journal = Journal.open(stage, layout.journal(stage), layout.root, layout.manifest(stage))
    key = stage_identity(layout, stage, upstream, settings) if settings is not None else None
    try:
        inputs = verified_inputs(layout, upstream, fetch)  # kept or not, a changed input is an error
        if (kept := kept_manifest(layout, stage, key, settings.current if settings else None)) is not None:
            return kept, None
        with reserved_write(layout.manifest(stage), MANIFEST_ROOM) as record:
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
    remember_digests(layout.root, manifest.outputs)
    # After the commit (a kill before this only costs a rerun), and only when a file the spec
    # names did not change while the stage read it.
    if key is not None and settings is not None and stage_identity(layout, stage, upstream, settings) == key:
        write_json(layout.stage_identity(stage), {"identity": key, "manifest": sha256_bytes(data)})
    if (reuse := session()) is not None:
        reuse.close()
    return manifest, out


def _stage_io_error(stage: str, err: OSError) -> StageIOError:
    """`err` naming the stage (and the file, when the OS named one)."""
    if err.errno is None or err.strerror is None:
        return StageIOError(f"stage {stage}: {err}")
    where = f": {err.filename}" if err.filename else ""
    return StageIOError(err.errno, f"stage {stage}: {err.strerror}{where}")

"""What a run of every stage would keep, decided before Dagster starts the run.

A stage whose identity is the one its outputs were made under keeps them, and a check its
outcome (`defs/stage.py`). Decided inside a run, that still costs Dagster's bookkeeping for
every step (the step's events written to the instance, the run's set-up and end): on a small
spec, most of a rerun's time. `albor run` decides it first, with the same functions, and
starts Dagster only for the stages that may change and those downstream of them; with
nothing left, it starts no run at all.
"""

from __future__ import annotations

import os
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from albor_pipeline.defs.pipeline import pipeline_resources
from albor_pipeline.defs.resources import ArtifactStore, manifest_sha256
from albor_pipeline.defs.stage import ROOT, Stage, kept_before_run
from albor_pipeline.runtime.artifacts import StageManifest, load_digests, save_digests
from albor_pipeline.runtime.lock import data_dir_lock
from albor_pipeline.runtime.stagerun import Progress
from albor_pipeline.spec import PipelineSpec


@dataclass(frozen=True)
class Plan:
    """The stages a run would keep (by name, with their manifests) and those it must start, in
    graph order."""

    kept: dict[str, StageManifest]
    run: list[Stage[Any]]
    seen: dict[str, str]  # each kept stage's manifest SHA-256: the run checks it still holds
    store: ArtifactStore  # the data dir decided on

    def resources(self) -> dict[str, Any]:
        """The run config of the run's data dir: the one decided on (Dagster takes a resource's
        run config whole), with the stages this plan keeps, checked at its start."""
        return {ROOT.store_key: {"config": {**self.store.model_dump(exclude_none=True), "kept": self.seen}}}

    @property
    def steps(self) -> int:
        """The Dagster steps of the stages to run: one per stage, one for its checks."""
        return sum(1 + bool(stage.checks) for stage in self.run)


def plan_run(spec: PipelineSpec, stages: list[Stage[Any]], log: Progress, output_dir: Path | str | None = None) -> Plan:
    """Which of `stages` (graph order) a run on the spec's values would keep: a stage whose
    upstream stages are all kept, whose identity is unchanged and whose checks' outcomes are
    kept, and one made only when asked for by name (`kept_before_run`). Decided under the
    data dir's lock (after finishing what a dead run left), so no run writes meanwhile; with
    reuse off or a data dir in a bucket, every stage runs. The data dir: `output_dir`, default
    `data_dir()`."""
    store, execution = pipeline_resources(spec, output_dir)
    layout = store.layout
    if store.bucket is not None or not execution.spec.reuse or not layout.root.is_dir():
        return Plan({}, stages, {}, store)
    kept: dict[str, StageManifest] = {}
    holder = f"pid {os.getpid()}, deciding what a run keeps"
    with data_dir_lock(layout, holder, wait=store.on_busy != "fail", log=log):
        load_digests(layout.digests)  # files hashed by earlier runs, trusted while their stat holds
        for stage in stages:
            upstream_kept = all(up in kept for up in (*stage.deps, *stage.reads))
            if (manifest := kept_before_run(stage, spec, execution, store, upstream_kept)) is not None:
                kept[stage.name] = manifest
        seen = {name: sha for name in kept if (sha := manifest_sha256(layout, name)) is not None}
        with suppress(OSError):  # a cache: a full disk costs the next run its hashing
            save_digests(layout.digests, layout.root)
    return Plan(kept, [stage for stage in stages if stage.name not in kept], seen, store)

"""One pipeline as Dagster definitions: every stage's declaration, merged, with its own data
dir and executor as resources.

A code location holds one pipeline (`definitions.py`) or several, each under its own prefix
(`Namespace`, the `AlborPipeline` component); `check_data_dirs` keeps their data dirs apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg

from albor_pipeline.defs import chat, corpus, documents, fim, hygiene, ingestion, mix, quality, stats, tokenizer
from albor_pipeline.defs.automation import automation_definitions
from albor_pipeline.defs.provenance import provenance_stage
from albor_pipeline.defs.resources import ArtifactStore, Execution
from albor_pipeline.defs.stage import Namespace, Stage, stage_definitions
from albor_pipeline.defs.whatif import whatif_definitions
from albor_pipeline.spec import PipelineSpec, data_dir, work_dir

STAGE_MODULES = (ingestion, quality, hygiene, documents, mix, fim, tokenizer, corpus, chat, stats)


def pipeline_stages(spec: PipelineSpec) -> list[Stage[Any]]:
    """Every stage in graph order, provenance last: it reads every other stage, and its page
    is each stage module's `provenance_section` (where it declares one) in that order."""
    stages: list[Stage[Any]] = [stage for module in STAGE_MODULES for stage in module.stages(spec)]
    found = (getattr(module, "provenance_section", None) for module in STAGE_MODULES)  # optional: a stage may add none
    sections = tuple(section for section in found if section is not None)
    return [*stages, provenance_stage(spec, tuple(s.name for s in stages), sections)]


def pipeline_resources(spec: PipelineSpec, output_dir: Path | str | None = None) -> tuple[ArtifactStore, Execution]:
    """The pipeline's data dir (default: `data_dir()`) and executor, as its runs get them."""
    root = data_dir(output_dir)
    work = str(work_dir(root)) if isinstance(root, str) else None
    store = ArtifactStore(data_dir=str(root), work_dir=work, on_busy=spec.locking.on_busy.value)
    return store, Execution(**spec.execution.model_dump(mode="json"))


def build_definitions(
    spec: PipelineSpec, output_dir: Path | str | None = None, prefix: str | None = None
) -> dg.Definitions:
    """The definitions of the pipeline `spec` writing into `output_dir` (default: `data_dir()`).

    With `prefix`, every asset key, group, job, schedule, sensor and resource key carries it,
    so several pipelines can share a code location; without, names are the stages' own.
    """
    ns = Namespace(prefix or "")
    stages = pipeline_stages(spec)
    store, execution = pipeline_resources(spec, output_dir)
    return dg.Definitions.merge(
        ingestion.source_definitions(spec, ns),
        *(stage_definitions(stage, ns, spec) for stage in stages),
        automation_definitions(spec, stages, ingestion.observed(spec), ns),
        whatif_definitions(spec, ns),
        dg.Definitions(
            resources={ns.store_key: store, ns.execution_key: execution},
            executor=dg.in_process_executor,
        ),
    )


def _overlap(a: str, b: str) -> bool:
    """`a` and `b` are the same directory or prefix, or one lies inside the other."""
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def check_data_dirs(defs: dg.Definitions) -> None:
    """Fail when two pipelines of `defs` would share a data dir, a bucket prefix or a bucket's
    working copy, or one lies inside another's: their files and their locks must never mix."""
    stores = sorted((key, r) for key, r in (defs.resources or {}).items() if isinstance(r, ArtifactStore))
    places = [(key, str(r.layout.root.resolve())) for key, r in stores]
    places += [(key, r.data_dir) for key, r in stores if r.bucket is not None]
    for i, (key, where) in enumerate(places):
        for other, there in places[i + 1 :]:
            if key != other and _overlap(where, there):
                raise ValueError(f"the pipelines of resources {key!r} and {other!r} share a data dir: {where}, {there}")

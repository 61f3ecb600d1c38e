"""The Definitions object: every stage's declaration, merged.

`ALBOR_SPEC` selects the spec and `ALBOR_DATA_DIR` the output root; both are read when
Dagster loads the definitions (`defs`), not when this module is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg

from albor_pipeline.defs import chat, corpus, documents, fim, hygiene, ingestion, mix, tokenizer
from albor_pipeline.defs.automation import automation_definitions
from albor_pipeline.defs.provenance import provenance_stage
from albor_pipeline.defs.resources import ArtifactStore, Execution
from albor_pipeline.defs.stage import Stage, stage_definitions
from albor_pipeline.spec import PipelineSpec, data_dir, load_spec, work_dir

STAGE_MODULES = (ingestion, hygiene, documents, mix, fim, tokenizer, corpus, chat)


def pipeline_stages(spec: PipelineSpec) -> list[Stage[Any]]:
    """Every stage in graph order, provenance last (it reads every other stage)."""
    stages: list[Stage[Any]] = [stage for module in STAGE_MODULES for stage in module.stages(spec)]
    return [*stages, provenance_stage(spec, tuple(s.name for s in stages))]


def _store(spec: PipelineSpec, root: Path | str) -> ArtifactStore:
    work = str(work_dir(root)) if isinstance(root, str) else None
    return ArtifactStore(data_dir=str(root), work_dir=work, on_busy=spec.locking.on_busy.value)


def build_definitions(spec: PipelineSpec, output_dir: Path | str | None = None) -> dg.Definitions:
    stages = pipeline_stages(spec)
    return dg.Definitions.merge(
        ingestion.source_definitions(spec),
        *(stage_definitions(stage) for stage in stages),
        automation_definitions(spec, stages, ingestion.observed(spec)),
        dg.Definitions(
            resources={
                "store": _store(spec, data_dir(output_dir)),
                "execution": Execution(**spec.execution.model_dump(mode="json")),
            },
            executor=dg.in_process_executor,
        ),
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions(load_spec())

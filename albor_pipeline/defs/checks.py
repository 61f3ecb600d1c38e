"""Asset checks: schemas, leak check, FIM rate, tokenizer round-trip, corpus shape."""

from __future__ import annotations

import dagster as dg

from albor_pipeline.spec import PipelineSpec


def pipeline_checks(spec: PipelineSpec) -> list[dg.AssetChecksDefinition]:
    return []

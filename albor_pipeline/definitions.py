"""The Definitions object: an asset graph built from the pipeline spec.

`ALBOR_SPEC` selects the spec and `ALBOR_DATA_DIR` the output root.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from albor_pipeline.defs.automation import automation_defs
from albor_pipeline.defs.checks import pipeline_checks
from albor_pipeline.defs.corpus import corpus_asset, corpus_key
from albor_pipeline.defs.documents import DOCUMENTS, documents_asset
from albor_pipeline.defs.fim import fim_asset, fim_key
from albor_pipeline.defs.ingestion import ingested_key, ingestion_asset, source_key, source_observation
from albor_pipeline.defs.mix import mix_asset, mixed_key
from albor_pipeline.defs.provenance import provenance_asset
from albor_pipeline.defs.resources import ArtifactStore
from albor_pipeline.defs.tokenizer import TOKENIZER, tokenizer_asset
from albor_pipeline.spec import SPLITS, PipelineSpec, data_dir, load_spec

BUILD_JOB = "build_corpora"


def build_definitions(spec: PipelineSpec, output_dir: Path | None = None) -> dg.Definitions:
    sources = [source_observation(s) for s in spec.sources]
    assets = [
        *(ingestion_asset(s) for s in spec.sources),
        documents_asset(spec),
        *(mix_asset(spec, split) for split in SPLITS),
        *(fim_asset(spec, split) for split in SPLITS),
        tokenizer_asset(spec),
        *(corpus_asset(spec, split) for split in SPLITS),
    ]
    stage_keys = [
        *(ingested_key(s.name) for s in spec.sources),
        DOCUMENTS,
        *(mixed_key(s) for s in SPLITS),
        *(fim_key(s) for s in SPLITS),
        TOKENIZER,
        *(corpus_key(s) for s in SPLITS),
    ]
    assets.append(provenance_asset(spec, stage_keys))
    build = dg.define_asset_job(
        BUILD_JOB,
        selection=dg.AssetSelection.all() - dg.AssetSelection.assets(*(source_key(s.name) for s in spec.sources)),
        description="Materialize every stage: ingestion through pretokenized corpora and provenance.",
    )
    automation = automation_defs(spec, [source_key(s.name) for s in spec.sources])
    return dg.Definitions(
        assets=[*sources, *assets],
        asset_checks=pipeline_checks(spec),
        jobs=[build, *automation["jobs"]],
        schedules=automation["schedules"],
        sensors=automation["sensors"],
        resources={"store": ArtifactStore(data_dir=str(data_dir(output_dir)))},
        executor=dg.in_process_executor,
    )


defs = build_definitions(load_spec())

"""What runs when: the build job, the source observation job, its schedule, the automation sensor.

Stages rebuild when an upstream data version changes (`stage.on_upstream_change`); the
sensor evaluates those conditions and the schedule fingerprints the sources.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dagster as dg

from albor_pipeline.defs.stage import ROOT, Namespace, Stage
from albor_pipeline.spec import PipelineSpec

BUILD_JOB = "build_corpora"
AUTOMATION_SENSOR = "albor_automation"
OBSERVE_JOB = "observe_sources"
OBSERVE_SCHEDULE = "observe_sources_schedule"


def automation_definitions(
    spec: PipelineSpec, stages: Sequence[Stage[Any]], sources: Sequence[str], ns: Namespace = ROOT
) -> dg.Definitions:
    """The jobs, schedule and sensor of one pipeline; in namespace `ns`, each name carries its prefix."""
    keys = [ns.key(s.name) for s in stages]
    build = dg.define_asset_job(
        ns.name(BUILD_JOB),
        selection=dg.AssetSelection.assets(*keys),
        description="Materialize every stage: ingestion through pretokenized corpora and provenance.",
        # The spec's values, so the launchpad shows (and lets a run override) them.
        config=dg.RunConfig(ops={key.to_python_identifier(): s.defaults for key, s in zip(keys, stages)}),
    )
    observe = dg.define_asset_job(
        ns.name(OBSERVE_JOB),
        selection=dg.AssetSelection.assets(*(ns.key(s) for s in sources)),
        description="Fingerprint every source; changed sources trigger rebuilds.",
    )
    schedule = dg.ScheduleDefinition(
        name=ns.name(OBSERVE_SCHEDULE),
        job=observe,
        cron_schedule=spec.automation.observe_cron,
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
    sensor = dg.AutomationConditionSensorDefinition(
        ns.name(AUTOMATION_SENSOR),
        # This pipeline's stages only: an asset may have one automation sensor, and a code
        # location may hold several pipelines.
        target=dg.AssetSelection.assets(*keys),
        minimum_interval_seconds=spec.automation.sensor_interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING,
        use_user_code_server=True,  # stage.InputsChanged reads the instance from Python
    )
    return dg.Definitions(jobs=[build, observe], schedules=[schedule], sensors=[sensor])

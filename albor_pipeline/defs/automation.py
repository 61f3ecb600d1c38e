"""What runs when: the build job, the source observation job, its schedule, the automation sensor.

Stages rebuild when an upstream data version changes (`stage.on_upstream_change`); the
sensor evaluates those conditions and the schedule fingerprints the sources.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dagster as dg

from albor_pipeline.defs.stage import Stage, asset_key
from albor_pipeline.spec import PipelineSpec

BUILD_JOB = "build_corpora"
AUTOMATION_SENSOR = "albor_automation"
OBSERVE_JOB = "observe_sources"
OBSERVE_SCHEDULE = "observe_sources_schedule"


def automation_definitions(spec: PipelineSpec, stages: Sequence[Stage[Any]], sources: Sequence[str]) -> dg.Definitions:
    build = dg.define_asset_job(
        BUILD_JOB,
        selection=dg.AssetSelection.assets(*(s.key for s in stages)),
        description="Materialize every stage: ingestion through pretokenized corpora and provenance.",
        # The spec's values, so the launchpad shows (and lets a run override) them.
        config=dg.RunConfig(ops={s.key.to_python_identifier(): s.defaults for s in stages}),
    )
    observe = dg.define_asset_job(
        OBSERVE_JOB,
        selection=dg.AssetSelection.assets(*(asset_key(s) for s in sources)),
        description="Fingerprint every source; changed sources trigger rebuilds.",
    )
    schedule = dg.ScheduleDefinition(
        name=OBSERVE_SCHEDULE,
        job=observe,
        cron_schedule=spec.automation.observe_cron,
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
    sensor = dg.AutomationConditionSensorDefinition(
        AUTOMATION_SENSOR,
        target=dg.AssetSelection.all(),
        minimum_interval_seconds=spec.automation.sensor_interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING,
        use_user_code_server=True,  # stage.InputsChanged reads the instance from Python
    )
    return dg.Definitions(jobs=[build, observe], schedules=[schedule], sensors=[sensor])

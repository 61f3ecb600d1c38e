"""Declarative automation: rebuild when an upstream *data version* changes.

A parent re-materialized with identical bytes keeps its DataVersion, so nothing below
it runs again; a touched-but-unchanged source keeps its fingerprint, so nothing runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from albor_pipeline.spec import PipelineSpec

AUTOMATION_SENSOR = "albor_automation"
OBSERVE_JOB = "observe_sources"
OBSERVE_SCHEDULE = "observe_sources_schedule"


def on_upstream_change() -> dg.AutomationCondition:
    AC = dg.AutomationCondition
    changed = AC.any_deps_match(AC.data_version_changed()).since_last_handled()
    # Wait while a parent is missing, running, or about to run in this tick: a stage
    # with many parents (provenance) then runs once after the wave, not once per parent.
    blocked = (
        AC.any_deps_missing() | AC.any_deps_in_progress() | AC.in_progress() | AC.any_deps_match(AC.will_be_requested())
    )
    return (changed & ~blocked).with_label("upstream data version changed")


def automation_defs(spec: PipelineSpec, source_keys: Sequence[dg.AssetKey]) -> dict[str, list]:
    observe = dg.define_asset_job(
        OBSERVE_JOB,
        selection=dg.AssetSelection.assets(*source_keys),
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
    )
    return {"jobs": [observe], "schedules": [schedule], "sensors": [sensor]}

"""The data dir as a resource: where artifacts live, held by one run at a time."""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path

import dagster as dg
from pydantic import PrivateAttr

from albor_pipeline.core.layout import Layout
from albor_pipeline.core.lock import data_dir_lock
from albor_pipeline.defs.launcher import WORKER_TAG, fail_dead_runs, this_worker


class ArtifactStore(dg.ConfigurableResource):
    """The output root (`ALBOR_DATA_DIR`, default data/artifacts).

    A run holds the data dir's lock from its first step to its end, so two runs (the
    CLI, the UI, the automation sensor, another `dagster` command) never mix files.
    """

    data_dir: str
    on_busy: str = "wait"  # spec `locking.on_busy`: wait for the other run, or fail at once

    _held: ExitStack = PrivateAttr(default_factory=ExitStack)

    @property
    def layout(self) -> Layout:
        return Layout(Path(self.data_dir))

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        log = context.log
        info = log.info if log else print
        run_id = context.run.run_id if context.run else None
        holder = f"pid {os.getpid()}, run {run_id or 'outside a run'}"
        removed = self._held.enter_context(data_dir_lock(self.layout, holder, wait=self.on_busy != "fail", log=info))
        if removed:
            info(f"removed {len(removed)} temp file(s) left by runs that died")
        if context.instance is not None and run_id:
            context.instance.add_run_tags(run_id, {WORKER_TAG: this_worker()})
            fail_dead_runs(context.instance, log)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self._held.close()

"""The code location: one pipeline, or a folder of pipelines.

By default it holds the pipeline of one spec: `ALBOR_SPEC` selects the spec and
`ALBOR_DATA_DIR` the output root, without a prefix. With `ALBOR_PIPELINES` set to a folder of
`defs.yaml` files declaring `AlborPipeline` components (`defs/component.py`), it holds every pipeline declared
there, each under its own prefix and data dir. The variables are read when Dagster loads the
definitions (`defs`), not when this module is imported.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
from pathlib import Path
from types import ModuleType

import dagster as dg

from albor_pipeline.defs.pipeline import STAGE_MODULES, build_definitions, check_data_dirs, pipeline_stages
from albor_pipeline.runtime.memory import collect_less
from albor_pipeline.spec import REPO_ROOT, PipelineSpec, data_dir, load_spec, work_dir

__all__ = ["STAGE_MODULES", "build_definitions", "defs", "load_pipelines", "pipeline_stages"]

PIPELINES_ENV = "ALBOR_PIPELINES"

# A run's process ends with a large heap (Dagster's definitions and caches, the libraries): the
# interpreter's last garbage collections over it took ~0.9 s of each run. Frozen as it exits,
# the heap is freed without them. Only at exit: a long-lived process still collects.
atexit.register(gc.freeze)
collect_less()  # the run's process, whose heap is Dagster's


def load_pipelines(folder: Path | str) -> dg.Definitions:
    """Every component declared under `folder` (`defs.yaml` files, Dagster's defs-folder layout),
    loaded by Dagster's component tree; the pipelines' data dirs must not overlap."""
    root = Path(folder).resolve()
    if not root.is_dir():
        raise FileNotFoundError(f"{PIPELINES_ENV}: no such folder: {root}")
    # The folder holds YAML declarations only, so it needs no importable package: a module
    # object naming the folder is the root of the tree.
    module = ModuleType(f"albor_pipelines.{root.name}")
    module.__file__, module.__path__ = None, [str(root)]
    tree = dg.ComponentTree.from_module(defs_module=module, project_root=REPO_ROOT)
    loaded = tree.build_defs()
    check_data_dirs(loaded)
    return loaded


_BUILT: dict[str, dg.Definitions] = {}


def _pipeline(spec: PipelineSpec) -> dg.Definitions:
    """The definitions of `spec` into `ALBOR_DATA_DIR`, built once per spec and data dir in a
    process: Dagster loads the code location several times in one run (a run's process does
    five times), and every load of the same spec gives the same definitions. An edited spec
    is another key, so it is built afresh."""
    root = data_dir()
    place = [str(root), str(work_dir(root)) if isinstance(root, str) else None]  # a bucket's working copy too
    key = json.dumps([spec.model_dump(mode="json"), place], sort_keys=True)
    if key not in _BUILT:
        _BUILT.clear()
        _BUILT[key] = build_definitions(spec)
    return _BUILT[key]


@dg.definitions
def defs() -> dg.Definitions:
    folder = os.environ.get(PIPELINES_ENV)
    return load_pipelines(folder) if folder else _pipeline(load_spec())

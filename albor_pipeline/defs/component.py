"""A pipeline as a Dagster component: one spec, one data dir, one asset-key prefix.

A `defs.yaml` declares one instance; a folder of them (or one file of several YAML
documents) puts several pipelines in one code location (`definitions.load_pipelines`):

    type: albor_pipeline.defs.component.AlborPipeline
    attributes:
      spec: ../pipeline.yaml           # relative paths: from the folder of this defs.yaml
      prefix: full                     # asset keys full/..., groups full_..., jobs full_build_corpora
      data_dir: ../artifacts-full      # or s3://bucket/prefix; never shared with another pipeline
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from albor_pipeline.defs.pipeline import build_definitions
from albor_pipeline.runtime.bucket import is_remote
from albor_pipeline.spec import load_spec


class AlborPipeline(dg.Component, dg.Model, dg.Resolvable):
    """An Albor pipeline: the stages of `spec`, writing into `data_dir`, under asset keys
    `<prefix>/<stage>`, groups `<prefix>_<group>` and jobs `<prefix>_build_corpora`, ...; its
    data dir resource is `<prefix>_store`, its executor `<prefix>_execution`."""

    spec: str
    data_dir: str
    prefix: str | None = None

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        spec = load_spec(_beside(context.path, self.spec))
        return build_definitions(spec, _beside(context.path, self.data_dir), prefix=self.prefix)


def _beside(folder: Path, path: str) -> Path | str:
    """`path` as given when absolute or a bucket URI, else relative to the declaring folder."""
    return path if is_remote(path) else (folder / path).resolve()

"""Where artifacts live. One resource, so tests and users can point a run elsewhere."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from albor_pipeline.spec import data_dir


class ArtifactStore(dg.ConfigurableResource):
    """The output root (`ALBOR_DATA_DIR`, default data/artifacts)."""

    data_dir: str

    @property
    def root(self) -> Path:
        return Path(self.data_dir)

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)


def default_store() -> ArtifactStore:
    return ArtifactStore(data_dir=str(data_dir()))

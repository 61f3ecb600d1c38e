"""Where artifacts live. One resource, so tests and users can point a run elsewhere."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from albor_pipeline.core.layout import Layout


class ArtifactStore(dg.ConfigurableResource):
    """The output root (`ALBOR_DATA_DIR`, default data/artifacts)."""

    data_dir: str

    @property
    def layout(self) -> Layout:
        return Layout(Path(self.data_dir))

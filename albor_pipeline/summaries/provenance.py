"""provenance.json: what it holds (`build_provenance`), and the same read back (`Built`) for
the stage sections of PROVENANCE.md, the dataset card and the statistics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from albor_pipeline.runtime.artifacts import read_manifest
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.report import Report
from albor_pipeline.spec import M, SourceKind


def build_provenance(
    layout: Layout, stages: list[str], spec: dict[str, Any], versions: dict[str, str]
) -> dict[str, Any]:
    manifests = [read_manifest(layout, s) for s in stages]
    return {
        "spec": spec,
        "versions": versions,
        "artifacts": [{**art.model_dump(), "stage": m.stage} for m in manifests for art in m.outputs],
        "stages": {
            m.stage: {
                "data_version": m.data_version,
                "config": m.config,
                "inputs": [{"path": a.path, "sha256": a.sha256} for a in m.inputs],
                "summary": m.summary,
            }
            for m in manifests
        },
    }


class ProvenanceSummary(Report):
    artifacts: int  # files listed in provenance.json


R = TypeVar("R", bound=Report)


@dataclass(frozen=True)
class Built:
    """provenance.json read back: the spec, and each built stage's settings and its summary
    through the stage's own model (`summaries/<stage>.py`)."""

    spec: dict[str, Any]
    stages: dict[str, Any]
    artifacts: list[dict[str, Any]]
    versions: dict[str, str]

    @classmethod
    def of(cls, prov: dict[str, Any]) -> Built:
        return cls(prov["spec"], prov["stages"], prov["artifacts"], prov["versions"])

    @classmethod
    def recorded(cls, layout: Layout, stages: list[str], spec: dict[str, Any]) -> Built:
        """`stages` as their manifests record them now (what provenance.json will hold)."""
        return cls.of(build_provenance(layout, stages, spec, {}))

    @property
    def sources(self) -> list[dict[str, Any]]:
        return self.spec["sources"]

    def names(self, *kinds: SourceKind) -> list[str]:
        """The spec's source names (of `kinds`), in spec order."""
        values = {k.value for k in kinds}
        return [s["name"] for s in self.sources if not kinds or s["kind"] in values]

    def summary(self, stage: str, model: type[R]) -> R | None:
        """The stage's summary, or None when it was not built."""
        entry = self.stages.get(stage)
        return model.model_validate(entry["summary"]) if entry is not None else None

    def config(self, stage: str) -> dict[str, Any]:
        return self.stages[stage]["config"]

    def settings(self, stage: str, model: type[M]) -> M:
        """The stage's recorded settings as the spec section `model` (keys it does not know left out)."""
        return model.model_validate({k: v for k, v in self.config(stage).items() if k in model.model_fields})


Section = Callable[[Built], list[str]]
"""A stage's section of PROVENANCE.md (its `summaries` module's `provenance_section`): its
lines, none when the stage was not built."""

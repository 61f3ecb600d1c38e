"""PROVENANCE.md + provenance.json over every artifact of the graph."""

from __future__ import annotations

from functools import partial

import dagster as dg

from albor_pipeline.defs.stage import NoConfig, Stage, StageContext
from albor_pipeline.runtime.artifacts import record, write_bytes, write_json
from albor_pipeline.runtime.layout import PROVENANCE
from albor_pipeline.runtime.stagerun import StageOutput
from albor_pipeline.runtime.versions import library_versions
from albor_pipeline.spec import PipelineSpec
from albor_pipeline.stages.provenance.card import render_card
from albor_pipeline.stages.provenance.provenance import render_markdown
from albor_pipeline.summaries.provenance import ProvenanceSummary, Section, build_provenance


def provenance(
    spec: PipelineSpec, stages: tuple[str, ...], sections: tuple[Section, ...], ctx: StageContext, config: NoConfig
) -> StageOutput:
    layout = ctx.layout
    # The removal requests stay out (they name what was removed); PROVENANCE.md gives their SHA-256.
    prov = build_provenance(layout, list(stages), spec.model_dump(mode="json", exclude={"remove"}), library_versions())
    markdown = render_markdown(prov, sections)
    write_json(layout.provenance_json, prov)
    write_bytes(layout.provenance_md, markdown.encode())
    write_bytes(layout.dataset_card, render_card(prov).encode())
    return StageOutput(
        artifacts=[record(p, layout.root) for p in (layout.provenance_json, layout.provenance_md, layout.dataset_card)],
        config={},
        summary=ProvenanceSummary(artifacts=len(prov["artifacts"])),
        row_count=len(prov["artifacts"]),
        metadata={"artifacts": len(prov["artifacts"]), "preview": dg.MetadataValue.md(markdown[:20000])},
    )


def provenance_stage(spec: PipelineSpec, upstream: tuple[str, ...], sections: tuple[Section, ...]) -> Stage[NoConfig]:
    """The provenance stage over `upstream`, its page made of the stages' `sections` in graph order."""
    return Stage(
        name=PROVENANCE,
        group="provenance",
        description="`PROVENANCE.md` and `provenance.json`: every artifact with its full SHA-256, the spec, "
        "seeds, per-source counts, mix multipliers, tokenizer facts and corpus token counts; and `README.md`, "
        "a Hugging Face dataset card from the same facts (configs, features, licences, intended use).",
        config=NoConfig,
        defaults=NoConfig(),
        work=partial(provenance, spec, upstream, sections),
        deps=upstream,
        lineage=True,
        kinds=("json",),
    )

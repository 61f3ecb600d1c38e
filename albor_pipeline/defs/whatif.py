"""The what-if preview in Dagster: `albor whatif` as a launchpad job. Its run config takes
the proposed rule changes; it writes nothing to the data dir and records, per source, an
observation of the source's `filtered/<source>` asset holding the answer.

No `from __future__ import annotations` here: Dagster reads the op's config class from its
annotation, which a string would hide inside the function that declares the op."""

from typing import Any

import dagster as dg

from albor_pipeline.defs.stage import Namespace
from albor_pipeline.runtime.layout import filtered_stage
from albor_pipeline.runtime.markdown import markdown_table
from albor_pipeline.spec import PipelineSpec
from albor_pipeline.stages.hygiene.whatif import SourceWhatIf, answer_all, effect_rows, proposal

JOB = "hygiene_whatif"


class WhatIfConfig(dg.Config):
    """Proposed hygiene changes, as `albor whatif` takes them."""

    changes: list[str] = []  # e.g. hygiene.rules.gopher_repetition.dup_line_frac=0.2
    rules_yaml: str = ""  # hygiene: {rules: {...}}, the spec's keys
    sources: list[str] = []  # default: every source with hygiene
    examples: int = 3  # documents shown each side of a changed threshold


def whatif_metadata(answer: SourceWhatIf) -> dict[str, Any]:
    """What the observation shows: the kept counts first, then the per-rule table and examples."""
    shown = [
        {"rule": rule, "side": side, "value": e.value, "file": e.file, "excerpt": e.excerpt}
        for rule in answer.past
        for side, examples in (("past (dropped)", answer.past[rule]), ("inside (kept)", answer.inside[rule]))
        for e in examples
    ]
    return {
        "kept_now": answer.kept_now,
        "kept_after": answer.kept_after,
        "kept_change": answer.kept_after - answer.kept_now,
        "documents": answer.documents,
        "rules": dg.MetadataValue.md(markdown_table(effect_rows(answer)) or "no document changes fate"),
        "near_threshold": dg.MetadataValue.md(markdown_table(shown) or "no changed threshold"),
        "removed_after": dg.MetadataValue.json(answer.removed_after),
    }


def whatif_definitions(spec: PipelineSpec, ns: Namespace) -> dg.Definitions:
    """The preview job of one pipeline (in namespace `ns`)."""

    @dg.op(name=ns.name("whatif_preview"), required_resource_keys={ns.store_key})
    def preview(context: dg.OpExecutionContext, config: WhatIfConfig) -> None:
        """What the proposed rule changes would remove or restore, from the stored signals."""
        layout = getattr(context.resources, ns.store_key).layout
        changes = proposal(config.changes, config.rules_yaml)
        for answer in answer_all(spec, layout, changes, config.sources, config.examples):
            context.log.info(f"{answer.source}: kept now {answer.kept_now:,}, after {answer.kept_after:,}")
            key = ns.key(filtered_stage(answer.source))
            context.log_event(dg.AssetObservation(asset_key=key, metadata=whatif_metadata(answer)))

    @dg.job(
        name=ns.name(JOB),
        description="What a hygiene rule change would remove or restore, before any rebuild (docs/quality.md).",
    )
    def whatif_job() -> None:
        preview()

    return dg.Definitions(jobs=[whatif_job])

"""Hygiene per document source: heuristic filters, then secrets and PII redaction."""

from __future__ import annotations

from functools import partial

import dagster as dg

from albor_pipeline.core.checks import CheckOutcome
from albor_pipeline.core.hygiene import clean_source, rescan
from albor_pipeline.core.ingest import DOC_SCHEMA
from albor_pipeline.core.layout import filtered_stage, ingested_stage
from albor_pipeline.core.markdown import markdown_table
from albor_pipeline.core.stage import StageOutput
from albor_pipeline.defs.stage import Check, CheckContext, Stage, StageContext, resolve, schema_check, spec_defaults
from albor_pipeline.spec import DOCUMENT_KINDS, HygieneSpec, PipelineSpec, RedactMode, SourceSpec

GROUP = "hygiene"
RESCAN_SAMPLE = 2000  # documents the no-secrets check re-scans


class HygieneConfig(dg.Config):
    """Run overrides of the source's `hygiene`; a field left unset keeps the spec's value."""

    redact: str | None = None


def hygiene(src: SourceSpec, ctx: StageContext, config: HygieneConfig) -> StageOutput:
    settings = resolve(src.hygiene, config, f"{filtered_stage(src.name)} run config")
    layout = ctx.layout
    result = clean_source(
        layout.ingested(src.name), settings, layout.filtered(src.name), layout.root, ctx.log.info, ctx.executor
    )
    summary = {
        "documents_in": result.documents_in,
        "kept": result.kept,
        "removed": result.removed,
        "findings": result.findings,
        "redacted_documents": result.redacted_documents,
        "examples": result.examples,
    }
    return StageOutput(
        artifacts=result.artifacts,
        config=settings.model_dump(mode="json"),
        summary=summary,
        metadata={
            "documents_in": result.documents_in,
            "kept": result.kept,
            "shards": len(result.artifacts),
            "removed_total": sum(result.removed.values()),
            "removed": dg.MetadataValue.md(
                markdown_table([{"reason": k, "documents": v} for k, v in result.removed.items()]) or "none"
            ),
            "findings": dg.MetadataValue.md(
                markdown_table([{"type": k, "count": v} for k, v in result.findings.items()]) or "none"
            ),
            "redacted_documents": result.redacted_documents,
            "examples": dg.MetadataValue.json(result.examples),
        },
    )


def _no_secrets_left(name: str, ctx: CheckContext) -> CheckOutcome:
    mode = HygieneSpec.model_validate(ctx.manifest.config).redact
    if mode in (RedactMode.report, RedactMode.off):
        return CheckOutcome(True, f"redact: {mode.value}: findings are kept by configuration", {"mode": mode.value})
    left = rescan(ctx.layout.filtered(name), RESCAN_SAMPLE)
    return CheckOutcome(
        not left,
        f"re-scanning up to {RESCAN_SAMPLE} documents found {sum(left.values())} secrets or PII",
        {"left": left},
    )


def stages(spec: PipelineSpec) -> list[Stage[HygieneConfig]]:
    return [
        Stage(
            name=filtered_stage(src.name),
            group=GROUP,
            description=f"`{src.name}` after hygiene: documents failing the quality filters (long lines, low "
            "alphanumeric share, auto-generated, data-heavy) removed and counted; secrets, e-mails and public "
            "IPs replaced by `<KEY>`, `<EMAIL>`, `<IP_ADDRESS>` (or the document dropped, or only counted).",
            config=HygieneConfig,
            defaults=spec_defaults(HygieneConfig, src.hygiene),
            work=partial(hygiene, src),
            deps=(ingested_stage(src.name),),
            checks=(
                schema_check(DOC_SCHEMA),
                Check(
                    "no_secrets_left",
                    "Re-scanning the output with the same detectors finds no secret or PII.",
                    partial(_no_secrets_left, src.name),
                    blocking=True,
                ),
            ),
        )
        for src in spec.sources_of(*DOCUMENT_KINDS)
    ]

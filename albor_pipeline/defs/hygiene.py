"""Hygiene per document or chat source: heuristic filters (documents), then secrets and PII
redaction (a conversation message by message)."""

from __future__ import annotations

from collections import Counter
from functools import partial

import dagster as dg

from albor_pipeline.defs.quality import model_of, reads_model
from albor_pipeline.defs.stage import Check, CheckContext, Stage, StageContext, resolve, schema_check, spec_defaults
from albor_pipeline.runtime.artifacts import read_manifest
from albor_pipeline.runtime.checks import CheckOutcome
from albor_pipeline.runtime.layout import QUALITY_CLASSIFIER, filtered_stage, ingested_stage
from albor_pipeline.runtime.markdown import markdown_table
from albor_pipeline.runtime.stagerun import StageOutput
from albor_pipeline.spec import PRESETS, PipelineSpec, RedactMode, SourceKind, SourceSpec
from albor_pipeline.stages.hygiene.checks import check_no_secrets
from albor_pipeline.stages.hygiene.hygiene import HYGIENE_KINDS, clean_source, rescan
from albor_pipeline.stages.hygiene.rules import rule_set
from albor_pipeline.summaries.hygiene import provenance_section as provenance_section  # its PROVENANCE.md section
from albor_pipeline.text.documents import VIEW_SCHEMA, texts_of
from albor_pipeline.text.ledger import TEXTS, is_side
from albor_pipeline.text.removal import REMOVED, TOMBSTONE_SCHEMA

GROUP = "hygiene"
RESCAN_SAMPLE = 2000  # documents the no-secrets check re-scans


class HygieneConfig(dg.Config):
    """Run overrides of the source's `hygiene`; a field left unset keeps the spec's value."""

    redact: RedactMode | None = None


def hygiene(spec: PipelineSpec, src: SourceSpec, ctx: StageContext, config: HygieneConfig) -> StageOutput:
    settings = resolve(src.hygiene, config, f"{filtered_stage(src.name)} run config")
    layout = ctx.layout
    # Ingestion redacted (or dropped) secrets iff its recorded mode says so; else they are scanned here.
    ingested_mode = read_manifest(layout, ingested_stage(src.name)).config["hygiene"]["redact"]
    result = clean_source(
        layout.ingested(src.name),
        settings,
        layout.filtered(src.name),
        ctx.io,
        kind=src.kind,
        model=model_of(spec, src, layout),
        scan_secrets=ingested_mode not in (RedactMode.redact.value, RedactMode.drop.value),
        audit=spec.audit,
    )
    summary = result.summary
    return StageOutput(
        artifacts=result.artifacts,
        config={**settings.model_dump(mode="json"), "audit": spec.audit.model_dump(mode="json")},
        summary=summary,
        row_count=summary.kept,
        metadata={
            "documents_in": summary.documents_in,
            "kept": summary.kept,
            "documents_scored_now": summary.scanned,
            "shards": sum(not is_side(a.path) for a in result.artifacts),
            "removed_total": sum(summary.removed.values()),
            **{f"removed_{name}": n for name, n in sorted(removed_by_rule_set(summary.removed).items())},
            "removed": dg.MetadataValue.md(
                markdown_table([{"reason": k, "documents": v} for k, v in summary.removed.items()]) or "none"
            ),
            "findings": dg.MetadataValue.md(
                markdown_table([{"type": k, "count": v} for k, v in summary.findings.items()]) or "none"
            ),
            "redacted_documents": summary.redacted_documents,
            "examples": dg.MetadataValue.json(summary.examples),
        },
    )


def removed_by_rule_set(removed: dict[str, int]) -> Counter[str]:
    """Documents removed per preset (numeric metadata: the Plots tab charts them run by run)."""
    out: Counter[str] = Counter()
    for why, n in removed.items():
        out[rule_set(why)] += n
    return out


def _no_secrets_left(name: str, ctx: CheckContext) -> CheckOutcome:
    """Two scans: the check's own patterns over every document (blind spots of the redactor's
    detectors are not its own), and the redactor's detectors (e-mails, addresses) over a sample."""
    mode = RedactMode(ctx.manifest.config["redact"])
    if mode in (RedactMode.report, RedactMode.off):
        return CheckOutcome(True, f"redact: {mode.value}: findings are kept by configuration", {"mode": mode.value})
    # The shards of texts hold every document the views keep (and those they drop): all are scanned.
    independent = check_no_secrets([texts_of(p) for p in ctx.parquet_outputs if p.name != REMOVED], ctx.executor)
    left = rescan(ctx.layout.filtered(name) / TEXTS, RESCAN_SAMPLE)
    return CheckOutcome(
        independent.passed and not left,
        f"{independent.description}; re-scanning up to {RESCAN_SAMPLE} documents with the redactor's detectors "
        f"found {sum(left.values())} secrets or PII",
        {**independent.metadata, "rescan_left": left},
    )


def _rule_sets(src: SourceSpec) -> str:
    """The rule sets a source's hygiene applies, as its description names them."""
    rules = src.hygiene.rules
    named = [p for p in PRESETS if getattr(rules, p) is not None]
    named += ["languages " + ", ".join(rules.languages)] if rules.languages else []
    named += [f"drop_if {r}" for r in rules.drop_if]
    return "; ".join(named) or "none"


def stages(spec: PipelineSpec) -> list[Stage[HygieneConfig]]:
    return [
        Stage(
            name=filtered_stage(src.name),
            group=GROUP,
            description=(
                f"`{src.name}` after hygiene: secrets, e-mails, public IPs and phone numbers in every message "
                "replaced by `<KEY>`, `<EMAIL>`, `<IP_ADDRESS>`, `<PHONE_NUMBER>` (or the conversation dropped, "
                "or only counted)."
                if src.kind is SourceKind.chat
                else f"`{src.name}` after hygiene: quality signals scored once per document (`_signals/`); "
                f"documents failing its rules ({_rule_sets(src)}) removed and counted; secrets, e-mails, public "
                "IPs and phone numbers replaced by `<KEY>`, `<EMAIL>`, `<IP_ADDRESS>`, `<PHONE_NUMBER>` (or the "
                "document dropped, or only counted)."
            ),
            config=HygieneConfig,
            defaults=spec_defaults(HygieneConfig, src.hygiene),
            work=partial(hygiene, spec, src),
            deps=(ingested_stage(src.name), *([QUALITY_CLASSIFIER] if reads_model(spec, src) else [])),
            checks=(
                schema_check(VIEW_SCHEMA, {REMOVED: TOMBSTONE_SCHEMA}),
                Check(
                    "no_secrets_left",
                    "An independent scan of every document (its own token patterns, and text glued to a `<KEY>`) "
                    "and a re-scan of a sample with the redactor's detectors find no secret or PII.",
                    partial(_no_secrets_left, src.name),
                    blocking=True,
                ),
            ),
        )
        for src in spec.sources_of(*HYGIENE_KINDS)
    ]

"""Sources: one observable source and one ingestion stage per spec source, and one observable
source per decontamination benchmark."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import dagster as dg

from albor_pipeline.defs.stage import ROOT, Namespace, Stage, StageContext, resolve, schema_check, spec_defaults
from albor_pipeline.runtime.artifacts import Artifact
from albor_pipeline.runtime.files import Location
from albor_pipeline.runtime.layout import Layout, benchmark_stage, ingested_stage, source_stage
from albor_pipeline.runtime.markdown import markdown_table
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.stagerun import StageOutput
from albor_pipeline.runtime.watchdog import time_limit
from albor_pipeline.spec import CHAT_KINDS, BenchmarkSpec, OnError, PipelineSpec, RemovalSpec, SourceKind, SourceSpec
from albor_pipeline.stages.documents.decontam import benchmark_fingerprint
from albor_pipeline.stages.ingest.ingest import ingest_source, source_fingerprint, source_unchanged
from albor_pipeline.stages.ingest.removal import resolve_removal
from albor_pipeline.summaries.ingest import provenance_section as provenance_section  # its PROVENANCE.md section
from albor_pipeline.text.chat_formats import ChatFormat
from albor_pipeline.text.documents import DOC_SCHEMA
from albor_pipeline.text.removal import REMOVED, TOMBSTONE_SCHEMA
from albor_pipeline.text.secrets import redact_path

GROUP = "ingestion"
DESCRIPTIONS = {
    SourceKind.code: "Documents of `{name}` as Parquet `{{text, source, file, sha256}}`; files that are not "
    "UTF-8, too short or too long are skipped and counted.",
    SourceKind.chat: "Conversations of `{name}`, cleaned (system folded into the first user turn, trailing "
    "user turns trimmed, no-assistant ones dropped; counted), as canonical JSON in `text`.",
    SourceKind.synthetic: "Seeded synthetic conversations of `{name}` over its word list, as canonical JSON in `text`.",
    SourceKind.web: "Web pages of `{name}` (WARC response records, or HTML files), their main text extracted, as "
    "Parquet `{{text, source, file, sha256}}` with `file` the page's URL; `_pages/` names each page's record "
    "and fetch date. Pages left out (status, type, size, nesting, block lists, no text) are counted by reason "
    "and listed with their URL in `_ledger/`.",
    SourceKind.mc: "Multiple-choice items of `{name}` `{{question, choices, answer}}`, as JSON in `text`.",
}


class IngestConfig(dg.Config):
    """Run overrides of the source's spec entry; a field left unset keeps the spec's value."""

    path: str | None = None
    include: list[str] | None = None
    exclude: list[str] | None = None
    text_field: str | None = None
    min_chars: int | None = None
    max_chars: int | None = None
    follow_symlinks: bool | None = None
    format: ChatFormat | None = None
    messages_field: str | None = None
    calculator: bool | None = None
    on_error: OnError | None = None
    rows: int | None = None
    seed: int | None = None


def _observable(
    key: str, path: Location, description: str, fingerprint: Callable[[Layout], Artifact], ns: Namespace
) -> dg.SourceAsset:
    """An observable source whose data version is `fingerprint`'s SHA-256, so a change in the
    files makes the stages that read them stale (the automation sensor rebuilds them)."""

    @dg.observable_source_asset(
        key=ns.key(key), group_name=ns.name(GROUP), description=description, required_resource_keys=ns.resource_keys
    )
    def _observe(context: dg.AssetExecutionContext) -> dg.ObserveResult:
        store, execution = ns.resources(context)
        with time_limit(execution.spec.stage_timeout_s, key, context.log.error):
            found = fingerprint(store.layout)
        return dg.ObserveResult(
            data_version=dg.DataVersion(found.sha256),
            metadata={"files": found.rows or 1, "bytes": found.bytes, "fingerprint": found.sha256, "path": str(path)},
        )

    return _observe


def _source(ns: Namespace, src: SourceSpec) -> dg.SourceAsset:
    return _observable(
        source_stage(src.name),
        src.path,
        f"Files of source `{src.name}` ({src.kind.value}) under `{src.path}`; "
        "its data version is a content fingerprint of exactly the files ingestion reads.",
        lambda layout: source_fingerprint(src, layout.fingerprint_cache(src.name)),
        ns,
    )


def _benchmark(ns: Namespace, bench: BenchmarkSpec) -> dg.SourceAsset:
    return _observable(
        benchmark_stage(bench.name),
        bench.path,
        f"Benchmark `{bench.name}` at `{bench.path}` (fields {', '.join(bench.fields)}): `documents` drops train "
        "documents sharing an n-gram with it; its data version is the file's SHA-256.",
        lambda _: benchmark_fingerprint(bench),
        ns,
    )


def ingest(
    src: SourceSpec, shard_mb: float, remove: RemovalSpec | None, ngram: int, ctx: StageContext, config: IngestConfig
) -> StageOutput:
    """Ingest `src`, leaving out what its `remove` entry names (tombstones with near dedup's `ngram`)."""
    resolved = resolve(src, config, f"{ingested_stage(src.name)} run config")
    layout = ctx.layout
    out = layout.ingested(src.name)
    # Its lines may name a skipped file (the first per reason): redacted as every recorded path is.
    io = StageIO(layout.root, ctx.executor, lambda line: ctx.log.info(redact_path(line)))
    removal = resolve_removal(src.name, remove, ngram)
    result = ingest_source(resolved, out, io, shard_mb=shard_mb, removal=removal)
    summary = result.summary
    if src.kind is SourceKind.web:  # pages, each listed with its URL in the ledger
        skipped = markdown_table([{"reason": k, "pages": v} for k, v in summary.skipped.items()])
    else:
        first = result.first
        rows = [{"reason": k, "files": v, "first": redact_path(first.get(k, ""))} for k, v in summary.skipped.items()]
        skipped = markdown_table(rows)
    return StageOutput(
        artifacts=result.artifacts,
        config={
            **resolved.model_dump(mode="json"),
            "shard_mb": shard_mb,
            # The requests by their SHA-256 (their paths and digests stay out of every record).
            **({"remove": {"rules_sha256": removal.rules_sha256, "ngram": ngram}} if removal else {}),
        },
        summary=summary,
        inputs=[result.source],
        row_count=summary.documents,
        metadata={
            "files": summary.files,
            "text_bytes": summary.text_bytes,
            "skipped_total": sum(summary.skipped.values()),
            "skipped": dg.MetadataValue.md(skipped or "nothing skipped"),
            # Redacted before anything is written (dropped under hygiene.redact: drop); counts, never values.
            "secrets": dg.MetadataValue.json(summary.secrets),
            **({"cleanup": dg.MetadataValue.json(summary.cleanup)} if src.kind in CHAT_KINDS else {}),
            **(
                {"removed_on_request": summary.removal.removed, "removal_sha256": summary.removal.rules_sha256}
                if summary.removal
                else {}
            ),
        },
    )


def observed(spec: PipelineSpec) -> list[str]:
    """Every observable source's name: the spec's sources, then decontamination benchmarks."""
    return [
        *(source_stage(s.name) for s in spec.sources),
        *(benchmark_stage(b.name) for b in spec.decontaminate.benchmarks),
    ]


def source_definitions(spec: PipelineSpec, ns: Namespace = ROOT) -> dg.Definitions:
    return dg.Definitions(
        assets=[*(_source(ns, s) for s in spec.sources), *(_benchmark(ns, b) for b in spec.decontaminate.benchmarks)]
    )


def stages(spec: PipelineSpec) -> list[Stage[IngestConfig]]:
    return [
        Stage(
            name=ingested_stage(src.name),
            group=GROUP,
            description=DESCRIPTIONS.get(src.kind, DESCRIPTIONS[SourceKind.code]).format(name=src.name),
            config=IngestConfig,
            defaults=spec_defaults(IngestConfig, src),
            work=partial(ingest, src, spec.shard_mb, spec.remove.get(src.name), spec.near_dedup.ngram),
            observes=(source_stage(src.name),),
            checks=(schema_check(DOC_SCHEMA, {REMOVED: TOMBSTONE_SCHEMA}),),
            source_unchanged=partial(source_unchanged, src),
        )
        for src in spec.sources
    ]

"""Exact dedup across sources + content-hash holdout (one Parquet per split): of the
documents, and (with chat sources) of the conversations, keyed on the conversation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from operator import attrgetter
from pathlib import Path

import dagster as dg

from albor_pipeline.defs.stage import Check, CheckContext, Stage, StageContext, resolve, schema_check, spec_defaults
from albor_pipeline.runtime.artifacts import read_manifest
from albor_pipeline.runtime.checks import CheckOutcome
from albor_pipeline.runtime.layout import (
    CONVERSATIONS,
    DOCUMENTS,
    Layout,
    benchmark_stage,
    filtered_stage,
    ingested_stage,
)
from albor_pipeline.runtime.markdown import markdown_table
from albor_pipeline.runtime.shards import shard_files
from albor_pipeline.runtime.stagerun import StageOutput
from albor_pipeline.spec import (
    CHAT_KINDS,
    DOCUMENT_KINDS,
    SPLITS,
    DecontaminateSpec,
    NearDedupSpec,
    PipelineSpec,
    SourceKind,
)
from albor_pipeline.stages.documents.checks import check_no_contamination, check_no_leak, check_no_near_leak
from albor_pipeline.stages.documents.decontam import Decontaminator
from albor_pipeline.stages.documents.documents import build_documents, signature_file
from albor_pipeline.stages.documents.removal import check_no_removed
from albor_pipeline.stages.hygiene.hygiene import HYGIENE_KINDS
from albor_pipeline.summaries.documents import Redaction
from albor_pipeline.summaries.documents import provenance_section as provenance_section  # its PROVENANCE.md section
from albor_pipeline.summaries.hygiene import HygieneSummary
from albor_pipeline.summaries.ingest import IngestSummary
from albor_pipeline.text.documents import DOC_SCHEMA
from albor_pipeline.text.removal import REMOVED, Tombstone, read_tombstones


class DedupSplitConfig(dg.Config):
    """Run overrides of the spec's `holdout`; a field left unset keeps the spec's value."""

    val_fraction: float | None = None
    test_fraction: float | None = None
    seed: int | None = None


OUT_DIRS: dict[str, Callable[[Layout], Path]] = {
    DOCUMENTS: attrgetter("documents_dir"),
    CONVERSATIONS: attrgetter("conversations_dir"),
}


def _reads(spec: PipelineSpec, name: str) -> tuple[str, Callable[[Layout, str], Path]]:
    """The stage (and its files) a holdout reads of source `name`: its output after hygiene;
    a synthetic source's as ingested (generated from a word list, nothing to redact)."""
    if spec.source(name).kind in HYGIENE_KINDS:
        return filtered_stage(name), Layout.filtered
    return ingested_stage(name), Layout.ingested


def removed_documents(spec: PipelineSpec, layout: Layout, names: list[str]) -> list[Tombstone] | None:
    """The tombstones of the documents removed at ingestion of sources `names`, as the stage
    after ingestion carries them; None when the spec requests no removal from them."""
    requested = {n: _reads(spec, n)[1](layout, n) / REMOVED for n in names if n in spec.remove}
    if not requested:
        return None
    missing = [n for n, path in requested.items() if not path.is_file()]
    if missing:
        raise FileNotFoundError(
            f"remove: no tombstones for source(s) {missing}; materialize their ingested/ and filtered/ stages again"
        )
    return read_tombstones(requested.values())


def _redaction(spec: PipelineSpec, layout: Layout, names: list[str]) -> dict[str, Redaction]:
    """Per chat source: the secrets ingestion redacted and the PII its hygiene stage redacted
    (counts only), shown with the conversations."""
    out = {}
    for name in names:
        if spec.source(name).kind in HYGIENE_KINDS:
            hygiene = HygieneSummary.model_validate(read_manifest(layout, filtered_stage(name)).summary)
            ingested = IngestSummary.model_validate(read_manifest(layout, ingested_stage(name)).summary)
            out[name] = Redaction(
                secrets=ingested.secrets,
                findings=hygiene.findings,
                redacted_conversations=hygiene.redacted_documents,
            )
    return out


def dedup_and_split(
    spec: PipelineSpec, stage: str, names: list[str], ctx: StageContext, config: DedupSplitConfig
) -> StageOutput:
    settings = resolve(spec.holdout, config, f"{stage} run config")
    layout = ctx.layout
    sources = [(n, shard) for n in names for shard in shard_files(_reads(spec, n)[1](layout, n))]
    # Conversations: exact dedup only. Documents: also near dedup and decontamination.
    near = spec.near_dedup if stage == DOCUMENTS else None
    decon = Decontaminator(spec.decontaminate) if stage == DOCUMENTS and spec.decontaminate.benchmarks else None

    tombstones = removed_documents(spec, layout, names)
    out = OUT_DIRS[stage](layout)
    result = build_documents(
        sources, settings, out, ctx.io, near=near, decon=decon, tombstones=tombstones, audit=spec.audit
    )
    summary = result.summary
    if stage == CONVERSATIONS:
        summary = summary.model_copy(update={"redaction": _redaction(spec, layout, names)})
    table = [{"source": n, **{s: summary.rows[s].get(n, 0) for s in SPLITS}} for n in names]
    facts = summary.to_json()
    near_found, decon_found, removal = summary.near_duplicates, summary.decontaminated, summary.removal
    return StageOutput(
        artifacts=[shard for shards in result.artifacts.values() for shard in shards],
        config={
            **settings.model_dump(mode="json"),
            "audit": spec.audit.model_dump(mode="json"),
            **({"near_dedup": near.model_dump(mode="json")} if near else {}),
            **({"decontaminate": spec.decontaminate.model_dump(mode="json")} if decon else {}),
        },
        summary=summary,
        inputs=decon.inputs if decon else [],
        metadata={
            "rows_per_split": dg.MetadataValue.md(markdown_table(table)),
            "duplicates_dropped": sum(summary.duplicates.values()),
            "duplicates": dg.MetadataValue.json(facts["duplicates"]),
            "near_duplicates_removed": sum(near_found.removed.values()) if near_found else 0,
            "near_duplicates": dg.MetadataValue.json(facts["near_duplicates"]),
            "decontaminated_dropped": sum(decon_found.dropped.values()) if decon_found else 0,
            "decontaminated": dg.MetadataValue.json(facts["decontaminated"]),
            **{f"{s}_rows": sum(a.rows or 0 for a in result.artifacts[s]) for s in SPLITS},
            **({"redaction": dg.MetadataValue.json(facts["redaction"])} if summary.redaction else {}),
            **(
                {
                    "removed_exact": sum(removal.exact.values()),
                    "removed_near": sum(removal.near.values()),
                    "removal": dg.MetadataValue.json(facts["removal"]),
                }
                if removal
                else {}
            ),
        },
    )


def _no_train_leak(stage: str, ctx: CheckContext) -> CheckOutcome:
    return check_no_leak(*(OUT_DIRS[stage](ctx.layout) / s for s in SPLITS))


def _stored(ctx: CheckContext) -> Callable[[Path], Path | None]:
    """The stage's signatures of a split shard, when it recorded them."""
    recorded = {ctx.layout.root / a.path for a in ctx.manifest.outputs}

    def stored(shard: Path) -> Path | None:
        path = shard.parent.parent / signature_file(f"{shard.parent.name}/{shard.name}")
        return path if path in recorded else None

    return stored


def _no_near_leak(ctx: CheckContext) -> CheckOutcome:
    near = NearDedupSpec.model_validate(ctx.manifest.config["near_dedup"])
    paths = {s: ctx.layout.documents(s) for s in SPLITS}
    return check_no_near_leak(
        paths, near.ngram, near.num_perm, near.bands, near.threshold, ctx.executor, ctx.layout.root, _stored(ctx)
    )


def _no_removed_split(stage: str, ctx: CheckContext) -> CheckOutcome:
    """The tombstones the stage read (its recorded inputs), against its splits: exact copies,
    and with near dedup near-duplicates, by the stage's rule and stored signatures."""
    tombstones = read_tombstones(ctx.layout.root / a.path for a in ctx.manifest.inputs if Path(a.path).name == REMOVED)
    recorded = ctx.manifest.config.get("near_dedup")
    near = NearDedupSpec.model_validate(recorded) if recorded else None
    splits = {s: OUT_DIRS[stage](ctx.layout) / s for s in SPLITS}
    return check_no_removed(tombstones, splits, near if near and near.enabled else None, ctx.executor, _stored(ctx))


def removal_check(spec: PipelineSpec, kinds: tuple[SourceKind, ...]) -> Check:
    """Blocking, on a stage made from `documents` or `conversations` (the mix, SFT): none of its
    Parquet rows is a document removed at ingestion of the sources of `kinds` (by SHA-256)."""
    names = [s.name for s in spec.sources_of(*kinds)]

    def run(ctx: CheckContext) -> CheckOutcome:
        sets = {p.relative_to(ctx.layout.root).as_posix(): p for p in ctx.parquet_outputs}
        return check_no_removed(removed_documents(spec, ctx.layout, names) or [], sets, executor=ctx.executor)

    tombstones = tuple(_reads(spec, n)[0] for n in names if n in spec.remove)  # whose outputs hold them
    return Check("no_removed_documents", REMOVAL_CHECK, run, blocking=True, reads=tombstones)


REMOVAL_CHECK = "No document removed on request (`remove:`) is in the outputs, by SHA-256"


def _no_benchmark_ngrams(ctx: CheckContext) -> CheckOutcome:
    spec = DecontaminateSpec.model_validate(ctx.manifest.config["decontaminate"])
    return check_no_contamination(ctx.layout.documents("train"), spec, ctx.executor)


def _stage(spec: PipelineSpec, stage: str, names: list[str], group: str, what: str) -> Stage[DedupSplitConfig]:
    return Stage(
        name=stage,
        group=group,
        description=f"Exact duplicate {what} (same `sha256`) kept once, first source in spec order wins; each "
        f"assigned to train/val/test by a hash of its content, so splits are disjoint and stable as sources grow.",
        config=DedupSplitConfig,
        defaults=spec_defaults(DedupSplitConfig, spec.holdout),
        work=partial(dedup_and_split, spec, stage, names),
        deps=tuple(_reads(spec, n)[0] for n in names),
        # The conversations' redaction counts: what ingestion redacted, from its manifest.
        reads=tuple(
            ingested_stage(n) for n in names if stage == CONVERSATIONS and spec.source(n).kind in HYGIENE_KINDS
        ),
        checks=(
            schema_check(DOC_SCHEMA),
            Check(
                "no_train_leak",
                f"val and test share no {what[:-1]} (sha256) with train.",
                partial(_no_train_leak, stage),
                True,
            ),
        ),
    )


def stages(spec: PipelineSpec) -> list[Stage[DedupSplitConfig]]:
    documents = _stage(spec, DOCUMENTS, [s.name for s in spec.sources_of(*DOCUMENT_KINDS)], "dedup", "documents")
    if spec.near_dedup.enabled:
        near_check = Check(
            "no_near_leak",
            "No document is a near-duplicate (verified Jaccard at or above the threshold) of one in another split.",
            _no_near_leak,
            True,
        )
        documents = replace(documents, checks=(*documents.checks, near_check))
    if spec.decontaminate.benchmarks:
        benchmarks = tuple(benchmark_stage(b.name) for b in spec.decontaminate.benchmarks)
        decon_check = Check(
            "no_benchmark_ngrams",
            "No train document shares a `decontaminate.ngram`-word n-gram with a benchmark item.",
            _no_benchmark_ngrams,
            True,
        )
        documents = replace(documents, observes=benchmarks, checks=(*documents.checks, decon_check))
    out = [documents]
    chats = [s.name for s in spec.sources_of(*CHAT_KINDS)]
    if chats:
        out.append(_stage(spec, CONVERSATIONS, chats, "chat", "conversations"))
    if spec.remove:
        near = " or a near-duplicate of one (near dedup's rule)" if spec.near_dedup.enabled else ""
        out = [
            replace(
                stage,
                checks=(
                    *stage.checks,
                    Check(
                        "no_removed_documents",
                        f"{REMOVAL_CHECK}{near if stage.name == DOCUMENTS else ''}.",
                        partial(_no_removed_split, stage.name),
                        True,
                    ),
                ),
            )
            for stage in out
        ]
    return out

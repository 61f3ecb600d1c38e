"""Pretokenized corpora: EOS-separated, packed into seq_len sequences, optional exports;
with `corpus.long`, the long documents again at their own seq_len (length staging)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path

import dagster as dg

from albor_pipeline.defs.stage import Check, CheckContext, Stage, StageContext, resolve, schema_check, spec_defaults
from albor_pipeline.runtime.artifacts import Artifact, StageManifest, check_recorded, read_manifest
from albor_pipeline.runtime.checks import CheckOutcome
from albor_pipeline.runtime.layout import (
    DOCUMENTS,
    TOKENIZER,
    Layout,
    corpus_stage,
    filtered_stage,
    fim_stage,
    ingested_stage,
    long_split,
    mixed_stage,
)
from albor_pipeline.runtime.markdown import markdown_table
from albor_pipeline.runtime.stagerun import StageOutput
from albor_pipeline.spec import (
    DOCUMENT_KINDS,
    SPLITS,
    CorpusSpec,
    ExportFormat,
    LongSpec,
    Packing,
    PipelineSpec,
    RemainderPolicy,
)
from albor_pipeline.stages.corpus.checks import check_doc_lens, check_min_chars, check_no_short_splits, check_sequences
from albor_pipeline.stages.corpus.corpus import Budget, Fates, build_corpus
from albor_pipeline.stages.corpus.diff import corpus_changes
from albor_pipeline.stages.corpus.exposure import read_states, removal_report
from albor_pipeline.stages.corpus.lineage import PIECES
from albor_pipeline.stages.corpus.versions import Version, keep_version, kept_version
from albor_pipeline.stages.ingest.removal import resolve_removal
from albor_pipeline.summaries.corpus import CheckpointRemovals, CorpusSummary
from albor_pipeline.summaries.corpus import provenance_section as provenance_section  # its PROVENANCE.md section
from albor_pipeline.summaries.mix import MixSummary
from albor_pipeline.summaries.tokenizer import TokenizerSummary
from albor_pipeline.text.ledger import is_ledger
from albor_pipeline.text.removal import REMOVED
from albor_pipeline.text.sequences import SEQ_SCHEMA
from albor_pipeline.text.vocab import EOS, PAD, load_tokenizer


class CorpusConfig(dg.Config):
    """Run overrides of the spec's `corpus`; a field left unset keeps the spec's value."""

    seq_len: int | None = None
    remainder: RemainderPolicy | None = None
    formats: list[ExportFormat] | None = None
    shard_sequences: int | None = None
    encoder: str | None = None
    bos: bool | None = None
    packing: Packing | None = None
    best_fit_window: int | None = None


class LongCorpusConfig(dg.Config):
    """Run overrides of the spec's `corpus.long`; the rest of `corpus` applies as to corpus/<split>."""

    min_chars: int | None = None
    seq_len: int | None = None


def pack(
    ctx: StageContext,
    spec: PipelineSpec,
    split: str,
    out: str,
    settings: CorpusSpec,
    min_chars: int = 0,
    pool: dict[str, int] | None = None,
    budget: Budget | None = None,
) -> StageOutput:
    """Pretokenize fim/<split> into corpus/<out> with `settings` (and the mix's pool and
    budget, `_mix_facts`; with `audit.ledger`, the tables `albor trace` and `albor exposure`
    read); the summary (with the removal report, `_removal_report`) and metadata."""
    ledger = spec.audit.ledger
    layout = ctx.layout
    # The version this build replaces: its facts stay (`versions.py`).
    kept = keep_version(layout, corpus_stage(out), ctx.fetch)
    result = build_corpus(
        layout.fim(split),
        layout.tokenizer_json,
        settings,
        layout.corpus_dir(out),
        ctx.io,
        min_chars=min_chars,
        pool=pool,
        budget=budget,
        ledger=ledger,
        fates=_fates(ctx, spec) if ledger else None,
    )
    summary = result.summary
    if checkpoints := _removal_report(ctx, spec, corpus_stage(out)):
        summary = summary.model_copy(update={"checkpoints": checkpoints})
    for warning in summary.warnings:
        ctx.log.warning(f"corpus/{out}: {warning}")
    bytes_per_token = result.text_bytes / summary.tokens if summary.tokens else 0.0
    return StageOutput(
        artifacts=result.artifacts,
        config={**settings.model_dump(mode="json"), "ledger": ledger},
        summary=summary,
        row_count=summary.sequences,
        metadata={
            **summary.model_dump(
                exclude={"sources", "budget", "warnings", "token_lengths", "checkpoints"}
            ),  # lengths: the stats asset's
            "sources": dg.MetadataValue.md(
                markdown_table(
                    [{"source": k, **v.model_dump(exclude={"token_lengths"})} for k, v in summary.sources.items()]
                )
            ),
            **({f"budget_{k}": v for k, v in summary.budget.model_dump().items()} if summary.budget else {}),
            "warnings": dg.MetadataValue.md("\n".join(f"- {w}" for w in summary.warnings) or "none"),
            **(
                {"checkpoints_saw_removed": dg.MetadataValue.md(markdown_table([c.model_dump() for c in checkpoints]))}
                if checkpoints
                else {}
            ),
            **_changes(ctx, corpus_stage(out), kept, result.artifacts, summary),
            "bytes_per_token": round(bytes_per_token, 4),
            "encoder": result.encoder,
            "tokens_per_s": round(summary.tokens / result.seconds) if result.seconds else 0,
        },
    )


def _changes(
    ctx: StageContext, stage: str, kept: Path | None, artifacts: list[Artifact], summary: CorpusSummary
) -> dict[str, dg.MetadataValue]:
    """What this build changed against the version it replaces (`albor diff`'s corpus part),
    as a table; nothing on a first build or without the ledger."""
    new = StageManifest(
        stage=stage,
        outputs=artifacts,
        inputs=[a for arts in ctx.inputs.values() for a in arts],
        summary=summary.to_json(),
    )
    if kept is None or new.data_version == kept.name:
        return {}
    current = Version(stage, new, ctx.layout.stage_dir(stage), True)
    if current.fact(PIECES) is None or (old := kept_version(stage, kept)).fact(PIECES) is None:
        return {}
    c = corpus_changes(old, current)
    rows = [{"source": s.source, "added": s.added, "removed": s.removed, "changed": s.changed} for s in c.documents]
    head = "\n".join(
        [
            f"- against version {c.version_a} (this build: {c.version_b})",
            f"- {c.sequences_changed:,} sequences changed (it had {c.sequences_a:,}, this build has "
            f"{c.sequences_b:,}){'; the tokenizer changed' if c.tokenizer_changed else ''}",
            f"- `albor diff {c.version_a} {c.version_b}` lists them",
        ]
    )
    return {"changes": dg.MetadataValue.md(head + "\n\n" + (markdown_table(rows) if rows else "no document changed"))}


def _fates(ctx: StageContext, spec: PipelineSpec) -> Fates:
    """The ledger shards (and ingestion's tombstones) of the committed stages a corpus's
    documents came through (ingestion, hygiene, dedup), checked against their manifests
    (fetched from a bucket): the corpus keeps them as its fates table. Not the corpus's
    inputs: a rebuild that changes a ledger but not one document keeps the corpus, with the
    fates it had."""
    stages = [f(s.name) for s in spec.sources_of(*DOCUMENT_KINDS) for f in (ingested_stage, filtered_stage)]
    fates = Fates()
    for stage in [*stages, DOCUMENTS]:
        if not ctx.layout.manifest(stage).is_file():
            continue
        outputs = read_manifest(ctx.layout, stage).outputs
        ledgers = [a for a in outputs if is_ledger(a.path)]
        tombstones = [a for a in outputs if stage.startswith("ingested/") and Path(a.path).name == REMOVED]
        check_recorded(ctx.layout.root, ledgers + tombstones, ctx.fetch)
        fates.ledgers.extend((stage, ctx.layout.root / a.path) for a in ledgers)
        fates.tombstones.extend((stage, ctx.layout.root / a.path) for a in tombstones)
    return fates


def _removal_report(ctx: StageContext, spec: PipelineSpec, stage: str) -> list[CheckpointRemovals]:
    """With removal requests and registered checkpoints (`audit.checkpoints`): which of the
    checkpoints that read `stage` saw the documents the requests name (in the versions they
    read, kept before this build replaced them). A registered path that does not exist yet
    is passed over, with a warning."""
    if not spec.remove or not spec.audit.checkpoints:
        return []
    paths = [p for p in spec.audit.checkpoints if p.exists()]
    for missing in sorted(set(spec.audit.checkpoints) - set(paths)):
        ctx.log.warning(f"{stage}: audit.checkpoints {missing} does not exist: no state read there")
    removals = {
        name: removal
        for name, entry in spec.remove.items()
        if (removal := resolve_removal(name, entry, spec.near_dedup.ngram)) is not None
    }
    return removal_report(ctx.layout, stage, read_states([str(p) for p in paths]), removals)


def _mix_facts(layout: Layout, split: str) -> tuple[dict[str, int], Budget | None]:
    """What corpus/<split> takes from the split's mix (its manifest, as it ran): each
    source's documents in the split's pool, and its `tokens` budget."""
    manifest = read_manifest(layout, mixed_stage(split))
    summary = MixSummary.model_validate(manifest.summary)
    mixed = summary.budget
    if mixed is None or mixed.tokens is None or mixed.chars_per_token is None:
        return summary.pool_rows(), None
    return summary.pool_rows(), Budget(mixed.tokens, mixed.chars_per_token, mixed.chars)


def corpus(spec: PipelineSpec, split: str, ctx: StageContext, config: CorpusConfig) -> StageOutput:
    settings = resolve(spec.corpus, config, f"{corpus_stage(split)} run config")
    pool, budget = _mix_facts(ctx.layout, split)
    return pack(ctx, spec, split, split, settings, pool=pool, budget=budget)


def long_corpus(
    long: LongSpec, spec: PipelineSpec, split: str, ctx: StageContext, config: LongCorpusConfig
) -> StageOutput:
    where = f"{corpus_stage(long_split(split))} run config"
    settings = resolve(long, config, where)
    # A shard holds the tokens of a corpus shard (4,096 x 2,048): 256 sequences at 32k, not 4,096.
    per_shard = max(1, spec.corpus.shard_sequences * spec.corpus.seq_len // settings.seq_len)
    update = {"seq_len": settings.seq_len, "long": settings, "shard_sequences": per_shard}
    corpus_settings = spec.corpus.model_copy(update=update)
    return pack(ctx, spec, split, long_split(split), corpus_settings, min_chars=settings.min_chars)


def _special_ids(layout: Layout) -> dict[str, int]:
    return TokenizerSummary.model_validate(read_manifest(layout, TOKENIZER).summary).special_ids


def _doc_lens(ctx: CheckContext) -> CheckOutcome:
    ids = _special_ids(ctx.layout)
    return check_doc_lens(ctx.parquet_outputs, ctx.manifest.config["seq_len"], ids[EOS], ids[PAD], ctx.executor)


def _no_short_splits(ctx: CheckContext) -> CheckOutcome:
    eos = _special_ids(ctx.layout)[EOS]
    return check_no_short_splits(ctx.parquet_outputs, ctx.manifest.config["seq_len"], eos, ctx.executor)


def _sequences(ctx: CheckContext) -> CheckOutcome:
    vocab = load_tokenizer(str(ctx.layout.tokenizer_json)).get_vocab_size()
    return check_sequences(ctx.parquet_outputs, ctx.manifest.config["seq_len"], vocab, ctx.executor)


def _min_chars(ctx: CheckContext) -> CheckOutcome:
    """By the corpus's pieces table when it wrote one (`audit.ledger`, which `best_fit` needs)."""
    min_chars = ctx.manifest.config["long"]["min_chars"]
    pieces = [ctx.layout.root / a.path for a in ctx.manifest.outputs if a.path.endswith(PIECES)]
    tok = ctx.layout.tokenizer_json
    return check_min_chars(ctx.parquet_outputs, tok, min_chars, ctx.executor, pieces[0] if pieces else None)


def _when_empty(check: Check, out: str) -> Check:
    """A corpus with no full sequence: a held-out split smaller than one sequence or a long
    subset with no long document passes, saying so (its summary warns). An empty corpus/train
    fails, naming what to look at: it almost always means a misconfigured spec."""

    def run(ctx: CheckContext) -> CheckOutcome:
        summary = CorpusSummary.model_validate(ctx.manifest.summary)
        if summary.sequences:
            return check.run(ctx)
        facts = f"{summary.documents:,} document(s), {summary.tokens:,} tokens, no full sequence"
        if out != "train":
            return CheckOutcome(True, f"empty: {facts}")
        seq_len = ctx.manifest.config["seq_len"]
        return CheckOutcome(
            False,
            f"corpus/train is empty: {facts} of corpus.seq_len {seq_len:,}. Look at the sources "
            "(path, include, filters), holdout's val_fraction and test_fraction, mix.train's size "
            "(rows, chars or tokens) and corpus.seq_len.",
        )

    return replace(check, run=run)


def _checks(spec: PipelineSpec, out: str, *extra: Check) -> tuple[Check, ...]:
    """The checks of packed corpus `out` (<split> or long_<split>), with what they do on an
    empty one (`_when_empty`)."""
    return tuple(_when_empty(check, out) for check in (*_packed_checks(spec), *extra))


def _packed_checks(spec: PipelineSpec) -> tuple[Check, ...]:
    return (
        schema_check(SEQ_SCHEMA),
        Check(
            "sequences",
            "Every sequence has `seq_len` ids, every id below the vocab size, at least one sequence.",
            _sequences,
            blocking=True,
        ),
        Check(
            "doc_lens",
            "`doc_lens` sums to each sequence's non-pad length; its pieces end exactly at the EOS tokens.",
            _doc_lens,
            blocking=True,
        ),
        *(
            [
                Check(
                    "no_short_splits",
                    "best_fit packing split no document shorter than `seq_len`.",
                    _no_short_splits,
                    blocking=True,
                )
            ]
            if spec.corpus.packing is Packing.best_fit
            else []
        ),
    )


def stages(spec: PipelineSpec) -> list[Stage[CorpusConfig] | Stage[LongCorpusConfig]]:
    out: list[Stage[CorpusConfig] | Stage[LongCorpusConfig]] = [
        Stage(
            name=corpus_stage(split),
            group="corpus",
            description=f"The {split} split pretokenized: every document + `</s>` (`<s>` first with `corpus.bos`), "
            "concatenated and cut into `seq_len` sequences (Parquet `input_ids: list<uint32>` with each sequence's "
            "document pieces in `doc_lens: list<uint32>`, and `index.json` for random access), plus Megatron/nanoGPT "
            "exports on request.",
            config=CorpusConfig,
            defaults=spec_defaults(CorpusConfig, spec.corpus),
            work=partial(corpus, spec, split),
            deps=(fim_stage(split), TOKENIZER),
            reads=(mixed_stage(split),),  # the mix's pool and budget, from its manifest
            checks=_checks(spec, split),
        )
        for split in SPLITS
    ]
    long = spec.corpus.long
    if long is None:
        return out
    return out + [
        Stage(
            name=corpus_stage(long_split(split)),
            group="corpus",
            description=f"Length staging: the {split} split's documents of at least `min_chars` characters, "
            f"packed like `corpus/{split}` at their own `seq_len`; `albor_pipeline.dataset` serves any corpus "
            "in shorter chunks without re-tokenizing.",
            config=LongCorpusConfig,
            defaults=spec_defaults(LongCorpusConfig, long),
            work=partial(long_corpus, long, spec, split),
            deps=(fim_stage(split), TOKENIZER),
            checks=_checks(
                spec,
                long_split(split),
                Check(
                    "min_chars",
                    "Every whole document in the long subset has at least `min_chars` characters.",
                    _min_chars,
                    blocking=True,
                ),
            ),
        )
        for split in SPLITS
    ]

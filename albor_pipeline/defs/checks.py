"""Asset checks: stage schemas, train/held-out leak, FIM rate, round-trip, corpus shape."""

import dagster as dg
import pyarrow as pa
from tokenizers import Tokenizer

from albor_pipeline.core.artifacts import read_manifest
from albor_pipeline.core.checks import (
    CheckOutcome,
    check_fim_rate,
    check_no_leak,
    check_roundtrip,
    check_schema,
    check_sequences,
)
from albor_pipeline.core.corpus import SEQ_SCHEMA
from albor_pipeline.core.fim import FIM_SCHEMA
from albor_pipeline.core.ingest import DOC_SCHEMA
from albor_pipeline.defs.corpus import corpus_key
from albor_pipeline.defs.documents import DOCUMENTS
from albor_pipeline.defs.fim import fim_key
from albor_pipeline.defs.ingestion import ingested_key
from albor_pipeline.defs.mix import mixed_key
from albor_pipeline.defs.resources import ArtifactStore
from albor_pipeline.defs.stage import stage_name
from albor_pipeline.defs.tokenizer import TOKENIZER
from albor_pipeline.spec import SPLITS, PipelineSpec


def _result(outcome: CheckOutcome) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=outcome.passed,
        description=outcome.description,
        metadata={
            k: dg.MetadataValue.json(v) if isinstance(v, (dict, list)) else v for k, v in outcome.metadata.items()
        },
    )


def _schema_check(key: dg.AssetKey, schema: pa.Schema) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=key, name="schema", blocking=True, description="Parquet schema matches the stage contract.")
    def _check(store: ArtifactStore) -> dg.AssetCheckResult:
        outputs = read_manifest(store.root, stage_name(key)).outputs
        return _result(check_schema([store.root / a.path for a in outputs if a.path.endswith(".parquet")], schema))

    return _check


def _fim_rate_check(split: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=fim_key(split), name="fim_rate", description="Observed FIM share within 5 sigma of `rate`.")
    def _check(store: ArtifactStore) -> dg.AssetCheckResult:
        config = read_manifest(store.root, f"fim/{split}").config
        rate = config["rate"] if config["enabled"] else 0.0
        return _result(check_fim_rate(store.path("fim", f"{split}.parquet"), rate))

    return _check


def _corpus_check(split: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=corpus_key(split),
        name="sequences",
        blocking=True,
        description="Every sequence has seq_len ids, every id < vocab size, at least one sequence.",
    )
    def _check(store: ArtifactStore) -> dg.AssetCheckResult:
        manifest = read_manifest(store.root, f"corpus/{split}")
        vocab = Tokenizer.from_file(str(store.path("tokenizer", "tokenizer.json"))).get_vocab_size()
        shards = [store.root / a.path for a in manifest.outputs if a.path.endswith(".parquet")]
        return _result(check_sequences(shards, manifest.config["seq_len"], vocab))

    return _check


def pipeline_checks(spec: PipelineSpec) -> list[dg.AssetChecksDefinition]:
    @dg.asset_check(
        asset=DOCUMENTS,
        name="no_train_leak",
        blocking=True,
        description="val and test share no document (sha256) with train.",
    )
    def no_train_leak(store: ArtifactStore) -> dg.AssetCheckResult:
        d = store.path("documents")
        return _result(check_no_leak(d / "train.parquet", d / "val.parquet", d / "test.parquet"))

    @dg.asset_check(
        asset=TOKENIZER,
        name="val_roundtrip",
        blocking=True,
        description="Every val document decodes back to its exact text.",
    )
    def val_roundtrip(store: ArtifactStore) -> dg.AssetCheckResult:
        return _result(check_roundtrip(store.path("tokenizer", "report.json")))

    checks = [no_train_leak, val_roundtrip]
    checks += [_schema_check(ingested_key(s.name), DOC_SCHEMA) for s in spec.sources]
    checks += [_schema_check(DOCUMENTS, DOC_SCHEMA)]
    checks += [_schema_check(mixed_key(s), DOC_SCHEMA) for s in SPLITS]
    checks += [_schema_check(fim_key(s), FIM_SCHEMA) for s in SPLITS]
    checks += [_schema_check(corpus_key(s), SEQ_SCHEMA) for s in SPLITS]
    checks += [_fim_rate_check(s) for s in SPLITS]
    checks += [_corpus_check(s) for s in SPLITS]
    return checks

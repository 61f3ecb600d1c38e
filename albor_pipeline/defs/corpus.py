"""Pretokenized corpora: EOS-separated, packed into seq_len sequences, optional exports."""

import dagster as dg

from albor_pipeline.core.corpus import build_corpus
from albor_pipeline.defs.config import config_class, to_spec
from albor_pipeline.defs.fim import fim_key
from albor_pipeline.defs.resources import ArtifactStore
from albor_pipeline.defs.stage import finish_stage, stage_asset, upstream_outputs
from albor_pipeline.defs.tokenizer import TOKENIZER
from albor_pipeline.spec import PipelineSpec


def corpus_key(split: str) -> dg.AssetKey:
    return dg.AssetKey(["corpus", split])


def corpus_asset(spec: PipelineSpec, split: str) -> dg.AssetsDefinition:
    Config = config_class(f"Corpus{split.title()}Config", spec.corpus)

    @stage_asset(
        corpus_key(split),
        [fim_key(split), TOKENIZER],
        "corpus",
        f"The {split} split pretokenized: every document + </s>, concatenated and cut into seq_len "
        "sequences (Parquet input_ids: list<uint32>), plus Megatron/nanoGPT exports on request.",
    )
    def _corpus(context: dg.AssetExecutionContext, config: Config, store: ArtifactStore) -> dg.MaterializeResult:  # type: ignore[valid-type]
        corpus = to_spec(config, spec.corpus)
        inputs = upstream_outputs(store.root, f"fim/{split}", "tokenizer")
        result = build_corpus(
            store.path("fim", f"{split}.parquet"),
            store.path("tokenizer", "tokenizer.json"),
            corpus,
            store.path("corpus", split),
            store.root,
            progress=context.log.info,
        )
        bpt = result.text_bytes / result.tokens if result.tokens else 0.0
        summary = {
            "documents": result.documents,
            "sequences": result.sequences,
            "tokens": result.tokens,
            "dropped_tokens": result.dropped_tokens,
            "padded_tokens": result.padded_tokens,
        }
        return finish_stage(
            context,
            store.root,
            result.artifacts,
            inputs,
            corpus.model_dump(mode="json"),
            summary,
            row_count=result.sequences,
            extra={
                **summary,
                "bytes_per_token": round(bpt, 4),
                "encoder": result.encoder,
                "tokens_per_s": round(result.tokens / result.seconds) if result.seconds else 0,
            },
        )

    return _corpus

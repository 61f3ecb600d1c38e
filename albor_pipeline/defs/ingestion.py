"""One observable source and one ingestion asset per spec source (an asset factory)."""

from pathlib import Path

import dagster as dg

from albor_pipeline.core.ingest import ingest_source, source_fingerprint
from albor_pipeline.core.markdown import markdown_table
from albor_pipeline.defs.config import config_class, to_spec
from albor_pipeline.defs.resources import ArtifactStore
from albor_pipeline.defs.stage import finish_stage, stage_asset
from albor_pipeline.spec import SourceSpec

GROUP = "ingestion"


def source_key(name: str) -> dg.AssetKey:
    return dg.AssetKey(["source", name])


def ingested_key(name: str) -> dg.AssetKey:
    return dg.AssetKey(["ingested", name])


def fingerprint_cache(store: ArtifactStore, name: str) -> Path:
    """Per-file hashes cached by (size, mtime) so an unchanged tree is not re-read."""
    return store.path("cache", "fingerprints", f"{name}.json")


def source_observation(src: SourceSpec) -> dg.SourceAsset:
    @dg.observable_source_asset(
        key=source_key(src.name),
        group_name=GROUP,
        required_resource_keys={"store"},
        description=f"Files of source `{src.name}` ({src.kind.value}) under {src.path}; "
        "its data version is a content fingerprint of exactly the files ingestion reads.",
    )
    def _observe(context) -> dg.ObserveResult:
        store: ArtifactStore = context.resources.store
        source = source_fingerprint(src, fingerprint_cache(store, src.name))
        return dg.ObserveResult(
            data_version=dg.DataVersion(source.sha256),
            metadata={"files": source.rows, "bytes": source.bytes, "fingerprint": source.sha256, "path": str(src.path)},
        )

    return _observe


def ingestion_asset(src: SourceSpec) -> dg.AssetsDefinition:
    Config = config_class(f"Ingest{src.name.title().replace('_', '')}Config", src, exclude=("name", "kind"))

    @stage_asset(
        ingested_key(src.name),
        [source_key(src.name)],
        GROUP,
        f"Documents of `{src.name}` as Parquet {{text, source, file, sha256}}; "
        "files that are not UTF-8, too short or too long are skipped and counted.",
    )
    def _ingest(context: dg.AssetExecutionContext, config: Config, store: ArtifactStore) -> dg.MaterializeResult:  # type: ignore[valid-type]
        resolved = to_spec(config, src)
        source = source_fingerprint(resolved, fingerprint_cache(store, src.name))
        result = ingest_source(
            resolved, store.path("ingested", f"{src.name}.parquet"), store.root, progress=context.log.info
        )
        skipped = sum(result.skipped.values())
        summary = {
            "files": result.files,
            "documents": result.artifact.rows,
            "text_bytes": result.text_bytes,
            "skipped": result.skipped,
        }
        return finish_stage(
            context,
            store.root,
            [result.artifact],
            [source],
            resolved.model_dump(mode="json"),
            summary,
            extra={
                "files": result.files,
                "text_bytes": result.text_bytes,
                "skipped_total": skipped,
                "skipped": dg.MetadataValue.md(
                    markdown_table([{"reason": k, "files": v} for k, v in result.skipped.items()]) or "nothing skipped"
                ),
            },
        )

    return _ingest

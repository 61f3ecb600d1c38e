"""Hygiene: filters + redaction as the filtered/<source> stages run them, redaction alone, and
the documents stage with near dedup against datatrove's MinHash."""

from __future__ import annotations

import fnmatch
import random
import shutil
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import HoldoutSpec, HygieneSpec, NearDedupSpec
from albor_pipeline.stages.documents.documents import build_documents
from albor_pipeline.stages.hygiene.hygiene import clean_source
from albor_pipeline.stages.tokenizer.tokenizer import iter_texts
from albor_pipeline.text.documents import DOC_SCHEMA, text_sha256
from albor_pipeline.text.secrets import SecretScanner
from bench.common import DATATROVE_MISSING, LOCAL, ingest_code, median_time


def bench_hygiene(corpora: list[Path], work: Path, repeat: int) -> dict[str, Any]:
    """Filters + redaction as the filtered/<source> stages run them, redaction alone, and
    near dedup against datatrove's MinHash."""
    ingested, text_bytes = ingest_code(corpora, work)
    res: dict[str, Any] = {"corpus_mb": round(text_bytes / 1e6, 1)}
    sec, results = median_time(
        lambda: [
            clean_source(work / "ingested" / n, HygieneSpec(), work / "filtered" / n, StageIO(work, LOCAL))
            for n in dict(ingested)
        ],
        repeat,
    )
    res["hygiene_mb_s"] = round(text_bytes / 1e6 / sec, 1)
    res["hygiene_findings"] = dict(sum((Counter(r.summary.findings) for r in results), Counter()))
    # Redaction alone: the scanner and the rewrite in one process over every document.
    scanner = SecretScanner()
    texts = [t for _, out in ingested for b in iter_texts(out) for t in b]
    sec, _ = median_time(lambda: [scanner.scan(t).redact(t) for t in texts], repeat)
    res["redaction_1proc_mb_s"] = round(text_bytes / 1e6 / sec, 1)
    res.update(bench_near_dedup(ingested, work, repeat))
    return res


def bench_near_dedup(ingested: list[tuple[str, Path]], work: Path, repeat: int) -> dict[str, Any]:
    """The documents stage with near dedup (exact + MinHash LSH + verification + writing the
    splits) against datatrove's four MinHash steps (signature, buckets, cluster, filter with a
    Parquet writer), same documents, 5-grams, 14 bands x 8 rows, one process each."""
    holdout = HoldoutSpec(val_fraction=0.01, test_fraction=0.01)
    near = NearDedupSpec()
    ours_s, result = median_time(
        lambda: build_documents(ingested, holdout, work / "near_documents", StageIO(work), near=near), repeat
    )
    exact_s, _ = median_time(
        lambda: build_documents(ingested, holdout, work / "exact_documents", StageIO(work)), repeat
    )
    docs = sum(pq.ParquetFile(p).metadata.num_rows for _, p in ingested)
    kept = sum(sum(r.values()) for r in result.summary.rows.values())
    res: dict[str, Any] = {
        "near_dedup_documents": docs,
        "near_dedup_s": round(ours_s, 2),
        "near_dedup_only_s": round(ours_s - exact_s, 2),
        "near_dedup_removed": docs - kept,
    }
    # The same bytes twice more: as one cluster of near-copies, and as distinct documents
    # (each copy's lines shuffled); the difference is what the cluster costs beyond its bytes.
    runs = {}
    for name, shuffled in (("distinct", True), ("cluster", False)):
        extra = [(name, template_cluster(work / f"{name}.parquet", CLUSTER, shuffled))]
        runs[name] = median_time(
            partial(build_documents, [*ingested, *extra], holdout, work / f"{name}_docs", StageIO(work), near=near),
            repeat,
        )
    found = runs["cluster"][1].summary.near_duplicates
    res["cluster_members"] = CLUSTER
    res["cluster_s"], res["distinct_s"] = round(runs["cluster"][0], 2), round(runs["distinct"][0], 2)
    res["cluster_adds_s"] = round(runs["cluster"][0] - runs["distinct"][0], 2)
    res["cluster_found_whole"] = found is not None and max(map(int, found.cluster_sizes), default=0) >= CLUSTER
    datatrove = datatrove_minhash(work, near, repeat)
    if datatrove is None:
        return {**res, "datatrove_minhash": DATATROVE_MISSING}
    dt_s, dt_kept = datatrove
    return {
        **res,
        "datatrove_minhash_s": round(dt_s, 2),
        "datatrove_minhash_removed": docs - dt_kept,
        "near_dedup_vs_datatrove": round(dt_s / ours_s, 2),
    }


CLUSTER = 10_000  # near-copies of one page, as a template or a mirror serves it


def template_cluster(path: Path, members: int, shuffled: bool = False) -> Path:
    """`members` near-copies of a real 6 KB file (the stdlib's fnmatch.py), each with a footer
    of its own: one near-duplicate cluster, as templated web pages form. `shuffled`: each
    copy's lines in an order of its own, so the same bytes are distinct documents."""
    lines = (Path(fnmatch.__file__)).read_text(encoding="utf-8").splitlines()
    texts = []
    for k in range(members):
        order = random.Random(k).sample(lines, len(lines)) if shuffled else lines
        texts.append("\n".join(order) + f"\n# mirror {k}: served by node {k * 7919 % 104729}\n")
    table = pa.table(
        {
            "text": texts,
            "source": ["cluster"] * members,
            "file": [f"page{k}.html" for k in range(members)],
            "sha256": [text_sha256(t) for t in texts],
        },
        schema=DOC_SCHEMA,
    )
    pq.write_table(table, path, row_group_size=256)
    return path


def datatrove_minhash(work: Path, near: NearDedupSpec, repeat: int) -> tuple[float, int] | None:
    """datatrove's four MinHash steps on the ingested shards under `work`, with `near`'s
    n-grams and bands: (median seconds, documents kept), or None without datatrove."""
    try:
        from datatrove.executor import LocalPipelineExecutor
        from datatrove.pipeline.dedup import (
            MinhashDedupBuckets,
            MinhashDedupCluster,
            MinhashDedupFilter,
            MinhashDedupSignature,
        )
        from datatrove.pipeline.dedup.minhash import MinhashConfig
        from datatrove.pipeline.readers import ParquetReader
        from datatrove.pipeline.writers import ParquetWriter
        from datatrove.utils.hashing import HashConfig
    except ImportError:
        return None
    config = MinhashConfig(
        n_grams=near.ngram,
        num_buckets=near.bands,
        hashes_per_bucket=near.num_perm // near.bands,
        # sha1: datatrove's xxhash path passes str, which xxhash 4 rejects.
        hash_config=HashConfig(precision=64, hash_fc="sha1"),
    )
    folder = work / "ingested"
    base = work / "datatrove_minhash"

    def run() -> None:
        shutil.rmtree(base, ignore_errors=True)

        def reader() -> ParquetReader:
            return ParquetReader(str(folder), glob_pattern="*/part-*.parquet", text_key="text", id_key="sha256")

        sigs, buckets, ids = str(base / "sigs"), str(base / "buckets"), str(base / "ids")
        steps: list[tuple[list[Any], int]] = [
            ([reader(), MinhashDedupSignature(output_folder=sigs, config=config)], 1),
            ([MinhashDedupBuckets(input_folder=sigs, output_folder=buckets, config=config)], config.num_buckets),
            ([MinhashDedupCluster(input_folder=buckets, output_folder=ids, config=config)], 1),
            ([reader(), MinhashDedupFilter(input_folder=ids), ParquetWriter(str(base / "out"))], 1),
        ]
        for i, (pipeline, tasks) in enumerate(steps):
            LocalPipelineExecutor(
                pipeline, tasks=tasks, workers=1, logging_dir=str(base / f"logs{i}"), skip_completed=False
            ).run()

    dt_s, _ = median_time(run, repeat)
    kept = sum(pq.ParquetFile(p).metadata.num_rows for p in (base / "out").rglob("*.parquet"))
    return dt_s, kept

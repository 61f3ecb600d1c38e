"""The corpus index a reader opens (`albor_pipeline.dataset`)."""

from __future__ import annotations

from typing import Any

from albor_pipeline.runtime.shards import Shard
from albor_pipeline.spec import CorpusSpec, ExportFormat
from albor_pipeline.stages.corpus.exports import STREAMS
from albor_pipeline.text.sequences import INDEX_FORMAT, ROW_GROUP_SEQUENCES
from albor_pipeline.text.vocab import token_dtype


def reader_index(
    spec: CorpusSpec, counts: dict[str, int], special_ids: dict[str, int | None], shards: list[Shard], min_chars: int
) -> dict[str, Any]:
    """The index of a corpus dir: its shape (`counts`: documents, tokens, vocab_size), the
    Parquet shards' layout and each export stream's dtype."""
    formats, vocab = set(spec.formats), counts["vocab_size"]
    return {
        "format": INDEX_FORMAT,
        "seq_len": spec.seq_len,
        "packing": spec.packing.value,
        "min_chars": min_chars,
        **counts,
        "special_ids": special_ids,
        "bos": spec.bos,
        "parquet": {
            "sequences": sum(shard.rows for shard in shards),
            "shard_sequences": spec.shard_sequences,
            "row_group_sequences": ROW_GROUP_SEQUENCES,
            "shards": [{"file": shard.name, "sequences": shard.rows} for shard in shards],
        }
        if ExportFormat.parquet in formats
        else None,
        "streams": {
            name: {"dtype": token_dtype(vocab, signed=signed).name, "tokens": counts["tokens"]}
            for fmt, name, signed in STREAMS
            if fmt in formats
        },
    }

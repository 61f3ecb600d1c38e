"""The layout of a sequence dir that `albor_pipeline.dataset` opens: a corpus split
(`corpus/<split>`) or packed SFT rows (`sft/<split>` with `chat.packing: best_fit`)."""

from __future__ import annotations

import pyarrow as pa

INDEX_FILE = "index.json"

INDEX_FORMAT = "albor-corpus/1"
"""What a reader needs for O(1) random access to a sequence dir: sequence i is row
(i % shard_sequences) % row_group_sequences of row group (i % shard_sequences) //
row_group_sequences of shard i // shard_sequences."""

ROW_GROUP_SEQUENCES = 32  # one random read decodes 32 sequences: ~1.4k sequences/s vs ~240 at 256, same bytes

DOC_LENS = pa.list_(pa.uint32())
"""`doc_lens`: the lengths of the document pieces in a sequence, in order, summing to its
non-pad length; a trainer builds position-id resets or `cu_seqlens` from it."""


SEQ_SCHEMA = pa.schema([("input_ids", pa.list_(pa.uint32())), ("doc_lens", DOC_LENS)])


PACKED_SCHEMA = pa.schema(
    [
        ("input_ids", pa.list_(pa.uint32())),
        ("loss_mask", pa.list_(pa.uint8())),
        ("doc_lens", DOC_LENS),  # each conversation's length, in order; padding follows them
        ("sources", pa.list_(pa.string())),
        ("sha256", pa.list_(pa.string())),
        ("messages", pa.list_(pa.string())),
    ]
)

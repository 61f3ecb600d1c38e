"""A worker process that encodes row groups of a FIM Parquet file.

Started as `python -m albor_pipeline.core.encode_worker FIM TOKENIZER K N` (a fresh
interpreter: no fork of a threaded parent, no re-import of the caller's script), so
it can load while the parent picks the encoder. It reads the encoder's name from
stdin, then encodes row groups K, K+N, K+2N, ... and writes for each a frame to
stdout: three little-endian int64 (ids, documents, text bytes), then the uint32 ids
and the int64 document lengths. A blocked stdout pipe is the back-pressure that
bounds memory.
"""

from __future__ import annotations

import struct
import sys

from albor_pipeline.core.corpus import _WORKER, _encode_row_group, _init_worker

HEADER = struct.Struct("<qqq")


def main() -> None:
    fim_path, tokenizer_path, first, step = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    # Build the usual encoder while the parent checks it against HF on a sample.
    _init_worker(fim_path, tokenizer_path, "tiktoken", 1)
    encoder_name = sys.stdin.readline().strip()
    if not encoder_name:
        return  # the parent decided not to use this worker
    if encoder_name != "tiktoken":
        _init_worker(fim_path, tokenizer_path, encoder_name, 1)
    out = sys.stdout.buffer
    for index in range(first, _WORKER["file"].num_row_groups, step):
        flat, lengths, text_bytes = _encode_row_group(index)
        out.write(HEADER.pack(len(flat), len(lengths), text_bytes))
        out.write(flat.tobytes())
        out.write(lengths.tobytes())
        out.flush()


if __name__ == "__main__":
    main()

"""A worker process that encodes row groups of a FIM Parquet file.

Started as `python -m albor_pipeline.core.encode_worker FIM TOKENIZER ENCODER` (a
fresh interpreter: no fork of a threaded parent, no re-import of the caller's
script). It reads row-group indices, one per stdin line, and writes for each a
frame to stdout: three little-endian int64 (ids, documents, text bytes), then the
uint32 ids and the int64 document lengths. A blocked stdout pipe is the
back-pressure that bounds memory.
"""

from __future__ import annotations

import struct
import sys

from albor_pipeline.core.corpus import _encode_row_group, _init_worker

HEADER = struct.Struct("<qqq")


def main() -> None:
    fim_path, tokenizer_path, encoder_name = sys.argv[1:4]
    _init_worker(fim_path, tokenizer_path, encoder_name, 1)
    out = sys.stdout.buffer
    for line in sys.stdin:
        flat, lengths, text_bytes = _encode_row_group(int(line))
        out.write(HEADER.pack(len(flat), len(lengths), text_bytes))
        out.write(flat.tobytes())
        out.write(lengths.tobytes())
        out.flush()


if __name__ == "__main__":
    main()

"""Pretokenization: encode documents, append EOS, pack into fixed-length sequences.

Outputs Parquet shards (`input_ids: list<uint32>`, seed 000's schema) and, on request,
a Megatron MMIDIDX v1 `.bin/.idx` pair (one sequence per document, EOD appended) and a
flat nanoGPT-style token `.bin` with a JSON sidecar. Memory is bounded by the batch.
"""

from __future__ import annotations

import bisect
import struct
import time
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from albor_pipeline.core.artifacts import (
    Artifact,
    BackgroundWrites,
    ParquetSink,
    atomic_path,
    record,
    staged_dir,
    write_json,
)
from albor_pipeline.core.documents import sha_keys
from albor_pipeline.core.encode import Encoder, pick_encoder
from albor_pipeline.core.encode_worker import EncodeJob, RowGroup, RowGroupEncoder, encode_row_group
from albor_pipeline.core.executor import INLINE, Executor, for_items
from albor_pipeline.core.shards import row_groups
from albor_pipeline.core.stage import Progress
from albor_pipeline.core.vocab import BOS, EOS, PAD
from albor_pipeline.spec import CorpusSpec, ExportFormat, Packing, RemainderPolicy

SEQ_SCHEMA = pa.schema([("input_ids", pa.list_(pa.uint32())), ("doc_lens", pa.list_(pa.uint32()))])
"""`doc_lens`: the lengths of the document pieces in a sequence, in order, summing to its
non-pad length; a trainer builds position-id resets or `cu_seqlens` from it."""
INDEX_FILE = "index.json"
INDEX_FORMAT = "albor-corpus/1"
"""What a reader needs for O(1) random access to a corpus dir (`albor_pipeline.dataset`):
sequence i is row (i % shard_sequences) % row_group_sequences of row group
(i % shard_sequences) // row_group_sequences of shard i // shard_sequences."""
ROW_GROUP_SEQUENCES = 32  # one random read decodes 32 sequences: ~1.4k sequences/s vs ~240 at 256, same bytes
STREAMS = ((ExportFormat.megatron, "megatron.bin", True), (ExportFormat.nanogpt, "tokens.bin", False))
"""Token-stream exports: (format, file, signed dtype): Megatron wants int32 past uint16, nanoGPT uint32."""
MMIDIDX_MAGIC = b"MMIDIDX\x00\x00"
MEGATRON_DTYPE_CODES = {np.dtype(np.uint16): 8, np.dtype(np.int32): 4}
PROGRESS_SECONDS = 5.0


def token_dtype(vocab_size: int, signed: bool = False) -> np.dtype:
    """uint16 when every id fits, else int32 (Megatron) / uint32 (flat stream)."""
    if vocab_size <= 65536:
        return np.dtype(np.uint16)
    return np.dtype(np.int32 if signed else np.uint32)


@dataclass
class Packed:
    """Full sequences and the document pieces of each (piece lengths, sequence after sequence)."""

    seqs: np.ndarray  # (n, seq_len) uint32
    pieces: np.ndarray  # uint32 lengths of the document pieces
    counts: np.ndarray  # pieces per sequence

    def split(self, k: int) -> tuple[Packed, Packed]:
        """(the first k sequences, the rest)."""
        at = int(self.counts[:k].sum())
        return (
            Packed(self.seqs[:k], self.pieces[:at], self.counts[:k]),
            Packed(self.seqs[k:], self.pieces[at:], self.counts[k:]),
        )


def _empty(seq_len: int) -> Packed:
    return Packed(np.zeros((0, seq_len), dtype=np.uint32), np.zeros(0, np.uint32), np.zeros(0, np.int64))


def _concat(parts: list[Packed], seq_len: int) -> Packed:
    if not parts:
        return _empty(seq_len)
    return Packed(
        np.concatenate([p.seqs for p in parts]),
        np.concatenate([p.pieces for p in parts]),
        np.concatenate([p.counts for p in parts]),
    )


class ConcatPacker:
    """Concatenates EOS-terminated documents and cuts the stream every `seq_len` tokens.

    Keeps the leftover tokens (and their piece lengths) for the next call, so sequences do
    not depend on how the documents arrive in batches, and counts the documents a sequence
    edge cuts. The final leftover is padded (`pad`) or dropped.
    """

    def __init__(self, seq_len: int, pad_id: int, pad_remainder: bool = False) -> None:
        self.seq_len, self.pad_id, self.pad_remainder = seq_len, pad_id, pad_remainder
        self.ids = np.zeros(0, dtype=np.uint32)
        self.lens = np.zeros(0, dtype=np.int64)  # piece lengths of the leftover, summing to len(ids)
        self.cut_documents = self.padded = self.dropped = 0

    def add(self, flat: np.ndarray, lengths: np.ndarray) -> Packed:
        """Pack `flat` (documents of `lengths` tokens) after the leftover; return the full sequences."""
        L = self.seq_len
        continued = len(self.ids) > 0  # the leftover's first piece continues a document already cut
        ids = np.concatenate([self.ids, flat]) if continued else flat
        lens = np.concatenate([self.lens, lengths.astype(np.int64)]) if continued else lengths.astype(np.int64)
        n = len(ids) // L
        cut = n * L
        ends = np.cumsum(lens)
        edges = np.arange(L, cut + 1, L, dtype=np.int64)
        cutting = edges[~np.isin(edges, ends)]  # sequence edges inside a document
        cut_docs = np.unique(np.searchsorted(ends, cutting, side="right"))
        self.cut_documents += int(len(cut_docs) - (continued and len(cut_docs) > 0 and cut_docs[0] == 0))
        bounds = np.union1d(ends[ends < cut], edges)
        starts = np.concatenate([[0], bounds[:-1]])
        pieces = (bounds - starts).astype(np.uint32)
        counts = np.bincount(starts // L, minlength=n) if n else np.zeros(0, dtype=np.int64)
        self.ids = ids[cut:]
        self.lens = np.diff(np.concatenate([[cut], ends[ends > cut]]))
        return Packed(ids[:cut].reshape(n, L), pieces, counts)

    def finish(self) -> Packed:
        """The leftover as one padded sequence (`pad_remainder`), else nothing (it is dropped)."""
        if not len(self.ids):
            return _empty(self.seq_len)
        if not self.pad_remainder:
            self.dropped = len(self.ids)
            return _empty(self.seq_len)
        self.padded = self.seq_len - len(self.ids)
        padded = np.concatenate([self.ids, np.full(self.padded, self.pad_id, dtype=np.uint32)])
        return Packed(padded.reshape(1, self.seq_len), self.lens.astype(np.uint32), np.array([len(self.lens)]))


class BestFitPacker:
    """Whole documents into `seq_len` bins, best-fit decreasing over a window of documents.

    A document longer than `seq_len` is the only one ever split: its full `seq_len` chunks
    become sequences of their own and its tail is packed like a document. Each window of
    `window` documents is packed into its own bins, padded with `pad_id`, so memory is
    bounded by the window and the output depends only on the documents' order.
    """

    def __init__(self, seq_len: int, pad_id: int, window: int) -> None:
        self.seq_len, self.pad_id, self.window = seq_len, pad_id, window
        self.docs: list[np.ndarray] = []
        self.cut_documents = self.padded = self.dropped = 0

    def add(self, flat: np.ndarray, lengths: np.ndarray) -> Packed:
        L, out = self.seq_len, []
        for doc in np.split(flat, np.cumsum(lengths)[:-1]) if len(lengths) else []:
            if len(doc) > L:
                self.cut_documents += 1
                full = len(doc) // L * L
                chunks = doc[:full].reshape(-1, L)
                out.append(Packed(chunks, np.full(len(chunks), L, np.uint32), np.ones(len(chunks), np.int64)))
                doc = doc[full:]
            if len(doc):
                self.docs.append(doc)
            if len(self.docs) >= self.window:
                out.append(self._pack_window())
        return _concat(out, L)

    def finish(self) -> Packed:
        return self._pack_window()

    def _pack_window(self) -> Packed:
        L, docs = self.seq_len, self.docs
        self.docs = []
        bins: list[list[int]] = []
        room: list[tuple[int, int]] = []  # (free tokens, bin), sorted: the best fit is the first that fits
        for i in sorted(range(len(docs)), key=lambda i: (-len(docs[i]), i)):
            n = len(docs[i])
            at = bisect.bisect_left(room, (n, -1))
            if at < len(room):
                free, b = room.pop(at)
                bins[b].append(i)
            else:
                free, b = L, len(bins)
                bins.append([i])
            bisect.insort(room, (free - n, b))
        if not bins:
            return _empty(L)
        seqs = np.full((len(bins), L), self.pad_id, dtype=np.uint32)
        pieces = []
        for row, members in enumerate(bins):
            tokens = np.concatenate([docs[i] for i in members])
            seqs[row, : len(tokens)] = tokens
            self.padded += L - len(tokens)
            pieces += [len(docs[i]) for i in members]
        return Packed(seqs, np.array(pieces, dtype=np.uint32), np.array([len(m) for m in bins], dtype=np.int64))


Packer = ConcatPacker | BestFitPacker


def make_packer(spec: CorpusSpec, pad_id: int) -> Packer:
    if spec.packing is Packing.best_fit:
        return BestFitPacker(spec.seq_len, pad_id, spec.best_fit_window)
    return ConcatPacker(spec.seq_len, pad_id, pad_remainder=spec.remainder is RemainderPolicy.pad)


class SourceAccounting:
    """Per source: documents, unique documents, repeats, tokens, token share and epochs.

    The mix can repeat a source's documents many times while its share of tokens stays
    small; this says both. Epochs = the source's tokens / the tokens of its unique documents
    (a repeated document counts its first occurrence's tokens once). Memory: ~30 bytes a
    document (its source, a 16-byte key of its SHA-256 and its tokens), counted by one
    sort at the end.
    """

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, sources: list[str], sha256s: pa.Array, lengths: np.ndarray) -> None:
        codes = np.array([self._codes.setdefault(s, len(self._codes)) for s in sources], dtype=np.int32)
        self._parts.append((codes, sha_keys(sha256s), lengths.astype(np.int64, copy=False)))

    def summary(self) -> dict[str, dict[str, float | int]]:
        if not self._parts:
            return {}
        codes, keys, lengths = (np.concatenate(column) for column in zip(*self._parts))
        total = int(lengths.sum())
        out = {}
        for source, code in sorted(self._codes.items()):
            mine = codes == code
            _, first, copies = np.unique(keys[mine], return_index=True, return_counts=True)
            tokens, unique_tokens = int(lengths[mine].sum()), int(lengths[mine][first].sum())
            out[source] = {
                "documents": int(mine.sum()),
                "unique_documents": len(first),
                "max_repeat": int(copies.max()),
                "mean_repeat": round(int(mine.sum()) / len(first), 4),
                "tokens": tokens,
                "token_share": round(tokens / total, 6) if total else 0.0,
                "epochs": round(tokens / unique_tokens, 4),
            }
        return out


def _list_array(values: np.ndarray, counts: np.ndarray) -> pa.ListArray:
    offsets = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values.astype(np.uint32, copy=False)))


def sequences_batch(packed: Packed) -> pa.RecordBatch:
    n, seq_len = packed.seqs.shape
    ids = _list_array(packed.seqs.reshape(-1), np.full(n, seq_len))
    return pa.RecordBatch.from_arrays([ids, _list_array(packed.pieces, packed.counts)], schema=SEQ_SCHEMA)


def megatron_index(lengths: np.ndarray, dtype: np.dtype) -> bytes:
    """MMIDIDX v1: header, int32 lengths, int64 byte pointers, int64 document indices."""
    n = len(lengths)
    pointers = np.zeros(n, dtype=np.int64)
    if n:
        np.cumsum(lengths[:-1].astype(np.int64) * dtype.itemsize, out=pointers[1:])
    doc_idx = np.arange(n + 1, dtype=np.int64)
    header = MMIDIDX_MAGIC + struct.pack("<Q", 1) + struct.pack("<B", MEGATRON_DTYPE_CODES[dtype])
    header += struct.pack("<Q", n) + struct.pack("<Q", n + 1)
    return header + lengths.astype(np.int32).tobytes() + pointers.tobytes() + doc_idx.tobytes()


class _ShardedSink:
    """Parquet shards of at most `per_shard` sequences: part-00000.parquet, ..."""

    def __init__(self, out_dir: Path, per_shard: int) -> None:
        self.out_dir, self.per_shard = out_dir, per_shard
        self.paths: list[Path] = []
        self.rows: list[int] = []
        self._sink: ParquetSink | None = None

    def write(self, packed: Packed) -> None:
        while len(packed.seqs):
            if self._sink is None or self._sink.rows >= self.per_shard:
                self.close()
                # No dictionary: ~32k distinct ids per row group make it cost time and bytes (+23 %).
                self._sink = ParquetSink(
                    self.out_dir / f"part-{len(self.paths):05d}.parquet",
                    SEQ_SCHEMA,
                    ROW_GROUP_SEQUENCES,
                    use_dictionary=False,
                )
                self._sink.__enter__()
                self.paths.append(self._sink.path)
            head, packed = packed.split(self.per_shard - self._sink.rows)
            self._sink.write(sequences_batch(head))

    def close(self, exc: BaseException | None = None) -> None:
        if self._sink is not None:
            self.rows.append(self._sink.rows)
            self._sink.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
            self._sink = None


@dataclass
class CorpusResult:
    artifacts: list[Artifact]
    documents: int
    sequences: int
    tokens: int
    dropped_tokens: int
    padded_tokens: int
    cut_documents: int  # documents split across two or more sequences
    sources: dict[str, dict[str, float | int]]  # SourceAccounting.summary()
    text_bytes: int
    encoder: str
    seconds: float


def _encoded_row_groups(
    groups: list[RowGroup],
    tokenizer_path: Path,
    tok: Tokenizer,
    encoder: Encoder,
    executor: Executor,
    bos: bool,
    min_chars: int,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, int]]:
    """Encoded row groups in input order, so output never depends on where they ran.

    Inline, the stage's own encoder runs; on an executor, each task reads its row group
    straight from its Parquet shard (no text crosses a process boundary) and encodes it
    with the encoder the stage picked, built once per worker.
    """
    if executor is INLINE:
        return map(RowGroupEncoder(tok, encoder, bos, min_chars).encode, groups)
    job = EncodeJob(str(tokenizer_path), encoder.name, bos, min_chars)
    return executor.map(partial(encode_row_group, job), groups)


def build_corpus(
    fim_path: Path,
    tokenizer_path: Path,
    spec: CorpusSpec,
    out_dir: Path,
    data_root: Path,
    executor: Executor = INLINE,
    progress: Progress | None = None,
    min_chars: int = 0,
) -> CorpusResult:
    """Pretokenize one split's FIM'd documents (a shard set or file) into `out_dir`: an ordered
    pass over the row groups' token streams.

    `executor`: where row groups are encoded (inline for files of fewer than 4 on a local pool).
    `min_chars`: only documents of at least this many characters (before FIM): the long subset.
    """
    start = time.perf_counter()
    tok = Tokenizer.from_file(str(tokenizer_path))
    groups = row_groups(fim_path)
    executor = for_items(executor, len(groups), 4)
    with staged_dir(out_dir) as staging:  # the split's files are replaced as one set, or not at all
        result = _write_corpus(
            tok, groups, tokenizer_path, spec, staging, data_root, executor, progress, start, min_chars
        )
    final = [(out_dir / Path(a.path).name).relative_to(data_root).as_posix() for a in result.artifacts]
    result.artifacts = [a.model_copy(update={"path": path}) for a, path in zip(result.artifacts, final)]
    return result


def _write_corpus(
    tok: Tokenizer,
    groups: list[RowGroup],
    tokenizer_path: Path,
    spec: CorpusSpec,
    out_dir: Path,
    data_root: Path,
    executor: Executor,
    progress: Progress | None,
    start: float,
    min_chars: int,
) -> CorpusResult:
    vocab = tok.get_vocab_size(with_added_tokens=True)
    eos, pad = tok.token_to_id(EOS), tok.token_to_id(PAD)
    if eos is None or pad is None:
        raise ValueError(f"{EOS} and {PAD} must be tokens of the tokenizer")
    # A quick guard on this data (the test suite proves id equality broadly): 32 documents, 8k chars each.
    first = pq.ParquetFile(groups[0][0]).read_row_group(groups[0][1], columns=["text"]) if groups else None
    sample = [t[:8192] for t in first.column(0).to_pylist()[:32]] if first is not None else []
    encoder, encoder_note = pick_encoder(tok, spec.encoder, sample)
    formats = set(spec.formats)
    docs = tokens = text_bytes = 0
    last_report = start
    doc_lengths: list[np.ndarray] = []
    packer = make_packer(spec, pad)
    accounting = SourceAccounting()
    shards = _ShardedSink(out_dir, spec.shard_sequences)
    with ExitStack() as stack:
        streams: list[tuple[BinaryIO, np.dtype]] = []
        for fmt, name, signed in STREAMS:
            if fmt in formats:
                stream = stack.enter_context(open(stack.enter_context(atomic_path(out_dir / name)), "wb"))
                streams.append((stream, token_dtype(vocab, signed)))
        writes = BackgroundWrites(shards.write)  # Parquet encoding overlaps reading and packing
        try:
            encoded = _encoded_row_groups(groups, tokenizer_path, tok, encoder, executor, spec.bos, min_chars)
            for (path, index), (flat, lengths, rows, nbytes) in zip(groups, encoded):
                meta = pq.ParquetFile(path).read_row_group(index, columns=["source", "sha256"]).take(pa.array(rows))
                accounting.add(meta.column("source").to_pylist(), meta.column("sha256").combine_chunks(), lengths)
                for fh, dtype in streams:
                    fh.write(flat.astype(dtype, copy=False).tobytes())
                doc_lengths.append(lengths)
                docs += len(lengths)
                tokens += len(flat)
                text_bytes += nbytes
                if ExportFormat.parquet in formats:
                    writes.submit(packer.add(flat, lengths))
                now = time.perf_counter()
                if progress and now - last_report >= PROGRESS_SECONDS:
                    last_report = now
                    progress(
                        f"corpus: {docs:,} documents, {tokens:,} tokens, {text_bytes / 1e6 / (now - start):.1f} MB/s"
                    )
            if progress:
                progress(f"corpus: {docs:,} documents, {tokens:,} tokens, {text_bytes / 1e6:.1f} MB encoded")
            if ExportFormat.parquet in formats:
                writes.submit(packer.finish())
            writes.close()
            padded, dropped = packer.padded, packer.dropped
        except BaseException as exc:
            with suppress(BaseException):
                writes.close()
            shards.close(exc)
            raise
        shards.close()
    lengths_all = np.concatenate(doc_lengths) if doc_lengths else np.zeros(0, dtype=np.int64)
    artifacts = [record(p, data_root, rows=n) for p, n in zip(shards.paths, shards.rows)]
    if ExportFormat.megatron in formats:
        with atomic_path(out_dir / "megatron.idx") as tmp:
            tmp.write_bytes(megatron_index(lengths_all, token_dtype(vocab, signed=True)))
        artifacts += [
            record(out_dir / "megatron.bin", data_root, rows=docs),
            record(out_dir / "megatron.idx", data_root),
        ]
    if ExportFormat.nanogpt in formats:
        write_json(
            out_dir / "tokens.json",
            {
                "dtype": token_dtype(vocab).name,
                "vocab_size": vocab,
                "tokens": tokens,
                "eos_id": eos,
                "documents": docs,
                "seq_len": spec.seq_len,
            },
        )
        artifacts += [
            record(out_dir / "tokens.bin", data_root, rows=tokens),
            record(out_dir / "tokens.json", data_root),
        ]
    sequences = sum(shards.rows)
    reader_index = {
        "format": INDEX_FORMAT,
        "seq_len": spec.seq_len,
        "packing": spec.packing.value,
        "min_chars": min_chars,
        "documents": docs,
        "tokens": tokens,
        "vocab_size": vocab,
        "special_ids": {"bos": tok.token_to_id(BOS), "eos": eos, "pad": pad},
        "bos": spec.bos,
        "parquet": {
            "sequences": sequences,
            "shard_sequences": spec.shard_sequences,
            "row_group_sequences": ROW_GROUP_SEQUENCES,
            "shards": [{"file": p.name, "sequences": n} for p, n in zip(shards.paths, shards.rows)],
        }
        if ExportFormat.parquet in formats
        else None,
        "streams": {
            name: {"dtype": token_dtype(vocab, signed=signed).name, "tokens": tokens}
            for fmt, name, signed in STREAMS
            if fmt in formats
        },
    }
    write_json(out_dir / INDEX_FILE, reader_index)
    artifacts.append(record(out_dir / INDEX_FILE, data_root))
    return CorpusResult(
        artifacts=artifacts,
        documents=docs,
        sequences=sequences,
        tokens=tokens,
        dropped_tokens=dropped,
        padded_tokens=padded,
        cut_documents=packer.cut_documents,
        sources=accounting.summary(),
        text_bytes=text_bytes,
        encoder=encoder_note,
        seconds=time.perf_counter() - start,
    )

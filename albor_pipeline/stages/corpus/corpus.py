"""Pretokenization: encode documents, append EOS, pack into fixed-length sequences.

Outputs Parquet shards (`input_ids: list<uint32>`, seed 000's schema) and, on request,
a Megatron MMIDIDX v1 `.bin/.idx` pair (one sequence per document, EOD appended) and a
flat nanoGPT-style token `.bin` with a JSON sidecar. Memory per task is bounded by a row
group or a chunk of sequences; the stage's own process holds ~30 bytes a document.
"""

from __future__ import annotations

import bisect
import hashlib
import struct
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from albor_pipeline.runtime.artifacts import (
    TEMP_SUFFIX,
    Artifact,
    ParquetSink,
    atomic_path,
    record,
    staged_dir,
    write_json,
)
from albor_pipeline.runtime.executor import INLINE, Executor, for_items
from albor_pipeline.runtime.nodes import Node, task_node
from albor_pipeline.runtime.shards import Shard, row_groups
from albor_pipeline.runtime.stage import Progress
from albor_pipeline.spec import CorpusSpec, ExportFormat, Packing, RemainderPolicy
from albor_pipeline.stages.corpus.encode_task import (
    EncodeJob,
    GroupTokens,
    RowGroup,
    RowGroupEncoder,
    SpoolItem,
    encode_row_group,
    spool_tokens,
)
from albor_pipeline.text.encode import Encoder, pick_encoder
from albor_pipeline.text.vocab import BOS, EOS, PAD, token_dtype

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


@dataclass
class Packed:
    """Full sequences and the document pieces of each (piece lengths, sequence after sequence)."""

    seqs: np.ndarray  # (n, seq_len) uint32
    pieces: np.ndarray  # uint32 lengths of the document pieces
    counts: np.ndarray  # pieces per sequence


@dataclass
class Segments:
    """Sequences as segments of the token stream: segment j is `lens[j]` tokens from stream
    position `starts[j]`; sequence i is the next `counts[i]` segments, then padding. The
    segments are the sequences' document pieces (`doc_lens`)."""

    starts: np.ndarray  # int64
    lens: np.ndarray  # int64
    counts: np.ndarray  # int64, one per sequence


@dataclass(frozen=True)
class PlanSummary:
    """What packing does to the stream as a whole (stage metadata)."""

    sequences: int
    cut_documents: int  # documents split across two or more sequences
    padded: int
    dropped: int


def concat_plan(ends: np.ndarray, seq_len: int, pad_remainder: bool) -> PlanSummary:
    """`concat` over documents ending at stream positions `ends`: cut every `seq_len` tokens;
    the tail is one padded sequence (`pad_remainder`) or dropped."""
    total = int(ends[-1]) if len(ends) else 0
    full, rest = divmod(total, seq_len)
    edges = np.arange(1, full + 1, dtype=np.int64) * seq_len
    at = np.searchsorted(ends, edges)  # the document holding each edge, or ending on it
    cut = len(np.unique(at[ends[at] != edges])) if full else 0
    padded = seq_len - rest if pad_remainder and rest else 0
    return PlanSummary(full + (padded > 0), cut, padded, 0 if pad_remainder else rest)


def concat_segments(ends: np.ndarray, lo: int, hi: int, seq_len: int) -> Segments:
    """The `concat` segments of stream positions [lo, hi) (lo on a sequence edge): the pieces
    between the document ends and sequence edges inside it. Any cut of the stream into
    ranges gives the same pieces, so shards never depend on one another."""
    inner = np.asarray(ends[np.searchsorted(ends, lo, side="right") : np.searchsorted(ends, hi, side="left")])
    bounds = np.concatenate([[lo], np.union1d(inner, np.arange(lo + seq_len, hi, seq_len, dtype=np.int64)), [hi]])
    starts = bounds[:-1].astype(np.int64)
    counts = np.bincount((starts - lo) // seq_len, minlength=-(-(hi - lo) // seq_len))
    return Segments(starts, np.diff(bounds).astype(np.int64), counts.astype(np.int64))


def best_fit_plan(lengths: np.ndarray, seq_len: int, window: int) -> tuple[Segments, PlanSummary]:
    """`best_fit`: whole documents into `seq_len` bins, best-fit decreasing over windows of
    `window` documents, each window padded on its own, so memory is bounded by the window
    and the output depends only on the documents' order.

    A document longer than `seq_len` is the only one ever split: its full chunks become
    sequences of their own (where it comes in the stream) and its tail is packed like a
    document."""
    L = seq_len
    starts_of = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(lengths) else lengths
    starts: list[int] = []
    lens: list[int] = []
    counts: list[int] = []
    pending: list[tuple[int, int]] = []  # (stream position, tokens) of the window's documents
    cut = padded = 0

    def pack_window() -> None:
        nonlocal padded
        bins: list[list[int]] = []
        room: list[tuple[int, int]] = []  # (free tokens, bin), sorted: the best fit is the first that fits
        for i in sorted(range(len(pending)), key=lambda i: (-pending[i][1], i)):
            n = pending[i][1]
            at = bisect.bisect_left(room, (n, -1))
            if at < len(room):
                free, b = room.pop(at)
                bins[b].append(i)
            else:
                free, b = L, len(bins)
                bins.append([i])
            bisect.insort(room, (free - n, b))
        for members in bins:
            for i in members:
                starts.append(pending[i][0])
                lens.append(pending[i][1])
            counts.append(len(members))
            padded += L - sum(pending[i][1] for i in members)
        pending.clear()

    for start, n in zip(starts_of.tolist(), lengths.tolist()):
        if n > L:
            cut += 1
            chunks = n // L
            starts += range(start, start + chunks * L, L)
            lens += [L] * chunks
            counts += [1] * chunks
            start, n = start + chunks * L, n - chunks * L
        if n:
            pending.append((start, n))
        if len(pending) >= window:
            pack_window()
    pack_window()
    segments = Segments(np.array(starts, np.int64), np.array(lens, np.int64), np.array(counts, np.int64))
    return segments, PlanSummary(len(counts), cut, padded, 0)


def fill(stream: np.ndarray, base: int, segments: Segments, seq_len: int, pad_id: int) -> Packed:
    """The sequences of `segments`, whose tokens are in `stream` (stream position `base` on)."""
    starts, lens, counts = segments.starts, segments.lens, segments.counts
    out = np.full(len(counts) * seq_len, pad_id, dtype=np.uint32)
    before = np.cumsum(lens) - lens  # tokens of the earlier segments
    first = np.cumsum(counts) - counts  # each sequence's first segment
    dest = np.repeat(np.arange(len(counts), dtype=np.int64) * seq_len - before[first], counts) + before
    seg = np.repeat(np.arange(len(lens)), lens)
    within = np.arange(int(lens.sum()), dtype=np.int64) - before[seg]
    out[dest[seg] + within] = stream[starts[seg] - base + within]
    return Packed(out.reshape(len(counts), seq_len), lens.astype(np.uint32), counts)


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

    def add(self, group: GroupTokens) -> None:
        mine = np.array([self._codes.setdefault(s, len(self._codes)) for s in group.sources], dtype=np.int32)
        codes = mine[group.codes] if len(mine) else group.codes
        self._parts.append((codes, group.keys, group.lengths.astype(np.int64, copy=False)))

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


PACK_SEQUENCES = 256  # sequences a packing task fills at once: ~2 MB of ids at seq_len 2048


@dataclass(frozen=True)
class PackJob:
    """The plan a packing task reads from the token spool: token files, document ends
    (`concat`) or explicit segments (`best_fit`)."""

    spool: str
    out_dir: str
    seq_len: int
    pad_id: int
    dtype: str
    tokens: int
    packing: Packing
    node: Node  # how a task reaches the spool where it runs

    def _plan(self, name: str) -> np.ndarray:
        return np.load(self.node.local(Path(self.spool) / f"{name}.npy"), mmap_mode="r")

    def segments(self, first: int, end: int) -> Segments:
        """Sequences [first, end)'s segments."""
        if self.packing is Packing.concat:
            lo, hi = first * self.seq_len, min(end * self.seq_len, self.tokens)
            return concat_segments(self._plan("ends"), lo, hi, self.seq_len)
        bounds = np.asarray(self._plan("seq_first")[first : end + 1])
        a, b = int(bounds[0]), int(bounds[-1])
        return Segments(
            np.asarray(self._plan("seg_starts")[a:b]), np.asarray(self._plan("seg_lens")[a:b]), np.diff(bounds)
        )

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Stream positions [lo, hi) as uint32, from the row groups' token files."""
        offsets = self._plan("offsets")
        task = int(np.searchsorted(offsets, lo, side="right")) - 1
        parts, itemsize = [], np.dtype(self.dtype).itemsize
        while lo < hi:
            end = min(hi, int(offsets[task + 1]))
            if end > lo:
                start = (lo - int(offsets[task])) * itemsize
                tokens = self.node.local(spool_tokens(self.spool, task))
                parts.append(np.fromfile(tokens, self.dtype, count=end - lo, offset=start))
            lo, task = end, task + 1
        return np.concatenate(parts).astype(np.uint32) if parts else np.zeros(0, np.uint32)


def pack_shard(job: PackJob, item: tuple[int, int, int]) -> Shard:
    """Write corpus shard `part-NNNNN.parquet` holding sequences [first, end) of the plan:
    a task per shard, so no sequence passes through the stage's own process."""
    shard, first, end = item
    out_dir = job.node.directory(job.out_dir)
    path = out_dir / f"part-{shard:05d}.parquet"
    # No dictionary: ~32k distinct ids per row group make it cost time and bytes (+23 %).
    with ParquetSink(path, SEQ_SCHEMA, ROW_GROUP_SEQUENCES, use_dictionary=False) as sink:
        for lo in range(first, end, PACK_SEQUENCES):
            segments = job.segments(lo, min(lo + PACK_SEQUENCES, end))
            base = int(segments.starts.min())
            stream = job.read(base, int((segments.starts + segments.lens).max()))
            sink.write(sequences_batch(fill(stream, base, segments, job.seq_len, job.pad_id)))
    written = Shard.of(path, sink.rows)
    job.node.ship(out_dir, written)
    return written


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
    """Pretokenize one split's FIM'd documents (a shard set or file) into `out_dir`.

    Two waves of tasks around a plan: a task per row group encodes it and spools its ids;
    the plan (every sequence's segments of the token stream) follows from the documents'
    lengths alone; then a task per Parquet shard fills its sequences from the spool and
    writes it, while this process concatenates the spooled ids into the exports. The bytes
    never depend on where or in which order tasks ran.

    `executor`: where tasks run (inline for fewer than 4 row groups or 2 shards on a local pool).
    `min_chars`: only documents of at least this many characters (before FIM): the long subset.
    """
    start = time.perf_counter()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix=".albor-tokens-", suffix=TEMP_SUFFIX, dir=out_dir.parent) as spool,
        staged_dir(out_dir) as staging,  # the split's files are replaced as one set, or not at all
    ):
        result = _write_corpus(
            tokenizer_path, fim_path, spec, staging, data_root, Path(spool), executor, progress, start, min_chars
        )
    final = [(out_dir / Path(a.path).name).relative_to(data_root).as_posix() for a in result.artifacts]
    result.artifacts = [a.model_copy(update={"path": path}) for a, path in zip(result.artifacts, final)]
    return result


def _encode(
    tok: Tokenizer,
    groups: list[RowGroup],
    job: EncodeJob,
    encoder: Encoder,
    executor: Executor,
    progress: Progress | None,
    start: float,
) -> tuple[list[GroupTokens], SourceAccounting]:
    """The first wave: every row group encoded and spooled, in input order (each token file
    in this process's spool too, for the exports)."""
    executor = for_items(executor, len(groups), 4)
    # Inline, the stage's own encoder runs (all cores); a worker builds its own, once.
    inline = RowGroupEncoder(tok, encoder, job.bos, job.min_chars) if executor.name == INLINE.name else None
    items = [SpoolItem(group, task) for task, group in enumerate(groups)]
    done: list[GroupTokens] = []
    accounting = SourceAccounting()
    docs = tokens = text_bytes = 0
    last_report = start
    for group in executor.map(partial(encode_row_group, job, encoder=inline), items):
        job.node.receive(group.spooled)
        done.append(replace(group, keys=np.zeros(0), codes=np.zeros(0)))  # accounting keeps those
        accounting.add(group)
        docs, tokens, text_bytes = (
            docs + len(group.lengths),
            tokens + int(group.lengths.sum()),
            text_bytes + group.text_bytes,
        )
        now = time.perf_counter()
        if progress and now - last_report >= PROGRESS_SECONDS:
            last_report = now
            progress(f"corpus: {docs:,} documents, {tokens:,} tokens, {text_bytes / 1e6 / (now - start):.1f} MB/s")
    if progress:
        progress(f"corpus: {docs:,} documents, {tokens:,} tokens, {text_bytes / 1e6:.1f} MB encoded")
    return done, accounting


def _concat_streams(spool: Path, tasks: int, finals: list[Path], data_root: Path, rows: list[int]) -> list[Artifact]:
    """The spooled ids end to end into each of `finals` (the same bytes: one hash)."""
    digest, size = hashlib.sha256(), 0
    with ExitStack() as stack:
        outs = [stack.enter_context(open(stack.enter_context(atomic_path(f)), "wb")) for f in finals]
        for task in range(tasks):
            with open(spool_tokens(spool, task), "rb") as src:
                while chunk := src.read(1 << 22):
                    digest.update(chunk)
                    size += len(chunk)
                    for out in outs:
                        out.write(chunk)
    sha = digest.hexdigest()
    return [
        Artifact(path=f.relative_to(data_root).as_posix(), sha256=sha, bytes=size, rows=n) for f, n in zip(finals, rows)
    ]


def _shard_items(sequences: int, spec: CorpusSpec, formats: set[ExportFormat]) -> list[tuple[int, int, int]]:
    """(shard, first sequence, end) of each Parquet shard: a packing task each."""
    if ExportFormat.parquet not in formats:
        return []
    per_shard = spec.shard_sequences
    return [(k, first, min(first + per_shard, sequences)) for k, first in enumerate(range(0, sequences, per_shard))]


def _write_corpus(
    tokenizer_path: Path,
    fim_path: Path,
    spec: CorpusSpec,
    out_dir: Path,
    data_root: Path,
    spool: Path,
    executor: Executor,
    progress: Progress | None,
    start: float,
    min_chars: int,
) -> CorpusResult:
    tok = Tokenizer.from_file(str(tokenizer_path))
    groups = row_groups(fim_path)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    eos, pad = tok.token_to_id(EOS), tok.token_to_id(PAD)
    if eos is None or pad is None:
        raise ValueError(f"{EOS} and {PAD} must be tokens of the tokenizer")
    # A quick guard on this data (the test suite proves id equality broadly): 32 documents, 8k chars each.
    first = pq.ParquetFile(groups[0][0]).read_row_group(groups[0][1], columns=["text"]) if groups else None
    sample = [t[:8192] for t in first.column(0).to_pylist()[:32]] if first is not None else []
    encoder, encoder_note = pick_encoder(tok, spec.encoder, sample)
    formats = set(spec.formats)
    dtype = token_dtype(vocab)
    encoding = for_items(executor, len(groups), 4)
    node = task_node(encoding.node)
    job = EncodeJob(str(tokenizer_path), encoder.name, spec.bos, min_chars, str(spool), dtype.name, node)
    encoded, accounting = _encode(tok, groups, job, encoder, encoding, progress, start)
    spooled = [g.spooled for g in encoded]
    lengths = np.concatenate([g.lengths for g in encoded]) if encoded else np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    offsets = np.concatenate([[0], np.cumsum([int(g.lengths.sum()) for g in encoded])]).astype(np.int64)
    docs, tokens, text_bytes = len(lengths), int(ends[-1]) if len(ends) else 0, sum(g.text_bytes for g in encoded)
    del encoded

    np.save(spool / "offsets.npy", offsets)
    if spec.packing is Packing.best_fit:
        segments, plan = best_fit_plan(lengths, spec.seq_len, spec.best_fit_window)
        np.save(spool / "seg_starts.npy", segments.starts)
        np.save(spool / "seg_lens.npy", segments.lens)
        np.save(spool / "seq_first.npy", np.concatenate([[0], np.cumsum(segments.counts)]).astype(np.int64))
        del segments
    else:
        plan = concat_plan(ends, spec.seq_len, spec.remainder is RemainderPolicy.pad)
        np.save(spool / "ends.npy", ends)
    spooled += [node.offer(npy) for npy in sorted(spool.glob("*.npy"))]
    packing = for_items(executor, len(items := _shard_items(plan.sequences, spec, formats)), 2)
    node = task_node(packing.node).with_spools(spooled)
    pack_job = PackJob(str(spool), str(out_dir), spec.seq_len, pad, dtype.name, tokens, spec.packing, node)

    streams = [out_dir / name for fmt, name, _ in STREAMS if fmt in formats]
    stream_rows = [docs if name == "megatron.bin" else tokens for fmt, name, _ in STREAMS if fmt in formats]
    with ThreadPoolExecutor(1) as background:  # the exports are written here while tasks pack
        exports = background.submit(_concat_streams, spool, len(groups), streams, data_root, stream_rows)
        shards = list(packing.map(partial(pack_shard, pack_job), items))
        for shard in shards:
            node.land(out_dir, shard)
        stream_artifacts = dict(zip((p.name for p in streams), exports.result()))
    if progress and shards:
        progress(f"corpus: {plan.sequences:,} sequences in {len(shards)} shard(s)")

    artifacts = [shard.artifact(out_dir, data_root) for shard in shards]
    if ExportFormat.megatron in formats:
        with atomic_path(out_dir / "megatron.idx") as tmp:
            tmp.write_bytes(megatron_index(lengths, token_dtype(vocab, signed=True)))
        artifacts += [stream_artifacts["megatron.bin"], record(out_dir / "megatron.idx", data_root)]
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
        artifacts += [stream_artifacts["tokens.bin"], record(out_dir / "tokens.json", data_root)]
    sequences = sum(shard.rows for shard in shards)
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
            "shards": [{"file": shard.name, "sequences": shard.rows} for shard in shards],
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
    parquet = ExportFormat.parquet in formats
    return CorpusResult(
        artifacts=artifacts,
        documents=docs,
        sequences=sequences,
        tokens=tokens,
        dropped_tokens=plan.dropped if parquet else 0,
        padded_tokens=plan.padded if parquet else 0,
        cut_documents=plan.cut_documents if parquet else 0,
        sources=accounting.summary(),
        text_bytes=text_bytes,
        encoder=encoder_note,
        seconds=time.perf_counter() - start,
    )

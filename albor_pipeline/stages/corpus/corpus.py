"""Pretokenization: encode documents, append EOS, pack into fixed-length sequences.

Outputs Parquet shards (`input_ids: list<uint32>`, seed 000's schema) and, on request,
a Megatron MMIDIDX v1 `.bin/.idx` pair (one sequence per document, EOD appended) and a
flat nanoGPT-style token `.bin` with a JSON sidecar. Memory per task is bounded by a row
group or a chunk of sequences; the stage's own process holds ~30 bytes a document.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from albor_pipeline.runtime.artifacts import (
    TEMP_SUFFIX,
    Artifact,
    record,
    write_json,
)
from albor_pipeline.runtime.distribution import Distribution, ValueCounts
from albor_pipeline.runtime.shardmap import StageIO, Written, map_shards, map_tasks, shards_of
from albor_pipeline.runtime.shards import RowGroup, Shard, SpoolItem, parquet_files, row_groups
from albor_pipeline.runtime.taskstore import InputFile, memo
from albor_pipeline.spec import CorpusSpec, ExportFormat, Packing, RemainderPolicy, repeat_warnings
from albor_pipeline.stages.corpus.encode_task import (
    ENCODE_ROW_GROUP,
    EncodeJob,
    GroupTokens,
    RowGroupEncoder,
    spool_tokens,
)
from albor_pipeline.stages.corpus.exports import NANOGPT_META, STREAMS, concat_streams, write_sidecars
from albor_pipeline.stages.corpus.index import reader_index
from albor_pipeline.stages.corpus.lineage import (
    DOCUMENTS,
    FATES,
    PIECES,
    WRITE_FATES,
    StagedFiles,
    concat_pieces,
    write_documents,
    write_pieces,
)
from albor_pipeline.stages.corpus.pack import PACK_SHARD, PackJob
from albor_pipeline.stages.corpus.plan import Plan, PlanSummary, Segments, best_fit_plan, budget_cut, concat_plan
from albor_pipeline.summaries.corpus import CorpusBudget, CorpusSummary, SourceFacts
from albor_pipeline.text.encode import make_encoder, pick_encoder
from albor_pipeline.text.sequences import INDEX_FILE
from albor_pipeline.text.vocab import BOS, EOS, PAD, load_tokenizer, token_dtype

PROGRESS_SECONDS = 5.0


class SourceAccounting:
    """Per source: documents, unique documents, repeats, tokens, token share, epochs and the
    distribution of its documents' tokens.

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

    def summary(
        self, documents: int, pool: Mapping[str, int] | None
    ) -> tuple[dict[str, SourceFacts], Distribution | None]:
        """The facts of the first `documents` documents (those a budget keeps), each source's
        epochs against its documents in `pool` (the split's, from the mix), and the distribution
        of those documents' tokens."""
        if not self._parts or not documents:
            return {}, None
        codes, keys, lengths = (np.concatenate(column)[:documents] for column in zip(*self._parts))
        total = int(lengths.sum())
        out = {}
        for source, code in sorted(self._codes.items()):
            mine = codes == code
            if not mine.any():
                continue
            _, first, copies = np.unique(keys[mine], return_index=True, return_counts=True)
            tokens, docs = int(lengths[mine].sum()), int(mine.sum())
            available = pool.get(source) if pool is not None else None
            out[source] = SourceFacts(
                documents=docs,
                unique_documents=len(first),
                max_repeat=int(copies.max()),
                mean_repeat=round(docs / len(first), 4),
                tokens=tokens,
                token_share=round(tokens / total, 6) if total else 0.0,
                pool_documents=available,
                epochs=round(docs / available, 4) if available else None,
                token_lengths=ValueCounts.of(lengths[mine]).distribution(),
            )
        return out, ValueCounts.of(lengths).distribution()


@dataclass(frozen=True)
class Budget:
    """`mix.<split>.tokens` as the corpus applies it, and how the mix planned it."""

    tokens: int
    chars_per_token: float  # the mix's estimate
    mix_chars: int  # the characters the mix holds


@dataclass
class CorpusResult:
    artifacts: list[Artifact]
    summary: CorpusSummary
    text_bytes: int  # the rest: the asset's metadata (throughput), not recorded facts
    encoder: str
    seconds: float


def build_corpus(
    fim_path: Path,
    tokenizer_path: Path,
    spec: CorpusSpec,
    out_dir: Path,
    io: StageIO,
    *,
    min_chars: int = 0,
    pool: Mapping[str, int] | None = None,
    budget: Budget | None = None,
    ledger: bool = True,
    fates: Fates | None = None,
) -> CorpusResult:
    """Pretokenize one split's FIM'd documents (a shard set or file) into `out_dir`.

    Two waves of tasks around a plan: a task per row group encodes it and spools its ids;
    the plan (every sequence's segments of the token stream) follows from the documents'
    lengths alone; then the shard map runs a task per Parquet shard that fills its sequences
    from the spool and writes it, while this process concatenates the spooled ids into the
    exports. The bytes never depend on where or in which order tasks ran.

    `min_chars`: only documents of at least this many characters (before FIM): the long subset.
    `pool`: each source's documents in the split (the mix's input rows), for its epochs.
    `budget`: keep the documents, in mix order, up to this many tokens (`plan.budget_cut`),
    counted with the trained tokenizer; a cheap global step after the encoding tasks.
    `ledger`: write every sequence's document pieces (`lineage.PIECES`) for `albor trace`,
    who each FIM row is (`lineage.DOCUMENTS`), and the upstream ledger shards and tombstones
    `fates` as one table (`lineage.FATES`), for `albor exposure` and `albor diff`.
    """
    start = time.perf_counter()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(str(tokenizer_path))
    with tempfile.TemporaryDirectory(prefix=".albor-tokens-", suffix=TEMP_SUFFIX, dir=out_dir.parent) as spool:
        where = (out_dir, Path(spool), io, start)
        build = _Build(tok, tokenizer_path, spec, *where, min_chars, pool, ledger, fim_path, fates or Fates())
        encoded = _encode_split(build, fim_path)
        if budget is None:
            return _pack_split(build, encoded)
        result = _pack_split(build, _cut(encoded, budget, spec, io))
    result.summary = _with_budget(result.summary, budget, int(encoded.lengths.sum()))
    return result


@dataclass(frozen=True)
class Fates:
    """The files the corpus's fates table is made of: (stage, file) of each upstream ledger
    shard, and of each tombstone file ingestion wrote for removal requests."""

    ledgers: list[tuple[str, Path]] = field(default_factory=list)
    tombstones: list[tuple[str, Path]] = field(default_factory=list)

    def item(self) -> tuple[StagedFiles, StagedFiles]:
        """(ledgers, tombstones) as `WRITE_FATES` takes them: each file by its content."""
        ledgers = tuple((stage, InputFile(str(path))) for stage, path in self.ledgers)
        return ledgers, tuple((stage, InputFile(str(path))) for stage, path in self.tombstones)


@dataclass(frozen=True)
class _Build:
    """One corpus build's settings and places, as its steps share them."""

    tok: Tokenizer
    tokenizer_path: Path
    spec: CorpusSpec
    out_dir: Path
    spool: Path  # the build's token spool and plan
    io: StageIO
    start: float  # when the build began (its rate lines)
    min_chars: int  # a long subset's bound; 0 for a split's corpus
    pool: Mapping[str, int] | None  # each source's documents in the split, for its epochs
    ledger: bool
    fim_path: Path  # the split's FIM'd documents (the ledger's documents table)
    fates: Fates  # the upstream stages' ledger shards and tombstones (the ledger's fates table)


def _cut(encoded: _Encoded, budget: Budget, spec: CorpusSpec, io: StageIO) -> _Encoded:
    """The documents a budget keeps (all of them when the mix holds fewer tokens)."""
    cut = budget_cut(encoded.lengths, budget.tokens, spec.seq_len, spec.packing is Packing.best_fit)
    if cut is None:
        return encoded
    if io.progress:
        io.progress(f"corpus: the {budget.tokens:,}-token budget keeps {cut.documents:,} documents")
    return encoded.keep(cut.documents, cut.tokens if spec.packing is Packing.concat else None)


@dataclass
class _Encoded:
    """The first wave's outcome: each document's tokens, the spool files, the accounting."""

    lengths: np.ndarray
    offsets: np.ndarray  # each row group's first stream position, then the total
    tasks: int  # row groups, each a spooled token file
    text_bytes: int
    accounting: SourceAccounting
    encoder: str  # what the stage picked and why
    rows: np.ndarray  # int64: each document's row in the FIM split (the long subset skips some)
    limit: int | None = None  # a budget's cut of the stream (`concat`: whole sequences)

    def keep(self, documents: int, limit: int | None) -> _Encoded:
        """The first `documents` documents only (a budget's cut), their stream packed up to `limit`."""
        return replace(self, lengths=self.lengths[:documents], rows=self.rows[:documents], limit=limit)


def _encode_split(build: _Build, fim_path: Path) -> _Encoded:
    """Every row group encoded (a task each) and its ids spooled, in input order."""
    tok, spec, io, min_chars = build.tok, build.spec, build.io, build.min_chars
    groups = row_groups(fim_path)
    # A quick guard on this data (the test suite proves id equality broadly): 32 documents, 8k chars each.
    first = pq.ParquetFile(groups[0][0]).read_row_group(groups[0][1], columns=["text"]) if groups else None
    sample = [t[:8192] for t in first.column(0).to_pylist()[:32]] if first is not None else []
    reads = [InputFile(str(build.tokenizer_path)), sample]
    name, encoder_note = memo(_pick_encoder, spec.encoder, reads, partial(_pick_encoder, tok, spec.encoder, sample))
    dtype = token_dtype(tok.get_vocab_size(with_added_tokens=True))
    # Inline, the stage's own encoder runs (all cores); a worker builds its own, once.
    inline = ENCODE_ROW_GROUP.runs_inline(io.executor, len(groups))
    own = RowGroupEncoder(tok, make_encoder(tok, name), spec.bos, min_chars) if inline else None
    job = EncodeJob(str(build.tokenizer_path), name, spec.bos, min_chars, str(build.spool), dtype.name, own)
    encoded, accounting = _encode(groups, job, io, build.start)
    lengths = np.concatenate([g.lengths for g in encoded]) if encoded else np.zeros(0, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum([int(g.lengths.sum()) for g in encoded])]).astype(np.int64)
    text_bytes = sum(g.text_bytes for g in encoded)
    rows = _split_rows(groups, encoded)
    return _Encoded(lengths, offsets, len(groups), text_bytes, accounting, encoder_note, rows)


def _pick_encoder(tok: Tokenizer, choice: str, sample: list[str]) -> tuple[str, str]:
    """(the encoder's name, why): kept per tokenizer and sample, so a rebuild whose encoding
    runs on the workers (or is reused) does not build the encoder in the run's process."""
    encoder, note = pick_encoder(tok, choice, sample)
    return encoder.name, note


def _split_rows(groups: list[RowGroup], encoded: list[GroupTokens]) -> np.ndarray:
    """Each encoded document's row in the FIM split, from the row groups' sizes (footers)."""
    footers = {path: pq.ParquetFile(path).metadata for path in dict.fromkeys(path for path, _ in groups)}
    sizes = [footers[path].row_group(g).num_rows for path, g in groups]  # a footer read once per file
    bases = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    parts = [
        bases[k] + (np.arange(len(g.lengths), dtype=np.int64) if g.rows is None else g.rows.astype(np.int64))
        for k, g in enumerate(encoded)
    ]
    return np.concatenate([np.zeros(0, np.int64), *parts])


def _plan(encoded: _Encoded, spec: CorpusSpec) -> tuple[Plan, PlanSummary, Segments]:
    """The plan the packing tasks read, what packing does to the stream, and every sequence's
    document pieces (the corpus's ledger)."""
    lengths, ends = encoded.lengths, np.cumsum(encoded.lengths)
    if spec.packing is Packing.best_fit:
        segments, summary = best_fit_plan(lengths, spec.seq_len, spec.best_fit_window)
        return Plan.best_fit(encoded.offsets, segments), summary, segments
    summary = concat_plan(ends, spec.seq_len, spec.remainder is RemainderPolicy.pad, encoded.limit)
    pieces = concat_pieces(lengths, summary.sequences, spec.seq_len, encoded.limit)
    return Plan(encoded.offsets, ends=ends), summary, pieces


def _encode(
    groups: list[RowGroup], job: EncodeJob, io: StageIO, start: float
) -> tuple[list[GroupTokens], SourceAccounting]:
    """The first wave: every row group encoded and spooled, in input order (each token file
    in this process's spool too, for the exports)."""
    last_report = [start]

    def rate(done: list[GroupTokens]) -> str | None:
        now = time.perf_counter()
        if now - last_report[0] < PROGRESS_SECONDS:
            return None
        last_report[0] = now
        docs, tokens, text_bytes = _totals(done)
        return f"corpus: {docs:,} documents, {tokens:,} tokens, {text_bytes / 1e6 / (now - start):.1f} MB/s"

    items = [SpoolItem(group, task) for task, group in enumerate(groups)]
    encoded = map_tasks(ENCODE_ROW_GROUP, job, items, Path(job.spool), io, rate)
    accounting = SourceAccounting()
    for item, group in zip(items, encoded):
        io.receive(spool_tokens(job.spool, item.task))
        accounting.add(group)
    if io.progress:
        docs, tokens, text_bytes = _totals(encoded)
        io.progress(f"corpus: {docs:,} documents, {tokens:,} tokens, {text_bytes / 1e6:.1f} MB encoded")
    return [replace(g, keys=np.zeros(0), codes=np.zeros(0)) for g in encoded], accounting


def _totals(done: list[GroupTokens]) -> tuple[int, int, int]:
    """Documents, tokens and text bytes of the row groups encoded so far."""
    return (
        sum(len(g.lengths) for g in done),
        sum(int(g.lengths.sum()) for g in done),
        sum(g.text_bytes for g in done),
    )


def _shard_items(sequences: int, spec: CorpusSpec, formats: set[ExportFormat]) -> list[tuple[int, int, int]]:
    """(shard, first sequence, end) of each Parquet shard: a packing task each."""
    if ExportFormat.parquet not in formats:
        return []
    per_shard = spec.shard_sequences
    return [(k, first, min(first + per_shard, sequences)) for k, first in enumerate(range(0, sequences, per_shard))]


def _pack_split(build: _Build, encoded: _Encoded) -> CorpusResult:
    """The plan, then the shard map's packing tasks, while this process writes the exports
    into the spool; they join the shards in the committed set."""
    tok, spec, out_dir, spool, io = build.tok, build.spec, build.out_dir, build.spool, build.io
    vocab = tok.get_vocab_size(with_added_tokens=True)
    eos, pad = tok.token_to_id(EOS), tok.token_to_id(PAD)
    if eos is None or pad is None:
        raise ValueError(f"{EOS} and {PAD} must be tokens of the tokenizer")
    plan, planned, segments = _plan(encoded, spec)
    tokens, docs, formats = int(encoded.lengths.sum()), len(encoded.lengths), set(spec.formats)
    for path in plan.save(spool):
        io.offer(path)
    dtype = token_dtype(vocab)
    job = PackJob(str(spool), spec.seq_len, pad, dtype.name, encoded.limit or tokens, spec.packing)
    streams = [name for fmt, name, _ in STREAMS if fmt in formats]
    exports = spool / "exports"
    exports.mkdir()
    counts = {"documents": docs, "tokens": tokens, "vocab_size": vocab}
    nanogpt = {"vocab_size": vocab, "tokens": tokens, "eos_id": eos, "documents": docs, "seq_len": spec.seq_len}
    special = {"bos": tok.token_to_id(BOS), "eos": eos, "pad": pad}
    items = _shard_items(planned.sequences, spec, formats)
    with ThreadPoolExecutor(1) as background:  # the exports are written here while tasks pack
        streamed = background.submit(concat_streams, spool, encoded.tasks, streams, exports, tokens * dtype.itemsize)
        finish = partial(
            _finish,
            exports=exports,
            streamed=streamed,
            spec=spec,
            encoded=encoded,
            counts=counts,
            special=special,
            nanogpt=nanogpt,
            min_chars=build.min_chars,
            ledger=segments if build.ledger else None,
            fim_path=build.fim_path,
            fates=build.fates,
            io=io,
        )
        packed = map_shards(PACK_SHARD, job, items, out_dir, io, finish=finish)
    stream = streamed.result()
    if io.progress and packed:
        io.progress(f"corpus: {planned.sequences:,} sequences in {len(packed)} shard(s)")
    shards = list(shards_of(packed))
    sequences = sum(shard.rows for shard in shards)
    cut = _plan_counts(planned, ExportFormat.parquet in formats)
    sources, token_lengths = encoded.accounting.summary(docs, build.pool)
    summary = CorpusSummary(
        documents=docs,
        sequences=sequences,
        tokens=tokens,
        **cut,
        cut_fraction=round(cut["cut_documents"] / docs, 6) if docs else 0.0,
        pad_fraction=round(cut["padded_tokens"] / (sequences * spec.seq_len), 6) if sequences else 0.0,
        sources=sources,
        warnings=_empty_warning(planned.sequences, docs, tokens, spec.seq_len)
        + repeat_warnings({name: f.epochs for name, f in sources.items()}, "epochs"),
        token_lengths=token_lengths,
    )
    artifacts = _artifacts(out_dir, io.root, shards, formats, stream, docs, tokens)
    return CorpusResult(artifacts, summary, encoded.text_bytes, encoded.encoder, time.perf_counter() - build.start)


def _finish(
    staging: Path,
    packed: list[Written],
    *,
    exports: Path,
    streamed: Future[tuple[str, int]],
    spec: CorpusSpec,
    encoded: _Encoded,
    counts: dict[str, int],
    special: dict[str, int | None],
    nanogpt: dict[str, int],
    min_chars: int,
    ledger: Segments | None,
    fim_path: Path,
    fates: Fates,
    io: StageIO,
) -> None:
    """What joins the packed shards' set (`staging`) before it commits: the exports, once
    `streamed` has written their streams into `exports`, with their sidecars; the reader index;
    and the ledger (unless `ledger` is None): every sequence's document pieces, who each
    FIM row of `fim_path` is, and the upstream ledgers' `fates`."""
    streamed.result()
    formats = set(spec.formats)
    streams = [exports / name for fmt, name, _ in STREAMS if fmt in formats]
    for path in [*streams, *write_sidecars(exports, formats, encoded.lengths, nanogpt)]:
        path.rename(staging / path.name)
    write_json(staging / INDEX_FILE, reader_index(spec, counts, special, list(shards_of(packed)), min_chars))
    if ledger is not None:
        write_pieces(staging / PIECES, ledger, encoded.lengths, encoded.rows)
        write_documents(staging / DOCUMENTS, parquet_files(fim_path))
        for _, path in [*fates.ledgers, *fates.tombstones]:  # not the corpus's inputs: a task reads them
            io.offer(path)  # on a node without the run's working copy too
        map_tasks(WRITE_FATES, None, [fates.item()], staging, io)  # one table, written once for every split
        io.receive(staging / FATES)


def _empty_warning(sequences: int, docs: int, tokens: int, seq_len: int) -> list[str]:
    """A split too small for one sequence: an empty corpus, said so (a held-out split's checks
    pass on it; corpus/train's fail)."""
    if sequences:
        return []
    return [f"empty: {docs:,} document(s), {tokens:,} tokens, not one full {seq_len:,}-token sequence"]


def _with_budget(summary: CorpusSummary, budget: Budget, mix_tokens: int) -> CorpusSummary:
    """The summary with the budget's facts, and a warning when the mix fell short of it."""
    packed = summary.tokens - summary.dropped_tokens
    report = CorpusBudget(
        tokens=budget.tokens,
        packed_tokens=packed,
        deviation=round(packed / budget.tokens - 1, 6),
        mix_tokens=mix_tokens,
        estimated_chars_per_token=budget.chars_per_token,
        measured_chars_per_token=round(budget.mix_chars / mix_tokens, 4) if mix_tokens else 0.0,
    )
    warnings = list(summary.warnings)
    if mix_tokens < budget.tokens:
        warnings.insert(
            0,
            f"the mix holds {mix_tokens:,} tokens, {1 - mix_tokens / budget.tokens:.1%} short of the "
            f"{budget.tokens:,}-token budget: it was planned at {budget.chars_per_token:g} chars/token and "
            f"encodes at {report.measured_chars_per_token:g}: set mix.<split>.chars_per_token to that or more",
        )
    return summary.model_copy(update={"budget": report, "warnings": warnings})


def _plan_counts(plan: PlanSummary, parquet: bool) -> dict[str, int]:
    """What packing did to the stream (nothing without Parquet sequences)."""
    if not parquet:
        return {"dropped_tokens": 0, "padded_tokens": 0, "cut_documents": 0}
    return {"dropped_tokens": plan.dropped, "padded_tokens": plan.padded, "cut_documents": plan.cut_documents}


def _artifacts(
    out_dir: Path,
    root: Path,
    shards: list[Shard],
    formats: set[ExportFormat],
    stream: tuple[str, int],
    docs: int,
    tokens: int,
) -> list[Artifact]:
    """The committed set's records, in the manifest's order: shards, each export's stream
    (`stream`: its SHA-256 and bytes) and its sidecar, the index."""
    sha256, size = stream
    artifacts = [shard.artifact(out_dir, root) for shard in shards]
    for fmt, name, sidecars, rows in (
        (ExportFormat.megatron, "megatron.bin", ("megatron.idx",), docs),
        (ExportFormat.nanogpt, "tokens.bin", ("tokens.json", NANOGPT_META), tokens),
    ):
        if fmt in formats:
            path = (out_dir / name).relative_to(root).as_posix()
            artifacts += [
                Artifact(path=path, sha256=sha256, bytes=size, rows=rows),
                *(record(out_dir / sidecar, root) for sidecar in sidecars),
            ]
    pieces = [record(out_dir / name, root) for name in (PIECES, DOCUMENTS, FATES) if (out_dir / name).exists()]
    return [*artifacts, record(out_dir / INDEX_FILE, root), *pieces]

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers

from albor_pipeline.runtime.artifacts import PARQUET_OPTIONS
from albor_pipeline.runtime.executor import INLINE, TASKS, LocalExecutor, TaskError
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.taskstore import TaskStore, reusing
from albor_pipeline.spec import CorpusSpec, FimSpec, Packing
from albor_pipeline.stages.corpus import pack as pack_module
from albor_pipeline.stages.corpus.checks import check_doc_lens, check_min_chars, check_no_short_splits
from albor_pipeline.stages.corpus.corpus import build_corpus
from albor_pipeline.stages.corpus.exports import megatron_index
from albor_pipeline.stages.corpus.lineage import PIECE_ENCODING, PIECE_ROW_GROUP, PIECES, concat_pieces, write_pieces
from albor_pipeline.stages.corpus.plan import (
    Packed,
    Plan,
    PlanSummary,
    Segments,
    best_fit_plan,
    concat_plan,
    concat_segments,
    fill,
)
from albor_pipeline.stages.fim.fim import apply_fim
from albor_pipeline.text import encode
from albor_pipeline.text.encode import (
    BYTELEVEL_PATTERN,
    FAST_BYTELEVEL_PATTERN,
    GigatokenEncoder,
    HFEncoder,
    encode_lists,
    pick_encoder,
    with_unassigned,
)
from albor_pipeline.text.vocab import byte_decoder, plain_tokenizer
from albor_pipeline_tests.support import LITERAL, STDLIB, write_docs


def glue(stream: np.ndarray, pieces: np.ndarray, eos: int) -> list[int]:
    """Document lengths from document pieces: a piece continues the previous document
    unless the previous piece ended in EOS (a sequence edge cut it)."""
    glued: list[int] = []
    pos = 0
    for piece in pieces.tolist():
        if glued and stream[pos - 1] != eos:
            glued[-1] += piece
        else:
            glued.append(piece)
        pos += piece
    return glued


def _stream(lengths: np.ndarray) -> np.ndarray:
    """Documents of `lengths` tokens: document i is i % 7 + 10 repeated, then EOS (9)."""
    return np.concatenate([np.r_[np.full(n - 1, i % 7 + 10, np.uint32), 9] for i, n in enumerate(lengths)])


def _packed(parts: list[Packed], seq_len: int) -> Packed:
    return Packed(
        np.concatenate([p.seqs for p in parts]) if parts else np.zeros((0, seq_len), np.uint32),
        np.concatenate([p.pieces for p in parts]) if parts else np.zeros(0, np.uint32),
        np.concatenate([p.counts for p in parts]) if parts else np.zeros(0, np.int64),
    )


def _concat_packed(
    lengths: np.ndarray, seq_len: int, pad_remainder: bool, cuts: list[int]
) -> tuple[Packed, PlanSummary]:
    """The concat plan filled shard by shard, the shards cut before the sequences in `cuts`."""
    ends = np.cumsum(lengths)
    plan = concat_plan(ends, seq_len, pad_remainder)
    stream, parts = _stream(lengths), []
    bounds = [0, *sorted({c for c in cuts if 0 < c < plan.sequences}), plan.sequences]
    for first, end in itertools.pairwise(bounds):
        if end > first:
            segments = concat_segments(ends, first * seq_len, min(end * seq_len, int(ends[-1])), seq_len)
            parts.append(fill(stream, 0, segments, seq_len, pad_id=0))
    return _packed(parts, seq_len), plan


def test_concat_packing_records_document_pieces():
    # Documents of 3, 5 and 2 tokens, cut every 4 tokens, the tail padded.
    packed, plan = _concat_packed(np.array([3, 5, 2]), 4, pad_remainder=True, cuts=[1])
    assert packed.seqs.tolist() == [[10, 10, 9, 11], [11, 11, 11, 9], [12, 9, 0, 0]]
    assert packed.pieces.tolist() == [3, 1, 4, 2] and packed.counts.tolist() == [2, 1, 1]
    assert (plan.sequences, plan.cut_documents, plan.padded, plan.dropped) == (3, 1, 2, 0)
    _, dropped = _concat_packed(np.array([3, 5, 2]), 4, pad_remainder=False, cuts=[])
    assert (dropped.sequences, dropped.padded, dropped.dropped) == (2, 0, 2)


@given(
    st.lists(st.integers(1, 40), min_size=1, max_size=60),
    st.lists(st.integers(0, 40), max_size=6),
    st.integers(2, 16),
    st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_concat_packing_pieces_rebuild_the_documents(doc_lengths, cuts, seq_len, pad_remainder):
    """However the sequences are cut into shards: the stream cut every seq_len, every full
    sequence's pieces sum to seq_len, and gluing pieces back gives exactly the documents."""
    lengths = np.array(doc_lengths, dtype=np.int64)
    packed, plan = _concat_packed(lengths, seq_len, pad_remainder, cuts)
    whole, _ = _concat_packed(lengths, seq_len, pad_remainder, [])
    assert np.array_equal(packed.seqs, whole.seqs) and np.array_equal(packed.pieces, whole.pieces)
    stream = _stream(lengths)
    full = len(stream) // seq_len
    assert np.array_equal(packed.seqs[:full].reshape(-1), stream[: full * seq_len])
    pieces = packed.pieces.astype(np.int64)
    per_seq = np.add.reduceat(pieces, np.r_[0, np.cumsum(packed.counts)[:-1]]) if len(packed.counts) else []
    assert all(total == seq_len for total in per_seq[:full]) and len(packed.seqs) == plan.sequences
    kept = len(stream) if pad_remainder else full * seq_len
    assert pieces.sum() == kept and plan.dropped == len(stream) - kept
    if pad_remainder:
        assert glue(packed.seqs.reshape(-1), pieces, eos=9) == doc_lengths
    ends = np.cumsum(lengths)
    expected_cut = sum(
        1 for end, n in zip(ends, lengths) if (end - n) // seq_len != (end - 1) // seq_len and end - n < full * seq_len
    )
    assert plan.cut_documents == expected_cut


def _flat_tokens(out: Path) -> np.ndarray:
    shards = sorted(out.glob("part-*.parquet"))
    return np.concatenate(
        [np.concatenate(pq.read_table(s).column("input_ids").to_numpy(zero_copy_only=False)) for s in shards]
    )


@pytest.mark.parametrize("encoder", ["hf", "gigatoken"])
def test_decode_back_gives_fim_documents_in_order(pipeline, encoder):
    tmp, _ = pipeline
    out = tmp / f"out_{encoder}"
    spec = CorpusSpec(seq_len=128, remainder="pad", encoder=encoder, formats=["parquet", "megatron", "nanogpt"])
    result = build_corpus(tmp / "fim", tmp / "tok" / "tokenizer.json", spec, out, StageIO(tmp))
    tok = Tokenizer.from_file(str(tmp / "tok" / "tokenizer.json"))
    eos, pad = tok.token_to_id("</s>"), tok.token_to_id("<pad>")
    table = pq.read_table(out / "part-00000.parquet")
    assert str(table.schema.field("input_ids").type) == "list<element: uint32>" or "uint32" in str(table.schema)
    tokens = _flat_tokens(out)
    assert len(tokens) % 128 == 0 and len(tokens) == result.summary.sequences * 128
    assert result.summary.padded_tokens == len(tokens) - result.summary.tokens
    stream = tokens[: result.summary.tokens]
    assert (tokens[result.summary.tokens :] == pad).all()
    fim_rows = pq.read_table(tmp / "fim").to_pylist()
    ends = np.flatnonzero(stream == eos)
    assert len(ends) == len(fim_rows) and ends[-1] == len(stream) - 1
    start = 0
    for row, end in zip(fim_rows, ends):
        text = tok.decode(stream[start:end].tolist(), skip_special_tokens=False)
        assert text == row["text"]  # sentinel ids decode to the sentinel strings around the segments
        start = end + 1
    # a document that literally contains special strings yields no special ids except its FIM sentinels
    literal_row = next(i for i, r in enumerate(fim_rows) if r["text"] == LITERAL)
    lo = 0 if literal_row == 0 else ends[literal_row - 1] + 1
    assert not set(stream[lo : ends[literal_row]].tolist()) & {0, 1, 2, 3, 1500, 1501, 1502}


def _best_fit_packed(lengths: np.ndarray, seq_len: int, window: int, cuts: list[int]) -> tuple[Packed, PlanSummary]:
    """The best_fit plan filled shard by shard, the shards cut before the sequences in `cuts`."""
    segments, plan = best_fit_plan(lengths, seq_len, window)
    stream, parts = _stream(lengths), []
    bounds = [0, *sorted({c for c in cuts if 0 < c < plan.sequences}), plan.sequences]
    first_segment = np.r_[0, np.cumsum(segments.counts)]
    for first, end in itertools.pairwise(bounds):
        a, b = first_segment[first], first_segment[end]
        part = Segments(segments.starts[a:b], segments.lens[a:b], segments.counts[first:end])
        parts.append(fill(stream, 0, part, seq_len, pad_id=0))
    return _packed(parts, seq_len), plan


def test_min_chars_joins_a_best_fit_document_s_pieces_by_the_pieces_table(pipeline, tmp_path, local2):
    """best_fit packs a long document's tail apart from its full chunks. Measured as runs up to
    an EOS, the tails look like short documents; by the pieces table, each document is all of
    its pieces, measured whole, on every backend; and a full corpus's short ones are counted."""
    tmp, docs = pipeline
    tok = tmp / "tok" / "tokenizer.json"
    spec = CorpusSpec(seq_len=256, packing="best_fit", best_fit_window=8, shard_sequences=5)
    build_corpus(tmp / "fim", tok, spec, tmp_path / "long", StageIO(tmp_path), min_chars=6000)
    shards, pieces = sorted((tmp_path / "long").glob("part-*.parquet")), tmp_path / "long" / PIECES
    assert len(shards) > 1 and not check_min_chars(shards, tok, 6000).passed  # the tails, measured alone
    long = sorted(len(d) for d in docs if len(d) >= 6000)
    expected = {"documents": len(long), "short": 0, "shortest_chars": long[0], "min_chars": 6000}
    for executor in (None, local2):
        outcome = check_min_chars(shards, tok, 6000, executor or INLINE, pieces)
        assert outcome.passed and outcome.metadata == expected, outcome.description
    build_corpus(tmp / "fim", tok, spec, tmp_path / "full", StageIO(tmp_path))
    full = check_min_chars(
        sorted((tmp_path / "full").glob("part-*.parquet")), tok, 6000, pieces=tmp_path / "full" / PIECES
    )
    lengths = [len(d) for d in docs]
    short = sum(n < 6000 for n in lengths)
    assert not full.passed and full.metadata == {
        **expected,
        "documents": len(docs),
        "short": short,
        "shortest_chars": min(lengths),
    }
    # A pieces table that does not match the sequences fails rather than measure wrong documents.
    table = pq.read_table(pieces)
    pq.write_table(table.slice(0, table.num_rows - 1), pieces)
    broken = check_min_chars(shards, tok, 6000, pieces=pieces)
    assert not broken.passed and "disagree" in broken.description


def test_best_fit_packs_whole_documents_and_splits_only_long_ones():
    packed, plan = _best_fit_packed(np.array([5, 3, 6, 2, 19]), 8, window=10, cuts=[])
    # the 19-token document's full chunks first, then best-fit decreasing over
    # (6, 5, 3, 3 [19's tail], 2): bins [6, 2], [5, 3], [3]
    assert packed.seqs[:2].tolist() == [[14] * 8, [14] * 8]
    assert packed.counts.tolist() == [1, 1, 2, 2, 1] and packed.pieces.tolist() == [8, 8, 6, 2, 5, 3, 3]
    assert packed.seqs[4].tolist() == [14, 14, 9, 0, 0, 0, 0, 0]
    assert (plan.sequences, plan.cut_documents, plan.padded) == (5, 1, 5)


@given(
    st.lists(st.integers(1, 50), min_size=1, max_size=80),
    st.integers(1, 9),
    st.integers(2, 16),
    st.lists(st.integers(0, 30), max_size=5),
)
@settings(max_examples=300, deadline=None)
def test_best_fit_keeps_every_short_document_whole(doc_lengths, window, seq_len, cuts):
    lengths = np.array(doc_lengths, dtype=np.int64)
    packed, plan = _best_fit_packed(lengths, seq_len, window, cuts)
    whole, _ = _best_fit_packed(lengths, seq_len, window, [])
    assert np.array_equal(packed.seqs, whole.seqs)  # the output does not depend on the shard cuts
    pieces = packed.pieces.astype(np.int64)
    # Exactly: every document up to seq_len whole; a longer one as full chunks plus its tail.
    expected = [n for n in doc_lengths if n <= seq_len]
    for n in (n for n in doc_lengths if n > seq_len):
        expected += [seq_len] * (n // seq_len) + ([n % seq_len] if n % seq_len else [])
    assert sorted(pieces.tolist()) == sorted(expected)
    assert int((packed.seqs == 0).sum()) == plan.padded == len(packed.seqs) * seq_len - lengths.sum()
    assert plan.cut_documents == int((lengths > seq_len).sum())
    # every piece is a run of one document's tokens, whole documents end in EOS
    at = 0
    flat = packed.seqs.reshape(-1)
    for row, count in enumerate(packed.counts.tolist()):
        pos = row * seq_len
        for piece in pieces[at : at + count].tolist():
            assert len(set(flat[pos : pos + piece - 1].tolist())) <= 1
            pos += piece
        at += count


@pytest.mark.parametrize("packing", list(Packing))
def test_the_pieces_table_written_a_chunk_at_a_time_has_the_bytes_of_a_whole_write(packing, tmp_path):
    """The ledger's pieces table is written a few sequences at a time (the stage's memory
    bounded by a chunk's pieces, not the split's): its bytes are those of the whole table
    written at once, whatever the chunk, over several row groups."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 900, 100_000).astype(np.int64)
    rows = rng.permutation(len(lengths)).astype(np.int64)
    if packing is Packing.concat:
        segments = concat_pieces(lengths, int(lengths.sum()) // 512, 512, None)
    else:
        segments, _ = best_fit_plan(lengths, 512, 64)
    files = []
    for chunk in (977, 1 << 14, len(segments.counts)):
        files.append(tmp_path / f"chunk-{chunk}.parquet")
        assert write_pieces(files[-1], segments, lengths, rows, chunk) == len(segments.lens) > 2 * PIECE_ROW_GROUP
    whole = tmp_path / "whole.parquet"
    pq.write_table(pq.read_table(files[0]), whole, row_group_size=PIECE_ROW_GROUP, **PIECE_ENCODING, **PARQUET_OPTIONS)
    assert {f.read_bytes() for f in files} == {whole.read_bytes()}


@pytest.mark.parametrize("packing", list(Packing))
def test_a_saved_plan_gives_each_task_its_sequences_segments(packing, tmp_path):
    """The plan's contract between the stage's process and its packing tasks: the files `save`
    writes are the ones `load` opens, and any range of sequences read back from them has the
    segments the whole plan gives those sequences."""
    lengths, seq_len = np.array([5, 3, 6, 2, 19, 1, 9, 4, 8], dtype=np.int64), 8
    offsets = np.array([0, 20, 57], dtype=np.int64)
    if packing is Packing.concat:
        ends = np.cumsum(lengths)
        whole = concat_pieces(lengths, int(ends[-1]) // seq_len, seq_len, None)
        plan = Plan(offsets, ends=ends)
    else:
        whole, _ = best_fit_plan(lengths, seq_len, 4)
        plan = Plan.best_fit(offsets, whole)
    saved = plan.save(tmp_path)
    opened: list[Path] = []

    def local(path: Path) -> Path:
        opened.append(path)
        return path

    loaded = Plan.load(tmp_path, packing, local)
    assert sorted(opened) == saved == sorted(tmp_path.iterdir())
    assert np.array_equal(loaded.offsets, offsets)
    first_segment = np.concatenate([[0], np.cumsum(whole.counts)])
    sequences = len(whole.counts)
    for first, end in itertools.combinations(range(sequences + 1), 2):
        got = loaded.segments(first, end, seq_len, int(lengths.sum()) // seq_len * seq_len)
        a, b = first_segment[first], first_segment[end]
        assert got.starts.tolist() == whole.starts[a:b].tolist()
        assert got.lens.tolist() == whole.lens[a:b].tolist()
        assert got.counts.tolist() == whole.counts[first:end].tolist()


def test_best_fit_corpus_passes_its_checks_and_beats_concat_on_cuts(pipeline):
    tmp, _ = pipeline
    results = {}
    for packing in ("concat", "best_fit"):
        out = tmp / f"packing_{packing}"
        spec = CorpusSpec(
            seq_len=256, remainder="pad", packing=packing, best_fit_window=64, formats=["parquet", "megatron"]
        )
        results[packing] = build_corpus(tmp / "fim", tmp / "tok" / "tokenizer.json", spec, out, StageIO(tmp))
        shards = sorted(out.glob("part-*.parquet"))
        assert check_doc_lens(shards, 256, eos_id=2, pad_id=3).passed
        assert check_no_short_splits(shards, 256, eos_id=2).passed == (packing == "best_fit")
    lengths = _megatron_lengths(tmp / "packing_best_fit")
    assert (
        results["best_fit"].summary.cut_documents
        == int((lengths > 256).sum())
        < results["concat"].summary.cut_documents
    )
    assert (
        results["best_fit"].summary.padded_tokens > 0
        and results["best_fit"].summary.tokens == results["concat"].summary.tokens
    )


def test_per_source_accounting_counts_repeats_tokens_and_epochs(pipeline):
    tmp, docs = pipeline
    x, y, z = docs[0], docs[1], docs[2]
    rows = [("a", x), ("b", z), ("a", x), ("a", y), ("b", z), ("a", x)]
    table = pq.read_table(write_docs(tmp / "acct.parquet", [t for _, t in rows]))
    table = table.set_column(1, "source", pa.array([s for s, _ in rows]))
    pq.write_table(table, tmp / "acct_src.parquet")
    apply_fim(tmp / "acct_src.parquet", FimSpec(rate=0.0), tmp / "acct_fim", StageIO(tmp), enabled=False)
    spec = CorpusSpec(seq_len=64, formats=["parquet"])
    pool = {"a": 3, "b": 1}  # a's pool holds a third document the mix left out
    tokenizer = tmp / "tok" / "tokenizer.json"
    result = build_corpus(tmp / "acct_fim", tokenizer, spec, tmp / "acct_out", StageIO(tmp), pool=pool)
    tok = plain_tokenizer(Tokenizer.from_file(str(tmp / "tok" / "tokenizer.json")))
    n = {t: len(tok.encode(t, add_special_tokens=False).ids) + 1 for t in (x, y, z)}  # + EOS
    a, b = result.summary.sources["a"], result.summary.sources["b"]
    assert (a.documents, a.unique_documents, a.max_repeat, a.mean_repeat) == (4, 2, 3, 2.0)
    assert a.tokens == 3 * n[x] + n[y] and (a.pool_documents, a.epochs) == (3, round(4 / 3, 4))
    assert (b.documents, b.unique_documents, b.max_repeat, b.epochs) == (2, 1, 2, 2.0)
    assert result.summary.warnings == []  # no source past 4 epochs
    assert a.token_share + b.token_share == pytest.approx(1.0, abs=1e-5)
    assert a.tokens + b.tokens == result.summary.tokens
    # Each document's tokens, as a distribution per source and in all (what the stats asset charts).
    lengths = {"a": [n[x], n[y], n[x], n[x]], "b": [n[z], n[z]]}
    for facts, mine in ((a, lengths["a"]), (b, lengths["b"]), (result.summary, lengths["a"] + lengths["b"])):
        d = facts.token_lengths
        assert (d.count, d.total, d.min, d.max) == (len(mine), sum(mine), min(mine), max(mine))
        assert list(d.quantiles.values()) == pytest.approx(list(np.quantile(mine, [0.1, 0.5, 0.9, 0.99])), abs=0.005)
        assert sum(d.bins) == len(mine)


def _megatron_lengths(out: Path) -> np.ndarray:
    raw = (out / "megatron.idx").read_bytes()
    n_seq = int(np.frombuffer(raw[18:26], "<u8")[0])
    return np.frombuffer(raw, "<i4", count=n_seq, offset=34)


@pytest.mark.parametrize(("bos", "workers"), [(False, 1), (True, 2)])
def test_doc_lens_rebuild_the_documents_and_bos_starts_each(pipeline, bos, workers):
    tmp, _ = pipeline
    out = tmp / f"doclens_{bos}"
    spec = CorpusSpec(seq_len=64, remainder="pad", bos=bos, formats=["parquet", "megatron"])
    result = build_corpus(tmp / "fim", tmp / "tok" / "tokenizer.json", spec, out, StageIO(tmp, LocalExecutor(workers)))
    shards = sorted(out.glob("part-*.parquet"))
    assert check_doc_lens(shards, 64, eos_id=2, pad_id=3).passed
    table = pq.read_table(shards)
    stream = np.concatenate(table.column("input_ids").to_numpy(zero_copy_only=False))
    pieces = np.concatenate(table.column("doc_lens").to_numpy(zero_copy_only=False)).astype(np.int64)
    glued = glue(stream, pieces, eos=2)
    documents = _megatron_lengths(out)
    assert glued == documents.tolist() and len(documents) == result.summary.documents
    starts = np.r_[0, np.cumsum(documents)[:-1]]
    assert (stream[starts] == 1).all() if bos else not (stream[starts] == 1).any()
    ends = np.cumsum(documents)
    assert result.summary.cut_documents == int(np.count_nonzero((ends - documents) // 64 != (ends - 1) // 64))


def test_megatron_and_nanogpt_exports_read_back_independently(pipeline):
    tmp, _ = pipeline
    out = tmp / "exports"
    spec = CorpusSpec(seq_len=64, formats=["parquet", "megatron", "nanogpt"])
    result = build_corpus(tmp / "fim", tmp / "tok" / "tokenizer.json", spec, out, StageIO(tmp))
    raw = (out / "megatron.idx").read_bytes()
    assert raw[:9] == b"MMIDIDX\x00\x00"
    version, dtype_code = np.frombuffer(raw[9:17], "<u8")[0], raw[17]
    n_seq, n_doc = np.frombuffer(raw[18:34], "<u8")
    assert (version, dtype_code, n_doc) == (1, 8, n_seq + 1)  # 8 = uint16
    off = 34
    lengths = np.frombuffer(raw, "<i4", count=n_seq, offset=off)
    pointers = np.frombuffer(raw, "<i8", count=n_seq, offset=off + 4 * n_seq)
    doc_idx = np.frombuffer(raw, "<i8", count=n_doc, offset=off + 12 * n_seq)
    assert off + 12 * n_seq + 8 * n_doc == len(raw)
    assert n_seq == result.summary.documents and doc_idx.tolist() == list(range(n_seq + 1))
    data = np.fromfile(out / "megatron.bin", dtype=np.uint16)
    eos = 2
    for i in range(n_seq):
        seq = data[pointers[i] // 2 : pointers[i] // 2 + lengths[i]]
        assert seq[-1] == eos and eos not in seq[:-1]
    packed = _flat_tokens(out)
    assert (data[: len(packed)] == packed).all() and len(data) - len(packed) == result.summary.dropped_tokens
    meta = json.loads((out / "tokens.json").read_text())
    assert meta["dtype"] == "uint16" and meta["tokens"] == len(data) and meta["eos_id"] == eos


def test_megatron_index_small_case():
    idx = megatron_index(np.array([3, 1, 2]), np.dtype(np.uint16))
    assert np.frombuffer(idx, "<i8", count=3, offset=34 + 12).tolist() == [0, 6, 8]


def test_corpus_is_deterministic_and_independent_of_worker_processes(pipeline, local2, run_pool):
    tmp, _ = pipeline
    table = pq.read_table(tmp / "fim")
    pq.write_table(table, tmp / "fim_small_groups.parquet", row_group_size=7)  # many row groups
    spec = CorpusSpec(seq_len=100, formats=["parquet", "megatron", "nanogpt"])
    tok = tmp / "tok" / "tokenizer.json"
    small_groups = tmp / "fim_small_groups.parquet"
    runs = [
        build_corpus(small_groups, tok, spec, tmp / f"d{w}", StageIO(tmp, LocalExecutor(w, pool=run_pool(w))))
        for w in (1, 2, 3)
    ]
    assert [x.sha256 for x in runs[0].artifacts] == [x.sha256 for x in runs[1].artifacts]
    assert [x.sha256 for x in runs[0].artifacts] == [x.sha256 for x in runs[2].artifacts]
    single = build_corpus(tmp / "fim", tok, spec, tmp / "d_one_group", StageIO(tmp))
    assert [x.sha256 for x in single.artifacts] == [x.sha256 for x in runs[0].artifacts]
    resharded = tmp / "fim_resharded"  # the same rows in 5 shards of other sizes (another shard_mb)
    resharded.mkdir(exist_ok=True)
    for k, (lo, hi) in enumerate(zip([0, 1, 9, 10, 30], [1, 9, 10, 30, table.num_rows])):
        pq.write_table(table.slice(lo, hi - lo), resharded / f"part-{k:05d}-0000.parquet", row_group_size=5)
    sharded = build_corpus(resharded, tok, spec, tmp / "d_sharded", StageIO(tmp, local2))
    assert [x.sha256 for x in sharded.artifacts] == [x.sha256 for x in runs[0].artifacts]
    assert runs[0].summary.dropped_tokens == runs[0].summary.tokens - runs[0].summary.sequences * 100


def test_failed_encode_task_names_the_row_group_and_keeps_the_previous_corpus(pipeline, local2):
    tmp, _ = pipeline
    table = pq.read_table(tmp / "fim")
    good, bad = tmp / "fim_groups.parquet", tmp / "fim_bad_group.parquet"
    pq.write_table(table, good, row_group_size=7, compression="zstd")
    tok = tmp / "tok" / "tokenizer.json"
    out = tmp / "d_kept"
    build_corpus(good, tok, CorpusSpec(seq_len=100), out, StageIO(tmp, local2))
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    # Garble the page header of row group 3's text: only the worker that reads it fails.
    data = bytearray(good.read_bytes())
    start = pq.ParquetFile(good).metadata.row_group(3).column(0).data_page_offset
    data[start : start + 16] = b"\xff" * 16
    bad.write_bytes(bytes(data))
    with pytest.raises(
        TaskError,
        match=r"encode_row_group failed on SpoolItem\(group=\('.*fim_bad_group.parquet', 3\), task=3\) \(local\)",
    ):
        build_corpus(bad, tok, CorpusSpec(seq_len=100), out, StageIO(tmp, local2))
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp.iterdir() if p.name.startswith(".d_kept")) == []


text_st = st.text(st.characters(codec="utf-8"), max_size=200) | st.lists(
    st.sampled_from(
        ["def", " self", "\n    ", "\r\n", "  ", "'s", "'ll", "</s>", "<|fim_prefix|>", "é", "🐍", "123", "\t", "x"]
    ),
    max_size=40,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(texts=st.lists(text_st, min_size=1, max_size=8))
def test_gigatoken_ids_equal_hf_ids(pipeline, texts):
    tmp, _ = pipeline
    tok = _tok(tmp)
    assert encode_lists(GigatokenEncoder(tok), texts) == encode_lists(HFEncoder(tok), texts)


_WHITESPACE_HEAVY = st.lists(
    st.sampled_from(
        [" ", "  ", "\n", "\t", "\r\n", "\u3000", "\x0b", "a", "Zé", "7", "'", "'s", "'ll", "#", "({", "\u200b"]
    ),
    max_size=30,
).map("".join)


@settings(max_examples=2000, deadline=None)
@given(text=text_st | _WHITESPACE_HEAVY)
def test_fast_pattern_splits_like_gpt2_pattern(text):
    """The rewritten regex (the bench's bare tiktoken baseline) gives exactly the GPT-2/HF splits."""
    assert regex.findall(FAST_BYTELEVEL_PATTERN, text) == regex.findall(BYTELEVEL_PATTERN, text)


def test_fast_pattern_splits_real_code_like_gpt2_pattern():
    for path in [*sorted((STDLIB / "json").rglob("*.py")), STDLIB / "textwrap.py", STDLIB / "tokenize.py"]:
        text = path.read_text(encoding="utf-8")
        pieces = regex.findall(FAST_BYTELEVEL_PATTERN, text)
        assert pieces == regex.findall(BYTELEVEL_PATTERN, text), path
        assert "".join(pieces) == text


_CACHE: dict[Path, Tokenizer] = {}


def _tok(tmp: Path) -> Tokenizer:
    if tmp not in _CACHE:
        _CACHE[tmp] = Tokenizer.from_file(str(tmp / "tok" / "tokenizer.json"))
    return _CACHE[tmp]


@pytest.mark.parametrize(
    "text",
    [
        " " * 20000 + "x",
        ("\n" + " " * 50) * 400 + "y",
        "'" * 20000,
        "'s  \t\n x1 é" * 2000,
        "a" * 20000,
        "\t \n" * 5000,
        "a" * 100_000,
        "a" * 1_000_000,
        " " * 1_000_000,
        "=" * 1_000_000,
        "7" * 1_000_000,
        "é" * 500_000,
    ],
    ids=[
        "spaces",
        "indented-lines",
        "quotes",
        "mixed",
        "one-long-word",
        "whitespace-only",
        "100k-letter-run",
        "1M-letter-run",
        "1M-space-run",
        "1M-punct-run",
        "1M-digit-run",
        "1M-byte-accent-run",
    ],
)
def test_gigatoken_equals_hf_on_long_runs(pipeline, text):
    """Long runs: where a split regex backtracks and BPE merges longest (tiktoken overflowed
    its regex stack on the 1 MB space run). No cutting: the ids are exactly HF's."""
    tmp, _ = pipeline
    tok = _tok(tmp)
    assert encode_lists(GigatokenEncoder(tok, threads=1), [text]) == encode_lists(HFEncoder(tok), [text])


def test_gigatoken_equals_hf_on_real_code(pipeline):
    tmp, docs = pipeline
    tok = _tok(tmp)
    texts = [p.read_text(encoding="utf-8") for p in sorted((STDLIB / "logging").rglob("*.py"))] + docs
    assert encode_lists(GigatokenEncoder(tok), texts) == encode_lists(HFEncoder(tok), texts)
    encoder, why = pick_encoder(tok, "auto", texts[:10])
    assert encoder.name == "gigatoken" and "matched" in why


PROBE = "aXa 1X1 !X! X XX\nX's X"  # X in letter, digit, punctuation, space and contraction contexts


def split_exposing_tokenizer() -> Tokenizer:
    """A ByteLevel BPE whose ids differ whenever two engines split a PROBE differently: every
    probe character merges with any byte beside it, but only inside one pre-token."""
    chars = {b: c for c, b in byte_decoder().items()}
    alphabet = [chars[b] for b in range(256)]
    probe = sorted({chars[b] for b in b"a1! \n's"})
    merges = list(dict.fromkeys([(p, c) for p in probe for c in alphabet] + [(c, p) for p in probe for c in alphabet]))
    vocab = {t: i for i, t in enumerate(alphabet + ["".join(m) for m in merges])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    return tok


def test_the_unassigned_class_is_kept_in_the_user_cache_and_rebuilt_when_damaged(tmp_path, monkeypatch):
    """Deriving the class walks every code point (about a second): it is read from the user's
    cache once written, equals a fresh derivation, and a torn file is rebuilt."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    encode._unassigned_class.cache_clear()
    derived = encode._unassigned_ranges()
    assert encode._unassigned_class() == derived and derived.count("-") > 500
    [path] = (tmp_path / "albor" / "unicode").glob("unassigned-*.txt")
    path.write_text("[\\x{378}-\\x{379}]")  # another class: read as it is, so the cache is what answers
    encode._unassigned_class.cache_clear()
    assert encode._unassigned_class() == "[\\x{378}-\\x{379}]"
    path.write_text(derived[:100])  # torn
    encode._unassigned_class.cache_clear()
    assert encode._unassigned_class() == derived and path.read_text() == derived
    encode._unassigned_class.cache_clear()


def test_texts_with_code_points_new_to_unicode_go_to_hf():
    """U+0C5C (Telugu, Unicode 17) is a letter to gigatoken and unassigned to HF, so its splits
    differ; a text holding it is encoded by HF, amid texts gigatoken encodes."""
    tok = split_exposing_tokenizer()
    new = PROBE.replace("X", "\u0c5c")
    texts = [PROBE.replace("X", "é"), new, "def f(x):\n    return x\n", new, "", PROBE.replace("X", "中")]
    assert with_unassigned(texts) == [1, 3]
    assert encode_lists(GigatokenEncoder(tok), texts) == encode_lists(HFEncoder(tok), texts)
    raw = GigatokenEncoder(tok)._gt.encode_batch([new], parallel=False).to_list()
    assert raw != encode_lists(HFEncoder(tok), [new])  # the case is real: unrouted, the ids differ


@pytest.mark.slow
def test_gigatoken_splits_every_code_point_like_hf():
    """Every code point, in every context of PROBE: gigatoken splits like HF except on code
    points unassigned in this Python's Unicode database, exactly the texts it routes to HF.

    HF encodes the assigned points' probes in full (about 280k); of the ~830k unassigned ones
    a spread sample shows the split differs there and that routing gives HF's ids."""
    tok = split_exposing_tokenizer()
    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    routed = set(with_unassigned([chr(c) for c in points]))
    assigned = [PROBE.replace("X", chr(c)) for i, c in enumerate(points) if i not in routed]
    fast = GigatokenEncoder(tok)._gt.encode_batch(assigned).to_list()
    ref = encode_lists(HFEncoder(tok), assigned)
    assert len(assigned) > 250_000 and fast == ref, [t for t, a, b in zip(assigned, fast, ref) if a != b][:20]
    unassigned = sorted(routed)[:: max(1, len(routed) // 2000)]
    probes = [PROBE.replace("X", chr(points[i])) for i in unassigned]
    ref = encode_lists(HFEncoder(tok), probes)
    assert GigatokenEncoder(tok)._gt.encode_batch(probes).to_list() != ref  # the routing is needed
    assert encode_lists(GigatokenEncoder(tok), probes) == ref


def test_auto_falls_back_to_hf_when_gigatoken_disagrees(pipeline):
    """A pre-tokenizer gigatoken loads but does not mirror (ByteLevel without its split regex),
    and one it cannot load (whitespace split): `auto` takes HF and says why."""
    tmp, docs = pipeline
    tok = Tokenizer.from_str(_tok(tmp).to_str())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    encoder, why = pick_encoder(tok, "auto", docs[:8])
    assert encoder.name == "hf" and why.startswith("hf (gigatoken disagreed")
    assert encode_lists(encoder, docs[:2]) == [e.ids for e in tok.encode_batch(docs[:2], add_special_tokens=False)]
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    encoder, why = pick_encoder(tok, "auto", docs[:8])
    assert encoder.name == "hf" and why.startswith("hf (gigatoken unavailable: Unsupported pre_tokenizer")


def test_autotokenizer_folder_matches_the_corpus_ids(pipeline, tmp_path):
    """`AutoTokenizer.from_pretrained(tokenizer dir)` knows its specials and max length and
    encodes every real document (literal `</s>` and FIM strings included) to the corpus ids, as
    does `tokenizer.json` in raw `tokenizers` with `encode_special_tokens`."""
    transformers = pytest.importorskip("transformers")
    tmp, docs = pipeline
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp / "tok"))
    assert (hf.bos_token_id, hf.eos_token_id, hf.pad_token_id, hf.unk_token_id) == (1, 2, 3, 0)
    assert hf.model_max_length == 2048 and hf.convert_tokens_to_ids("<|fim_middle|>") == 1502  # vocab 1500 + 2
    plain = apply_fim(
        write_docs(tmp_path / "docs.parquet", docs), FimSpec(rate=0.0), tmp_path / "fim", StageIO(tmp_path)
    )
    assert plain.summary.transformed == 0
    spec = CorpusSpec(seq_len=64, formats=["megatron"])
    build_corpus(tmp_path / "fim", tmp / "tok" / "tokenizer.json", spec, tmp_path / "c", StageIO(tmp_path))
    stream = np.fromfile(tmp_path / "c" / "megatron.bin", dtype=np.uint16)
    ends = np.cumsum(_megatron_lengths(tmp_path / "c"))
    corpus_docs = [d[:-1].tolist() for d in np.split(stream, ends[:-1])]  # each without its EOS
    assert len(corpus_docs) == len(docs) and any("</s>" in d for d in docs)
    assert [hf(d)["input_ids"] for d in docs] == corpus_docs
    raw = Tokenizer.from_file(str(tmp / "tok" / "tokenizer.json"))  # a raw `tokenizers` user, as docs/outputs.md says
    raw.encode_special_tokens = True
    assert [e.ids for e in raw.encode_batch(docs, add_special_tokens=False)] == corpus_docs
    padded = hf.pad({"input_ids": corpus_docs[-3:]})
    assert [row[-1] for row in padded["input_ids"]].count(3) >= 1 and len({len(r) for r in padded["input_ids"]}) == 1


def test_megatron_hf_tokenizer_wrapper_reads_the_folder(pipeline):
    """Megatron's HuggingFaceTokenizer over the tokenizer folder: EOD is `</s>` (id 2), and a
    literal `</s>` in text stays ordinary text."""
    pytest.importorskip("megatron.core")
    from megatron.core.tokenizers.text.libraries.huggingface_tokenizer import HuggingFaceTokenizer

    tmp, _ = pipeline
    wrapper = HuggingFaceTokenizer(str(tmp / "tok"))
    assert (wrapper.eod, wrapper.bos_id) == (2, 1)
    ids = wrapper.text_to_ids(LITERAL)
    assert 2 not in ids and wrapper.ids_to_text(ids) == LITERAL


def _sequences(out: Path) -> tuple[list[list[int]], list[list[int]]]:
    table = pq.read_table(sorted(out.glob("part-*.parquet")))
    return table.column("input_ids").to_pylist(), table.column("doc_lens").to_pylist()


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_corpus_shards_and_packing_chunks_change_files_not_sequences(pipeline, monkeypatch, packing, local2):
    """Packing tasks fill shards of `shard_sequences` in chunks of PACK_SEQUENCES from the token
    spool: neither, nor the workers, changes a sequence or an export."""
    tmp, _ = pipeline
    tok = tmp / "tok" / "tokenizer.json"
    pq.write_table(pq.read_table(tmp / "fim"), tmp / "fim_groups7.parquet", row_group_size=7)
    fim = tmp / "fim_groups7.parquet"

    def spec(shard_sequences: int) -> CorpusSpec:
        return CorpusSpec(
            seq_len=64,
            remainder="pad",
            packing=packing,
            best_fit_window=16,
            shard_sequences=shard_sequences,
            formats=["parquet", "megatron", "nanogpt"],
        )

    one = build_corpus(fim, tok, spec(100_000), tmp / f"one_{packing}", StageIO(tmp))
    sharded = build_corpus(fim, tok, spec(3), tmp / f"sharded_{packing}", StageIO(tmp, local2))
    monkeypatch.setattr(pack_module, "PACK_SEQUENCES", 2)
    chunked = build_corpus(fim, tok, spec(3), tmp / f"chunked_{packing}", StageIO(tmp))
    assert len([a for a in one.artifacts if Path(a.path).name.startswith("part-")]) == 1
    assert len([a for a in sharded.artifacts if Path(a.path).name.startswith("part-")]) == -(
        -one.summary.sequences // 3
    )
    assert -(-one.summary.sequences // 3) > 5
    pieces = [a.sha256 for run in (one, sharded) for a in run.artifacts if a.path.endswith(PIECES)]
    assert len(pieces) == 2 and pieces[0] == pieces[1]  # the ledger is the plan's, whatever the shards
    assert _sequences(tmp / f"sharded_{packing}") == _sequences(tmp / f"one_{packing}")
    assert [(a.path, a.sha256) for a in chunked.artifacts] == [
        (a.path.replace("sharded", "chunked"), a.sha256) for a in sharded.artifacts
    ]
    exports = {"megatron.bin", "megatron.idx", "tokens.bin"}
    assert {Path(a.path).name: a.sha256 for a in one.artifacts if Path(a.path).name in exports} == {
        Path(a.path).name: a.sha256 for a in sharded.artifacts if Path(a.path).name in exports
    }
    assert (one.summary.sequences, one.summary.padded_tokens, one.summary.cut_documents) == (
        sharded.summary.sequences,
        sharded.summary.padded_tokens,
        sharded.summary.cut_documents,
    )
    assert not list(tmp.glob(".albor-tokens-*"))  # the spool is gone


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_a_rebuild_repacks_only_the_shards_whose_sequences_changed(pipeline, packing, tmp_path):
    """A packing task's identity is the slice of the token spool it packs, not the spool, and
    an encoding task's is its row group's bytes, not its file's: the last document edited,
    only its row group is encoded again and only the shards holding its sequences are packed
    again, and the corpus is a cold build's."""
    tmp, _ = pipeline
    tok = tmp / "tok" / "tokenizer.json"
    table = pq.read_table(tmp / "fim")
    spec = CorpusSpec(seq_len=64, remainder="pad", packing=packing, best_fit_window=16, shard_sequences=50)
    store = TaskStore(str(Layout(tmp_path / "data").task_store), 10**9)

    def build(rows: pa.Table, out: Path, reuse: bool = True) -> tuple[dict[str, str], int, int, int]:
        fim = tmp_path / f"{out.name}.parquet"
        pq.write_table(rows, fim, row_group_size=7)
        mark = TASKS.mark()
        with reusing(store if reuse else None, "corpus"):
            result = build_corpus(fim, tok, spec, out, StageIO(tmp_path / "data"))
        seen, encoded = TASKS.since(mark)["pack_shard"], TASKS.since(mark)["encode_row_group"]
        ran = int(encoded["tasks"] - encoded["reused"])
        return {Path(a.path).name: a.sha256 for a in result.artifacts}, int(seen["tasks"]), int(seen["reused"]), ran

    out = tmp_path / "data" / "corpus"
    first, shards, reused, _ = build(table, out)
    assert shards > 5 and reused == 0
    texts = table.column("text").to_pylist()
    edited = table.set_column(
        table.schema.get_field_index("text"), "text", pa.array([*texts[:-1], texts[-1] + " and more words here"])
    )
    again, tasks, reused, encoded = build(edited, out)
    changed = {name for name, sha in again.items() if name.startswith("part-") and first.get(name) != sha}
    assert 0 < len(changed) < shards and tasks - reused == len(changed)
    assert encoded == 1 and pq.ParquetFile(tmp_path / "corpus.parquet").num_row_groups > 3  # the last row group
    cold, _, _, _ = build(edited, tmp_path / "data" / "cold", reuse=False)
    assert cold == again


def test_a_long_subset_shares_its_split_s_encoding_and_equals_encoding_it_alone(pipeline, tmp_path):
    """With a task store, a long subset's row groups are cut from the whole row groups' ids,
    kept as the split corpus's own encoding tasks: the corpus built after it encodes nothing,
    and both are the bytes of builds without a store (the subset encoded alone)."""
    tmp, docs = pipeline
    tok = tmp / "tok" / "tokenizer.json"
    spec = CorpusSpec(seq_len=256, shard_sequences=5)
    data = tmp_path / "data"
    store = TaskStore(str(Layout(data).task_store), 10**9)
    fim = tmp_path / "fim.parquet"
    pq.write_table(pq.read_table(tmp / "fim"), fim, row_group_size=7)

    def build(name: str, min_chars: int, reuse: bool) -> tuple[dict[str, str], dict[str, float]]:
        mark = TASKS.mark()
        with reusing(store if reuse else None, "corpus"):
            result = build_corpus(fim, tok, spec, data / name, StageIO(data), min_chars=min_chars)
        return {Path(a.path).name: a.sha256 for a in result.artifacts}, TASKS.since(mark)["encode_row_group"]

    alone, _ = build("long_alone", 6000, reuse=False)
    long, seen = build("long", 6000, reuse=True)
    groups = pq.ParquetFile(fim).num_row_groups
    assert sum(len(d) >= 6000 for d in docs) > 1 and groups > 3
    assert long == alone
    assert (seen["tasks"], seen["reused"], seen["parts"], seen["parts_reused"]) == (groups, 0, groups, 0)
    whole, seen = build("whole", 0, reuse=True)
    assert seen["tasks"] == seen["reused"] == groups  # every row group's ids: the long subset's parts
    assert whole == build("whole_alone", 0, reuse=False)[0]
    again, seen = build("long_again", 6000, reuse=True)
    assert again == alone and seen["reused"] == groups

"""Packed sequences: shapes, ids, document lengths, no short splits, enough characters."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from albor_pipeline.runtime.checks import CheckOutcome, per_shard
from albor_pipeline.runtime.executor import INLINE, Executor
from albor_pipeline.runtime.nodes import Node, task_node
from albor_pipeline.runtime.shards import iter_batches
from albor_pipeline.text.sequences import ROW_GROUP_SEQUENCES
from albor_pipeline.text.vocab import EOS, PAD, added_tokens, load_tokenizer, token_to_bytes

# Sequences a corpus check holds at once: a row group as the corpus writes it, so a batch never
# concatenates row groups' lists. At 256 sequences a batch of a long corpus shard (8 row groups of
# 32 sequences at seq_len 32768: 8.4M ids) cost a worker 0.38 s a shard to read, 0.06 s at 32.
CHECK_BATCH = ROW_GROUP_SEQUENCES


def _sequence_counts(seq_len: int, path: Path) -> tuple[int, int, int]:
    """(sequences, of the wrong length, max id) of one corpus shard."""
    sequences = bad_len = 0
    max_id = -1
    for batch in iter_batches(path, ["input_ids"], CHECK_BATCH):
        col = batch.column(0)
        sequences += len(col)
        bad_len += int(pc.sum(pc.not_equal(pc.list_value_length(col), seq_len)).as_py() or 0)
        if len(col):
            max_id = max(max_id, int(pc.max(pc.list_flatten(col)).as_py()))
    return sequences, bad_len, max_id


def check_sequences(paths: list[Path], seq_len: int, vocab_size: int, executor: Executor = INLINE) -> CheckOutcome:
    """Every sequence has seq_len ids, every id < vocab_size, and there is at least one (a
    shard per task)."""
    counts = per_shard(executor, partial(_sequence_counts, seq_len), paths)
    sequences, bad_len = sum(c[0] for c in counts), sum(c[1] for c in counts)
    max_id = max((c[2] for c in counts), default=-1)
    ok = sequences > 0 and bad_len == 0 and max_id < vocab_size
    return CheckOutcome(
        ok,
        f"{sequences} sequences, {bad_len} of wrong length, max id {max_id} (vocab {vocab_size})",
        {"sequences": sequences, "wrong_length": bad_len, "max_id": max_id},
    )


def _packed_batches(path: Path) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(flat ids, piece lengths, pieces per sequence) of each record batch of a corpus shard."""
    for batch in iter_batches(path, ["input_ids", "doc_lens"], CHECK_BATCH):
        lens = batch.column("doc_lens")
        yield (
            batch.column("input_ids").flatten().to_numpy(zero_copy_only=False),
            lens.flatten().to_numpy(zero_copy_only=False).astype(np.int64),
            pc.list_value_length(lens).to_numpy(zero_copy_only=False).astype(np.int64),
        )


def _piece_ends(pieces: np.ndarray, counts: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(flat position of each piece's last token, whether it is its sequence's last piece)."""
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    within = np.cumsum(pieces) - np.repeat(np.concatenate([[0], np.cumsum(pieces)])[first], counts)
    ends = np.repeat(np.arange(len(counts)) * seq_len, counts) + within - 1
    last = np.zeros(len(pieces), dtype=bool)
    last[np.cumsum(counts)[counts > 0] - 1] = True
    return ends, last


def _doc_lens_counts(seq_len: int, eos_id: int, pad_id: int, path: Path) -> tuple[int, int, int]:
    """(sequences, bad sums, EOS mismatches) of one corpus shard."""
    sequences = bad_sum = bad_eos = 0
    for ids, pieces, counts in _packed_batches(path):
        n = len(counts)
        sequences += n
        sums = np.bincount(np.repeat(np.arange(n), counts), weights=pieces, minlength=n)
        # Pads per sequence: a sum per seq_len slice, not a bin index and a weight per token
        # (0.47 s against 0.02 s for a 21M-token shard, as long corpora's once were).
        per_seq = np.add.reduceat(ids == pad_id, np.arange(0, len(ids), seq_len), dtype=np.int64) if len(ids) else ids
        pads = np.pad(per_seq.astype(np.int64), (0, max(0, n - len(per_seq))))
        bad_sum += int(np.count_nonzero(sums + pads != seq_len))
        ends, last = _piece_ends(pieces, counts, seq_len)
        eos_at = np.flatnonzero(ids == eos_id)
        bad_eos += int(np.count_nonzero(ids[ends[~last]] != eos_id)) + int(np.count_nonzero(~np.isin(eos_at, ends)))
    return sequences, bad_sum, bad_eos


def check_doc_lens(
    paths: list[Path], seq_len: int, eos_id: int, pad_id: int, executor: Executor = INLINE
) -> CheckOutcome:
    """`doc_lens` agrees with the tokens: pieces sum to the non-pad length, every piece but a
    sequence's last ends in EOS, and EOS appears nowhere else (a shard per task)."""
    counts = per_shard(executor, partial(_doc_lens_counts, seq_len, eos_id, pad_id), paths)
    sequences, bad_sum, bad_eos = (sum(c[k] for c in counts) for k in range(3))
    ok = sequences > 0 and bad_sum == 0 and bad_eos == 0
    return CheckOutcome(
        ok,
        f"{sequences} sequences; {bad_sum} with doc_lens not summing to the non-pad length, {bad_eos} EOS mismatches",
        {"sequences": sequences, "bad_sums": bad_sum, "eos_mismatches": bad_eos},
    )


def _short_split_counts(seq_len: int, eos_id: int, path: Path) -> tuple[int, int]:
    """(document pieces, pieces of a document shorter than seq_len that was split) of a shard."""
    pieces_seen = split = 0
    for ids, pieces, counts in _packed_batches(path):
        ends, _ = _piece_ends(pieces, counts, seq_len)
        pieces_seen += len(pieces)
        split += int(np.count_nonzero((ids[ends] != eos_id) & (pieces != seq_len)))
    return pieces_seen, split


def check_no_short_splits(paths: list[Path], seq_len: int, eos_id: int, executor: Executor = INLINE) -> CheckOutcome:
    """best_fit: a piece that does not end a document is a full `seq_len` chunk of a longer one,
    so no document shorter than `seq_len` was split (a shard per task)."""
    counts = per_shard(executor, partial(_short_split_counts, seq_len, eos_id), paths)
    pieces_seen, split = sum(c[0] for c in counts), sum(c[1] for c in counts)
    return CheckOutcome(
        pieces_seen > 0 and split == 0,
        f"{split} of {pieces_seen} document pieces are parts of a document shorter than seq_len",
        {"pieces": pieces_seen, "short_splits": split},
    )


@lru_cache(maxsize=2)  # per tokenizer object: `load_tokenizer` gives one per version of the file
def token_chars(tok: Tokenizer) -> np.ndarray:
    """Characters each id adds to decoded text: its bytes that start a UTF-8 character (0 for
    special tokens). Summed over a document's tokens, that is its decoded length. 0.1 s at
    32k tokens: computed once per tokenizer in a process, not per shard checked."""
    specials = set(added_tokens(tok))
    vocab = tok.get_vocab(with_added_tokens=True)
    chars = np.zeros(max(vocab.values()) + 1, dtype=np.int32)
    for token, idx in vocab.items():
        if token not in specials:
            chars[idx] = sum(1 for b in token_to_bytes(token) if b & 0xC0 != 0x80)
    chars.setflags(write=False)  # shared by every caller
    return chars


@dataclass
class _ShardChars:
    """One corpus shard's documents by characters. `head`: the characters up to its first EOS
    (the end of a document that may have started in earlier shards), None without an EOS;
    `inner`: documents wholly inside it, those under `min_chars`, the shortest one's
    characters; `tail`: characters and tokens after its last EOS (continued in the next shard)."""

    head: int | None
    inner: int
    short: int
    shortest: int | None
    tail_chars: int
    tail_tokens: int


def _shard_chars(node: Node, tokenizer_path: str, min_chars: int, path: Path) -> _ShardChars:
    """A shard's `_ShardChars`, a record batch at a time (a corpus shard holds ~8.4M ids)."""
    tok = load_tokenizer(str(node.local(tokenizer_path)))
    chars, eos, pad = token_chars(tok), tok.token_to_id(EOS), tok.token_to_id(PAD)
    head: int | None = None
    inner = short = 0
    shortest: int | None = None
    carry_chars = carry_tokens = 0  # since the shard's start or its last EOS so far
    for ids, _, _ in _packed_batches(path):
        stream = ids[ids != pad]
        per_token = chars[stream].astype(np.int64)
        ends = np.flatnonzero(stream == eos) + 1
        if not len(ends):
            carry_chars, carry_tokens = carry_chars + int(per_token.sum()), carry_tokens + len(stream)
            continue
        per_doc = np.diff(np.cumsum(per_token)[ends - 1], prepend=0)
        per_doc[0] += carry_chars
        if head is None:
            head, per_doc = int(per_doc[0]), per_doc[1:]
        if len(per_doc):
            inner, short = inner + len(per_doc), short + int((per_doc < min_chars).sum())
            shortest = min(int(per_doc.min()), shortest if shortest is not None else int(per_doc.min()))
        carry_chars, carry_tokens = int(per_token[ends[-1] :].sum()), len(stream) - int(ends[-1])
    return _ShardChars(head, inner, short, shortest, carry_chars, carry_tokens)


def check_min_chars(
    paths: list[Path], tokenizer_path: Path, min_chars: int, executor: Executor = INLINE, pieces: Path | None = None
) -> CheckOutcome:
    """Length staging: every whole document in the sequences has at least `min_chars`
    characters before FIM, counted from its tokens' bytes (special tokens, i.e. FIM
    sentinels and BOS/EOS, add none; literal special-token text does). A shard per task.

    With the corpus's pieces table (`lineage.PIECES`), a document is all the pieces it names
    for one FIM row, wherever they landed: `best_fit` packs a long document's tail apart from
    its full chunks. Without it, a document is a run of tokens up to an EOS, continued across
    shards: right for `concat` only."""
    if pieces is not None:
        return _min_chars_by_pieces(paths, tokenizer_path, min_chars, executor, pieces)
    documents = short = 0
    lows: list[int] = []
    carry_chars = carry_tokens = 0  # the document continued from earlier shards
    node = task_node(executor.node)
    for shard in per_shard(
        executor, partial(_shard_chars, node, str(tokenizer_path), min_chars), paths, [tokenizer_path]
    ):
        if shard.head is None:
            carry_chars, carry_tokens = carry_chars + shard.tail_chars, carry_tokens + shard.tail_tokens
            continue
        first = carry_chars + shard.head
        documents += 1 + shard.inner
        short += int(first < min_chars) + shard.short
        lows += [first] if shard.shortest is None else [first, shard.shortest]
        carry_chars, carry_tokens = shard.tail_chars, shard.tail_tokens
    shortest = min(lows, default=None)
    # A last document whose EOS fell in the dropped remainder cannot be measured; it is the
    # only content of a subset whose one long document fills a sequence but not two.
    return CheckOutcome(
        short == 0 and (documents > 0 or carry_tokens > 0),
        f"{short} of {documents} whole documents have fewer than {min_chars} characters (shortest {shortest})"
        + (f"; the last one continues past the final sequence ({carry_tokens} tokens seen)" if carry_tokens else ""),
        {"documents": documents, "short": short, "shortest_chars": shortest or 0, "min_chars": min_chars},
    )


def _piece_chars(node: Node, tokenizer_path: str, path: Path) -> np.ndarray:
    """(tokens, characters, ends in EOS) of each non-empty piece of a shard, in sequence
    order: a (3, pieces) int64 array."""
    tok = load_tokenizer(str(node.local(tokenizer_path)))
    chars, eos = token_chars(tok), tok.token_to_id(EOS)
    parts = [np.zeros((3, 0), np.int64)]
    for ids, pieces, counts in _packed_batches(path):
        ends, _ = _piece_ends(pieces, counts, len(ids) // max(len(counts), 1))
        total = np.concatenate([[0], np.cumsum(chars[ids], dtype=np.int64)])
        real = pieces > 0
        ends, lens = ends[real], pieces[real]
        parts.append(np.stack([lens, total[ends + 1] - total[ends + 1 - lens], ids[ends] == eos]).astype(np.int64))
    return np.concatenate(parts, axis=1)


def _min_chars_by_pieces(
    paths: list[Path], tokenizer_path: Path, min_chars: int, executor: Executor, pieces: Path
) -> CheckOutcome:
    """`check_min_chars` with each document's pieces from the pieces table: the shards give
    each piece's characters and whether it ends in EOS, in the table's order (sequence, then
    offset). A document's pieces must be its tokens in order, EOS only at its end; one whose
    last piece lacks its EOS continues past the final sequence and is not whole."""
    node = task_node(executor.node)
    lens, chars, eos = np.concatenate(
        [
            np.zeros((3, 0), np.int64),
            *per_shard(executor, partial(_piece_chars, node, str(tokenizer_path)), paths, [tokenizer_path]),
        ],
        axis=1,
    )
    table = pq.read_table(pieces, columns=["length", "row", "doc_offset"])
    if not np.array_equal(lens, table.column("length").to_numpy()):
        return CheckOutcome(
            False,
            f"the sequences' doc_lens disagree with {pieces.name} ({len(lens)} pieces vs {table.num_rows})",
            {"min_chars": min_chars},
        )
    rows, offsets = table.column("row").to_numpy(), table.column("doc_offset").to_numpy()
    order = np.lexsort((offsets, rows))
    rows, offsets, lens, chars, eos = rows[order], offsets[order], lens[order], chars[order], eos[order].astype(bool)
    first = np.concatenate([[True], rows[1:] != rows[:-1]]) if len(rows) else np.zeros(0, bool)
    last = np.concatenate([first[1:], [True]]) if len(rows) else first
    expected = np.where(first, 0, np.concatenate([[0], offsets[:-1] + lens[:-1]]))
    broken = int(np.count_nonzero(offsets != expected)) + int(np.count_nonzero(eos & ~last))
    per_doc = np.add.reduceat(chars, np.flatnonzero(first)) if len(rows) else chars
    whole = eos[last]
    measured = per_doc[whole]
    documents, short = len(measured), int((measured < min_chars).sum())
    shortest = int(measured.min()) if documents else None
    open_docs = int(np.count_nonzero(~whole))
    return CheckOutcome(
        short == 0 and broken == 0 and (documents > 0 or open_docs > 0),
        f"{short} of {documents} whole documents have fewer than {min_chars} characters (shortest {shortest})"
        + (f"; {open_docs} continue past the final sequence" if open_docs else "")
        + (f"; {broken} pieces out of their document's order or with an EOS inside it" if broken else ""),
        {"documents": documents, "short": short, "shortest_chars": shortest or 0, "min_chars": min_chars},
    )

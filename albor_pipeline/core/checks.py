"""Data checks over finished artifacts (pure functions; the Dagster layer wraps them)."""

from __future__ import annotations

import json
import math
import re
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from albor_pipeline.core.artifacts import TEMP_SUFFIX
from albor_pipeline.core.chat import ChatIds, assistant_text
from albor_pipeline.core.decontam import contaminated
from albor_pipeline.core.executor import INLINE, Executor, for_items
from albor_pipeline.core.neardup import LshJob, NearDupIndex, Signer, word_hashes
from albor_pipeline.core.nodes import Node, OnNode, Spooled, task_node
from albor_pipeline.core.secrets import redact_path
from albor_pipeline.core.shards import iter_batches, parquet_files
from albor_pipeline.core.vocab import EOS, PAD, added_tokens, token_to_bytes
from albor_pipeline.spec import ChatTokens, DecontaminateSpec

T = TypeVar("T")


@dataclass
class CheckOutcome:
    passed: bool
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)


def check_schema(paths: list[Path], expected: pa.Schema) -> CheckOutcome:
    """Every Parquet file has exactly the expected column names and types."""
    wrong = {}
    for path in paths:
        actual = pq.read_schema(path)
        if actual.names != expected.names or any(
            actual.field(n).type != expected.field(n).type for n in expected.names
        ):
            wrong[path.name] = str(actual)
    ok = bool(paths) and not wrong
    return CheckOutcome(
        ok,
        f"{len(paths) - len(wrong)}/{len(paths)} Parquet file(s) match the stage contract",
        {"expected": str(expected), "mismatched": wrong},
    )


def _hashes(path: Path) -> set[str]:
    out: set[str] = set()
    for batch in iter_batches(path, ["sha256"], 65536):
        out.update(batch.column(0).to_pylist())
    return out


def check_no_leak(train: Path, *held_out: Path) -> CheckOutcome:
    """No held-out document (by sha256) is also in train (each a Parquet file or shard set)."""
    train_hashes = _hashes(train)
    leaks = {p.stem: len(_hashes(p) & train_hashes) for p in held_out}
    return CheckOutcome(
        not any(leaks.values()),
        "held-out documents shared with train: " + ", ".join(f"{k} {v}" for k, v in leaks.items()),
        {"shared": leaks},
    )


def check_fim_rate(paths: list[Path], rate: float, sigmas: float = 5.0) -> CheckOutcome:
    """Observed FIM share (over the shards `paths`) within `sigmas` binomial standard deviations of `rate`.

    Rows under min_chars are never transformed, so the bound counts only rows that could be.
    """
    n = k = 0
    for path in paths:
        for batch in pq.ParquetFile(path).iter_batches(columns=["fim_format"]):
            n += batch.num_rows
            k += batch.num_rows - batch.column(0).null_count
    sd = math.sqrt(max(n * rate * (1 - rate), 1e-12))
    ok = n == 0 or k <= n * rate + sigmas * sd + 1
    ok = ok and (n < 30 or k >= n * rate - sigmas * sd - n * 0.05)  # short rows are exempt, allow 5 %
    return CheckOutcome(ok, f"{k}/{n} rows FIM'd at rate {rate}", {"observed": k / n if n else 0.0, "rows": n})


def per_shard(executor: Executor, fn: Callable[[Path], T], paths: list[Path]) -> list[T]:
    """`fn` of each shard of `paths`, a task each on `executor` (inline for one shard), on
    the shard's copy wherever the task runs."""
    executor = for_items(executor, len(paths), 2)
    return list(executor.map(OnNode(task_node(executor.node), fn), paths))


def _sequence_counts(seq_len: int, path: Path) -> tuple[int, int, int]:
    """(sequences, of the wrong length, max id) of one corpus shard."""
    sequences = bad_len = 0
    max_id = -1
    for batch in pq.ParquetFile(path).iter_batches(batch_size=1024, columns=["input_ids"]):
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


def check_roundtrip(report_path: Path) -> CheckOutcome:
    report = json.loads(report_path.read_text(encoding="utf-8"))
    ok = report["roundtrip_ok"] == report["val_documents"]
    return CheckOutcome(
        ok,
        f"{report['roundtrip_ok']}/{report['val_documents']} val documents round-trip exactly",
        {"failures_first": report["roundtrip_failures_first"]},
    )


CHECK_BATCH = 1024  # sequences a corpus check holds at once


def _packed_batches(path: Path) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(flat ids, piece lengths, pieces per sequence) of each record batch of a corpus shard."""
    for batch in pq.ParquetFile(path).iter_batches(batch_size=CHECK_BATCH, columns=["input_ids", "doc_lens"]):
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
        pads = np.bincount(np.arange(len(ids)) // seq_len, weights=ids == pad_id, minlength=n)
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


def token_chars(tok: Tokenizer) -> np.ndarray:
    """Characters each id adds to decoded text: its bytes that start a UTF-8 character (0 for
    special tokens). Summed over a document's tokens, that is its decoded length."""
    specials = set(added_tokens(tok))
    vocab = tok.get_vocab(with_added_tokens=True)
    chars = np.zeros(max(vocab.values()) + 1, dtype=np.int32)
    for token, idx in vocab.items():
        if token not in specials:
            chars[idx] = sum(1 for b in token_to_bytes(token) if b & 0xC0 != 0x80)
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
    """A shard's `_ShardChars`, a record batch at a time (a corpus shard holds ~10**8 tokens)."""
    tok = Tokenizer.from_file(str(node.local(tokenizer_path)))
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
    paths: list[Path], tokenizer_path: Path, min_chars: int, executor: Executor = INLINE
) -> CheckOutcome:
    """Length staging: every whole document in the sequences has at least `min_chars`
    characters before FIM, counted from its tokens' bytes (special tokens, i.e. FIM
    sentinels and BOS/EOS, add none; literal special-token text does). A shard per task;
    a document continued across shards is joined here from its pieces' characters."""
    documents = short = 0
    lows: list[int] = []
    carry_chars = carry_tokens = 0  # the document continued from earlier shards
    node = task_node(executor.node)
    for shard in per_shard(executor, partial(_shard_chars, node, str(tokenizer_path), min_chars), paths):
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


def _sft_rows(paths: list[Path], columns: list[str]) -> Iterator[dict[str, Any]]:
    for path in paths:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=512, columns=columns):
            yield from batch.to_pylist()


def check_sft_mask(paths: list[Path], tokenizer_path: Path, max_tokens: int) -> CheckOutcome:
    """Decoding only the mask-1 tokens, specials removed, gives exactly the assistant's text
    and python code of that conversation (a prefix of it where the row was truncated)."""
    tok = Tokenizer.from_file(str(tokenizer_path))
    specials = set(added_tokens(tok).values())
    table = [b""] * tok.get_vocab_size(with_added_tokens=True)
    for token, i in tok.get_vocab(with_added_tokens=False).items():
        if i not in specials:
            table[i] = token_to_bytes(token)
    rows = bad = 0
    first_bad: list[str] = []
    for row in _sft_rows(paths, ["input_ids", "loss_mask", "sha256", "messages"]):
        rows += 1
        trained = b"".join(table[i] for i, m in zip(row["input_ids"], row["loss_mask"]) if m)
        expected = assistant_text(json.loads(row["messages"])).encode("utf-8")
        truncated = len(row["input_ids"]) == max_tokens and trained != expected
        if not (trained == expected or (truncated and expected.startswith(trained))):
            bad += 1
            if len(first_bad) < 5:
                first_bad.append(row["sha256"])
    return CheckOutcome(
        rows > 0 and bad == 0,
        f"{rows - bad}/{rows} conversations train on exactly their assistant text and python code",
        {"rows": rows, "mismatched": bad, "first_mismatched_sha256": first_bad},
    )


def _structure_error(ids: list[int], chat: ChatIds, truncated: bool) -> str | None:
    """Where a row's special ids break the render grammar, or None."""
    if not ids or ids[0] != chat.bos:
        return "does not start with BOS"
    nxt = {
        "turn": {chat.user_start: "user"},
        "user": {chat.user_end: "after_user"},
        "after_user": {chat.assistant_start: "assistant"},
        "assistant": {chat.python_start: "python", chat.output_start: "output", chat.assistant_end: "turn"},
        "python": {chat.python_end: "assistant"},
        "output": {chat.output_end: "assistant"},
    }
    structural, state, assistant_turns = chat.structural, "turn", 0
    for pos in range(1, len(ids)):
        token = ids[pos]
        if token not in structural:
            continue
        if token not in nxt[state]:
            return f"special id {token} at position {pos} where the render allows {sorted(nxt[state])}"
        state = nxt[state][token]
        assistant_turns += token == chat.assistant_end
    if state != "turn" and not truncated:
        return f"ends inside a turn ({state})"
    if not assistant_turns and not truncated:
        return "has no assistant turn"
    return None


def check_sft_structure(paths: list[Path], tokenizer_path: Path, tokens: ChatTokens, max_tokens: int) -> CheckOutcome:
    """Chat special ids (and BOS) appear only where rendering puts them: BOS first, then
    user_start/user_end, assistant_start, python and output pairs inside an assistant turn,
    assistant_end; a truncated row may stop anywhere."""
    chat = ChatIds.of(Tokenizer.from_file(str(tokenizer_path)), tokens)
    rows = bad = 0
    first: list[str] = []
    for row in _sft_rows(paths, ["input_ids", "sha256"]):
        rows += 1
        error = _structure_error(row["input_ids"], chat, len(row["input_ids"]) >= max_tokens)
        if error:
            bad += 1
            if len(first) < 5:
                first.append(f"{row['sha256'][:12]}: {error}")
    return CheckOutcome(
        rows > 0 and bad == 0,
        f"{bad} of {rows} conversations have a special id out of place",
        {"rows": rows, "bad": bad, "first_bad": first},
    )


def check_max_tokens(paths: list[Path], max_tokens: int) -> CheckOutcome:
    """No rendered conversation is longer than `max_tokens`."""
    rows = longest = over = 0
    for path in paths:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=4096, columns=["input_ids"]):
            lengths = pc.list_value_length(batch.column(0)).to_numpy(zero_copy_only=False)
            rows += len(lengths)
            over += int(np.count_nonzero(lengths > max_tokens))
            longest = max(longest, int(lengths.max(initial=0)))
    return CheckOutcome(
        over == 0,
        f"{over} of {rows} rows longer than {max_tokens} tokens (longest {longest})",
        {"rows": rows, "over": over, "longest": longest},
    )


def check_choice_ids(path: Path) -> CheckOutcome:
    """Every eval item's answer letters are distinct ids and its answer is one of them."""
    items = bad = 0
    for row in _sft_rows([path], ["choice_token_ids", "answer"]):
        items += 1
        choices = row["choice_token_ids"]
        bad += len(set(choices)) != len(choices) or not 0 <= row["answer"] < len(choices)
    return CheckOutcome(
        items > 0 and bad == 0,
        f"{bad} of {items} items have repeated choice ids or an answer outside them",
        {"items": items, "bad": bad},
    )


def _signatures(
    signer: Signer, lsh: LshJob, node: Node, item: tuple[int, int, Path]
) -> tuple[np.ndarray, list[Spooled | None]]:
    """Shard `item` = (task, its first document, path): its documents' MinHash signatures
    spooled for LSH, a per-shard task; returns the partition offsets and spool files."""
    task, first, path = item
    batches = iter_batches(node.local(path), ["text"])
    sigs = [signer.signature(word_hashes(t)) for b in batches for t in b.column(0).to_pylist()]
    stacked = np.stack(sigs) if sigs else np.zeros((0, signer.num_perm), np.uint64)
    return lsh.spool_signatures(task, first, stacked, node)


def check_no_near_leak(
    paths: dict[str, Path],
    ngram: int,
    num_perm: int,
    bands: int,
    threshold: float,
    executor: Executor = INLINE,
    spool_dir: Path | None = None,
) -> CheckOutcome:
    """No document of one split (a Parquet file or shard set) is a near-duplicate (verified
    Jaccard >= threshold on LSH candidates) of a document of another split. Signatures, LSH
    buckets and the candidates' verification run a shard (or a partition, or a run of pairs)
    per task on `executor`, spooling to `spool_dir`; clusters in this process."""
    index = NearDupIndex(ngram, num_perm, bands, threshold)
    shards = [(split, file) for split, path in paths.items() for file in parquet_files(path)]
    rows = [pq.ParquetFile(f).metadata.num_rows for _, f in shards]
    firsts = np.concatenate(([0], np.cumsum(rows, dtype=np.int64)))
    shard_split = np.array([split for split, _ in shards], dtype=object)

    def locate(docs: np.ndarray) -> np.ndarray:
        shard = np.searchsorted(firsts, docs, side="right") - 1
        return np.stack([shard, docs - firsts[shard]], axis=1)

    with tempfile.TemporaryDirectory(prefix=".albor-minhash-", suffix=TEMP_SUFFIX, dir=spool_dir) as spool:
        lsh = index.lsh(spool, int(firsts[-1]))
        items = [(k, int(firsts[k]), f) for k, (_, f) in enumerate(shards)]
        signing = for_items(executor, len(items), 2)
        node = task_node(signing.node)
        signed = list(signing.map(partial(_signatures, index.signer, lsh, node), items))
        stacked = np.stack([o for o, _ in signed]) if signed else np.zeros((0, lsh.partitions + 1), np.int64)
        index.find_candidates(lsh, stacked, firsts, executor, node.with_spools(s for _, sent in signed for s in sent))
    index.verify_shards([str(f) for _, f in shards], locate, spool_dir, executor)
    pairs = np.array([(a, b) for a, b, _ in index.verified], dtype=np.int64).reshape(-1, 2)
    sides = shard_split[locate(pairs.ravel())[:, 0]].reshape(-1, 2)
    crossing = [v for v, (x, y) in zip(index.verified, sides) if x != y]
    return CheckOutcome(
        not crossing,
        f"{len(crossing)} near-duplicate pairs across splits (of {len(index.pairs)} LSH candidates)",
        {"crossing": len(crossing), "candidates": len(index.pairs), "documents": int(firsts[-1])},
    )


def check_no_contamination(train: Path, spec: DecontaminateSpec, executor: Executor = INLINE) -> CheckOutcome:
    """No train document shares an n-gram with any benchmark item (a shard per task)."""
    files = parquet_files(train)
    found: Counter[str] = Counter()
    executor = for_items(executor, len(files), 2)
    for hits in executor.map(OnNode(task_node(executor.node), partial(contaminated, spec=spec)), files):
        found.update(hits)
    return CheckOutcome(
        not found,
        f"{sum(found.values())} (train document, benchmark) pair(s) share a {spec.ngram}-gram"
        if found
        else f"no train document shares a {spec.ngram}-gram with {', '.join(b.name for b in spec.benchmarks)}",
        {"per_benchmark": dict(sorted(found.items())), "benchmarks": [b.name for b in spec.benchmarks]},
    )


@dataclass(frozen=True)
class _Leak:
    """A kind of secret the no-secrets check looks for: literal markers (a cheap test that a
    document may hold one) and the pattern that finds it."""

    kind: str
    markers: tuple[str, ...]
    pattern: re.Pattern[str]


# The no-secrets check's own patterns, written apart from detect-secrets' so that it does not
# share the redactor's blind spots: known token formats, loose in length and context.
LEAKS = (
    _Leak(
        "GitHub token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{30,})"),
    ),
    _Leak(
        "GitLab token",
        (*(f"gl{p}-" for p in ("pat", "dt", "ft", "soat", "rt", "cbt", "imt", "ptt", "agent", "oas")), "GR1348941"),
        re.compile(r"\b(?:gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-|GR1348941)[A-Za-z0-9_-]{20,}"),
    ),
    _Leak(
        "Slack token",
        ("xox", "hooks.slack.com"),
        re.compile(r"\bxox[abposr]-\d{6,}-[A-Za-z0-9-]{10,}|hooks\.slack\.com/services/[A-Za-z0-9_/]{20,}"),
    ),
    _Leak("Stripe key", ("k_live_",), re.compile(r"\b[rs]k_live_[A-Za-z0-9]{16,}")),
    _Leak("npm token", ("npm_",), re.compile(r"\bnpm_[A-Za-z0-9]{36}(?![A-Za-z0-9])")),
    _Leak("PyPI token", ("pypi-",), re.compile(r"\bpypi-AgE[A-Za-z0-9_-]{40,}")),
    _Leak("OpenAI key", ("T3BlbkFJ",), re.compile(r"\bsk-[A-Za-z0-9_-]{10,}T3BlbkFJ[A-Za-z0-9_-]{10,}")),
    _Leak("JWT", ("eyJ",), re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}")),
    _Leak(
        "AWS access key id",
        ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
        re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b"),
    ),
    _Leak(
        "AWS secret key",
        ("aws", "AWS", "Aws"),
        re.compile(
            r"(?i:aws)[\w.-]{0,30}?(?i:secret)[\w.-]{0,30}?['\"]?\s*[:=]\s*['\"]?[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])"
        ),
    ),
    _Leak(
        "private key",
        ("PRIVATE KEY", "PuTTY-User-Key"),
        re.compile(
            r"-----BEGIN[A-Z ]*PRIVATE KEY[A-Z ]*-----[^-]{0,300}?[A-Za-z0-9+/]{40}"
            r"|PuTTY-User-Key-File-\d.{0,300}?Private-Lines:\s*\d+\s*[A-Za-z0-9+/]{40}",
            re.DOTALL,
        ),
    ),
    # What a redaction that replaced a part of a token leaves: the rest glued to the placeholder.
    _Leak("token cut by <KEY>", ("<KEY>",), re.compile(r"<KEY>[A-Za-z0-9_-]{8,}|[A-Za-z0-9_-]{8,}<KEY>")),
)
# A value of 20+ token characters after an assignment (`=`, `:`, `=>`), quoted or not, whose
# name (just before the operator) says key, secret, token, password or credential.
SECRET_ASSIGNED = r"""(?i:key|secret|token|passw(?:or)?d|pwd|credential|auth)[\w.-]*['"]?\]?\s*"""
ASSIGNED_VALUE = re.compile(r"""[:=>]\s*[rbuf]?['"]?(?:Bearer\s+)?([A-Za-z0-9+/_=-]{20,})""")
SECRET_NAME_BEFORE = re.compile(SECRET_ASSIGNED + r"(?::|=|:=|=>)?\s*\Z")
# Documents worth a closer look: a marker, or a value assigned to a secret-ish name. One RE2
# pass over a whole column (pyarrow), since most documents hold neither.
CANDIDATES = "|".join(
    [*(re.escape(m) for leak in LEAKS for m in leak.markers), SECRET_ASSIGNED + ASSIGNED_VALUE.pattern]
)
HIGH_ENTROPY_BITS = 4.5  # random base64 of 24+ characters has more; words and identifiers less
LEAK_EXAMPLES = 5  # file paths a failing check names


def _entropy(value: str) -> float:
    """Shannon entropy of `value`'s characters, in bits."""
    counts = np.unique(np.frombuffer(value.encode("utf-8"), dtype=np.uint8), return_counts=True)[1] / len(value)
    return float(-(counts * np.log2(counts)).sum())


def _high_entropy_values(text: str) -> int:
    """Values assigned to a secret-ish name that look random: letters of both cases and
    digits, and at least `HIGH_ENTROPY_BITS` of entropy per character."""
    found = 0
    for match in ASSIGNED_VALUE.finditer(text):
        value = match.group(1)
        if (
            SECRET_NAME_BEFORE.search(text, max(0, match.start() - 64), match.start() + 1)
            and any(c.islower() for c in value)
            and any(c.isupper() for c in value)
            and any(c.isdigit() for c in value)
            and _entropy(value) >= HIGH_ENTROPY_BITS
        ):
            found += 1
    return found


def find_leaks(text: str) -> Counter[str]:
    """Secret-shaped strings in `text` by kind (counts only: values never leave here)."""
    found: Counter[str] = Counter()
    for leak in LEAKS:
        if any(m in text for m in leak.markers):
            hits = sum(1 for _ in leak.pattern.finditer(text))
            if hits:
                found[leak.kind] += hits
    entropy = _high_entropy_values(text)
    if entropy:
        found["high-entropy value of a secret name"] += entropy
    return found


def _shard_leaks(path: Path) -> tuple[int, Counter[str], list[str]]:
    """(documents, leaks by kind, the first files holding one, redacted) of one shard."""
    documents = 0
    found: Counter[str] = Counter()
    files: list[str] = []
    for batch in pq.ParquetFile(path).iter_batches(batch_size=1024, columns=["text", "file"]):
        documents += batch.num_rows
        candidates = pc.match_substring_regex(batch.column(0), CANDIDATES).to_numpy(zero_copy_only=False)
        for row in np.flatnonzero(candidates).tolist():
            leaks = find_leaks(batch.column(0)[row].as_py())
            found.update(leaks)
            if leaks and len(files) < LEAK_EXAMPLES:
                files.append(redact_path(batch.column(1)[row].as_py()))
    return documents, found, files


def check_no_secrets(paths: list[Path], executor: Executor = INLINE) -> CheckOutcome:
    """No document of a hygiene output holds a secret-shaped string, by the check's own
    patterns (`LEAKS`), independent of the redactor's: every document, a shard per task."""
    documents = 0
    found: Counter[str] = Counter()
    files: list[str] = []
    for shard_documents, shard_found, shard_files in per_shard(executor, _shard_leaks, paths):
        documents += shard_documents
        found.update(shard_found)
        files = (files + shard_files)[:LEAK_EXAMPLES]
    return CheckOutcome(
        not found,
        f"an independent scan of {documents:,} documents found {sum(found.values())} secret-shaped strings"
        + (": " + ", ".join(f"{k} {v}" for k, v in sorted(found.items())) if found else ""),
        {"documents": documents, "left": dict(sorted(found.items())), "files": files},
    )

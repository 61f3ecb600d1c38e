"""SFT rows and eval sets: masks, structure, lengths, answer ids."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from albor_pipeline.runtime.checks import CheckOutcome
from albor_pipeline.spec import ChatTokens
from albor_pipeline.text.chat import ChatIds, assistant_text
from albor_pipeline.text.vocab import BOS, id_bytes, load_tokenizer


def _sft_rows(paths: list[Path], columns: list[str]) -> Iterator[dict[str, Any]]:
    for path in paths:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=512, columns=columns):
            yield from batch.to_pylist()


def _conversations(paths: list[Path], columns: list[str]) -> Iterator[dict[str, Any]]:
    """Every conversation of an SFT split as a row of its own, packed rows cut at their `doc_lens`
    (so the mask and structure checks hold each conversation of a packed row to its own text)."""
    if not paths or "doc_lens" not in pq.read_schema(paths[0]).names:
        yield from _sft_rows(paths, columns)
        return
    for row in _sft_rows(paths, [*columns, "doc_lens"]):
        start = 0
        for k, length in enumerate(row["doc_lens"]):
            yield {
                name: row[name][start : start + length] if name in ("input_ids", "loss_mask") else row[name][k]
                for name in columns
            }
            start += length


def check_packed_rows(paths: list[Path], tokenizer_path: Path, row_tokens: int) -> CheckOutcome:
    """Every packed row is `row_tokens` long, its conversations each start with BOS (mask 0), the
    padding after them is BOS with mask 0, and it has at least one trained token."""
    bos = load_tokenizer(str(tokenizer_path)).token_to_id(BOS)
    rows = bad = 0
    first: list[str] = []
    for row in _sft_rows(paths, ["input_ids", "loss_mask", "doc_lens", "sha256"]):
        rows += 1
        ids, mask, lens = np.array(row["input_ids"]), np.array(row["loss_mask"]), np.array(row["doc_lens"])
        starts = np.cumsum(lens) - lens
        used = int(lens.sum())
        errors = [
            len(ids) != row_tokens and f"{len(ids)} tokens",
            not len(lens) and "no conversation",
            used > len(ids) and "doc_lens past the row",
            (ids[starts[starts < len(ids)]] != bos).any() and "a conversation not starting with BOS",
            mask[starts[starts < len(ids)]].any() and "a trained conversation start",
            ((ids[used:] != bos) | (mask[used:] != 0)).any() and "padding that is not BOS with mask 0",
            not mask.any() and "no trained token",
        ]
        error = next((e for e in errors if e), None)
        if error:
            bad += 1
            if len(first) < 5:
                first.append(f"row {rows - 1} ({row['sha256'][0][:12] if row['sha256'] else '-'}): {error}")
    return CheckOutcome(
        rows > 0 and bad == 0,
        f"{bad} of {rows} packed rows break the packing (length, boundaries, padding, a trained token)",
        {"rows": rows, "bad": bad, "first_bad": first},
    )


def check_sft_mask(paths: list[Path], tokenizer_path: Path, tokens: ChatTokens, max_tokens: int) -> CheckOutcome:
    """Decoding only the mask-1 tokens, specials removed, gives exactly the assistant's text
    and python code of that conversation (a prefix of it where the row was truncated), and
    every special id carries the mask the render gives it (1 only on python calls and
    `<|assistant_end|>`)."""
    tok = load_tokenizer(str(tokenizer_path))
    chat = ChatIds.of(tok, tokens)
    trained_specials = np.array([chat.python_start, chat.python_end, chat.assistant_end])
    structural = np.array(sorted(chat.structural))
    table = id_bytes(tok)
    rows = bad = 0
    first_bad: list[str] = []
    for row in _conversations(paths, ["input_ids", "loss_mask", "sha256", "messages"]):
        rows += 1
        trained = b"".join(table[i] for i, m in zip(row["input_ids"], row["loss_mask"]) if m)
        expected = assistant_text(json.loads(row["messages"])).encode("utf-8")
        truncated = len(row["input_ids"]) == max_tokens and trained != expected
        ids, mask = np.array(row["input_ids"]), np.array(row["loss_mask"])
        special = np.isin(ids, structural)
        wrong_special = (mask[special] != np.isin(ids[special], trained_specials)).any()
        if wrong_special or not (trained == expected or (truncated and expected.startswith(trained))):
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
    chat = ChatIds.of(load_tokenizer(str(tokenizer_path)), tokens)
    rows = bad = 0
    first: list[str] = []
    for row in _conversations(paths, ["input_ids", "sha256"]):
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
    """No rendered conversation is longer than `max_tokens`: a row's, or in packed rows each of
    their `doc_lens` (a row may be `max_tokens + 1` long)."""
    packed = bool(paths) and "doc_lens" in pq.read_schema(paths[0]).names
    rows = longest = over = 0
    for path in paths:
        for batch in pq.ParquetFile(path).iter_batches(
            batch_size=4096, columns=["doc_lens" if packed else "input_ids"]
        ):
            column = batch.column(0)
            lengths = (pc.list_flatten(column) if packed else pc.list_value_length(column)).to_numpy(
                zero_copy_only=False
            )
            rows += len(lengths)
            over += int(np.count_nonzero(lengths > max_tokens))
            longest = max(longest, int(lengths.max(initial=0)))
    return CheckOutcome(
        over == 0,
        f"{over} of {rows} conversations longer than {max_tokens} tokens (longest {longest})",
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

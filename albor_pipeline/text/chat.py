"""Conversations, nanochat's way: validate and clean them, then render ids + loss mask.

A conversation is `[{role, content}]` with roles system/user/assistant; assistant
content may be a list of parts `{type: text|python|python_output, text}` (tool use).
Cleaning folds a system message into the first user turn, trims trailing user turns
(no reply to learn from) and drops conversations without an assistant turn; anything
else that breaks the format is a `ChatError` the caller reports with file and line.

Rendering follows nanochat's `render_conversation`: BOS, then user turns wrapped in
user tokens (mask 0), `<|assistant_start|>` (mask 0), the assistant's text and python
calls (wrapped) and `<|assistant_end|>` (mask 1), python outputs wrapped in output
tokens (mask 0: the tool writes them). Text is encoded as ordinary text, so a literal
`<|assistant_start|>` in a message is never the special id.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from tokenizers import Tokenizer

from albor_pipeline.text.vocab import BOS

if TYPE_CHECKING:  # the spec's model, for its field names only: the spec sits above `text`
    from albor_pipeline.spec import ChatTokens

ROLES = ("system", "user", "assistant")
PART_TYPES = ("text", "python", "python_output")
CALCULATOR = re.compile(r"(<<[^>]+>>)")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

Message = dict[str, Any]


class ChatError(ValueError):
    """A conversation that breaks the format; the caller adds file and line."""


def calculator_parts(content: str | list[dict[str, str]]) -> list[dict[str, str]]:
    """`<<expr=result>>` in assistant text -> a python part (expr) and a python_output part
    (result), as nanochat reads GSM8K's calculator annotations."""
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
    out: list[dict[str, str]] = []
    for part in parts:
        if part["type"] != "text":
            out.append(part)
            continue
        for piece in CALCULATOR.split(part["text"]):
            if piece.startswith("<<") and piece.endswith(">>"):
                expr, _, result = piece[2:-2].rpartition("=") if "=" in piece else (piece[2:-2], "", "")
                out += [{"type": "python", "text": expr}, {"type": "python_output", "text": result}]
            elif piece:
                out.append({"type": "text", "text": piece})
    return out


def _content(message: Any, i: int) -> tuple[str, str | list[dict[str, str]]]:
    if not isinstance(message, dict):
        raise ChatError(f"message {i}: expected an object with role and content, got {type(message).__name__}")
    role = message.get("role")
    if role not in ROLES:
        raise ChatError(f"message {i}: unknown role {role!r} (expected one of {list(ROLES)})")
    if "content" not in message:
        raise ChatError(f"message {i}: missing content")
    content = message["content"]
    if isinstance(content, str):
        return role, content
    if not isinstance(content, list) or role != "assistant":
        kind = "a string" if role != "assistant" else "a string or a list of parts"
        raise ChatError(f"message {i} ({role}): content must be {kind}, got {type(content).__name__}")
    parts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in PART_TYPES:
            got = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ChatError(f"message {i} part {j}: type must be one of {list(PART_TYPES)}, got {got!r}")
        if not isinstance(part.get("text"), str):
            raise ChatError(f"message {i} part {j}: text must be a string")
        parts.append({"type": part["type"], "text": part["text"]})
    return role, parts


def clean_conversation(raw: Any, calculator: bool, cleanup: Counter[str]) -> list[Message] | None:
    """The cleaned messages, or None when nothing is left to train on (counted in `cleanup`)."""
    if not isinstance(raw, list) or not raw:
        raise ChatError(f"messages must be a non-empty list, got {type(raw).__name__}")
    messages: list[Message] = []
    for i, message in enumerate(raw):
        role, content = _content(message, i)
        if calculator and role == "assistant":
            content = calculator_parts(content)
        messages.append({"role": role, "content": content})
    if messages[0]["role"] == "system":
        if len(messages) == 1:  # a system prompt alone: no assistant turn, dropped as documented
            cleanup["no_assistant"] += 1
            return None
        if messages[1]["role"] != "user":
            raise ChatError("message 0: a system message must be followed by a user message")
        first = {"role": "user", "content": messages[0]["content"] + "\n\n" + messages[1]["content"]}
        messages = [first, *messages[2:]]
        cleanup["folded_system"] += 1
    for i, message in enumerate(messages):
        expected = "user" if i % 2 == 0 else "assistant"
        if message["role"] != expected:
            raise ChatError(
                f"message {i}: {message['role']} where {expected} is expected "
                "(turns alternate user/assistant; a system message only first)"
            )
    if len(messages) > 1 and messages[-1]["role"] == "user":
        messages.pop()
        cleanup["trimmed_trailing_user"] += 1
    if len(messages) < 2:
        cleanup["no_assistant"] += 1
        return None
    return messages


def conversation_json(messages: list[Message]) -> str:
    """The canonical text of a conversation: what is stored, hashed and held out."""
    return json.dumps(messages, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def mc_labels(item: dict[str, Any]) -> list[str]:
    """An item's answer labels: its own (ARC's "1".."4"), else A, B, C, ..."""
    return list(item.get("labels") or LETTERS[: len(item["choices"])])


def mc_prompt(question: str, choices: list[str], labels: list[str] | None = None) -> str:
    """nanochat's multiple-choice rendering: the label after each choice, no space before it."""
    lines = "".join(f"- {choice}={label}\n" for label, choice in zip(labels or LETTERS, choices))
    return f"Multiple Choice question: {question}\n{lines}\nRespond only with the letter of the correct answer."


def parse_mc(obj: Any) -> dict[str, Any]:
    """`{question, choices, answer, labels?}` as stored, the answer an index. `answer`: a choice
    index, or one of the item's `labels` (nanochat keeps ARC's own), else a letter A, B, ..."""
    if not isinstance(obj, dict):
        raise ChatError(f"expected an object, got {type(obj).__name__}")
    question, choices, answer = obj.get("question"), obj.get("choices"), obj.get("answer")
    if not isinstance(question, str) or not question.strip():
        raise ChatError("question must be a non-empty string")
    if not isinstance(choices, list) or not 2 <= len(choices) <= len(LETTERS):
        raise ChatError(f"choices must be a list of 2..{len(LETTERS)} strings")
    if not all(isinstance(c, str) for c in choices):
        raise ChatError("choices must be strings")
    labels = obj.get("labels")
    if labels is not None and not (
        isinstance(labels, list)
        and len(labels) == len(choices)
        and all(isinstance(x, str) and x.strip() == x and x for x in labels)
        and len(set(labels)) == len(labels)
    ):
        raise ChatError("labels must be distinct non-empty strings, one per choice")
    names = labels or list(LETTERS[: len(choices)])
    if isinstance(answer, str) and answer in names:
        answer = names.index(answer)
    if not isinstance(answer, int) or isinstance(answer, bool) or not 0 <= answer < len(choices):
        raise ChatError(f"answer must be a choice index (0..{len(choices) - 1}) or one of {names}, got {answer!r}")
    return {"question": question, "choices": choices, "answer": answer, **({"labels": labels} if labels else {})}


@dataclass(frozen=True)
class ChatIds:
    """The ids rendering needs, looked up once in the tokenizer."""

    bos: int
    user_start: int
    user_end: int
    assistant_start: int
    assistant_end: int
    python_start: int
    python_end: int
    output_start: int
    output_end: int

    @classmethod
    def of(cls, tok: Tokenizer, tokens: ChatTokens) -> ChatIds:
        names = {"bos": BOS, **tokens.model_dump()}
        ids = {name: tok.token_to_id(text) for name, text in names.items()}
        missing = [names[n] for n, i in ids.items() if i is None]
        if missing:
            raise ChatError(f"the tokenizer has no id for {missing}; rebuild it with these chat tokens")
        return cls(**{n: int(i) for n, i in ids.items() if i is not None})

    @property
    def structural(self) -> frozenset[int]:
        return frozenset(vars(self).values())


Piece = tuple[str | int, int]  # (text to encode, or a special id; mask)


def render_pieces(messages: list[Message], ids: ChatIds) -> list[Piece]:
    """A cleaned conversation as (text or special id, mask) pieces, nanochat's render."""
    pieces: list[Piece] = [(ids.bos, 0)]
    for message in messages:
        content = message["content"]
        if message["role"] == "user":
            pieces += [(ids.user_start, 0), (content, 0), (ids.user_end, 0)]
            continue
        pieces.append((ids.assistant_start, 0))
        for part in [{"type": "text", "text": content}] if isinstance(content, str) else content:
            if part["type"] == "text":
                pieces.append((part["text"], 1))
            elif part["type"] == "python":
                pieces += [(ids.python_start, 1), (part["text"], 1), (ids.python_end, 1)]
            else:
                pieces += [(ids.output_start, 0), (part["text"], 0), (ids.output_end, 0)]
        pieces.append((ids.assistant_end, 1))
    return pieces


def assistant_text(messages: list[Message]) -> str:
    """What the mask trains on, specials aside: the assistant's text and python code, in order."""
    out = []
    for message in messages:
        if message["role"] != "assistant":
            continue
        content = message["content"]
        if isinstance(content, str):
            out.append(content)
        else:
            out += [p["text"] for p in content if p["type"] != "python_output"]
    return "".join(out)


SFT_SCHEMA = pa.schema(
    [
        ("input_ids", pa.list_(pa.uint32())),
        ("loss_mask", pa.list_(pa.uint8())),
        ("source", pa.string()),
        ("sha256", pa.string()),
        ("messages", pa.string()),
    ]
)


EVAL_SCHEMA = pa.schema(
    [
        ("input_ids", pa.list_(pa.uint32())),
        ("choice_token_ids", pa.list_(pa.uint32())),
        ("answer", pa.int32()),
        ("sha256", pa.string()),
        ("item", pa.string()),
    ]
)

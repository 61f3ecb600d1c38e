"""Base-model eval items, rendered few-shot as nanochat's CORE evaluation renders them
(`core_eval.py`, after DCLM), so a trainer scores a base model by summed log-probability.

- `multiple_choice` `{query, choices, gold}`: one sequence per choice, the context shared,
  the continuation span where they part (a common token prefix).
- `schema` `{context_options, continuation, gold}`: one sequence per context, the
  continuation shared (a common token suffix).
- `language_modeling` `{context, continuation}`: one sequence, the span the tokens the
  continuation adds to the trimmed context.

A prompt is `k` shots, each `<shot><delimiter><answer>` and a blank line, then the item;
the shots are items of the same set drawn with `random.Random(1234 + i)`, never item i.
"""

from __future__ import annotations

import random
from enum import Enum
from typing import Any

import pyarrow as pa

from albor_pipeline.text.chat import ChatError


class BaseTask(str, Enum):
    multiple_choice = "multiple_choice"
    schema = "schema"
    language_modeling = "language_modeling"


def _strings(obj: dict[str, Any], key: str, at_least: int) -> list[str]:
    value = obj.get(key)
    if not isinstance(value, list) or len(value) < at_least or not all(isinstance(v, str) and v for v in value):
        raise ChatError(f"{key} must be a list of {at_least} or more non-empty strings")
    return value


def _string(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ChatError(f"{key} must be a non-empty string")
    return value


def _gold(obj: dict[str, Any], options: list[str]) -> int:
    gold = obj.get("gold")
    if not isinstance(gold, int) or isinstance(gold, bool) or not 0 <= gold < len(options):
        raise ChatError(f"gold must be an index into the {len(options)} options, got {gold!r}")
    return gold


def parse_base_item(obj: Any, task: BaseTask) -> dict[str, Any]:
    """An item held to its task's fields, as stored."""
    if not isinstance(obj, dict):
        raise ChatError(f"expected an object, got {type(obj).__name__}")
    if task is BaseTask.multiple_choice:
        choices = _strings(obj, "choices", 2)
        return {"query": _string(obj, "query"), "choices": choices, "gold": _gold(obj, choices)}
    if task is BaseTask.schema:
        options = _strings(obj, "context_options", 2)
        return {"context_options": options, "continuation": _string(obj, "continuation"), "gold": _gold(obj, options)}
    return {"context": _string(obj, "context"), "continuation": _string(obj, "continuation")}


def fewshot(index: int, items: int, shots: int) -> list[int]:
    """The shots of item `index`: nanochat's draw, so a model sees the prompts CORE shows it."""
    if shots <= 0:
        return []
    return random.Random(1234 + index).sample([i for i in range(items) if i != index], shots)


def render_prompts(item: dict[str, Any], task: BaseTask, delimiter: str, shots: list[dict[str, Any]]) -> list[str]:
    """The item's prompts, character for character nanochat's templates: one per choice, one
    per context option, or (language modelling) the prompt without and with the continuation."""
    if task is BaseTask.multiple_choice:
        prefix = "".join(f"{s['query']}{delimiter}{s['choices'][s['gold']]}\n\n" for s in shots)
        return [f"{prefix}{item['query']}{delimiter}{choice}" for choice in item["choices"]]
    if task is BaseTask.schema:
        prefix = "".join(f"{s['context_options'][s['gold']]}{delimiter}{s['continuation']}\n\n" for s in shots)
        return [f"{prefix}{context}{delimiter}{item['continuation']}" for context in item["context_options"]]
    prefix = "".join(f"{s['context'].strip()}{delimiter}{s['continuation']}\n\n" for s in shots)
    without = f"{prefix}{item['context'].strip()}{delimiter}"
    return [without.strip(), without + item["continuation"]]


def _common(sequences: list[list[int]], reverse: bool) -> int:
    """The length of the common token prefix (or suffix) of `sequences`."""
    rows = [s[::-1] if reverse else s for s in sequences]
    n = min(map(len, rows))
    return next((i for i in range(n) if any(r[i] != rows[0][i] for r in rows)), n)


def spans(tokens: list[list[int]], task: BaseTask) -> tuple[list[list[int]], list[int], list[int]]:
    """(sequences, continuation starts, ends) as nanochat's batch_sequences_* cut them."""
    if task is BaseTask.multiple_choice:
        start = _common(tokens, reverse=False)
        return tokens, [start] * len(tokens), [len(t) for t in tokens]
    if task is BaseTask.schema:
        suffix = _common(tokens, reverse=True)
        return tokens, [len(t) - suffix for t in tokens], [len(t) for t in tokens]
    without, with_ = tokens
    if len(without) >= len(with_) or with_[: len(without)] != without:
        raise ChatError("the prompt without the continuation does not tokenize as a prefix of the prompt with it")
    return [with_], [len(without)], [len(with_)]


BASE_EVAL_SCHEMA = pa.schema(
    [
        ("input_ids", pa.list_(pa.list_(pa.uint32()))),  # a sequence per choice / context option (LM: one)
        ("starts", pa.list_(pa.int32())),  # where each sequence's scored continuation starts
        ("ends", pa.list_(pa.int32())),  # ... and ends (exclusive)
        ("gold", pa.int32()),  # the right sequence (LM: 0, scored by exact greedy match)
        ("fewshot", pa.list_(pa.int32())),  # the rows whose items are the shots
        ("sha256", pa.string()),
        ("item", pa.string()),
    ]
)

"""Chat datasets come in several shapes; each becomes nanochat's messages before cleaning.

- `messages`: `{messages: [{role, content}]}`, assistant content a string or nanochat's
  parts `{type: text|python|python_output, text}` (the canonical form, read as is).
- `openai`: OpenAI chat messages: roles system/developer/user/assistant/tool, content a
  string, null or a list of `{type: "text", text}` parts, assistant `tool_calls`.
- `sharegpt`: `{conversations: [{from: system|human|gpt|function_call|observation, value}]}`.
- `alpaca`: `{instruction, input?, output, system?}`: one user turn, one assistant turn.
- `auto`: the shape of each row decides; a row matching none is an error.

Tool use becomes nanochat's tool parts, so every format trains the same tokens: a call of
a code-execution tool (`python`, `code_interpreter`, ...) is a python part holding its
code; any other call is a python part holding a Python call expression,
`name(key='value', ...)` from its JSON arguments, always valid Python (`call_code`); a
tool's reply is a python_output part.
The assistant turns around a call fold into one assistant message, as nanochat keeps a
tool exchange inside one assistant turn.
"""

from __future__ import annotations

import json
import math
import re
from enum import Enum
from keyword import iskeyword
from typing import Any

from albor_pipeline.text.chat import ChatError, Message


class ChatFormat(str, Enum):
    messages = "messages"
    openai = "openai"
    sharegpt = "sharegpt"
    alpaca = "alpaca"
    auto = "auto"


# The field a format's conversation sits in, unless the source names another.
DEFAULT_FIELD = {ChatFormat.messages: "messages", ChatFormat.openai: "messages", ChatFormat.sharegpt: "conversations"}
ALPACA_FIELDS = ("instruction", "input", "output", "system")
CODE_TOOLS = frozenset({"python", "code_interpreter", "ipython", "execute_python", "run_python", "python_repl"})
CODE_ARGUMENTS = ("code", "source", "script")
SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "function_call": "call",
    "observation": "tool",
    "tool": "tool",
}


def detect(row: dict[str, Any], field: str | None) -> ChatFormat:
    """The format of one row, by its fields; a row matching none is a `ChatError`."""
    if isinstance(row.get("conversations"), list) and field in (None, "conversations"):
        return ChatFormat.sharegpt
    if "instruction" in row and "output" in row:
        return ChatFormat.alpaca
    messages = row.get(field or "messages")
    if isinstance(messages, list):
        openai = any(
            isinstance(m, dict) and (m.get("tool_calls") or m.get("role") in ("tool", "developer") or _text_parts(m))
            for m in messages
        )
        return ChatFormat.openai if openai else ChatFormat.messages
    raise ChatError(
        f"cannot tell the chat format: expected {field or 'messages'!r} (messages/openai), 'conversations' "
        f"(sharegpt) or 'instruction' and 'output' (alpaca); the row has {sorted(row)[:10]}"
    )


def _text_parts(message: dict[str, Any]) -> bool:
    """OpenAI's content parts: a user's content as a list (nanochat allows parts only for the assistant)."""
    return message.get("role") != "assistant" and isinstance(message.get("content"), list)


def to_messages(row: dict[str, Any], fmt: ChatFormat, field: str | None) -> Any:
    """The row's conversation as nanochat's raw messages (validated later by `clean_conversation`)."""
    if fmt is ChatFormat.auto:
        fmt = detect(row, field)
    if fmt is ChatFormat.alpaca:
        return _alpaca(row)
    name = field or DEFAULT_FIELD[fmt]
    if name not in row:
        raise ChatError(f"missing field {name!r} (has {sorted(row)[:10]})")
    if fmt is ChatFormat.sharegpt:
        return _sharegpt(row[name])
    return _openai(row[name]) if fmt is ChatFormat.openai else row[name]


def _alpaca(row: dict[str, Any]) -> list[Message]:
    values = {k: row.get(k) for k in ALPACA_FIELDS}
    for key, value in values.items():
        if value is not None and not isinstance(value, str):
            raise ChatError(f"{key} must be a string, got {type(value).__name__}")
    if not values["instruction"] or not values["output"]:
        raise ChatError("instruction and output must be non-empty strings")
    prompt = values["instruction"] + (f"\n\n{values['input']}" if values["input"] else "")
    system = [{"role": "system", "content": values["system"]}] if values["system"] else []
    return [*system, {"role": "user", "content": prompt}, {"role": "assistant", "content": values["output"]}]


def _sharegpt(turns: Any) -> list[Message]:
    if not isinstance(turns, list):
        raise ChatError(f"conversations must be a list, got {type(turns).__name__}")
    out = _Turns()
    for i, turn in enumerate(turns):
        valid = isinstance(turn, dict) and turn.get("from") in SHAREGPT_ROLES and isinstance(turn.get("value"), str)
        if not valid:
            got = turn.get("from") if isinstance(turn, dict) else type(turn).__name__
            raise ChatError(f"turn {i}: expected {{from: one of {sorted(SHAREGPT_ROLES)}, value: string}}, got {got!r}")
        role, value = SHAREGPT_ROLES[turn["from"]], turn["value"]
        if role == "call":
            try:
                call = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ChatError(f"turn {i}: a function_call's value is not JSON: {exc.msg}") from None
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise ChatError(f"turn {i}: a function_call's value must be {{name, arguments}}")
            out.part(i, "python", call_code(call["name"], call.get("arguments", {})))
        elif role == "tool":
            out.part(i, "python_output", value)
        else:
            out.message(role, value)
    return out.messages


def _openai(messages: Any) -> list[Message]:
    if not isinstance(messages, list):
        raise ChatError(f"messages must be a list, got {type(messages).__name__}")
    out = _Turns()
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ChatError(f"message {i}: expected an object, got {type(message).__name__}")
        role = message.get("role")
        role = "system" if role == "developer" else role
        text = _openai_content(message.get("content"), i)
        if role == "tool":
            out.part(i, "python_output", text or "")
            continue
        content = text if text is not None else message.get("content")  # nanochat's parts as they are
        if role != "assistant" or not message.get("tool_calls"):
            out.message(role, content)
            continue
        if content:
            out.message("assistant", content)
        for j, call in enumerate(message["tool_calls"]):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise ChatError(f"message {i} tool call {j}: expected {{function: {{name, arguments}}}}")
            out.part(i, "python", call_code(function["name"], function.get("arguments", "{}")))
    return out.messages


def _openai_content(content: Any, i: int) -> str | None:
    """A string, null, or OpenAI's text parts joined; other parts (images, audio) are an error."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        kinds = sorted({str(p.get("type")) for p in content} - {"text", "python", "python_output"})
        if kinds:
            raise ChatError(f"message {i}: content parts of type {kinds} are not text")
        if all(p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
            return "".join(p["text"] for p in content)
    return None  # nanochat's own parts: read as they are


class _Turns:
    """Messages being assembled: tool parts join the assistant turn they belong to."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def message(self, role: Any, content: Any) -> None:
        if role == "assistant" and self.messages and self.messages[-1]["role"] == "assistant":
            self._parts().extend(content if isinstance(content, list) else [{"type": "text", "text": content}])
            return
        self.messages.append({"role": role, "content": list(content) if isinstance(content, list) else content})

    def part(self, i: int, kind: str, text: str) -> None:
        if not self.messages or self.messages[-1]["role"] != "assistant":
            if kind == "python_output":
                raise ChatError(f"message {i}: a tool result with no assistant tool call before it")
            self.messages.append({"role": "assistant", "content": []})
        self._parts().append({"type": kind, "text": text})

    def _parts(self) -> list[dict[str, str]]:
        last = self.messages[-1]
        if isinstance(last["content"], str):
            last["content"] = [{"type": "text", "text": last["content"]}]
        if not isinstance(last["content"], list):
            raise ChatError(f"assistant content must be a string or parts, got {type(last['content']).__name__}")
        parts: list[dict[str, str]] = last["content"]
        return parts


def _identifier(key: Any) -> bool:
    return isinstance(key, str) and key.isidentifier() and not iskeyword(key)


def _python_name(name: str) -> str:
    """A tool's name as a dotted Python name: as is when it is one (`get_weather`,
    `tools.search`); else each character outside [A-Za-z0-9_.] becomes `_`, an empty or
    digit-led part gains a `_` prefix and a keyword a `_` suffix (`get-weather` ->
    `get_weather`, `Market Trends API` -> `Market_Trends_API`, `3d.class` -> `_3d.class_`).
    Deterministic, and no name can inject code."""
    if all(_identifier(part) for part in name.split(".")):
        return name
    parts = re.sub(r"[^A-Za-z0-9_.]", "_", name).split(".")
    parts = ["_" + part if not part or part[0].isdigit() else part for part in parts]
    return ".".join(part + "_" if iskeyword(part) else part for part in parts)


def _finite(value: Any) -> bool:
    """Whether a JSON value holds no Infinity or NaN (Python's repr writes them as the names
    `inf` and `nan`); iterative, as a JSON value may nest deeply."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def call_code(name: str, arguments: Any) -> str:
    """A tool call as the python part nanochat trains on: a code tool's code as is, any other
    call as `name(key=value, ...)` with Python literals for the JSON arguments, always a valid
    Python call that runs nothing of the data: the name as `_python_name` writes it, and keys
    that are not identifiers (`max-results`, `y"; z`, `class`) as `**{'max-results': 5}`
    after the others.

    Arguments that are not JSON, or hold an Infinity or NaN (JSON has neither; `inf` in
    Python is a name), are a `ChatError`: the conversation is refused (or counted as
    malformed), never trained on."""
    if not name.strip():
        raise ChatError("a tool call with an empty name")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            if name in CODE_TOOLS:  # code tools often send the code itself
                return arguments
            raise ChatError(f"tool call {name[:50]!r}: arguments are not JSON") from None
    if name in CODE_TOOLS and isinstance(arguments, dict):
        code = next((arguments[k] for k in CODE_ARGUMENTS if isinstance(arguments.get(k), str)), None)
        if code is not None:
            return code
    if not _finite(arguments):
        raise ChatError(f"tool call {name[:50]!r}: an argument is Infinity or NaN, which no Python literal writes")
    if not isinstance(arguments, dict):
        return f"{_python_name(name)}({arguments!r})"
    named = [f"{k}={v!r}" for k, v in arguments.items() if _identifier(k)]
    others = {k: v for k, v in arguments.items() if not _identifier(k)}
    return f"{_python_name(name)}({', '.join(named + ([f'**{others!r}'] if others else []))})"

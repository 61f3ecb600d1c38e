"""Chat formats: ShareGPT, Alpaca and OpenAI rows become the same conversations, and ids."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import REPO_ROOT, SourceSpec
from albor_pipeline.stages.ingest.ingest import ingest_source
from albor_pipeline.text.chat import ChatError
from albor_pipeline.text.chat_formats import ChatFormat, call_code, to_messages
from albor_pipeline.text.datafiles import IngestError

from .test_chat import _rendered, chat_tok  # noqa: F401  (the module's tokenizer fixture)

FORMATS = REPO_ROOT / "data" / "samples" / "chat_formats"
SYSTEM, QUESTION, ANSWER = "Be brief.", "How long is 'abc'?", "Let me run it."
CODE, OUTPUT, AFTER = "print(len('abc'))", "3", "It is 3 characters long."
LOOKUP, FOUND = "What does the help topic 'if' say?", "The if statement is used for conditional execution."

# One conversation (a system prompt, a python tool call and a help lookup with their replies)
# in every format that can hold it.
MESSAGES = {
    "messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": QUESTION},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": ANSWER},
                {"type": "python", "text": CODE},
                {"type": "python_output", "text": OUTPUT},
                {"type": "text", "text": AFTER},
            ],
        },
        {"role": "user", "content": LOOKUP},
        {
            "role": "assistant",
            "content": [
                {"type": "python", "text": "pydoc_topic(topic='if', full=False)"},
                {"type": "python_output", "text": FOUND},
                {"type": "text", "text": "It runs a block when a condition holds."},
            ],
        },
    ]
}


def _call(name: str, arguments: dict) -> dict:
    return {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


OPENAI = {
    "messages": [
        {"role": "developer", "content": SYSTEM},
        {"role": "user", "content": [{"type": "text", "text": QUESTION}]},
        {"role": "assistant", "content": ANSWER, "tool_calls": [_call("python", {"code": CODE})]},
        {"role": "tool", "tool_call_id": "c", "content": OUTPUT},
        {"role": "assistant", "content": AFTER},
        {"role": "user", "content": LOOKUP},
        {"role": "assistant", "content": None, "tool_calls": [_call("pydoc_topic", {"topic": "if", "full": False})]},
        {"role": "tool", "tool_call_id": "c", "content": FOUND},
        {"role": "assistant", "content": "It runs a block when a condition holds."},
    ]
}
SHAREGPT = {
    "conversations": [
        {"from": "system", "value": SYSTEM},
        {"from": "human", "value": QUESTION},
        {"from": "gpt", "value": ANSWER},
        {"from": "function_call", "value": json.dumps({"name": "python", "arguments": {"code": CODE}})},
        {"from": "observation", "value": OUTPUT},
        {"from": "gpt", "value": AFTER},
        {"from": "human", "value": LOOKUP},
        {
            "from": "function_call",
            "value": json.dumps({"name": "pydoc_topic", "arguments": {"topic": "if", "full": False}}),
        },
        {"from": "observation", "value": FOUND},
        {"from": "gpt", "value": "It runs a block when a condition holds."},
    ]
}


def _ingest(tmp: Path, name: str, rows: list[dict], fmt: str, parquet: bool = False) -> list[str]:
    """The canonical conversation texts of `rows` ingested in `fmt`, from JSONL or Parquet."""
    folder = tmp / name
    folder.mkdir()
    if parquet:
        pq.write_table(pa.Table.from_pylist(rows), folder / "rows.parquet")
    else:
        (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    src = SourceSpec(name=name, kind="chat", path=folder, format=fmt)
    ingest_source(src, tmp / f"{name}_out", StageIO(tmp))
    return pq.read_table(tmp / f"{name}_out").column("text").to_pylist()


def test_every_format_gives_the_same_conversation_and_the_same_ids(chat_tok, tmp_path):  # noqa: F811
    expected = _ingest(tmp_path, "m", [MESSAGES], "messages")
    for fmt, row in (("openai", OPENAI), ("sharegpt", SHAREGPT)):
        assert _ingest(tmp_path, fmt, [row], fmt) == expected, fmt
        assert _ingest(tmp_path, f"auto_{fmt}", [row], "auto") == expected, fmt
    # nanochat's own parts in an assistant message that also calls a tool are kept
    parts = [{"type": "text", "text": "a"}, {"type": "python", "text": "1+1"}, {"type": "python_output", "text": "2"}]
    row = {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": parts, "tool_calls": [_call("python", {"code": "print(3)"})]},
            {"role": "tool", "content": "3"},
        ]
    }
    calls = [{"type": "python", "text": "print(3)"}, {"type": "python_output", "text": "3"}]
    assert to_messages(row, ChatFormat.openai, None) == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [*parts, *calls]},
    ]
    # Parquet alike: OpenAI messages as a JSON string column, ShareGPT turns as structs
    assert _ingest(tmp_path, "po", [{"messages": json.dumps(OPENAI["messages"])}], "openai", parquet=True) == expected
    assert _ingest(tmp_path, "ps", [SHAREGPT], "auto", parquet=True) == expected
    # Alpaca holds one exchange; it equals that exchange in every other format.
    alpaca = {"instruction": "Summarize this module.", "input": "json", "output": "JSON encoding.", "system": SYSTEM}
    single = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Summarize this module.\n\njson"},
        {"role": "assistant", "content": "JSON encoding."},
    ]
    one = _ingest(tmp_path, "one", [{"messages": single}], "messages")
    assert _ingest(tmp_path, "alpaca", [alpaca], "alpaca") == one
    assert _ingest(tmp_path, "pa", [alpaca], "auto", parquet=True) == one
    assert (
        _ingest(
            tmp_path,
            "sg1",
            [
                {
                    "conversations": [
                        {"from": x["role"].replace("user", "human").replace("assistant", "gpt"), "value": x["content"]}
                        for x in single
                    ]
                }
            ],
            "sharegpt",
        )
        == one
    )
    # ... and renders to the same ids and mask.
    rendered = _rendered(chat_tok[0], tmp_path, [json.loads(expected[0]), json.loads(one[0])])
    again = _rendered(
        chat_tok[0], tmp_path / "m", [json.loads(t) for t in _ingest(tmp_path, "o2", [OPENAI, alpaca], "auto")]
    )
    assert [r["input_ids"] for r in rendered] == [r["input_ids"] for r in again]
    assert [r["loss_mask"] for r in rendered] == [r["loss_mask"] for r in again]


def test_the_shipped_samples_read_in_auto(tmp_path):
    src = SourceSpec(name="formats", kind="chat", path=FORMATS, format="auto")
    result = ingest_source(src, tmp_path / "out", StageIO(tmp_path))
    rows = sum(1 for f in FORMATS.iterdir() for _ in f.open())
    texts = pq.read_table(tmp_path / "out").column("text").to_pylist()
    assert result.summary.documents == rows == len(texts) and result.summary.skipped == {}
    parts = [p for t in texts for m in json.loads(t) if isinstance(m["content"], list) for p in m["content"]]
    calls = [p["text"] for p in parts if p["type"] == "python"]
    assert any(c.startswith("import ") for c in calls) and any(c.startswith("pydoc_topic(topic=") for c in calls)
    assert sum(p["type"] == "python_output" for p in parts) == len(calls)
    assert result.summary.cleanup.get("folded_system", 0) > 0


def _assistant_calls(name: str, arguments: dict) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [_call(name, arguments)]}


def _function_call(name: str, arguments: dict) -> dict:
    return {"from": "function_call", "value": json.dumps({"name": name, "arguments": arguments})}


BAD_ROWS = [
    (
        "openai",
        {"messages": [{"role": "tool", "content": "3"}]},
        "message 0: a tool result with no assistant tool call",
    ),
    (
        "openai",
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
        r"message 0: content parts of type \['image_url'\] are not text",
    ),
    (
        "openai",
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [{"function": {}}]}]},
        "message 1 tool call 0: expected",
    ),
    ("sharegpt", {"conversations": [{"from": "robot", "value": "x"}]}, "turn 0: expected {from: one of"),
    (
        "sharegpt",
        {"conversations": [{"from": "function_call", "value": "{oops"}]},
        "turn 0: a function_call's value is not JSON",
    ),
    # A tool call renders as a python part; no Python literal writes Infinity or NaN.
    (
        "sharegpt",
        {"conversations": [{"from": "human", "value": "q"}, _function_call("f", {"x": [1, float("inf")]})]},
        "tool call 'f': an argument is Infinity or NaN",
    ),
    (
        "openai",
        {"messages": [{"role": "user", "content": "q"}, _assistant_calls("f", {"x": {"y": float("nan")}})]},
        "tool call 'f': an argument is Infinity or NaN",
    ),
    (
        "openai",
        {"messages": [{"role": "user", "content": "q"}, _assistant_calls(" ", {})]},
        "a tool call with an empty name",
    ),
    ("alpaca", {"instruction": "Do it.", "output": 3}, "output must be a string, got int"),
    ("alpaca", {"instruction": "", "output": "x"}, "instruction and output must be non-empty"),
    (
        "auto",
        {"prompt": "q", "completion": "a"},
        r"cannot tell the chat format: .* the row has \['completion', 'prompt'\]",
    ),
]


# (name, arguments, rendered): every tool name and key a dataset may hold renders as a
# Python call that runs nothing of the data: OpenAI allows `[a-zA-Z0-9_-]+` names, ToolACE
# spaces, and a hostile row tries to inject code through either.
CALLS = [
    ("get_weather", {"city": "Paris", "days": 3}, "get_weather(city='Paris', days=3)"),
    ("get-weather", {"max-results": 5}, "get_weather(**{'max-results': 5})"),
    ("brave-search", {"q": "x", "max-results": 5, "class": 1}, "brave_search(q='x', **{'max-results': 5, 'class': 1})"),
    ("Market Trends API", {"region": "EU"}, "Market_Trends_API(region='EU')"),
    ("3d.class", {}, "_3d.class_()"),
    ("a..b", {}, "a._.b()"),
    ("os.system('id') #", {"x": 1}, "os.system__id____(x=1)"),
    ("import os; f", {}, "import_os__f()"),
    ("f", {'y"; z': 1, "a\n)": "b"}, "f(**{'y\"; z': 1, 'a\\n)': 'b'})"),
]


@pytest.mark.parametrize(("name", "arguments", "rendered"), CALLS, ids=[c[0] for c in CALLS])
def test_tool_calls_render_as_python_calls(name, arguments, rendered):
    """A call renders as one Python call of a dotted name whose arguments are literals equal to
    the JSON ones (keys that are not identifiers passed as `**{...}`), and its conversation is kept."""
    assert call_code(name, arguments) == call_code(name, json.dumps(arguments)) == rendered
    call = ast.parse(rendered, mode="eval").body
    assert isinstance(call, ast.Call) and not call.args
    func = call.func
    while isinstance(func, ast.Attribute):
        func = func.value
    assert isinstance(func, ast.Name)
    passed: dict = {}
    for keyword in call.keywords:
        value = ast.literal_eval(keyword.value)  # a literal, or this raises
        passed.update(value if keyword.arg is None else {keyword.arg: value})
    assert passed == arguments
    row = {"messages": [{"role": "user", "content": "q"}, _assistant_calls(name, arguments)]}
    assert to_messages(row, ChatFormat.openai, None)[1]["content"] == [{"type": "python", "text": rendered}]


def test_tool_call_literals_render_as_python():
    """Nested JSON values become Python literals; Infinity and NaN, which none writes, are refused."""
    code = call_code("tools.search", {"query": "a'b", "limit": 3, "opts": {"deep": [True, None, 1.5]}, "match": 1})
    assert code == "tools.search(query=\"a'b\", limit=3, opts={'deep': [True, None, 1.5]}, match=1)"
    assert isinstance(ast.parse(code, mode="eval").body, ast.Call)
    for arguments in ['{"x": Infinity}', '{"x": [NaN]}', '{"x": -Infinity}']:
        with pytest.raises(ChatError, match="Infinity or NaN"):
            call_code("f", arguments)


@pytest.mark.parametrize(("fmt", "row", "message"), BAD_ROWS, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(BAD_ROWS)])
def test_a_malformed_row_names_its_file_and_line_or_is_counted(tmp_path, fmt, row, message):
    good = {"messages": MESSAGES["messages"]} if fmt in ("openai", "auto") else SHAREGPT
    good = {"instruction": "Do it.", "output": "Done."} if fmt == "alpaca" else good
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "chat.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(IngestError, match=rf"chat.jsonl:2: {message}"):
        ingest_source(SourceSpec(name="b", kind="chat", path=folder, format=fmt), tmp_path / "o", StageIO(tmp_path))
    skip = SourceSpec(name="b", kind="chat", path=folder, format=fmt, on_error="skip")
    counted = ingest_source(skip, tmp_path / "o", StageIO(tmp_path))
    assert counted.summary.skipped == {"malformed": 1} and counted.summary.documents == 1

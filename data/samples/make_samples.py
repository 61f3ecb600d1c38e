"""Regenerate the shipped sample sources (run from the repo root with any Python 3.11+).

Nothing can be downloaded, so every sample is built from what every Python has:
- `pydoc_topics.jsonl`: the interpreter's help topics (pydoc_data.topics), one JSON
  object per topic. Prose about Python, as a JSONL data source.
- `python_chat.jsonl`: conversations about Python built from the built-ins' docstrings
  and the help topics: single and multi-turn, some with a system prompt, some with a
  python tool call and its output, some ending in an unanswered user turn (cleaning
  trims it), a few quoting chat special-token strings literally.
- `chat_formats/`: conversations about standard-library modules (their docstrings) in
  the other common chat formats, for a `format: auto` source: ShareGPT, Alpaca and
  OpenAI messages, with tool calls (a python tool and a help-topic lookup) and replies.
- `base_eval/`: base-model eval items as nanochat's CORE tasks take them: multiple choice
  (which module a docstring describes), schema (which built-in a docstring's first line
  belongs to) and language modelling (the last word of a help-topic sentence).
- `python_mc.jsonl`: multiple-choice questions (which built-in / help topic a passage
  documents), four seeded choices each.
- `words.txt`: the lowercase words of the help topics, for the synthetic spelling tasks.
- `python_bench.jsonl`: a HumanEval-shaped eval set (`task_id`, `prompt`,
  `canonical_solution`, `test`, `entry_point`) for decontamination. Most problems are
  written here; four take their reference solution from the standard library (colorsys,
  shlex, html), so the default spec's stdlib source really contains benchmark text and
  decontamination has something to drop.
"""

from __future__ import annotations

import ast
import builtins
import colorsys
import html
import importlib
import inspect
import json
import random
import re
import shlex
from pathlib import Path
from pydoc_data.topics import topics

HERE = Path(__file__).parent
SYSTEM = "You are a concise, accurate Python tutor."


def _paragraphs(text: str, limit: int) -> str:
    """Leading paragraphs of `text` up to about `limit` characters."""
    out = ""
    for para in re.split(r"\n\s*\n", text.strip()):
        if out and len(out) + len(para) > limit:
            break
        out += ("\n\n" if out else "") + para.strip()
    return out


def _documented_builtins() -> list[tuple[str, str]]:
    out = []
    for name in sorted(dir(builtins)):
        obj = getattr(builtins, name)
        if name.startswith("_") or not callable(obj) or (isinstance(obj, type) and issubclass(obj, BaseException)):
            continue
        doc = inspect.getdoc(obj)
        if doc and len(doc) > 40:
            out.append((name, doc))
    return out


def _write_jsonl(name: str, rows: list[dict]) -> None:
    path = HERE / name
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {path} ({path.stat().st_size:,} bytes, {len(rows)} rows)")


def conversations(rng: random.Random) -> list[dict]:
    rows: list[dict] = []
    for i, (name, doc) in enumerate(_documented_builtins()):
        first, _, rest = doc.partition("\n\n")
        messages = [
            {"role": "user", "content": f"What does the built-in `{name}` do?"},
            {"role": "assistant", "content": first},
        ]
        if rest and i % 2:
            messages += [
                {"role": "user", "content": "Can you tell me more?"},
                {"role": "assistant", "content": _paragraphs(rest, 1200)},
            ]
        if i % 5 == 0:
            messages.insert(0, {"role": "system", "content": SYSTEM})
        if i % 7 == 3:
            messages.append({"role": "user", "content": "Thanks!"})  # no reply: cleaning trims it
        rows.append({"messages": messages})
    for i, name in enumerate(sorted(topics)):
        text = topics[name]
        messages = [
            {"role": "user", "content": f"Explain the Python help topic {name!r}."},
            {"role": "assistant", "content": _paragraphs(text, 1500)},
        ]
        rest = text[len(messages[1]["content"]) :].strip()
        if rest and i % 3 == 0:
            messages += [
                {"role": "user", "content": "Go on."},
                {"role": "assistant", "content": _paragraphs(rest, 1500)},
            ]
        rows.append({"messages": messages})
    for word in rng.sample(sorted(topics), 40):  # tool use: python computes, the answer quotes it
        expr = f"len({word!r}), {word!r}.upper(), sorted({word!r})[0]"
        value = repr(eval(expr))  # the samples' own constant expressions, nothing external
        parts = [
            {"type": "text", "text": "Let me check that in Python.\n\n"},
            {"type": "python", "text": expr},
            {"type": "python_output", "text": value},
            {"type": "text", "text": f"\n\nSo the length, upper case and first letter are {value}."},
        ]
        question = f"For the string {word!r}, what are its length, its upper-case form and its smallest character?"
        rows.append({"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": parts}]})
    literal = [
        ("What is `<|assistant_start|>` in a chat template?", "It is a marker string such as <|assistant_start|>"),
        ("Why does my log contain </s> and <s>?", "Those look like a tokenizer's end </s> and start <s> markers."),
        ("¿Qué hace `print`? 🐍", "Escribe sus argumentos en la salida estándar, separados por espacios."),
    ]
    for question, answer in literal:
        rows.append({"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]})
    rng.shuffle(rows)
    return rows


def mc_items(rng: random.Random) -> list[dict]:
    items = []
    names = [n for n, _ in _documented_builtins()]
    for name, doc in _documented_builtins():
        passage = re.sub(rf"\b{re.escape(name)}\b", "___", doc.split("\n\n")[0])
        others = rng.sample([n for n in names if n != name], 3)
        choices = sorted([name, *others], key=lambda _: rng.random())
        items.append(
            {
                "question": f"Which built-in does this describe? {passage}",
                "choices": [f"`{c}`" for c in choices],
                "answer": choices.index(name),
            }
        )
    topic_names = sorted(topics)
    for name in topic_names:
        passage = _paragraphs(topics[name], 300)[:300]
        others = rng.sample([n for n in topic_names if n != name], 3)
        choices = sorted([name, *others], key=lambda _: rng.random())
        items.append(
            {
                "question": f"Which help topic begins like this? {passage}",
                "choices": choices,
                "answer": "ABCD"[choices.index(name)],  # letters work as well as indices
            }
        )
    return items


def words() -> list[str]:
    found = {w for text in topics.values() for w in re.findall(r"\b[a-z]{3,14}\b", text)}
    return sorted(found)


# Small problems written for this project: each function with its docstring and a test.
WRITTEN = '''
def is_palindrome(text: str) -> bool:
    """True if text reads the same backwards, ignoring case and non-letters.
    >>> is_palindrome("A man, a plan, a canal: Panama")
    True
    """
    letters = [c.lower() for c in text if c.isalpha()]
    return letters == letters[::-1]


def running_max(values: list[int]) -> list[int]:
    """The largest value seen so far at every position of values.
    >>> running_max([1, 3, 2, 5, 4])
    [1, 3, 3, 5, 5]
    """
    out, best = [], None
    for v in values:
        best = v if best is None or v > best else best
        out.append(best)
    return out


def chunk_pairs(items: list, size: int) -> list[list]:
    """Split items into consecutive chunks of at most size elements, in order.
    >>> chunk_pairs([1, 2, 3, 4, 5], 2)
    [[1, 2], [3, 4], [5]]
    """
    if size <= 0:
        raise ValueError('size must be positive')
    return [items[i : i + size] for i in range(0, len(items), size)]


def count_vowel_words(sentence: str) -> int:
    """How many words of the sentence start with a vowel (a, e, i, o, u), any case.
    >>> count_vowel_words("An apple is on the table")
    4
    """
    return sum(1 for word in sentence.split() if word[0].lower() in 'aeiou')


def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge overlapping closed intervals and return them sorted by start.
    >>> merge_intervals([(5, 7), (1, 3), (2, 4)])
    [(1, 4), (5, 7)]
    """
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def digit_root(n: int) -> int:
    """Repeatedly sum the decimal digits of a non-negative n until one digit remains.
    >>> digit_root(9875)
    2
    """
    while n >= 10:
        n = sum(int(d) for d in str(n))
    return n


def rotate_left(items: list, k: int) -> list:
    """Rotate items k places to the left; k may exceed the length or be negative.
    >>> rotate_left([1, 2, 3, 4], 1)
    [2, 3, 4, 1]
    """
    if not items:
        return []
    k %= len(items)
    return items[k:] + items[:k]


def word_frequencies(text: str) -> dict[str, int]:
    """Count the lowercase words of text, ignoring punctuation at word edges.
    >>> word_frequencies("the cat, the hat.")
    {'the': 2, 'cat': 1, 'hat': 1}
    """
    counts: dict[str, int] = {}
    for raw in text.split():
        word = raw.strip('.,;:!?"\\'()').lower()
        if word:
            counts[word] = counts.get(word, 0) + 1
    return counts


def balanced_brackets(text: str) -> bool:
    """True if every (, [ and { in text is closed in the right order.
    >>> balanced_brackets("f(a[0], {1: 2})")
    True
    """
    pairs = {')': '(', ']': '[', '}': '{'}
    stack = []
    for c in text:
        if c in '([{':
            stack.append(c)
        elif c in pairs:
            if not stack or stack.pop() != pairs[c]:
                return False
    return not stack


def snake_to_camel(name: str) -> str:
    """Turn a snake_case identifier into camelCase, keeping leading underscores.
    >>> snake_to_camel("_parse_http_header")
    '_parseHttpHeader'
    """
    stripped = name.lstrip('_')
    prefix = name[: len(name) - len(stripped)]
    head, *rest = stripped.split('_')
    return prefix + head + ''.join(part.capitalize() for part in rest)


def second_largest(values: list[int]) -> int | None:
    """The second largest distinct value, or None when there are fewer than two.
    >>> second_largest([4, 1, 4, 3])
    3
    """
    distinct = sorted(set(values))
    return distinct[-2] if len(distinct) >= 2 else None


def run_length_encode(text: str) -> list[tuple[str, int]]:
    """Pairs of (character, run length) for the runs of equal characters in text.
    >>> run_length_encode("aaabcc")
    [('a', 3), ('b', 1), ('c', 2)]
    """
    runs: list[tuple[str, int]] = []
    for c in text:
        if runs and runs[-1][0] == c:
            runs[-1] = (c, runs[-1][1] + 1)
        else:
            runs.append((c, 1))
    return runs
'''
TESTS = {
    "is_palindrome": "assert is_palindrome('Never odd or even') and not is_palindrome('python')",
    "running_max": "assert running_max([2, 1, 3]) == [2, 2, 3] and running_max([]) == []",
    "chunk_pairs": "assert chunk_pairs([1, 2, 3], 3) == [[1, 2, 3]] and chunk_pairs([], 4) == []",
    "count_vowel_words": "assert count_vowel_words('Every owl in Utah') == 4 and count_vowel_words('') == 0",
    "merge_intervals": "assert merge_intervals([(1, 2), (2, 3)]) == [(1, 3)] and merge_intervals([]) == []",
    "digit_root": "assert digit_root(0) == 0 and digit_root(38) == 2",
    "rotate_left": "assert rotate_left([1, 2, 3], -1) == [3, 1, 2] and rotate_left([], 5) == []",
    "word_frequencies": "assert word_frequencies('A a. b!') == {'a': 2, 'b': 1}",
    "balanced_brackets": "assert balanced_brackets('') and not balanced_brackets('(]') and not balanced_brackets('((')",
    "snake_to_camel": "assert snake_to_camel('a_b_c') == 'aBC' and snake_to_camel('x') == 'x'",
    "second_largest": "assert second_largest([1]) is None and second_largest([2, 2, 1]) == 1",
    "run_length_encode": "assert run_length_encode('') == [] and run_length_encode('zz') == [('z', 2)]",
}
# Reference solutions taken from the standard library (stable across Python 3.11-3.13).
FROM_STDLIB = [colorsys.rgb_to_hsv, colorsys.hls_to_rgb, shlex.quote, html.escape]


def _split_function(source: str) -> tuple[str, str]:
    """(signature and docstring, body) of a function's source."""
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef)
    first = node.body[0]
    has_doc = ast.get_docstring(node) is not None
    cut = first.end_lineno if has_doc else first.lineno - 1
    lines = source.splitlines(keepends=True)
    return "".join(lines[:cut]), "".join(lines[cut:])


def benchmark() -> list[dict]:
    functions = [n for n in ast.parse(WRITTEN).body if isinstance(n, ast.FunctionDef)]
    sources = [(f.name, f"{ast.get_source_segment(WRITTEN, f)}\n", TESTS[f.name]) for f in functions]
    sources += [(fn.__name__, inspect.getsource(fn), f"assert callable({fn.__name__})") for fn in FROM_STDLIB]
    rows = []
    for i, (name, source, test) in enumerate(sources):
        prompt, solution = _split_function(source)
        rows.append(
            {
                "task_id": f"AlborEval/{i}",
                "prompt": prompt,
                "canonical_solution": solution,
                "test": test,
                "entry_point": name,
            }
        )
    return rows


MODULES = (
    "argparse",
    "base64",
    "bisect",
    "calendar",
    "collections",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "enum",
    "fnmatch",
    "fractions",
    "functools",
    "glob",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "logging",
    "operator",
    "os",
    "pathlib",
    "pickle",
    "pprint",
    "queue",
    "random",
    "re",
    "secrets",
    "shlex",
    "shutil",
    "socket",
    "sqlite3",
    "statistics",
    "string",
    "struct",
    "subprocess",
    "tempfile",
    "textwrap",
    "threading",
    "timeit",
    "tokenize",
    "traceback",
    "typing",
    "unittest",
    "urllib",
    "uuid",
    "warnings",
    "weakref",
    "zipfile",
    "zlib",
)


def _module_docs() -> list[tuple[str, str]]:
    """(module, its docstring's leading paragraphs) of the modules above that have one."""
    out = []
    for name in MODULES:
        doc = inspect.getdoc(importlib.import_module(name))
        if doc and len(doc) > 80:
            out.append((name, _paragraphs(doc, 900)))
    return out


def _tool_turns(name: str, i: int) -> tuple[str, str, dict, str] | None:
    """A tool exchange for every third module: (question, code or call, call, tool reply)."""
    if i % 3 == 1:
        code = f"import {name}\nprint(len([n for n in dir({name}) if not n.startswith('_')]))"
        value = str(len([n for n in dir(importlib.import_module(name)) if not n.startswith("_")]))
        question = f"How many public names does the `{name}` module define?"
        return question, code, {"name": "python", "arguments": {"code": code}}, value
    if i % 3 == 2:
        topic = sorted(topics)[i]
        question = f"What does the help topic {topic!r} say?"
        call = {"name": "pydoc_topic", "arguments": {"topic": topic}}
        return question, f"pydoc_topic(topic={topic!r})", call, _paragraphs(topics[topic], 400)
    return None


def chat_formats() -> dict[str, list[dict]]:
    """The same kind of conversation in ShareGPT, Alpaca and OpenAI form, a module each."""
    rows: dict[str, list[dict]] = {"sharegpt.jsonl": [], "alpaca.jsonl": [], "openai.jsonl": []}
    for i, (name, doc) in enumerate(_module_docs()):
        question = f"What is the Python module `{name}` for?"
        if i % 3 == 0:
            rows["alpaca.jsonl"].append(
                {"instruction": "Explain what this standard-library module is for.", "input": name, "output": doc}
                | ({"system": SYSTEM} if i % 2 else {})
            )
            continue
        tool = _tool_turns(name, i)
        if i % 3 == 1:
            turns = [{"from": "system", "value": SYSTEM}] if i % 2 else []
            turns += [{"from": "human", "value": question}, {"from": "gpt", "value": doc}]
            if tool:
                call = json.dumps(tool[2])
                turns += [
                    {"from": "human", "value": tool[0]},
                    {"from": "function_call", "value": call},
                    {"from": "observation", "value": tool[3]},
                    {"from": "gpt", "value": f"It defines {tool[3]} public names."},
                ]
            rows["sharegpt.jsonl"].append({"conversations": turns})
            continue
        messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": question}]}]
        messages.append({"role": "assistant", "content": doc})
        if tool:
            function = {"name": tool[2]["name"], "arguments": json.dumps(tool[2]["arguments"])}
            call = {"id": f"call_{i}", "type": "function", "function": function}
            messages += [
                {"role": "user", "content": tool[0]},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"call_{i}", "content": tool[3]},
                {"role": "assistant", "content": "That is the topic's opening, quoted from Python's help."},
            ]
        rows["openai.jsonl"].append({"messages": messages})
    return rows


def base_eval(rng: random.Random) -> dict[str, list[dict]]:
    """CORE-shaped items: multiple_choice, schema and language_modeling."""
    modules = _module_docs()
    mc = []
    for name, doc in modules:
        passage = re.sub(rf"\b{re.escape(name)}\b", "___", doc.split("\n\n")[0])[:400]
        choices = sorted([name, *rng.sample([m for m, _ in modules if m != name], 3)], key=lambda _: rng.random())
        query = f"Question: Which standard-library module does this describe? {passage}\nAnswer:"
        mc.append({"query": query, "choices": choices, "gold": choices.index(name)})
    names = [n for n, _ in _documented_builtins()]
    schema = []
    for name, doc in _documented_builtins():
        first = doc.split("\n")[0].strip()
        if not first or name in first:
            continue
        options = sorted([name, *rng.sample([n for n in names if n != name], 2)], key=lambda _: rng.random())
        schema.append(
            {
                "context_options": [f"The Python built-in `{o}`:" for o in options],
                "continuation": first,
                "gold": options.index(name),
            }
        )
    lm = []
    for name in sorted(topics):
        for sentence in re.findall(r"[A-Z][^.!?\n]*(?:\n[^.!?\n]+)*[.]", _paragraphs(topics[name], 600)):
            words = sentence[:-1].split()
            if 10 <= len(words) <= 40 and words[-1].isalpha() and len(words[-1]) > 3:
                lm.append({"context": " ".join(words[:-1]), "continuation": words[-1]})
                break
    return {"mc.jsonl": mc, "schema.jsonl": schema, "lm.jsonl": lm}


def main() -> None:
    with open(HERE / "pydoc_topics.jsonl", "w", encoding="utf-8", newline="\n") as fh:
        for name in sorted(topics):
            fh.write(json.dumps({"topic": name, "text": topics[name]}, ensure_ascii=False) + "\n")
    _write_jsonl("python_chat.jsonl", conversations(random.Random(0)))
    _write_jsonl("python_mc.jsonl", mc_items(random.Random(1)))
    (HERE / "base_eval").mkdir(exist_ok=True)
    for name, rows in base_eval(random.Random(2)).items():
        _write_jsonl(f"base_eval/{name}", rows)
    (HERE / "chat_formats").mkdir(exist_ok=True)
    for name, rows in chat_formats().items():
        _write_jsonl(f"chat_formats/{name}", rows)
    _write_jsonl("python_bench.jsonl", benchmark())
    (HERE / "words.txt").write_text("".join(f"{w}\n" for w in words()), encoding="utf-8")
    print(f"wrote {HERE / 'words.txt'} ({len(words())} words)")


if __name__ == "__main__":
    main()

"""Regenerate the shipped sample sources (run from the repo root with any Python 3.11+).

Nothing can be downloaded, so every sample is built from what every Python has:
- `pydoc_topics.jsonl`: the interpreter's help topics (pydoc_data.topics), one JSON
  object per topic. Prose about Python, as a JSONL data source.
- `python_chat.jsonl`: conversations about Python built from the built-ins' docstrings
  and the help topics: single and multi-turn, some with a system prompt, some with a
  python tool call and its output, some ending in an unanswered user turn (cleaning
  trims it), a few quoting chat special-token strings literally.
- `python_mc.jsonl`: multiple-choice questions (which built-in / help topic a passage
  documents), four seeded choices each.
- `words.txt`: the lowercase words of the help topics, for the synthetic spelling tasks.
"""

from __future__ import annotations

import builtins
import inspect
import json
import random
import re
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


def main() -> None:
    with open(HERE / "pydoc_topics.jsonl", "w", encoding="utf-8", newline="\n") as fh:
        for name in sorted(topics):
            fh.write(json.dumps({"topic": name, "text": topics[name]}, ensure_ascii=False) + "\n")
    _write_jsonl("python_chat.jsonl", conversations(random.Random(0)))
    _write_jsonl("python_mc.jsonl", mc_items(random.Random(1)))
    (HERE / "words.txt").write_text("".join(f"{w}\n" for w in words()), encoding="utf-8")
    print(f"wrote {HERE / 'words.txt'} ({len(words())} words)")


if __name__ == "__main__":
    main()

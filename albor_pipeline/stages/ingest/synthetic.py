"""Seeded synthetic chat tasks in the spirit of nanochat's SpellingBee and SimpleSpelling.

Small models do not learn how a token maps to its letters unless the data over-represents
it. Conversation i depends only on (seed, i) and the word list, so a source is
reproducible and grows without reshuffling what it already produced.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from albor_pipeline.spec import SyntheticTask
from albor_pipeline.text.chat import Message

ALPHABET = "abcdefghijklmnopqrstuvwxyz"
BEE_TEMPLATES = (
    "How many {letter} are in the word {word}",
    "How many {letter} are in {word}",
    "Count the number of {letter} in {word}",
    "How many times does {letter} appear in {word}",
    "In the word {word}, how many {letter} are there",
    "What is the frequency of {letter} in {word}",
    "How many {letter}s are in {word}",
    "{word} has how many {letter}",
    "¿Cuántas {letter} hay en {word}?",
    "Combien de {letter} dans {word}",
    "Wie viele {letter} sind in {word}",
    "{word}中有多少个{letter}",
)
SPELL_TEMPLATES = ("Spell the word: {word}", "Spell {word}", "How do you spell {word}?", "Spell out {word} for me")


def _quote(rng: random.Random, text: str) -> str:
    quote = rng.choice(("", "'", '"'))
    return f"{quote}{text}{quote}"


def spelling_bee(rng: random.Random, words: list[str]) -> list[Message]:
    """Count a letter by spelling the word out, then check it with a python call."""
    word = rng.choice(words)
    letter = rng.choice(word) if rng.random() < 0.9 else rng.choice(ALPHABET)
    template = rng.choice(BEE_TEMPLATES)
    question = template.format(letter=_quote(rng, letter), word=_quote(rng, word))
    if rng.random() < 0.3:
        question = question.lower()
    if rng.random() < 0.5:
        question += "?"
    lines, count = [], 0
    for i, char in enumerate(word, 1):
        if char == letter:
            count += 1
            lines.append(f"{i}:{char} hit! count={count}")
        else:
            lines.append(f"{i}:{char}")
    manual = (
        f"We are asked to find the number '{letter}' in the word '{word}'. Let me try a manual approach first.\n\n"
        f"First spell the word out:\n{word}:{','.join(word)}\n\nThen count the occurrences of '{letter}':\n"
        + "\n".join(lines)
        + f"\n\nThis gives us {count}."
    )
    parts = [
        {"type": "text", "text": manual},
        {"type": "text", "text": "\n\nLet me double check this using Python:\n\n"},
        {"type": "python", "text": f"'{word}'.count('{letter}')"},
        {"type": "python_output", "text": str(word.count(letter))},
        {"type": "text", "text": f"\n\nPython gives us {count}.\n\nMy final answer is:\n\n#### {count}"},
    ]
    return [{"role": "user", "content": question}, {"role": "assistant", "content": parts}]


def simple_spelling(rng: random.Random, words: list[str]) -> list[Message]:
    """Spell a word letter by letter."""
    word = rng.choice(words)
    question = rng.choice(SPELL_TEMPLATES).format(word=word)
    return [{"role": "user", "content": question}, {"role": "assistant", "content": f"{word}:{','.join(word)}"}]


GENERATORS = {SyntheticTask.spelling_bee: spelling_bee, SyntheticTask.simple_spelling: simple_spelling}


def read_words(text: str) -> list[str]:
    """The word list: one lowercase a-z word per line; anything else is left out."""
    return [
        w for w in (line.strip() for line in text.splitlines()) if w and w.isascii() and w.isalpha() and w.islower()
    ]


def generate(task: SyntheticTask, words: list[str], rows: int, seed: int) -> Iterator[list[Message]]:
    """Conversation i from `random.Random(f"{seed}:{i}")`: independent of how many come before."""
    make = GENERATORS[task]
    for i in range(rows):
        yield make(random.Random(f"{task.value}:{seed}:{i}"), words)

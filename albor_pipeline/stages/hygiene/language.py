"""The language filter's language identification: py3langid (langid.py's naive Bayes over
byte n-grams, 140 languages; its model ships inside the package, so nothing is downloaded).

A document's language is that of its first `LANGUAGE_CHARS` characters: its head decides,
so the cost per document is bounded (py3langid walks bytes in Python at ~2 MB/s) and the
answer is the same as on the whole text for all but a few documents. A pure function of
the text and the pinned model: the same document gets the same language in any batch,
process or run.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from py3langid.langid import MODEL_FILE, LanguageIdentifier

LANGUAGE_CHARS = 2000
NO_LANGUAGE = "zxx"  # ISO 639's "no linguistic content" (py3langid's own label): no letters at all


@cache
def _identifier() -> LanguageIdentifier:
    """This process's identifier (its model loads once, ~0.5 s), with probabilities."""
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def language_scored(text: str) -> tuple[str, float]:
    """The ISO 639 code of `text`'s language and its probability, from its first
    `LANGUAGE_CHARS` characters; (`zxx`, 1.0) when they hold no letter (py3langid would name
    an arbitrary language)."""
    head = text[:LANGUAGE_CHARS]
    if not any(c.isalpha() for c in head):
        return NO_LANGUAGE, 1.0
    language, score = _identifier().classify(head)
    return str(language), float(score)


def language_of(text: str) -> str:
    """The ISO 639 code of `text`'s language (`language_scored`)."""
    return language_scored(text)[0]


def check_languages(languages: Iterable[str]) -> None:
    """A clear error for a code the model does not know (it would drop every document); the
    model is loaded only when there are codes to check."""
    wanted = set(languages)
    if wanted and (unknown := sorted(wanted - set(_identifier().labels))):
        raise ValueError(
            f"hygiene.rules.languages: unknown language code(s) {', '.join(unknown)}; "
            f"py3langid knows {', '.join(sorted(_identifier().labels))}"
        )

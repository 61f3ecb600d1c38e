"""English words and sentences as datatrove's prose filters see them, at a fraction of the cost.

datatrove splits English with spaCy's blank English pipeline (its tokenizer, then its rule
sentencizer), inside a memory zone: every new word of every document builds a spaCy lexeme,
about half a millisecond each. The prose signals need only the token texts, so this module
applies spaCy's own English rules (its special cases, prefix, suffix and infix patterns and
URL pattern, read from the installed spaCy, never restated here) by the tokenizer's algorithm
in plain Python, and caches each whitespace-separated chunk's tokens across documents.

The algorithm follows spaCy's `Tokenizer` (3.8): split at whitespace; per chunk, a special
case, else prefixes and suffixes peeled off until none is left or the rest is a special case,
then the rest as a special case, a URL, or split at its infixes; then the special cases that
only show up as a run of tokens (`Mr.Smith`: `Mr`, `.`, `Smith`) are merged again, longest
first, as spaCy's phrase matcher does. The tests prove the tokens equal spaCy's.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator
from functools import cache
from importlib import metadata
from itertools import chain
from operator import itemgetter
from typing import Any, NamedTuple

from pydantic import BaseModel

from albor_pipeline.runtime.readcache import user_cached

WS_TOKEN = None  # where spaCy makes a whitespace token (any whitespace but one space after a word)
BREAKS = re.compile(r"\s{2,}|[^\S ]")  # whitespace that is a token of its own in spaCy
CACHE_CHUNKS = 200_000  # chunks kept across documents (~60 MB), then the cache starts over

Match = Callable[[str], "re.Match[str] | None"]
Token = str | None


class Chunk(NamedTuple):
    """One whitespace-free chunk's tokens: before and after its special-case runs merge."""

    split: tuple[str, ...]
    final: tuple[str, ...]
    first: str  # split[0] and split[-1], read at C speed by FIRST and LAST
    last: str


FINAL, FIRST, LAST = itemgetter(1), itemgetter(2), itemgetter(3)


class Pattern(BaseModel):
    pattern: str
    flags: int

    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.pattern, self.flags)


class SpacyRules(BaseModel):
    """spaCy's blank English tokenizer rules as data: its special cases, its prefix, suffix,
    infix and URL patterns, and its sentencizer's sentence-ending marks. Read once per spaCy
    version and kept in the user's cache (`spacy_rules`): importing spaCy costs seconds (it
    imports thinc, and torch where installed), in every worker that scores prose."""

    spacy: str
    specials: dict[str, tuple[str, ...]]
    prefix: Pattern
    suffix: Pattern
    infix: Pattern
    url: Pattern
    token_match: Pattern | None
    faster_heuristics: bool
    sentence_ends: tuple[str, ...]


def _read_spacy() -> SpacyRules:
    import spacy  # spaCy's English rules: datatrove's word and sentence splitter for English
    from spacy.attrs import ORTH
    from spacy.pipeline import Sentencizer

    tokenizer: Any = spacy.blank("en").tokenizer

    def pattern(bound: Any) -> Pattern:
        return Pattern(pattern=bound.__self__.pattern, flags=bound.__self__.flags)

    return SpacyRules(
        spacy=spacy.__version__,
        specials={s: tuple(part[ORTH] for part in parts) for s, parts in tokenizer.rules.items()},
        prefix=pattern(tokenizer.prefix_search),
        suffix=pattern(tokenizer.suffix_search),
        infix=pattern(tokenizer.infix_finditer),
        url=pattern(tokenizer.url_match),
        token_match=pattern(tokenizer.token_match) if tokenizer.token_match else None,
        faster_heuristics=tokenizer.faster_heuristics,
        sentence_ends=tuple(sorted(Sentencizer.default_punct_chars)),
    )


def spacy_rules() -> SpacyRules:
    """The installed spaCy's English rules: from the user's cache (`~/.cache/albor/`, one file
    per spaCy version), else read from spaCy and kept there (`user_cached`)."""
    version = metadata.version("spacy")

    def parse(data: bytes) -> SpacyRules:
        rules = SpacyRules.model_validate_json(data)
        if rules.spacy != version:
            raise ValueError(f"rules of spaCy {rules.spacy}, not {version}")
        return rules

    return user_cached(f"spacy/en-rules-{version}.json", lambda: _read_spacy().model_dump_json().encode(), parse)


class EnglishWords:
    """spaCy's blank English tokenizer, as token texts, with a chunk cache."""

    def __init__(self, rules: SpacyRules | None = None) -> None:
        rules = rules or spacy_rules()
        self.specials: dict[str, tuple[str, ...]] = rules.specials
        self.prefix: Match = rules.prefix.compiled().search
        self.suffix: Match = rules.suffix.compiled().search
        self.infixes: Callable[[str], Iterator[re.Match[str]]] = rules.infix.compiled().finditer
        self.url: Match = rules.url.compiled().match
        self.token_match: Match | None = rules.token_match.compiled().match if rules.token_match else None
        self.sentence_ends = frozenset(rules.sentence_ends)
        self.runs: dict[str, list[tuple[tuple[str, ...], str]]] = {}
        everything = not rules.faster_heuristics  # else only those with an affix or infix, as spaCy
        for s in self.specials:
            affixed = _length(self.prefix(s)) or _length(self.suffix(s)) or any(self.infixes(s))
            if not any(c.isspace() for c in s) and (everything or affixed):
                pattern = tuple(self._split(s, specials=False))
                self.runs.setdefault(pattern[0], []).append((pattern, s))
        # Two chunks one space apart: spaCy matches runs across the space, and such a match,
        # though never merged (its text holds the space), can still shadow a run inside a chunk.
        self.pairs = frozenset(p[i : i + 2] for runs in self.runs.values() for p, _ in runs for i in range(len(p) - 1))
        self.cache: dict[str, Chunk] = {}

    def words(self, text: str) -> list[str]:
        """datatrove's `split_into_words(text)` for English: spaCy's non-whitespace tokens."""
        return [t for t in self.tokens(text) if t is not WS_TOKEN]

    def sentences(self, text: str) -> int:
        """How many pieces datatrove's `split_into_sentences(text)` gives: spaCy's sentencizer
        opens a sentence at the first token after a sentence-ending mark that is neither one
        nor punctuation (at least one piece, as datatrove returns the text itself)."""
        count, seen_end = 1, False
        for token in self.tokens(text):
            ends = token in self.sentence_ends
            if seen_end and not ends and (token is WS_TOKEN or not _is_punct(token)):
                count, seen_end = count + 1, False
            elif ends:
                seen_end = True
        return count

    def tokens(self, text: str) -> list[Token]:
        """spaCy's tokens of `text`, each whitespace token as WS_TOKEN."""
        out: list[Token] = []
        cache, pairs = self.cache, self.pairs
        for k, run in enumerate(BREAKS.split(text)):
            if k:
                out.append(WS_TOKEN)
            chunks = [cache.get(p) or self._chunk(p) for p in run.split(" ") if p]
            if pairs.isdisjoint(zip(map(LAST, chunks), map(FIRST, chunks[1:]))):
                out.extend(chain.from_iterable(map(FINAL, chunks)))
                continue
            joints = [i for i, joint in enumerate(zip(map(LAST, chunks), map(FIRST, chunks[1:]))) if joint in pairs]
            done = 0
            for first, last in _spans(joints):  # chunks first..last+1 joined by possible runs
                out.extend(chain.from_iterable(map(FINAL, chunks[done:first])))
                group = chunks[first : last + 2]
                tokens = [t for chunk in group for t in chunk.split]
                owner = [g for g, chunk in enumerate(group) for _ in chunk.split]
                out.extend(self._merge(tokens, owner))
                done = last + 2
            out.extend(chain.from_iterable(map(FINAL, chunks[done:])))
        return out

    def _chunk(self, piece: str) -> Chunk:
        split = tuple(self._split(piece, specials=True))
        final = tuple(self._merge(list(split), [0] * len(split)))
        chunk = Chunk(split, split if final == split else final, split[0], split[-1])
        if len(self.cache) >= CACHE_CHUNKS:
            self.cache.clear()
        self.cache[piece] = chunk
        return chunk

    def _merge(self, tokens: list[str], owner: list[int]) -> list[str]:
        """Special-case runs merged: every match, longest first (then leftmost), taken unless
        its first or last token lies in one seen before (spaCy marks a skipped match's tokens
        seen too), merged only inside one chunk."""
        found = []
        for i, token in enumerate(tokens):
            for pattern, special in self.runs.get(token, ()):
                end = i + len(pattern)
                if tuple(tokens[i:end]) == pattern:
                    found.append((i, end, special))
        if not found:
            return tokens
        found.sort(key=lambda m: (m[0] - m[1], m[0]))
        seen: set[int] = set()
        merged: dict[int, tuple[int, str]] = {}
        for start, end, special in found:
            if start not in seen and end - 1 not in seen and owner[start] == owner[end - 1]:
                merged[start] = (end, special)
            seen.update(range(start, end))
        out: list[str] = []
        i = 0
        while i < len(tokens):
            if i in merged:
                end, special = merged[i]
                out.extend(self.specials[special])
                i = end
            else:
                out.append(tokens[i])
                i += 1
        return out

    def _split(self, string: str, specials: bool) -> list[str]:
        """One chunk's tokens by affixes, special cases (unless `specials` is off, as for the
        run patterns), URLs and infixes: spaCy's `_split_affixes` then `_attach_tokens`."""
        special = self.specials if specials else {}
        if string in special:
            return list(special[string])
        prefixes, suffixes = self._peel(string, special)
        rest = string[sum(map(len, prefixes)) : len(string) - sum(map(len, suffixes))]
        tokens = list(prefixes)
        if rest in special:
            tokens.extend(special[rest])
        elif rest and ((self.token_match and self.token_match(rest)) or self.url(rest)):
            tokens.append(rest)
        elif rest:
            tokens.extend(self._infix_split(rest))
        tokens.extend(reversed(suffixes))
        return tokens

    def _peel(self, string: str, special: dict[str, tuple[str, ...]]) -> tuple[list[str], list[str]]:
        """The prefixes and suffixes spaCy peels off a chunk, outermost first."""
        prefixes: list[str] = []
        suffixes: list[str] = []
        last = -1
        while string and len(string) != last:
            if (self.token_match and self.token_match(string)) or string in special:
                break
            last = len(string)
            pre = _length(self.prefix(string))
            if pre and string[pre:] in special:
                prefixes.append(string[:pre])
                break
            suf = _length(self.suffix(string[pre:]))
            if suf and string[:-suf] in special:
                suffixes.append(string[-suf:])
                break
            if pre and suf and pre + suf <= len(string):
                prefixes.append(string[:pre])
                suffixes.append(string[-suf:])
                string = string[pre:-suf]
            elif pre:
                prefixes.append(string[:pre])
                string = string[pre:]
            elif suf:
                suffixes.append(string[-suf:])
                string = string[:-suf]
        return prefixes, suffixes

    def _infix_split(self, rest: str) -> list[str]:
        """`rest` split around its infixes (an infix at the very start splits nothing)."""
        tokens, start = [], 0
        for m in self.infixes(rest):
            if m.start() == 0:
                continue
            if m.start() != start:
                tokens.append(rest[start : m.start()])
            if m.start() != m.end():
                tokens.append(rest[m.start() : m.end()])
            start = m.end()
        if rest[start:]:
            tokens.append(rest[start:])
        return tokens


def _length(match: re.Match[str] | None) -> int:
    """A prefix or suffix match's length (0: none), as spaCy's `find_prefix` and `find_suffix`."""
    return match.end() - match.start() if match else 0


def _spans(joints: list[int]) -> Iterator[tuple[int, int]]:
    """Runs of consecutive joint numbers, as (first, last)."""
    first = last = joints[0]
    for j in joints[1:]:
        if j != last + 1:
            yield first, last
            first = j
        last = j
    yield first, last


@cache
def _is_punct(token: str) -> bool:
    """spaCy's `is_punct`: every character in a Unicode punctuation category."""
    return all(unicodedata.category(c).startswith("P") for c in token)


@cache
def english_words() -> EnglishWords:
    """The process's splitter (loading spaCy's rules takes about a second)."""
    return EnglishWords()

"""Prose quality signals, computed once per document, and the peers' rules as predicates on them.

`prose_signals` measures one text for the four rule sets every peer ships (Gopher quality and
repetition, C4, FineWeb), by datatrove's definitions (0.10): its word and sentence splits
(`words.EnglishWords`), its punctuation sets, its line and paragraph splits and its ratios, so
each value equals the one datatrove's filter compares. `gopher_quality`, `gopher_repetition`,
`c4` and `fineweb` then decide from the stored values alone, returning datatrove's reason; a
threshold change re-evaluates them and reads no text.

What is a threshold and what is a parameter of a signal: a rule that only compares a value is a
threshold (in the preset models); what decides which lines or words a value counts (C4's line
rules, FineWeb's short-line length and stop characters, Gopher's stop words) is a parameter
(`ProseParams`), part of the signals' identity.

Where this differs from datatrove on purpose:
- C4 only decides. datatrove's filter also rewrites a kept document without its dropped lines;
  here hygiene keeps texts as they are, and the lines C4 would drop are counted (`c4_*_lines`).
- A ratio whose denominator is zero is 0.0 (datatrove raises ZeroDivisionError: a document
  without words once `min_doc_words` is off; the preset rules here never divide).
- Repetition n-gram fractions are 0.0 when a text has fewer than n words (datatrove skips the
  rule; thresholds are at least 0, so `0.0 > threshold` keeps the document as skipping does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from operator import methodcaller
from typing import Any

import numpy as np

from albor_pipeline.spec import C4Lines, ProseParams
from albor_pipeline.stages.hygiene.words import english_words

# datatrove.utils.text's sets (the tests prove them equal): TERMINAL_PUNCTUATION is sentence-
# ending marks of many scripts, PUNCTUATION_SET adds its ASCII/CJK punctuation and control codes.
TERMINAL_PUNCTUATION = frozenset(
    "!.?\u0589\u061d\u061e\u061f\u06d4\u0700\u0701\u0702\u07f9\u0837\u0839\u083d\u083e\u0964\u0965\u104a"
    "\u104b\u1362\u1367\u1368\u166e\u1735\u1736\u17d4\u17d5\u17d6\u17d9\u17da\u1803\u1809\u1944\u1945"
    "\u1aa8\u1aa9\u1aaa\u1aab\u1b5a\u1b5b\u1b5e\u1b5f\u1b7d\u1b7e\u1c3b\u1c3c\u1c7e\u1c7f\u203c\u203d"
    "\u2047\u2048\u2049\u2e2e\u2e3c\u2e53\u2e54\u3002\ua4ff\ua60e\ua60f\ua6f3\ua6f7\ua876\ua877\ua8ce"
    "\ua8cf\ua92f\ua9c8\ua9c9\uaa5d\uaa5e\uaa5f\uaaf0\uaaf1\uabeb\ufe52\ufe56\ufe57\uff01\uff0e\uff1f"
    "\uff61\U00010a56\U00010a57\U00010f55\U00010f56\U00010f57\U00010f58\U00010f59\U00010f86\U00010f87"
    "\U00010f88\U00010f89\U00011047\U00011048\U000110be\U000110bf\U000110c0\U000110c1\U00011141\U00011142"
    "\U00011143\U000111c5\U000111c6\U000111cd\U000111de\U000111df\U00011238\U00011239\U0001123b\U0001123c"
    "\U000112a9\U0001144b\U0001144c\U000115c2\U000115c3\U000115c9\U000115ca\U000115cb\U000115cc\U000115cd"
    "\U000115ce\U000115cf\U000115d0\U000115d1\U000115d2\U000115d3\U000115d4\U000115d5\U000115d6\U000115d7"
    "\U00011641\U00011642\U0001173c\U0001173d\U0001173e\U00011944\U00011946\U00011a42\U00011a43\U00011a9b"
    "\U00011a9c\U00011c41\U00011c42\U00011ef7\U00011ef8\U00011f43\U00011f44\U00016a6e\U00016a6f\U00016af5"
    "\U00016b37\U00016b38\U00016b44\U00016e98\U0001bc9f\U0001da88"
)
PUNCTUATION = frozenset(
    "!/\u2014\u201d:\uff05\uff11\u3008&(\u3001\u2501\\\u3010#%\u300c\u300d\uff0c\u3011\uff1b+^]~\u201c\u300a\u201e';\u2019{|\u2236\u00b4[=-`*\uff0e\uff08\u2013\uff1f\uff01\uff1a$\uff5e\u00ab\u3009,><\u300b)?\uff09\u3002\u2026@_.\"}\u25ba\u00bb"
    + "".join(chr(c) for a, b in ((0, 9), (11, 13), (13, 32), (127, 160)) for c in range(a, b))
)
PUNCTUATION_SET = PUNCTUATION | TERMINAL_PUNCTUATION
DELETE_PUNCTUATION = str.maketrans(dict.fromkeys(PUNCTUATION_SET))

TOP_NGRAMS = (2, 3, 4)
DUP_NGRAMS = (5, 6, 7, 8, 9, 10)
BULLET = methodcaller("startswith", ("•", "-"))  # of a line without its leading whitespace
ELLIPSIS_END = methodcaller("endswith", ("...", "…"))  # of a line without its trailing whitespace
PARAGRAPH_BREAK = re.compile(r"\n{2,}")
LINE_BREAKS = re.compile("\n+")

# C4 (the TensorFlow Datasets rules, as datatrove runs them)
CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
C4_END_PUNCTUATION = (".", "?", "!", '"', "'")
C4_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")


@dataclass(frozen=True, slots=True)
class ProseSignals:
    """One document's prose signals: counts, and ratios exactly as datatrove computes them."""

    chars: int
    words: int  # datatrove's words (spaCy's English tokens, punctuation included)
    gopher_nonsymbol_words: int  # words with a character that is not punctuation: Gopher's word count
    gopher_mean_word_length: float  # of those words (nan without any)
    gopher_hash_ratio: float  # "#" per word
    gopher_ellipsis_ratio: float  # "..." and "…" per word
    gopher_bullet_lines_ratio: float  # lines starting with "•" or "-"
    gopher_ellipsis_lines_ratio: float  # lines ending with "..." or "…"
    gopher_alpha_words_ratio: float  # words with a letter
    gopher_stop_words: int  # distinct stop words present
    gopher_dup_para_frac: float  # paragraphs ("\n\n"-separated) repeating an earlier one
    gopher_dup_para_char_frac: float  # their characters, per character of the text
    gopher_dup_line_frac: float
    gopher_dup_line_char_frac: float
    gopher_top_2_gram_frac: float  # characters of the most frequent n-gram's occurrences, per character
    gopher_top_3_gram_frac: float
    gopher_top_4_gram_frac: float
    gopher_dup_5_gram_frac: float  # characters in n-grams repeating an earlier one, per character
    gopher_dup_6_gram_frac: float
    gopher_dup_7_gram_frac: float
    gopher_dup_8_gram_frac: float
    gopher_dup_9_gram_frac: float
    gopher_dup_10_gram_frac: float
    c4_lines: int
    c4_terminal_lines: int  # lines ending in terminal punctuation (citations removed)
    c4_kept_lines: int  # lines passing all of C4's line rules
    c4_javascript_lines: int  # otherwise kept lines dropped for naming javascript
    c4_policy_lines: int  # ... for cookie, privacy or terms-of-use wording
    c4_sentences: int  # sentences in kept lines
    c4_lorem_ipsum_line: int  # first line (from 1) where C4 meets "lorem ipsum"; 0: none
    c4_curly_bracket_line: int  # first line where C4 meets "{"; 0: none
    fineweb_lines: int  # non-blank "\n" lines
    fineweb_line_punct_ratio: float  # of those, ending in a stop character
    fineweb_short_line_ratio: float
    fineweb_char_dup_ratio: float  # characters of repeated lines, per non-newline character
    fineweb_list_ratio: float  # newlines per word


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def find_duplicates(items: list[str]) -> tuple[int, int]:
    """(items repeating an earlier one, their characters): datatrove's `find_duplicates`."""
    seen: set[str] = set()
    count = chars = 0
    for item in items:
        if item in seen:
            count, chars = count + 1, chars + len(item)
        else:
            seen.add(item)
    return count, chars


def prose_signals(text: str, params: ProseParams | None = None) -> ProseSignals:
    """Every prose signal of `text` (its words are split once, for all of them)."""
    params = params or ProseParams()
    words = english_words().words(text)
    distinct = list(dict.fromkeys(words))  # in order of appearance
    number = {w: k for k, w in enumerate(distinct)}
    ids = np.fromiter(map(number.__getitem__, words), np.int64, len(words))
    return ProseSignals(
        chars=len(text),
        words=len(words),
        **_gopher_quality(text, words, distinct, ids, params.stop_words),
        **_gopher_repetition(text, words, ids),
        **_c4(text, params.c4),
        **_fineweb(text, len(words), params),
    )


def _gopher_quality(
    text: str, words: list[str], distinct: list[str], ids: np.ndarray, stop_words: tuple[str, ...]
) -> dict[str, Any]:
    """Gopher's quality measures; word properties are taken once per distinct word."""
    nonsymbol = np.array([bool(w.translate(DELETE_PUNCTUATION)) for w in distinct], bool)[ids]
    alpha = np.array([any(map(str.isalpha, w)) for w in distinct], bool)[ids]
    lengths = np.fromiter(map(len, distinct), np.int64, len(distinct))[ids]
    kept = int(nonsymbol.sum())
    lines = text.splitlines()
    return {
        "gopher_nonsymbol_words": kept,
        "gopher_mean_word_length": int(lengths[nonsymbol].sum()) / kept if kept else float("nan"),
        "gopher_hash_ratio": _ratio(text.count("#"), len(words)),
        "gopher_ellipsis_ratio": _ratio(text.count("...") + text.count("…"), len(words)),
        "gopher_bullet_lines_ratio": _ratio(sum(map(BULLET, map(str.lstrip, lines))), len(lines)),
        "gopher_ellipsis_lines_ratio": _ratio(sum(map(ELLIPSIS_END, map(str.rstrip, lines))), len(lines)),
        "gopher_alpha_words_ratio": _ratio(int(alpha.sum()), len(words)),
        "gopher_stop_words": len(set(stop_words).intersection(distinct)),
    }


def _gopher_repetition(text: str, words: list[str], ids: np.ndarray) -> dict[str, Any]:
    """Gopher's repetition measures, per character of the text."""
    paragraphs = PARAGRAPH_BREAK.split(text.strip())
    para_dups, para_chars = find_duplicates(paragraphs)
    lines = LINE_BREAKS.split(text)
    line_dups, line_chars = find_duplicates(lines)
    out = {
        "gopher_dup_para_frac": _ratio(para_dups, len(paragraphs)),
        "gopher_dup_para_char_frac": _ratio(para_chars, len(text)),
        "gopher_dup_line_frac": _ratio(line_dups, len(lines)),
        "gopher_dup_line_char_frac": _ratio(line_chars, len(text)),
    }
    lengths = np.fromiter(map(len, words), np.int64, len(words))
    for n in TOP_NGRAMS:
        out[f"gopher_top_{n}_gram_frac"] = _ratio(_top_ngram_chars(ids, lengths, n), len(text))
    ends = np.concatenate(([0], np.cumsum(lengths)))
    hashes = _Hashes("".join(words))
    for n in DUP_NGRAMS:
        out[f"gopher_dup_{n}_gram_frac"] = _ratio(_dup_ngram_chars(hashes, ends, n), len(text))
    return out


def _top_ngram_chars(ids: np.ndarray, lengths: np.ndarray, n: int) -> int:
    """Characters of the most frequent n-gram ("word word ..." once per occurrence); on a tie,
    the one seen first, as `Counter.most_common(1)` picks."""
    if len(ids) < n:
        return 0
    positions, width = len(ids) - n + 1, int(ids.max()) + 1
    rank = ids[:positions]
    for k in range(1, n):  # n-gram identities, exactly: the (n-1)-gram's rank and the next word
        _, first, rank, counts = np.unique(rank * width + ids[k : positions + k], True, True, True)
    tied = np.flatnonzero(counts == counts.max())
    at = int(first[tied[np.argmin(first[tied])]])
    return (int(lengths[at : at + n].sum()) + n - 1) * int(counts.max())


class _Hashes:
    """Polynomial hashes (mod 2**64) of a string's substrings in O(1) each: equal substrings
    hash equal, so repeated n-grams are found among the positions whose hash repeats."""

    BASE = 0x9E3779B97F4A7C15  # odd: invertible mod 2**64

    def __init__(self, s: str) -> None:
        codes = np.frombuffer(s.encode("utf-32-le", "surrogatepass"), np.uint32).astype(np.uint64)
        self.prefix = np.concatenate(([np.uint64(0)], np.cumsum(codes * self._powers(self.BASE, len(codes)))))
        self.unpower = self._powers(pow(self.BASE, -1, 2**64), len(codes) + 1)
        self.text = s

    @staticmethod
    def _powers(base: int, count: int) -> np.ndarray:
        """base**0 .. base**(count-1), mod 2**64."""
        steps = np.full(count, base, np.uint64)
        steps[:1] = 1
        return np.cumprod(steps, dtype=np.uint64)

    def of(self, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
        return (self.prefix[stops] - self.prefix[starts]) * self.unpower[starts]


def _dup_ngram_chars(hashes: _Hashes, ends: np.ndarray, n: int) -> int:
    """datatrove's `find_all_duplicate`: scanning word positions, an n-gram (its words joined
    without spaces) seen before adds its characters and skips its n words. Only positions whose
    hash repeats can repeat; the scan visits those and compares the strings themselves."""
    positions = len(ends) - n
    if positions <= 0:
        return 0
    h = hashes.of(ends[:positions], ends[n:])
    _, inverse, counts = np.unique(h, return_inverse=True, return_counts=True)
    seen: set[str] = set()
    repeated = idx = 0
    bounds = ends.tolist()
    for i in np.flatnonzero(counts[inverse.reshape(-1)] > 1).tolist():
        if i < idx:
            continue
        gram = hashes.text[bounds[i] : bounds[i + n]]
        if gram in seen:
            repeated, idx = repeated + len(gram), i + n
        else:
            seen.add(gram)
            idx = i + 1
    return repeated


def _c4(text: str, rules: C4Lines) -> dict[str, Any]:
    """C4's line walk (datatrove's `C4QualityFilter`), counting instead of stopping: the first
    line that would drop the document for "lorem ipsum" or "{" is noted, and the walk goes on."""
    out = dict.fromkeys(("c4_terminal_lines", "c4_kept_lines", "c4_javascript_lines", "c4_policy_lines"), 0)
    out |= {"c4_sentences": 0, "c4_lorem_ipsum_line": 0, "c4_curly_bracket_line": 0}
    lines = text.splitlines()
    blank_dropped = rules.filter_no_terminal_punct or rules.min_words_per_line > 0
    for number, stripped in enumerate(map(str.strip, lines), 1):
        if not stripped and blank_dropped:
            continue
        cited = rules.remove_citations and "[" in stripped
        line = CITATION.sub("", stripped) if cited else stripped
        terminal = line.endswith(C4_END_PUNCTUATION) and not line.endswith("...")
        out["c4_terminal_lines"] += terminal
        if rules.filter_no_terminal_punct and not terminal:
            continue
        words = stripped.split()  # before citations go, as datatrove counts them
        if rules.max_word_length != -1 and max(map(len, words), default=0) > rules.max_word_length:
            continue
        if len(words) < rules.min_words_per_line:
            continue
        lower = line.lower()
        if "lorem ipsum" in lower and not out["c4_lorem_ipsum_line"]:
            out["c4_lorem_ipsum_line"] = number
        if rules.filter_javascript and "javascript" in lower:
            out["c4_javascript_lines"] += 1
            continue
        if "{" in line and not out["c4_curly_bracket_line"]:
            out["c4_curly_bracket_line"] = number
        if rules.filter_policy and any(p in lower for p in C4_POLICY):
            out["c4_policy_lines"] += 1
            continue
        out["c4_kept_lines"] += 1
        out["c4_sentences"] += english_words().sentences(line)
    return {"c4_lines": len(lines), **out}


def _fineweb(text: str, words: int, params: ProseParams) -> dict[str, Any]:
    """FineWeb's line measures (datatrove's `FineWebQualityFilter`)."""
    lines = [line for line in text.split("\n") if line.strip() != ""]
    stop = params.fineweb_stop_chars if params.fineweb_stop_chars is not None else tuple(TERMINAL_PUNCTUATION)
    short = params.fineweb_short_line_length
    return {
        "fineweb_lines": len(lines),
        "fineweb_line_punct_ratio": _ratio(sum(map(methodcaller("endswith", stop), lines)), len(lines)),
        "fineweb_short_line_ratio": _ratio(sum(map(short.__ge__, map(len, lines))), len(lines)),
        "fineweb_char_dup_ratio": _ratio(find_duplicates(lines)[1], len(text) - text.count("\n")),
        "fineweb_list_ratio": _ratio(text.count("\n"), words),
    }

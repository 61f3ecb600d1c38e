"""The prose signals and presets equal datatrove's filters (the peers' oracle), document by
document, on real prose nobody here wrote: Python's HTML documentation as Debian ships it
(python3-doc) reduced to text, the machine's /usr/share/doc READMEs and the shipped pydoc topics.

Values are compared exactly (floats bit for bit) with datatrove's own helpers; decisions with
datatrove's filter classes, at their defaults and, rule by rule, at a threshold equal to a value
some document has, so a value off by one ulp or one word would flip that document. Each
comparison is then run again with our threshold nudged past that value, and must then fail.
C4 differs on purpose: datatrove's filter also rewrites kept documents without their dropped
lines; ours only decides, so its kept lines and sentences are checked against the rewrite.
"""

from __future__ import annotations

import gzip
import math
import re
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from pydoc_data.topics import topics
from typing import Any

import numpy as np
import pytest
from datatrove.data import Document
from datatrove.pipeline.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)
from datatrove.pipeline.filters.gopher_quality_filter import STOP_WORDS
from datatrove.pipeline.filters.gopher_repetition_filter import (
    find_all_duplicate,
    find_duplicates,
    find_top_duplicate,
    get_n_grams,
)
from datatrove.utils import text as dt_text
from hypothesis import given, settings
from hypothesis import strategies as st

from albor_pipeline.spec import C4, FineWeb, GopherQuality, GopherRepetition
from albor_pipeline.stages.hygiene import rules as R
from albor_pipeline.stages.hygiene import signals as S
from albor_pipeline.stages.hygiene.words import english_words
from bench.signals import html_text

pytestmark = pytest.mark.slow  # datatrove's spaCy calls: about a minute for the corpus

ROOT = Path(__file__).resolve().parents[3]
PYTHON_DOC = Path("/usr/share/doc/python3-doc/html")
HTML_PAGES = 100  # every other page of the manual, small ones first
README_CHARS = 16_000  # larger READMEs are changelogs and licences as often as prose


@pytest.fixture(scope="module")
def corpus() -> dict[str, str]:
    """A few hundred documents: manual pages, READMEs, pydoc topics (Debian's python3-doc is
    installed by scripts/system-deps, as `make test` does, when it is missing)."""
    subprocess.run([ROOT / "scripts/system-deps", f"{PYTHON_DOC}/index.html:python3-doc"], check=True)
    pages = sorted(PYTHON_DOC.rglob("*.html"), key=lambda p: (p.stat().st_size, str(p)))
    docs = {str(p): html_text(p) for p in pages[: HTML_PAGES * 2 : 2]}
    readmes = [p for p in sorted(Path("/usr/share/doc").glob("*/README*")) if p.is_file()]
    for path in readmes[::2]:
        if path.stat().st_size < README_CHARS:
            raw = path.read_bytes()
            docs[str(path)] = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode(errors="replace")
    docs.update({f"pydoc:{name}": text for name, text in topics.items()})
    assert len(docs) >= 300
    return docs


@pytest.fixture(scope="module")
def signals(corpus: dict[str, str]) -> dict[str, S.ProseSignals]:
    return {name: S.prose_signals(text) for name, text in corpus.items()}


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _datatrove_values(text: str) -> dict[str, float]:
    """The values datatrove's filters compare, by its own helpers (its filters keep none)."""
    words = dt_text.split_into_words(text)
    nonsymbol = [w for w in words if any(ch not in dt_text.PUNCTUATION_SET for ch in w)]
    lines = text.splitlines()
    paragraphs = re.split(r"\n{2,}", text.strip())
    gopher_lines = re.split("\n+", text)
    fw_lines = [line for line in text.split("\n") if line.strip()]
    out = {
        "words": len(words),
        "gopher_nonsymbol_words": len(nonsymbol),
        "gopher_mean_word_length": float(np.mean([len(w) for w in nonsymbol])) if nonsymbol else math.nan,
        "gopher_hash_ratio": text.count("#") / len(words),
        "gopher_ellipsis_ratio": (text.count("...") + text.count("…")) / len(words),
        "gopher_bullet_lines_ratio": sum(s.lstrip().startswith(("•", "-")) for s in lines) / len(lines),
        "gopher_ellipsis_lines_ratio": sum(s.rstrip().endswith(("...", "…")) for s in lines) / len(lines),
        "gopher_alpha_words_ratio": sum(any(c.isalpha() for c in w) for w in words) / len(words),
        "gopher_stop_words": len(set(STOP_WORDS).intersection(words)),
        "gopher_dup_para_frac": find_duplicates(paragraphs)[0] / len(paragraphs),
        "gopher_dup_para_char_frac": find_duplicates(paragraphs)[1] / len(text),
        "gopher_dup_line_frac": find_duplicates(gopher_lines)[0] / len(gopher_lines),
        "gopher_dup_line_char_frac": find_duplicates(gopher_lines)[1] / len(text),
        "fineweb_line_punct_ratio": sum(line.endswith(tuple(dt_text.TERMINAL_PUNCTUATION)) for line in fw_lines)
        / len(fw_lines),
        "fineweb_short_line_ratio": sum(len(line) <= 30 for line in fw_lines) / len(fw_lines),
        "fineweb_char_dup_ratio": find_duplicates(fw_lines)[1] / len(text.replace("\n", "")),
        "fineweb_list_ratio": text.count("\n") / len(words),
    }
    for n in S.TOP_NGRAMS:
        grams = get_n_grams(words, n)
        out[f"gopher_top_{n}_gram_frac"] = find_top_duplicate(grams) / len(text) if grams else 0.0
    for n in S.DUP_NGRAMS:
        out[f"gopher_dup_{n}_gram_frac"] = find_all_duplicate(words, n) / len(text)
    return out


def _theirs(check: Any, name: str, text: str) -> str | None:
    result = check.filter(Document(text=text, id=name))
    return None if result is True else result[1]


def _gopher_quality_only(field: str, limit: float) -> tuple[GopherQuality, GopherQualityFilter]:
    off = dict.fromkeys(GopherQuality.model_fields, None) | {field: limit}
    return GopherQuality(**off), GopherQualityFilter(**off)


def _gopher_repetition_only(field: str, limit: float) -> tuple[GopherRepetition, GopherRepetitionFilter]:
    ours = GopherRepetition(**dict.fromkeys(GopherRepetition.model_fields, None) | {field: limit})
    grams = re.fullmatch(r"(top|dup)_(\d+)_gram_frac", field)
    lines = dict.fromkeys(("dup_line_frac", "dup_para_frac", "dup_line_char_frac", "dup_para_char_frac"))
    if grams is None:
        return ours, GopherRepetitionFilter(**lines | {field: limit}, top_n_grams=(), dup_n_grams=())
    kind, n = grams[1], int(grams[2])
    tops, dups = (((n, limit),), ()) if kind == "top" else ((), ((n, limit),))
    return ours, GopherRepetitionFilter(**lines, top_n_grams=tops, dup_n_grams=dups)


def _c4_only(field: str, limit: float) -> tuple[C4, C4QualityFilter]:
    off = {"min_num_sentences": -1, "filter_lorem_ipsum": False, "filter_curly_bracket": False, field: limit}
    return C4(**off), C4QualityFilter(**off)


def _fineweb_only(field: str, limit: float) -> tuple[FineWeb, FineWebQualityFilter]:
    passing = {"line_punct_thr": -1.0, "short_line_thr": 2.0, "char_duplicates_ratio": 2.0, "new_line_ratio": 1e9}
    return FineWeb(**passing | {field: limit}), FineWebQualityFilter(**passing | {field: limit})


def _deciding(conds_of: Callable[[Any], Iterable[R.Cond]]) -> Callable[[S.ProseSignals, Any], str | None]:
    """A preset's decision on one document's stored signals, as datatrove names it (`peer`)."""

    def decide(signals: S.ProseSignals, rules: Any) -> str | None:
        cs = list(conds_of(rules))
        k = int(R.decide(cs, {name: np.asarray([v]) for name, v in asdict(signals).items()}, 1)[0])
        return None if k < 0 else cs[k].peer

    return decide


gopher_quality, gopher_repetition = _deciding(R.gopher_quality_conds), _deciding(R.gopher_repetition_conds)
c4, fineweb = _deciding(R.c4_conds), _deciding(R.fineweb_conds)
PRESETS: dict[str, tuple[Callable[..., str | None], Callable[..., Any], Callable[..., Any], Callable[..., Any]]] = {
    "gopher_quality": (gopher_quality, GopherQuality, GopherQualityFilter, _gopher_quality_only),
    "gopher_repetition": (gopher_repetition, GopherRepetition, GopherRepetitionFilter, _gopher_repetition_only),
    "c4": (c4, C4, C4QualityFilter, _c4_only),
    "fineweb": (fineweb, FineWeb, FineWebQualityFilter, _fineweb_only),
}
# (preset, threshold, the signal it tests, "<" if a value below the threshold drops, else ">")
RULES = [
    ("gopher_quality", "min_doc_words", "gopher_nonsymbol_words", "<"),
    ("gopher_quality", "max_doc_words", "gopher_nonsymbol_words", ">"),
    ("gopher_quality", "min_avg_word_length", "gopher_mean_word_length", "<"),
    ("gopher_quality", "max_avg_word_length", "gopher_mean_word_length", ">"),
    ("gopher_quality", "max_symbol_word_ratio", "gopher_hash_ratio", ">"),
    ("gopher_quality", "max_bullet_lines_ratio", "gopher_bullet_lines_ratio", ">"),
    ("gopher_quality", "max_ellipsis_lines_ratio", "gopher_ellipsis_lines_ratio", ">"),
    ("gopher_quality", "max_non_alpha_words_ratio", "gopher_alpha_words_ratio", "<"),
    ("gopher_quality", "min_stop_words", "gopher_stop_words", "<"),
    *[
        ("gopher_repetition", name, f"gopher_{name}", ">")
        for name in ("dup_line_frac", "dup_para_frac", "dup_line_char_frac", "dup_para_char_frac")
    ],
    *[("gopher_repetition", f"top_{n}_gram_frac", f"gopher_top_{n}_gram_frac", ">") for n in S.TOP_NGRAMS],
    *[("gopher_repetition", f"dup_{n}_gram_frac", f"gopher_dup_{n}_gram_frac", ">") for n in S.DUP_NGRAMS],
    ("c4", "min_num_sentences", "c4_sentences", "<"),
    ("c4", "filter_curly_bracket", "c4_curly_bracket_line", "flag"),
    ("fineweb", "line_punct_thr", "fineweb_line_punct_ratio", "<"),
    ("fineweb", "short_line_thr", "fineweb_short_line_ratio", ">"),
    ("fineweb", "char_duplicates_ratio", "fineweb_char_dup_ratio", ">"),
    ("fineweb", "new_line_ratio", "fineweb_list_ratio", ">"),
]


def _at_and_past(values: list[Any], op: str) -> tuple[Any, Any]:
    """A threshold some document's value equals (the median nonzero one: 0 turns some rules
    off), and the nearest threshold past it, which drops that document too."""
    if op == "flag":
        return True, False
    present = sorted(v for v in values if v and not math.isnan(v))
    at = present[len(present) // 2]
    if isinstance(at, int):
        return at, at + 1 if op == "<" else at - 1
    return at, float(np.nextafter(at, math.inf if op == "<" else -math.inf))


@dataclass
class Peer:
    """What datatrove says of each document, taken in one pass (its splits are cached per
    text, so each document is tokenized once for all of them)."""

    words: dict[str, list[str]] = field(default_factory=dict)
    values: dict[str, dict[str, float]] = field(default_factory=dict)
    defaults: dict[str, dict[str, str | None]] = field(default_factory=dict)
    rules: dict[str, dict[str, str | None]] = field(default_factory=dict)
    c4_kept: dict[str, tuple[int, int]] = field(default_factory=dict)


@pytest.fixture(scope="module")
def peer(corpus: dict[str, str], signals: dict[str, S.ProseSignals]) -> Peer:
    defaults = {preset: peer() for preset, (_, _, peer, _) in PRESETS.items()}
    rules = {}
    for preset, name, signal, op in RULES:
        at, _ = _at_and_past([getattr(s, signal) for s in signals.values()], op)
        rules[name] = PRESETS[preset][3](name, at)[1]
    rewrite = C4QualityFilter(min_num_sentences=-1, filter_lorem_ipsum=False, filter_curly_bracket=False)
    out = Peer()
    for name, text in corpus.items():
        out.words[name] = dt_text.split_into_words(text)
        out.values[name] = _datatrove_values(text)
        out.defaults[name] = {preset: _theirs(check, name, text) for preset, check in defaults.items()}
        out.rules[name] = {rule: _theirs(check, name, text) for rule, check in rules.items()}
        doc = Document(text=text, id=name)
        assert rewrite.filter(doc) is True
        kept = doc.text.split("\n") if doc.text else []
        out.c4_kept[name] = (len(kept), sum(len(dt_text.split_into_sentences(line)) for line in kept))
    return out


def test_constants_and_words_equal_datatrove(corpus: dict[str, str], peer: Peer) -> None:
    """The punctuation sets are datatrove's, and the words and sentences spaCy's, as datatrove
    splits them (every document's words; every line's sentences in the pydoc topics)."""
    assert dt_text.TERMINAL_PUNCTUATION == S.TERMINAL_PUNCTUATION
    assert dt_text.PUNCTUATION_SET == S.PUNCTUATION_SET
    words = english_words()
    for name, text in corpus.items():
        assert words.words(text) == peer.words[name], name
    lines = [line.strip() for text in topics.values() for line in text.splitlines() if line.strip()]
    assert [words.sentences(line) for line in lines] == [len(dt_text.split_into_sentences(line)) for line in lines]


# Pieces that exercise spaCy's special cases, affixes, infixes, URLs and the runs it merges
# again, even across a space ("Mr" "." then "Smith"), glued or spaced at random.
PIECES = (
    *("Mr.", "Mr", ".", "Smith", "Mr.Smith", "e.g.", "e.g.,", "(", ")", ":)", "(:", "(:)", ":", "-", "--"),
    *("don't", "Don't", "'s", "'", '"', "U.S.", "a.m.", "10a.m.", "5km", "$5", "http://example.com/a?b=1"),
    *("www.x.org.", "...", "…", "—", "well-known", "a/b", "x=1", "#", "Co.", "Inc.,", "o.O", "<3", "^_^"),
    *("(-:", "'cause", "y'all", "can't.", "!", "?", "‽", "Hello", "world", "the", "1990s", "§2", "[1]"),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PIECES), st.sampled_from(("", " ", "  ", "\n", " \n", "\t"))), max_size=12))
def test_words_and_sentences_equal_spacy_on_tricky_text(parts: list[tuple[str, str]]) -> None:
    text = "".join(piece + gap for piece, gap in parts)
    assert english_words().words(text) == dt_text.split_into_words(text)
    assert english_words().sentences(text) == len(dt_text.split_into_sentences(text))


def test_values_equal_datatrove(signals: dict[str, S.ProseSignals], peer: Peer) -> None:
    for name, theirs in peer.values.items():
        ours = asdict(signals[name])
        assert {k: (ours[k], v) for k, v in theirs.items() if not _same(ours[k], v)} == {}, name


@pytest.mark.parametrize("preset", PRESETS)
def test_default_decisions_equal_datatrove(preset: str, signals: dict[str, S.ProseSignals], peer: Peer) -> None:
    decide, rules = PRESETS[preset][:2]
    theirs = {name: reasons[preset] for name, reasons in peer.defaults.items()}
    assert {name: decide(signals[name], rules()) for name in theirs} == theirs
    assert len(set(theirs.values())) > 1  # the corpus has documents kept and dropped


@pytest.mark.parametrize(("preset", "field", "signal", "op"), RULES, ids=[r[1] for r in RULES])
def test_each_rule_decides_as_datatrove_at_a_sharp_threshold(
    preset: str, field: str, signal: str, op: str, signals: dict[str, S.ProseSignals], peer: Peer
) -> None:
    """Alone, at a threshold that one document's value equals: decisions equal datatrove's; and
    nudged past that value (ours only), they no longer do, so the comparison can fail."""
    decide, _, _, only = PRESETS[preset]
    at, past = _at_and_past([getattr(s, signal) for s in signals.values()], op)
    theirs = {name: reasons[field] for name, reasons in peer.rules.items()}
    assert {name: decide(signals[name], only(field, at)[0]) for name in theirs} == theirs
    assert None in theirs.values() and len(set(theirs.values())) > 1
    assert {name: decide(signals[name], only(field, past)[0]) for name in theirs} != theirs


def test_c4_kept_lines_are_datatrove_rewrite(signals: dict[str, S.ProseSignals], peer: Peer) -> None:
    """What datatrove's C4 keeps of each document (it rewrites the text to its kept lines, where
    ours only decides): as many lines as we count, holding as many sentences."""
    for name, (lines, sentences) in peer.c4_kept.items():
        assert (signals[name].c4_kept_lines, signals[name].c4_sentences) == (lines, sentences), name


def test_c4_first_marker_met_decides() -> None:
    """C4 stops at the first line with "lorem ipsum" or "{": whichever comes first is the reason
    (the real prose here has no lorem ipsum, so two made-up pages)."""
    lorem = "Lorem ipsum dolor sit amet, consectetur adipiscing elit.\nSee {this} for more.\nIt is. So true."
    texts = {"lorem": lorem, "curly": "\n".join(reversed(lorem.splitlines()))}
    for config in ({}, {"filter_lorem_ipsum": False}, {"filter_curly_bracket": False}, {"min_num_sentences": 2}):
        theirs = {name: _theirs(C4QualityFilter(**config), name, text) for name, text in texts.items()}
        assert {name: c4(S.prose_signals(text), C4(**config)) for name, text in texts.items()} == theirs
    assert [c4(S.prose_signals(text), C4()) for text in texts.values()] == ["lorem_ipsum", "curly_bracket"]

"""Prose signals against datatrove's filters: the same rules on the same documents, one core.

Ours: `prose_signals` (every signal, words split once) and the four presets' decisions.
datatrove's: GopherQuality, GopherRepetition, C4Quality and FineWebQuality on each document in
turn, as its pipeline streams a document through its filters (its word splits are cached per
text, so each document is tokenized once there too). Both load spaCy before the clock starts;
ours is timed from a cold chunk cache. Not run by the tests: `python -m bench.signals [FILE...]`
(text files; none: the pydoc topics, Python's shipped help text).
"""

from __future__ import annotations

import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np

from albor_pipeline.spec import C4, FineWeb, GopherQuality, GopherRepetition
from albor_pipeline.stages.hygiene import rules as R
from albor_pipeline.stages.hygiene import signals as S
from albor_pipeline.stages.hygiene.words import english_words
from bench.common import DATATROVE_MISSING

PRESETS = tuple(
    list(conds)  # lists: each bench call walks them again
    for conds in (
        R.gopher_quality_conds(GopherQuality()),
        R.gopher_repetition_conds(GopherRepetition()),
        R.c4_conds(C4()),
        R.fineweb_conds(FineWeb()),
    )
)


class _Text(HTMLParser):
    """An HTML page's text: a line break at each block element, scripts and styles left out."""

    BLOCKS = frozenset(("p", "div", "li", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "dt", "dd", "tr", "br"))
    BLOCKS |= {"table", "ul", "ol", "dl", "blockquote", "section"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.hidden += tag in ("script", "style", "head")
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        self.hidden -= tag in ("script", "style", "head")
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.parts.append(data)


def html_text(path: Path) -> str:
    """An HTML page's text (python3-doc's pages: real prose for the bench and the tests)."""
    parser = _Text()
    parser.feed(path.read_text(errors="replace"))
    parser.close()
    return "".join(parser.parts)


def _ours(texts: list[str]) -> list[tuple[str | None, ...]]:
    """Each text's datatrove reason under each preset, from its signals (scored once)."""
    scored = [S.prose_signals(text) for text in texts]
    cols = {name: np.asarray([getattr(s, name) for s in scored]) for name in S.ProseSignals.__dataclass_fields__}
    verdicts = []
    for preset in PRESETS:
        first = R.decide(preset, cols, len(texts)).tolist()
        verdicts.append([None if k < 0 else preset[k].peer for k in first])
    return list(zip(*verdicts))


def bench_prose_signals(texts: list[str]) -> dict[str, Any]:
    """MB/s per core of ours and datatrove's, and whether every decision agreed."""
    try:
        from datatrove.data import Document
        from datatrove.pipeline.filters import (
            C4QualityFilter,
            FineWebQualityFilter,
            GopherQualityFilter,
            GopherRepetitionFilter,
        )
        from datatrove.utils.text import split_into_words
    except ImportError:
        return {"datatrove": DATATROVE_MISSING}
    mb = sum(len(t.encode()) for t in texts) / 1e6
    english_words().cache.clear()
    split_into_words("Warm up: spaCy loads once.")
    start = time.perf_counter()
    ours = _ours(texts)
    ours_s = time.perf_counter() - start
    filters = (GopherQualityFilter(), GopherRepetitionFilter(), C4QualityFilter(), FineWebQualityFilter())
    start = time.perf_counter()
    theirs = []
    for i, text in enumerate(texts):
        results = [f.filter(Document(text=text, id=str(i))) for f in filters]
        theirs.append(tuple(None if r is True else r[1] for r in results))
    theirs_s = time.perf_counter() - start
    return {
        "documents": len(texts),
        "mb": round(mb, 2),
        "ours_mb_s": round(mb / ours_s, 3),
        "datatrove_mb_s": round(mb / theirs_s, 3),
        "speedup": round(theirs_s / ours_s, 2),
        "decisions_equal": ours == theirs,
        "decisions_differ": [(i, a, b) for i, (a, b) in enumerate(zip(ours, theirs)) if a != b][:5],
    }


def main(argv: list[str]) -> None:
    if argv:
        texts = [Path(p).read_text(errors="replace") for p in argv]
    else:
        from pydoc_data.topics import topics

        texts = list(topics.values())
    print(bench_prose_signals(texts))


if __name__ == "__main__":
    main(sys.argv[1:])

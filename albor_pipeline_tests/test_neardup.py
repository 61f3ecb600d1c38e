"""Near-duplicate detection (work in progress, issue 17) on real stdlib files with planted
near-copies at several edit distances."""

from __future__ import annotations

import numpy as np

from albor_pipeline.core.neardup import MinHasher, P, _inverse, jaccard, near_duplicates, shingles

from .support import STDLIB


def test_word_hashes_do_not_depend_on_position_or_case():
    assert (int(_inverse(P)) * int(P)) % 2**64 == 1
    a = shingles("def foo(x): return x + 1", 2)
    b = shingles("zzz  DEF foo(x):\n    return x + 1", 2)
    assert len(np.setdiff1d(a, b)) == 0 and len(b) == len(a) + 1
    assert len(shingles("!!! ...", 5)) == 0 and len(shingles("one two", 5)) == 1


def test_planted_near_copies_are_found_and_distinct_files_are_not():
    files = sorted((STDLIB / "email").rglob("*.py")) + sorted((STDLIB / "json").glob("*.py"))
    texts = [p.read_text(encoding="utf-8") for p in files]
    base = texts[5]
    light = base.replace("def ", "def  ", 3) + "\n# one comment added\n"  # whitespace and a line
    lines = base.splitlines()
    heavy = "\n".join(line for i, line in enumerate(lines) if i % 4)  # a quarter of the lines gone
    clusters = near_duplicates([*texts, light, heavy], threshold=0.8)
    groups = clusters.groups()
    assert groups == {5: [5, len(texts)]}, groups  # the light copy joins; the heavy one is too far
    assert jaccard(shingles(base, 5), shingles(heavy, 5)) < 0.8 < jaccard(shingles(base, 5), shingles(light, 5))
    # MinHash estimates Jaccard: agreement of signatures tracks the exact value.
    hasher = MinHasher()
    for other in (light, heavy):
        exact = jaccard(shingles(base, 5), shingles(other, 5))
        estimate = float((hasher.signature(shingles(base, 5)) == hasher.signature(shingles(other, 5))).mean())
        assert abs(estimate - exact) < 0.15

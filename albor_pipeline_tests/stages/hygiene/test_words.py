"""spaCy's English rules, kept in the user's cache: equal to spaCy's own, rebuilt when the
file is damaged, and read without importing spaCy (seconds per process that scores prose)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from albor_pipeline.stages.hygiene import words


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "albor" / "spacy"


def test_the_cached_rules_are_spacys_and_a_damaged_file_is_rebuilt(cache: Path) -> None:
    first = words.spacy_rules()
    [path] = cache.glob("en-rules-*.json")
    assert first == words._read_spacy() == words.spacy_rules()  # the second call reads the file
    assert len(first.specials) > 1000 and first.prefix.pattern and "." in first.sentence_ends
    path.write_text(path.read_text()[:100])  # a torn write from some other tool
    assert words.spacy_rules() == first and words.SpacyRules.model_validate_json(path.read_text()) == first


def test_a_process_with_the_cache_does_not_import_spacy(cache: Path) -> None:
    words.spacy_rules()
    text = "Don't split Mr. Smith's U.S. e-mail"
    tokens = ["Do", "n't", "split", "Mr.", "Smith", "'s", "U.S.", "e", "-", "mail"]
    code = (
        "import sys; from albor_pipeline.stages.hygiene.words import EnglishWords; "
        f"assert EnglishWords().words({text!r}) == {tokens!r}; "
        "assert 'spacy' not in sys.modules and 'torch' not in sys.modules"
    )
    env = {"XDG_CACHE_HOME": str(cache.parent.parent), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=Path(__file__).parents[3])

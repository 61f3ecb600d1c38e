"""The language filter on real multilingual text: the translated messages of GLib, which
this machine ships for a hundred languages (libglib2.0-data), read with Python's gettext."""

from __future__ import annotations

import gettext
import json
from pathlib import Path

import pytest

from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import HygieneRules, HygieneSpec, SourceSpec
from albor_pipeline.stages.hygiene.hygiene import clean_source
from albor_pipeline.stages.hygiene.language import language_of
from albor_pipeline.stages.ingest.ingest import ingest_source
from albor_pipeline.text.documents import read_document_set
from albor_pipeline_tests.support import STDLIB

LOCALE = Path("/usr/share/locale")
LANGUAGES = ("de", "fr", "es", "it", "pl", "ru", "ja", "nl")  # GLib's catalogs, named as py3langid names them
DOCS_PER_LANGUAGE = 3
MESSAGES_PER_DOC = 20  # a paragraph's worth: ~1-2k characters


def _translations(lang: str) -> list[tuple[str, str]]:
    """(English original, translation) of GLib's messages in `lang` that are translated
    (a message left in English is no text in `lang`) and of some length."""
    path = LOCALE / lang / "LC_MESSAGES" / "glib20.mo"
    if not path.exists():
        pytest.skip(f"{path} is not on this machine (Debian's libglib2.0-data)")
    with path.open("rb") as f:
        catalog = gettext.GNUTranslations(f)._catalog  # every (msgid, msgstr); gettext has no public listing
    return sorted((k, v) for k, v in catalog.items() if isinstance(k, str) and k and v != k and len(v) > 30)


def _documents() -> list[tuple[str, str]]:
    """(language, text): DOCS_PER_LANGUAGE documents of MESSAGES_PER_DOC messages for each of
    LANGUAGES, and as many of the English originals (from the German catalog)."""
    docs = []
    for lang in LANGUAGES:
        pairs = _translations(lang)
        for d in range(DOCS_PER_LANGUAGE):
            chunk = pairs[d * MESSAGES_PER_DOC : (d + 1) * MESSAGES_PER_DOC]
            docs.append((lang, "\n".join(v for _, v in chunk)))
            if lang == "de":
                docs.append(("en", "\n".join(k for k, _ in chunk)))
    return docs


def test_language_filter_keeps_the_listed_languages_and_counts_the_rest(tmp_path):
    """A JSONL source of real messages in nine languages, filtered to English and German:
    those are kept whole, every other document is dropped and counted by its language."""
    docs = _documents()
    path = tmp_path / "messages.jsonl"
    path.write_text("".join(json.dumps({"text": text}, ensure_ascii=False) + "\n" for _, text in docs))
    hygiene = HygieneSpec(rules=HygieneRules(languages=("en", "de")))
    src = SourceSpec(name="messages", kind="jsonl", path=path, hygiene=hygiene)
    ingest_source(src, tmp_path / "in", StageIO(tmp_path))
    result = clean_source(tmp_path / "in", hygiene, tmp_path / "out", StageIO(tmp_path))
    kept = read_document_set(tmp_path / "out").column("text").to_pylist()
    assert sorted(kept) == sorted(text for lang, text in docs if lang in ("en", "de"))
    assert result.summary.documents_in == len(docs)
    assert result.summary.removed == {f"language:{lang}": DOCS_PER_LANGUAGE for lang in LANGUAGES if lang != "de"}
    # Off (the default): nothing is dropped for its language.
    off = clean_source(tmp_path / "in", HygieneSpec(), tmp_path / "off", StageIO(tmp_path))
    assert off.summary.kept == len(docs) and off.summary.removed == {}


def test_a_document_is_named_by_its_head_and_text_without_letters_has_no_language():
    """The first 2,000 characters decide (a French document with a long German appendix stays
    French, the same in any batch); digits and punctuation alone are `zxx`."""
    french, german = (next(t for lang, t in _documents() if lang == want) for want in ("fr", "de"))
    assert language_of(french) == "fr" and language_of(german) == "de"
    head = (french + "\n") * (2000 // len(french) + 1)
    assert language_of(head + german * 20) == "fr"
    assert language_of("1234 5678 -- 3.14, 2.71 (42)\n" * 10) == "zxx"


def test_an_unknown_language_code_is_a_clear_error(tmp_path):
    """A code py3langid does not know would drop every document: the stage refuses it, naming it."""
    src = SourceSpec(name="s", kind="code", path=STDLIB / "json")
    ingest_source(src, tmp_path / "in", StageIO(tmp_path))
    spec = HygieneSpec(rules=HygieneRules(languages=("en", "xx")))
    with pytest.raises(ValueError, match=r"unknown language code\(s\) xx; py3langid knows .*\bde, .*\ben, "):
        clean_source(tmp_path / "in", spec, tmp_path / "out", StageIO(tmp_path))

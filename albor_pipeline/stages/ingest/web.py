"""Web pages: WARC response records and HTML files -> each page's main text, with its URL,
record and fetch date.

FastWARC reads the records (response records only, HTTP parsed); Resiliparse's html2text
extracts the main text. Both are ChatNoir's well-kept C++ libraries; Resiliparse was picked
over trafilatura and inscriptis on Python's own documentation pages (docs/web.md): 26x
trafilatura's speed, code blocks kept line by line, less navigation left in. Extraction is
a pure function of the page's bytes and the settings (no time-out: a page too big to
extract is skipped by its size, so a slower machine never keeps a different set).

What a page can be skipped for is counted by reason and, for a page with a URL, written to
the ledger: `not_http`, `http_status`, `not_html`, `content_encoding` (one it cannot
decode), `too_large`, `too_deep` (`MAX_DEPTH`), `truncated_record` (the file ends inside it), `no_text` (extraction
found none), `duplicate_url` (`dedup_urls`), `blocked` (a block list's rule, named in the
ledger), and `truncated_warc` for a WARC file whose rest cannot be read (the records before
it are kept). Only response records are read: requests, metadata and revisits hold no page.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import pyarrow as pa

from albor_pipeline.runtime.files import Location, join, random_access, read_bytes, skip_reason
from albor_pipeline.spec import Extraction, WebSpec, block_list_entries
from albor_pipeline.text.ledger import LedgerRows
from albor_pipeline.text.secrets import redact_path

PAGE_SCHEMA = pa.schema(
    [
        ("sha256", pa.string()),  # the document as ingested
        ("url", pa.string()),  # as the record names it (the document's `file`, unless redacted)
        ("warc", pa.string()),  # the file it came from, relative to the source's root
        ("record_id", pa.string()),  # WARC-Record-ID (null: an HTML file)
        ("date", pa.string()),  # WARC-Date, ISO 8601 as written (null: an HTML file)
        ("offset", pa.int64()),  # the record's byte offset in the (compressed) file
        ("charset", pa.string()),  # what the page was decoded as
    ]
)
WARC_SUFFIXES = (".warc", ".warc.gz")
HTML_TYPES = ("text/html", "application/xhtml+xml")
MAX_DEPTH = 2_000
"""Elements a page may nest: Resiliparse's main-content pass is quadratic in the nesting
(2,000 levels: 0.09 s; 4,000: 0.35 s; 100,000: minutes, and no signal stops it), so a deeper
page is skipped (`too_deep`), decided by its bytes alone."""
_FLAT = (
    b"area|base|br|col|embed|hr|img|input|link|meta|param|source|track|wbr|"  # void elements
    b"p|li|dt|dd|tr|td|th|option|optgroup|rb|rt|rp|thead|tbody|tfoot|colgroup|caption|html|head|body"
)
_NESTING_TAG = re.compile(rb"<(/?)(?!(?:" + _FLAT + rb")[\s/>])[A-Za-z]", re.IGNORECASE)
"""Tags that deepen the tree: not void elements, nor those a parser closes by itself."""


@dataclass(frozen=True)
class Page:
    """Where a document came from on the web."""

    url: str
    warc: str
    record_id: str | None = None
    date: str | None = None
    offset: int | None = None
    charset: str | None = None

    def as_recorded(self, file: str) -> Page:
        """This page under the URL its document records (`file`: redacted as every path)."""
        return dataclasses.replace(self, url=file)


@dataclass(frozen=True)
class Blocks:
    """A web source's block lists, read: domains (a domain blocks its subdomains), exact URLs
    (normalised) and patterns (regular expressions searched in the URL), each rule with the
    file and line that gave it, for the ledger."""

    domains: dict[str, str] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)
    patterns: tuple[tuple[str, str], ...] = ()

    @classmethod
    def read(cls, spec: WebSpec) -> Blocks:
        domains = {line.lower().strip("."): where for path in spec.block.domains for where, line in _lines(path)}
        urls = {normalise_url(line): where for path in spec.block.urls for where, line in _lines(path)}
        patterns = tuple((line, where) for path in spec.block.patterns for where, line in _lines(path))
        return cls(domains, urls, patterns)

    @cached_property
    def _compiled(self) -> list[tuple[re.Pattern[str], str]]:
        return [(re.compile(pattern), where) for pattern, where in self.patterns]

    def rule(self, url: str) -> str | None:
        """The rule blocking `url` (`domain example.com (blocked.txt:3)`), or None."""
        host = (urlsplit(url).hostname or "").lower()
        parts = host.split(".")
        for i in range(len(parts) - 1):
            if (where := self.domains.get(".".join(parts[i:]))) is not None:
                return f"domain {'.'.join(parts[i:])} ({where})"
        if (where := self.urls.get(normalise_url(url))) is not None:
            return f"url ({where})"
        for pattern, where in self._compiled:
            if pattern.search(url):
                return f"pattern {pattern.pattern} ({where})"
        return None


def _lines(path: Path) -> Iterator[tuple[str, str]]:
    """(file:line, entry) of a block list (`block_list_entries`)."""
    for lineno, entry in block_list_entries(path):
        yield f"{path.name}:{lineno}", entry


def normalise_url(url: str) -> str:
    """`url` as two fetches of one page name it: scheme and host lowercased, the default port
    and the fragment dropped, an empty path made `/`."""
    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:  # a malformed port or address: compared as written
        return url.strip()
    scheme = parts.scheme.lower()
    if port is not None and (scheme, port) not in (("http", 80), ("https", 443)):
        host = f"{host}:{port}"
    return urlunsplit((scheme, host, parts.path or "/", parts.query, ""))


@dataclass
class WebCounts:
    """What a web task left out, by reason (the ingestion summary's skips)."""

    skipped: Counter[str]
    ledger: LedgerRows = field(default_factory=LedgerRows)

    def skip(self, source: str, url: str, reason: str, detail: str = "") -> None:
        """Count a page left out, and write its ledger row (the URL redacted as every path)."""
        self.skipped[reason] += 1
        self.ledger.add(source, redact_path(url), None, "skipped", f"{reason}: {detail}" if detail else reason)

    def block(self, source: str, url: str, rule: str) -> None:
        self.skipped["blocked"] += 1
        self.ledger.add(source, redact_path(url), None, "blocked", rule)


@dataclass
class _Fetched:
    """One page's bytes as a record or a file holds them."""

    url: str
    body: bytes
    page: Page
    charset: str | None = None  # the HTTP header's


class Extractor:
    """A web source's pages -> (URL, main text, Page), in file and record order."""

    def __init__(self, source: str, spec: WebSpec, blocks: Blocks) -> None:
        self.source, self.spec, self.blocks = source, spec, blocks
        self._options = extract_options(spec.extract)

    def documents(self, root: Location, files: list[str], counts: WebCounts) -> Iterator[tuple[str, str, Page]]:
        """The pages of `files` that pass the block lists, URL dedup and the nesting guard and
        hold text; every other is counted in `counts`, with its ledger row."""
        for rel in files:
            seen: set[str] = set()
            fetched = _records(join(root, rel), rel, self.spec, counts, self.source) if is_warc(rel) else None
            for got in fetched if fetched is not None else _html_file(root, rel, self.spec, counts, self.source):
                if (rule := self.blocks.rule(got.url)) is not None:
                    counts.block(self.source, got.url, rule)
                    continue
                if self.spec.dedup_urls:
                    key = normalise_url(got.url)
                    if key in seen:
                        counts.skip(self.source, got.url, "duplicate_url")
                        continue
                    seen.add(key)
                if too_deep(got.body):
                    counts.skip(self.source, got.url, "too_deep", f"elements nested over {MAX_DEPTH} levels")
                    continue
                text, charset = self.extract(got.body, got.charset)
                if not text.strip():
                    counts.skip(self.source, got.url, "no_text")
                    continue
                page = dataclasses.replace(got.page, charset=charset)
                yield got.url, text, page

    def extract(self, body: bytes, charset: str | None) -> tuple[str, str]:
        """The page's main text (lines and paragraphs kept: the prose rules read them) and the
        charset it was decoded as: the HTTP header's when Python knows it, else Resiliparse's
        detection (meta tags, then the bytes)."""
        from resiliparse.extract.html2text import extract_plain_text
        from resiliparse.parse.encoding import detect_encoding
        from resiliparse.parse.html import HTMLTree

        encoding = _known(charset) or detect_encoding(body) or "utf-8"
        text = extract_plain_text(HTMLTree.parse_from_bytes(body, encoding), **self._options)
        return text.replace("\x00", ""), encoding


def extract_options(extract: Extraction) -> dict[str, Any]:
    """Resiliparse `extract_plain_text`'s keyword arguments for `extract`: lines and
    paragraphs kept (the prose rules read them); links, forms and noscript never text."""
    skip = [*(["table"] if not extract.tables else []), *(["pre"] if not extract.code else []), *extract.skip]
    return {
        "preserve_formatting": True,
        "main_content": extract.main_content,
        "list_bullets": extract.lists,
        "alt_texts": extract.alt_texts,
        "links": False,
        "form_fields": False,
        "noscript": False,
        "skip_elements": skip or None,
    }


def too_deep(body: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the page's elements nest deeper than `limit` (opening tags less closing ones,
    of the tags that deepen the tree), cheap next to extraction: counting every tag, in
    numpy, bounds the depth from above (450 MB/s), and only a page that bound does not clear
    is counted exactly."""
    if body.count(b"<") - body.count(b"</") <= limit:
        return False
    raw = np.frombuffer(body, np.uint8)
    after = raw[np.flatnonzero(raw[:-1] == ord("<")) + 1]  # the byte after each "<"
    letter = ((after | 0x20) >= ord("a")) & ((after | 0x20) <= ord("z"))
    if _depth(letter.astype(np.int64) - (after == ord("/"))) <= limit:
        return False
    marks = _NESTING_TAG.findall(body)
    return _depth(np.where(np.array(marks, dtype="S1") == b"/", -1, 1)) > limit


def _depth(steps: np.ndarray) -> int:
    """The deepest nesting a sequence of +1 (an opening tag), -1 (a closing one) and 0 steps
    reaches; a stray closing tag never takes it below zero."""
    if not len(steps):
        return 0
    walk = np.cumsum(steps)
    return int((walk - np.minimum(np.minimum.accumulate(walk), 0)).max())


def _known(charset: str | None) -> str | None:
    """`charset` when Python has a codec of that name."""
    import codecs

    if not charset:
        return None
    try:
        return codecs.lookup(charset).name
    except LookupError:
        return None


def is_warc(rel: str) -> bool:
    return rel.lower().endswith(WARC_SUFFIXES)


def _records(path: Location, rel: str, spec: WebSpec, counts: WebCounts, source: str) -> Iterator[_Fetched]:
    """The HTML response records of one WARC file, in order. A file whose rest cannot be read
    (cut short, corrupt) ends there: what came before is kept, the rest counted as
    `truncated_warc`."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    try:
        stream: Any = random_access(path)  # FastWARC asks where it is (tell): a bucket's plain stream cannot say
    except OSError as exc:
        counts.skipped[skip_reason(exc)] += 1
        return
    with stream:
        records = ArchiveIterator(stream, record_types=WarcRecordType.response, parse_http=True)
        while True:
            try:
                record = next(records)
            except StopIteration:
                return
            except Exception as exc:  # FastWARC's stream and parse errors: the file's end is lost
                counts.skip(source, rel, "truncated_warc", type(exc).__name__)
                return
            if (got := _response(record, rel, spec, counts, source)) is not None:
                yield got


def _response(record: Any, rel: str, spec: WebSpec, counts: WebCounts, source: str) -> _Fetched | None:
    """A response record's page, or None (counted) when it is not a fetched HTML page."""
    url = record.headers.get("WARC-Target-URI") or ""
    if not record.is_http:
        counts.skip(source, url, "not_http")
        return None
    status = record.http_headers.status_code
    if status != 200:
        counts.skip(source, url, "http_status", str(status))
        return None
    mime = (record.http_content_type or "").lower()
    if mime not in HTML_TYPES:
        counts.skip(source, url, "not_html", mime or "no content type")
        return None
    if record.content_length > spec.max_html_bytes:
        counts.skip(source, url, "too_large", f"{record.content_length} bytes")
        return None
    raw = record.reader.read()
    if len(raw) < record.content_length:  # the file ends inside this record
        counts.skip(source, url, "truncated_record", f"{len(raw)} of {record.content_length} bytes")
        return None
    coding = (record.http_headers.get("Content-Encoding") or "identity").strip().lower()
    body = _decoded(raw, coding)
    if body is None:
        counts.skip(source, url, "content_encoding", coding)
        return None
    page = Page(url, rel, record.record_id, record.headers.get("WARC-Date"), record.stream_pos)
    return _Fetched(url, body, page, record.http_charset)


def _decoded(body: bytes, coding: str) -> bytes | None:
    """A payload as the server meant it (`Content-Encoding`: gzip, deflate, br, or none), or
    None when the coding is unknown or its bytes do not decode."""
    import zlib

    import brotli  # FastWARC's own dependency

    try:
        if coding in ("identity", ""):
            return body
        if coding in ("gzip", "x-gzip", "deflate"):
            return zlib.decompress(body, wbits=47)  # a gzip or zlib header, detected
        if coding == "br":
            return bytes(brotli.decompress(body))
    except (zlib.error, brotli.error):
        return None
    return None


def _html_file(root: Location, rel: str, spec: WebSpec, counts: WebCounts, source: str) -> Iterator[_Fetched]:
    """An HTML file as a page: its URL is `base_url` + its path (else its path)."""
    url = f"{spec.base_url.rstrip('/')}/{rel}" if spec.base_url else rel
    try:
        body = read_bytes(join(root, rel), spec.max_html_bytes + 1)
    except OSError as exc:
        counts.skip(source, url, skip_reason(exc))
        return
    if len(body) > spec.max_html_bytes:
        counts.skip(source, url, "too_large", f"over {spec.max_html_bytes} bytes")
        return
    yield _Fetched(url, body, Page(url, rel))


def page_batch(rows: list[tuple[str, Page]]) -> pa.RecordBatch:
    """(SHA-256, page) of kept documents as `_pages` rows."""
    cols: dict[str, list[Any]] = {
        "sha256": [sha for sha, _ in rows],
        "url": [p.url for _, p in rows],
        "warc": [p.warc for _, p in rows],
        "record_id": [p.record_id for _, p in rows],
        "date": [p.date for _, p in rows],
        "offset": [p.offset for _, p in rows],
        "charset": [p.charset for _, p in rows],
    }
    return pa.RecordBatch.from_pydict(cols, schema=PAGE_SCHEMA)

"""WARC files of real pages, written as a crawler writes them (warcio): Debian's python3-doc
HTML, each page a request and a response record with its HTTP headers, gzip per record; a
crawl also holds what a web source must skip: an image, a JSON reply, a redirect, a 404, a
revisit, a page in Latin-1, a gzip-encoded page, and optionally a record cut short at the
end. Deterministic: fixed dates, record ids from the URL."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON_DOC = Path("/usr/share/doc/python3-doc/html")
BASE = "https://docs.python.org/3/"


def python_doc_pages() -> list[Path]:
    """Every HTML page of python3-doc, sorted (the package installed when missing)."""
    subprocess.run([ROOT / "scripts/system-deps", f"{PYTHON_DOC}/index.html:python3-doc"], check=True)
    return sorted(p for p in PYTHON_DOC.resolve().rglob("*.html") if p.is_file())


def url_of(page: Path) -> str:
    return BASE + page.relative_to(PYTHON_DOC.resolve()).as_posix()


def _record_id(kind: str, url: str) -> str:
    return f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, kind + ':' + url)}>"


class Crawl:
    """One WARC file being written."""

    def __init__(self, fh: io.BufferedIOBase, date: str) -> None:
        from warcio.warcwriter import WARCWriter

        self.writer, self.date = WARCWriter(fh, gzip=True), date

    def response(self, url: str, body: bytes, content_type: str, status: str = "200 OK", extra: Sequence = ()) -> None:
        from warcio.statusandheaders import StatusAndHeaders

        headers = [("Content-Type", content_type), ("Content-Length", str(len(body))), *extra]
        http = StatusAndHeaders(status, headers, protocol="HTTP/1.1")
        warc = {"WARC-Date": self.date, "WARC-Record-ID": _record_id("response", url)}
        record = self.writer.create_warc_record(
            url, "response", payload=io.BytesIO(body), http_headers=http, warc_headers_dict=warc
        )
        self.writer.write_record(record)

    def request(self, url: str) -> None:
        from warcio.statusandheaders import StatusAndHeaders

        path = "/" + url.split("/", 3)[3]
        http = StatusAndHeaders(f"GET {path} HTTP/1.1", [("Host", "docs.python.org")], is_http_request=True)
        warc = {"WARC-Date": self.date, "WARC-Record-ID": _record_id("request", url)}
        self.writer.write_record(
            self.writer.create_warc_record(url, "request", http_headers=http, warc_headers_dict=warc)
        )

    def page(self, page: Path) -> str:
        url = url_of(page)
        self.request(url)
        self.response(url, page.read_bytes(), "text/html; charset=utf-8")
        return url


def write_crawl(
    path: Path, pages: Sequence[Path], *, date: str = "2026-05-01T12:00:00Z", odd: bool = True, cut: bool = False
) -> list[str]:
    """A WARC at `path` holding `pages` (their URLs returned, in order); with `odd`, the
    records a web source skips too; with `cut`, a last record cut in half."""
    urls = []
    with path.open("wb") as fh:
        crawl = Crawl(fh, date)
        for page in pages:
            urls.append(crawl.page(page))
        if odd:
            _odd_records(crawl, pages[0])
        if cut:
            buf = io.BytesIO()
            Crawl(buf, date).response(BASE + "cut-short.html", pages[0].read_bytes(), "text/html")
            fh.write(buf.getvalue()[: len(buf.getvalue()) // 2])
    return urls


ODD_SKIPS = {"not_html": 2, "http_status": 2}  # what `_odd_records` adds that a web source skips, by reason
ODD_KEPT = 2  # and the pages it keeps: the Latin-1 page and the gzip-encoded one


def _odd_records(crawl: Crawl, first: Path) -> None:
    png = next(iter(sorted((PYTHON_DOC.resolve() / "_images").glob("*.png"))))
    crawl.response(BASE + "_images/" + png.name, png.read_bytes(), "image/png")
    crawl.response(BASE + "api/versions.json", json.dumps({"3": "3.11"}).encode(), "application/json")
    crawl.response(BASE + "old.html", b"", "text/html", "301 Moved Permanently", [("Location", BASE)])
    crawl.response(BASE + "missing.html", b"<html><body><h1>Not Found</h1></body></html>", "text/html", "404 Not Found")
    latin = (
        "<html><head><title>Caf\u00e9</title></head><body><main><h1>Un caf\u00e9</h1>"
        + "<p>Un caf\u00e9 na\u00efve \u00e0 la cr\u00e8me br\u00fbl\u00e9e, servi avec une br\u00eache de pain.</p>"
        * 12
        + "</main></body></html>"
    ).encode("iso-8859-1")
    crawl.response(BASE + "latin1.html", latin, "text/html; charset=iso-8859-1")
    body = gzip.compress(first.read_bytes(), mtime=0)
    crawl.response(BASE + "encoded.html", body, "text/html; charset=utf-8", extra=[("Content-Encoding", "gzip")])


MIRROR = "https://mirror.example.net/python/3/"  # copies of pages: exact duplicates for `documents`
SPAM = "https://spam.example.com/"  # the shipped spec's blocked domain


MAIN = b'<div class="body" role="main">'


def mirrored(html: bytes) -> bytes:
    """A mirror's copy of a page: its banner inside the main text (a near-duplicate)."""
    banner = b"<p>Mirrored from docs.python.org by mirror.example.net; refreshed every day at 04:00 UTC.</p>"
    return html.replace(MAIN, MAIN + banner, 1)


def write_sample(directory: Path, pages_per_file: int = 120) -> list[Path]:
    """The shipped web sample (`data/samples/web/`): two crawl files of python3-doc pages, the
    second with a mirror's copies of ten pages of the first (near-duplicates: its banner in
    each), two spam pages and a record cut short at its end."""
    pages = python_doc_pages()
    step = max(1, len(pages) // (2 * pages_per_file))
    first, second = pages[0::step][:pages_per_file], pages[step // 2 :: step][:pages_per_file]
    directory.mkdir(parents=True, exist_ok=True)
    one, two = directory / "crawl-0001.warc.gz", directory / "crawl-0002.warc.gz"
    write_crawl(one, first)
    with two.open("wb") as fh:
        crawl = Crawl(fh, "2026-05-02T08:30:00Z")
        for page in second:
            crawl.page(page)
        for page in first[:10]:
            url = MIRROR + page.relative_to(PYTHON_DOC.resolve()).as_posix()
            crawl.response(url, mirrored(page.read_bytes()), "text/html; charset=utf-8")
        for i in range(2):
            offer = "Buy cheap watches online today, best prices guaranteed. " * 30
            spam = f"<html><body><main><p>{offer}</p></main></body></html>"
            crawl.response(f"{SPAM}offer-{i}.html", spam.encode(), "text/html; charset=utf-8")
        buf = io.BytesIO()
        Crawl(buf, crawl.date).response(BASE + "cut-short.html", first[0].read_bytes(), "text/html")
        fh.write(buf.getvalue()[: len(buf.getvalue()) // 2])
    return [one, two]

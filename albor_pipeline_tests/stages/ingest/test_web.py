"""The web source: WARC files of real pages (Debian's python3-doc, written as a crawler
writes them) through extraction, block lists, the prose rules and dedup into a corpus.

warcio, an independent WARC library, is the oracle for what the records hold: each kept
document's page is the record its `_pages` row names (id, URL and date at that offset), and
the skips by reason are what warcio counts in the same files.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.shards import shard_files
from albor_pipeline.spec import REPO_ROOT, SPLITS, SourceSpec, SpecError, WebSpec, load_spec, parse_spec
from albor_pipeline.stages.corpus.lineage import FATES
from albor_pipeline.stages.hygiene.whatif import answer_all
from albor_pipeline.stages.ingest.ingest import ingest_source
from albor_pipeline.stages.ingest.web import MAX_DEPTH, Blocks, _decoded, normalise_url
from albor_pipeline.trace import Tracer, trace_lines
from albor_pipeline_tests.crawl import BASE, MIRROR, ODD_KEPT, ODD_SKIPS, SPAM, python_doc_pages, write_crawl
from albor_pipeline_tests.support import materialize_all, recorded_outputs, task_counts

WEB_SPEC = REPO_ROOT / "data" / "web.yaml"
SAMPLE = REPO_ROOT / "data" / "samples" / "web"


def _warcio_responses(path: Path) -> list[dict]:
    """Every response record of a WARC as warcio reads it: offset, id, URL, date, status,
    content type; a record cut short stops the reading (as it stops a crawler's reader)."""
    from warcio.archiveiterator import ArchiveIterator

    found = []
    with path.open("rb") as fh:
        records = ArchiveIterator(fh)
        try:
            for record in records:
                if record.rec_type != "response":
                    continue
                body = record.content_stream().read()
                http = record.http_headers
                found.append(
                    {
                        "offset": records.get_record_offset(),
                        "id": record.rec_headers.get_header("WARC-Record-ID"),
                        "url": record.rec_headers.get_header("WARC-Target-URI"),
                        "date": record.rec_headers.get_header("WARC-Date"),
                        "status": http.get_statuscode(),
                        "type": (http.get_header("Content-Type") or "").split(";")[0].strip(),
                        "length": int(http.get_header("Content-Length") or -1),
                        "body": len(body),
                    }
                )
        except Exception:  # the record cut short: warcio's reader ends here too
            found.append({"cut": True})
    return found


@pytest.fixture(scope="module")
def web_build(tmp_path_factory: pytest.TempPathFactory):
    """The shipped web spec, built whole into a data dir of its own."""
    out = tmp_path_factory.mktemp("web") / "out"
    spec = load_spec(WEB_SPEC)
    return spec, out, materialize_all(spec, out)


def test_a_crawl_of_real_pages_builds_a_corpus_with_the_recipe_s_stages(web_build) -> None:
    _, out, result = web_build
    layout = Layout(out)
    ingested = pq.read_table(layout.ingested("python_docs"))
    train = sum(pq.ParquetFile(p).metadata.num_rows for p in shard_files(layout.corpus_dir("train")))
    assert ingested.num_rows > 150 and train > 100
    keys = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert {"ingested/python_docs", "filtered/python_docs", "documents", "tokenizer", "corpus/train"} <= keys
    kept = {f for split in SPLITS for f in pq.read_table(layout.documents(split)).column("file").to_pylist()}
    assert all(url.startswith("https://docs.python.org/") or url.startswith(MIRROR) for url in kept)
    # The mirror's banner-marked copies are near-duplicates: never kept beside their page.
    assert not [u for u in kept if u.startswith(MIRROR) and u.replace(MIRROR, BASE) in kept]
    ledger = pq.read_table(layout.documents_dir / "_ledger").to_pylist()
    assert sum(r["fate"] == "near_duplicate" and r["file"].startswith(MIRROR) for r in ledger) >= 3


def test_every_kept_document_traces_back_to_its_url_and_record(web_build) -> None:
    spec, out, _ = web_build
    layout = Layout(out)
    records = {path.name: _warcio_responses(path) for path in sorted(SAMPLE.glob("*.warc.gz"))}
    by_offset = {(name, r["offset"]): r for name, found in records.items() for r in found if "offset" in r}
    pages = pq.read_table(layout.ingested("python_docs") / "_pages").to_pylist()
    ingested = pq.read_table(layout.ingested("python_docs"), columns=["file", "sha256"]).to_pylist()
    assert sorted(p["sha256"] for p in pages) == sorted(d["sha256"] for d in ingested)
    for page in pages:
        record = by_offset[(page["warc"], page["offset"])]
        assert (page["record_id"], page["url"], page["date"]) == (record["id"], record["url"], record["date"])
    kept = pq.read_table(layout.documents("train"), columns=["file"]).column("file")[0].as_py()
    (doc,) = Tracer(spec, layout).documents(f"python_docs:{kept}")
    assert doc.page is not None and doc.page.url == kept and doc.pieces
    assert doc.page.record_id == next(p for p in pages if p["url"] == kept)["record_id"]
    text = "\n".join(trace_lines([doc], "q"))
    assert f"record {doc.page.record_id} at byte {doc.page.offset} of {doc.page.warc}" in text


def test_bad_records_are_counted_by_reason_as_warcio_reads_them(web_build) -> None:
    _, out, _ = web_build
    warcio = Counter()
    for found in (_warcio_responses(p) for p in sorted(SAMPLE.glob("*.warc.gz"))):
        for r in found:
            if r.get("cut") or (r["status"] == "200" and r["body"] < r["length"]):
                warcio["truncated_record"] += 1
            elif r["status"] != "200":
                warcio["http_status"] += 1
            elif r["type"] != "text/html":
                warcio["not_html"] += 1
    summary = pq.read_table(Layout(out).ingested("python_docs") / "_ledger").to_pylist()
    skipped = Counter(row["detail"].split(":")[0] for row in summary if row["fate"] == "skipped")
    assert warcio == {"http_status": 2, "not_html": 2, "truncated_record": 1}
    assert {k: skipped[k] for k in warcio} == dict(warcio)


def test_a_blocked_domain_is_absent_from_every_output_and_the_ledger_says_why(web_build) -> None:
    spec, out, _ = web_build
    layout = Layout(out)
    host = SPAM.split("/")[2]
    fates = []  # each corpus keeps the ledgers as they stood (its fates table): they say why too
    for artifact in recorded_outputs(out):
        if not artifact.endswith(".parquet") or artifact.startswith("ingested/python_docs/_ledger"):
            continue
        table = pq.read_table(out / artifact)
        if artifact.endswith(f"/{FATES}"):
            fates.append({(r["stage"], r["file"], r["fate"]) for r in table.to_pylist() if host in r["file"]})
            continue
        for name in table.column_names:
            if pa.types.is_string(table.schema.field(name).type) or pa.types.is_large_string(
                table.schema.field(name).type
            ):
                assert not pc.any(pc.match_substring(table.column(name), host)).as_py(), (artifact, name)
    ledger = pq.read_table(layout.ingested("python_docs") / "_ledger").to_pylist()
    blocked = [row for row in ledger if host in row["file"]]
    assert len(blocked) == 2 and {row["fate"] for row in blocked} == {"blocked"}
    assert {row["detail"] for row in blocked} == {f"domain {host} (blocked_domains.txt:2)"}
    rows = {("ingested/python_docs", row["file"], "blocked") for row in blocked}
    assert fates and all(found == rows for found in fates)
    answer = Tracer(spec, layout).missing(f"{SPAM}*")
    assert f"{SPAM}offer-0.html: blocked at ingested/python_docs (domain {host}" in answer


def _crawl_spec(tmp: Path) -> dict:
    raw = load_spec(WEB_SPEC).model_dump(mode="json")
    raw["sources"][0]["path"] = str(tmp / "warcs")
    return raw


@pytest.mark.slow
def test_adding_one_warc_file_runs_only_its_tasks_and_equals_a_cold_build(tmp_path: Path) -> None:
    warcs = tmp_path / "warcs"
    shutil.copytree(SAMPLE, warcs)
    spec = parse_spec(_crawl_spec(tmp_path), REPO_ROOT / "data")
    materialize_all(spec, tmp_path / "out")
    pages = python_doc_pages()
    write_crawl(warcs / "crawl-0003.warc.gz", pages[1::9][:40], date="2026-05-03T09:00:00Z", odd=False)
    again = task_counts(materialize_all(spec, tmp_path / "out"))
    assert again["ingested/python_docs _ingest_group"] == (3, 2)  # the new file's task alone ran
    materialize_all(spec, tmp_path / "cold")
    assert recorded_outputs(tmp_path / "out") == recorded_outputs(tmp_path / "cold")


def test_block_lists_name_their_rule_and_a_domain_blocks_its_subdomains(tmp_path: Path) -> None:
    (tmp_path / "domains.txt").write_text("# comment\nExample.COM\n")
    (tmp_path / "urls.txt").write_text("HTTPS://Docs.Python.org:443/3/index.html#top\n")
    (tmp_path / "patterns.txt").write_text("# release notes\n/whatsnew/\\d\n")
    web = WebSpec.model_validate(
        {
            "block": {
                "domains": [tmp_path / "domains.txt"],
                "urls": [tmp_path / "urls.txt"],
                "patterns": [tmp_path / "patterns.txt"],
            }
        }
    )
    blocks = Blocks.read(web)
    assert blocks.rule("http://www.example.com/a") == "domain example.com (domains.txt:2)"
    assert blocks.rule("http://example.com/") == "domain example.com (domains.txt:2)"
    assert blocks.rule("http://notexample.com/") is None
    assert blocks.rule("https://docs.python.org/3/index.html") == "url (urls.txt:1)"
    assert blocks.rule("https://docs.python.org/3/index.html?x=1") is None
    assert blocks.rule("https://docs.python.org/3/whatsnew/3.11.html") == "pattern /whatsnew/\\d (patterns.txt:2)"
    assert normalise_url("HTTP://A.b:80") == "http://a.b/"


def test_a_bad_block_list_is_a_spec_error_naming_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "warcs").mkdir()
    (tmp_path / "bad.txt").write_text("# fine\n/ok/\n([unclosed\n")
    raw = {"sources": [{"name": "w", "kind": "web", "path": "warcs", "web": {"block": {"patterns": ["bad.txt"]}}}]}
    with pytest.raises(SpecError, match=r"bad.txt:3: not a regular expression"):
        parse_spec(raw, tmp_path)
    raw["sources"][0]["web"]["block"] = {"domains": ["missing.txt"]}
    with pytest.raises(SpecError, match=r"missing.txt: cannot be read"):
        parse_spec(raw, tmp_path)


def test_payloads_decode_by_their_content_encoding() -> None:
    import gzip
    import zlib

    import brotli

    html = b"<html><body><p>x</p></body></html>"
    assert _decoded(gzip.compress(html), "gzip") == html
    assert _decoded(zlib.compress(html), "deflate") == html
    assert _decoded(brotli.compress(html), "br") == html
    assert _decoded(b"not gzip", "gzip") is None
    assert _decoded(html, "compress") is None


def test_html_files_are_pages_under_their_base_url_and_ingest_the_same_twice(tmp_path: Path) -> None:
    pages = python_doc_pages()[:12]
    site = tmp_path / "site"
    for page in pages:
        target = site / page.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(page, target)
    src = SourceSpec(name="site", kind="web", path=site, web={"base_url": "https://docs.example.org/"})
    digests = []
    for run in ("one", "two"):
        out = tmp_path / run / "ingested" / "site"
        result = ingest_source(src, out, StageIO(tmp_path / run))
        digests.append([a.sha256 for a in result.artifacts])
        files = pq.read_table(out, columns=["file"]).column("file").to_pylist()
        assert files and all(f.startswith("https://docs.example.org/") and f.endswith(".html") for f in files)
    assert digests[0] == digests[1]


def test_extraction_keeps_code_blocks_line_by_line_and_drops_the_navigation(tmp_path: Path) -> None:
    page = next(p for p in python_doc_pages() if p.name == "json.html")
    (tmp_path / "site").mkdir()
    shutil.copyfile(page, tmp_path / "site" / "json.html")
    src = SourceSpec(name="s", kind="web", path=tmp_path / "site")
    ingest_source(src, tmp_path / "out", StageIO(tmp_path))
    text = pq.read_table(tmp_path / "out").column("text")[0].as_py()
    assert ">>> import json\n>>> json.dumps(['foo', {'bar': ('baz', None, 1.0, 2)}])" in text
    assert "Navigation" not in text and "Quick search" not in text
    no_code = SourceSpec(name="s", kind="web", path=tmp_path / "site", web={"extract": {"code": False}})
    ingest_source(no_code, tmp_path / "out2", StageIO(tmp_path))
    assert ">>> import json" not in pq.read_table(tmp_path / "out2").column("text")[0].as_py()


def test_odd_records_the_crawl_writer_adds_are_what_the_source_skips(tmp_path: Path) -> None:
    (tmp_path / "warcs").mkdir()
    pages = python_doc_pages()[3::50][:4]
    write_crawl(tmp_path / "warcs" / "a.warc.gz", pages, cut=True)
    src = SourceSpec(name="w", kind="web", path=tmp_path / "warcs", min_chars=0)
    result = ingest_source(src, tmp_path / "out", StageIO(tmp_path))
    assert result.summary.skipped == {**ODD_SKIPS, "truncated_record": 1}
    assert result.summary.documents == len(pages) + ODD_KEPT
    texts = pq.read_table(tmp_path / "out", columns=["file", "text"]).to_pylist()
    latin = next(t["text"] for t in texts if t["file"].endswith("latin1.html"))
    assert "Un café naïve à la crème brûlée" in latin


def test_whatif_answers_for_a_source_whose_rules_hold_a_language(web_build) -> None:
    """The language rule compares a string signal: whatif once failed on it (`.item()`)."""
    spec, out, _ = web_build
    filtered = json.loads((out / "manifests" / "filtered__python_docs.json").read_text())["summary"]
    (answer,) = answer_all(spec, Layout(out), {"rules": {"fineweb": {"char_duplicates_ratio": 0.01}}})
    assert answer.kept_now == filtered["kept"] and answer.removed_after["language:fr"] == 1
    assert answer.kept_after < answer.kept_now


def test_a_page_nested_past_the_limit_is_skipped_before_extraction(tmp_path: Path) -> None:
    """Resiliparse's main-content pass is quadratic in the nesting and cannot be stopped: a
    page deeper than MAX_DEPTH is skipped by its bytes, one just under it is extracted."""
    site = tmp_path / "site"
    site.mkdir()
    words = "<p>" + "A sentence of plain words that a reader would keep. " * 4 + "</p>"
    for name, depth in (("deep.html", MAX_DEPTH + 500), ("shallow.html", MAX_DEPTH - 500)):
        (site / name).write_text(f"<html><body>{'<div>' * depth}{words}{'</div>' * depth}</body></html>")
    src = SourceSpec(name="s", kind="web", path=site)
    result = ingest_source(src, tmp_path / "out", StageIO(tmp_path))
    assert result.summary.skipped == {"too_deep": 1} and result.summary.documents == 1
    ledger = pq.read_table(tmp_path / "out" / "_ledger").to_pylist()
    assert [(r["file"], r["detail"]) for r in ledger] == [
        ("deep.html", f"too_deep: elements nested over {MAX_DEPTH} levels")
    ]

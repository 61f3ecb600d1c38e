"""The web source: extraction against bare Resiliparse, and the whole recipe against
datatrove's equivalent pipeline, on the same WARC files of real pages (python3-doc, written
as a crawler writes them: `albor_pipeline_tests/crawl.py`).

- Extraction, one core: the ingestion stage (read the WARC, decode, extract, screen,
  redact, hash, write) on an inline executor, against Resiliparse's `extract_plain_text`
  alone on the same pages' bytes, read beforehand. MB of HTML a second; the shipped sample
  (small) and every page `copies` times (large).
- Recipe, fresh processes: `albor run` on the recipe's spec (the peers' default rules, no
  language filter: datatrove's needs a fastText model from the Hugging Face hub) against
  datatrove 0.10.1's WarcReader -> Trafilatura -> URLFilter -> Gopher repetition and
  quality -> FineWeb quality -> MinHash dedup -> DocumentTokenizer (the tokenizer albor
  trained). Per-core cost is the CPU seconds of each side's process tree; the documents
  each keeps are compared, with the difference by cause.

datatrove runs in its own venv (`.venv-peers/`, made on first use): its processing extra
pins trafilatura 1.11 and lxml, which would change the default spec's site-packages corpus.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

from albor_pipeline.runtime.executor import InlineExecutor
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import Extraction, SourceSpec
from albor_pipeline.stages.ingest.ingest import ingest_source
from albor_pipeline.stages.ingest.web import extract_options
from albor_pipeline_tests.crawl import Crawl, python_doc_pages, url_of
from bench.common import REPO
from bench.graph import RSS

SAMPLE = REPO / "data" / "samples" / "web"
PEERS = REPO / ".venv-peers"
PEER_PACKAGES = ["datatrove[processing,io]==0.10.1", "lxml_html_clean==0.4.6", "spacy==3.8.18"]  # spaCy: its word split
DATATROVE = Path(__file__).resolve().with_name("web_datatrove.py")  # run by the peers' Python


def write_copies(directory: Path, copies: int, files_per_copy: int = 4) -> Path:
    """Every python3-doc page `copies` times, each copy under its own URLs, in
    `copies * files_per_copy` crawl files."""
    pages = python_doc_pages()
    directory.mkdir(parents=True, exist_ok=True)
    chunk = -(-len(pages) // files_per_copy)
    for copy in range(copies):
        for f in range(files_per_copy):
            with (directory / f"crawl-{copy:02d}-{f}.warc.gz").open("wb") as fh:
                crawl = Crawl(fh, f"2026-05-{copy + 1:02d}T00:00:00Z")
                for page in pages[f * chunk : (f + 1) * chunk]:
                    url = f"{url_of(page)}?copy={copy}"
                    crawl.response(url, page.read_bytes(), "text/html; charset=utf-8")
    return directory


def _payloads(directory: Path) -> list[tuple[bytes, str | None]]:
    """The HTML and the HTTP charset of every 200 text/html response in `directory`'s WARC
    files."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    bodies = []
    for path in sorted(directory.glob("*.warc.gz")):
        with path.open("rb") as fh:
            for record in ArchiveIterator(fh, record_types=WarcRecordType.response, parse_http=True):
                if record.http_headers.status_code == 200 and record.http_content_type == "text/html":
                    body = record.reader.read()
                    if len(body) == record.content_length:
                        bodies.append((body, record.http_charset))
    return bodies


def _bare(bodies: list[tuple[bytes, str | None]]) -> float:
    """Seconds Resiliparse alone takes over the pages, decoded and extracted as the stage
    does (the header's charset, else detection; the default settings' options)."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import detect_encoding
    from resiliparse.parse.html import HTMLTree

    options = extract_options(Extraction())
    start = time.perf_counter()
    for body, charset in bodies:
        extract_plain_text(HTMLTree.parse_from_bytes(body, charset or detect_encoding(body) or "utf-8"), **options)
    return time.perf_counter() - start


def _stage(directory: Path, work: Path) -> tuple[float, int]:
    """Seconds the ingestion stage takes over the WARC files on one core, and its documents."""
    shutil.rmtree(work, ignore_errors=True)
    start = time.perf_counter()
    result = ingest_source(
        SourceSpec(name="web", kind="web", path=directory), work / "ingested" / "web", StageIO(work, InlineExecutor())
    )
    return time.perf_counter() - start, result.summary.documents


def bench_extraction(directory: Path, work: Path, repeat: int) -> dict[str, Any]:
    """MB of HTML a second on one core: bare Resiliparse, and the ingestion stage, in this
    process (the stage's first run, which imports what it uses, and the median of the
    warm ones after it). Bare and stage runs alternate, and the ratio is the median of the
    pairs', so a burst of load on the machine does not fall on one side only."""
    bodies = _payloads(directory)
    mb = sum(len(b) for b, _ in bodies) / 1e6
    first, documents = _stage(directory, work)
    pairs = [(_bare(bodies), _stage(directory, work)[0]) for _ in range(repeat)]  # interleaved: load hits both
    bare = statistics.median(b for b, _ in pairs)
    stage = statistics.median(s for _, s in pairs)
    return {
        "pages": len(bodies),
        "html_mb": round(mb, 1),
        "bare_mb_s": round(mb / bare, 2),
        "stage_mb_s": round(mb / stage, 2),
        "stage_first_mb_s": round(mb / first, 2),
        "ratio": round(statistics.median(b / s for b, s in pairs), 3),
        "documents": documents,
    }


def recipe_spec(directory: Path, path: Path) -> Path:
    """The recipe over `directory`: the web source with the peers' default rules (no language
    filter), exact and near dedup, mix, tokenizer, corpus; the block lists shipped."""
    spec = yaml.safe_load((REPO / "data" / "web.yaml").read_text())
    source = spec["sources"][0]
    source["path"] = str(directory)
    source["web"]["block"] = {"domains": [str(REPO / "data" / "web" / "blocked_domains.txt")]}
    source["web"]["dedup_urls"] = False
    source.pop("hygiene")
    spec["corpus"]["formats"] = ["parquet"]
    path.write_text(yaml.safe_dump(spec))
    return path


def _cpu_of(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the whole process tree) of a fresh process, under
    `bench/rss.py` (a pool's workers are no waited-for children: rusage would miss them). Its
    output goes to `log`.err."""
    err = log.with_suffix(".err")
    start = time.perf_counter()
    with err.open("w") as fe:
        done = subprocess.run([sys.executable, str(RSS), *cmd], stdout=subprocess.PIPE, stderr=fe, env=env, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed ({done.returncode}): {err.read_text()[-2000:]}")
    return wall, json.loads(done.stdout.strip().splitlines()[-1])["cpu_s"]


def peers_python() -> Path:
    """The peers' venv's Python, made and installed on first use."""
    python = PEERS / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEERS)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES], check=True)
    return python


def bench_recipe(directory: Path, work: Path) -> dict[str, Any]:
    """The recipe in albor and in datatrove on the same WARC files: wall, CPU seconds, kept
    documents."""
    data, home = work / "albor", work / "home"
    for d in (data, home):
        shutil.rmtree(d, ignore_errors=True)
    home.mkdir(parents=True)
    spec = recipe_spec(directory, work / "web.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "ALBOR_DATA_DIR": str(data)}
    wall, cpu = _cpu_of([sys.executable, "-m", "albor_pipeline.cli", "run", "--spec", str(spec)], work / "albor", env)
    kept = {
        split: pq.read_table(data / "documents" / split, columns=["file"]).column("file").to_pylist()
        for split in ("train", "val", "test")
    }
    albor_urls = {u for urls in kept.values() for u in urls}
    tokenizer = data / "tokenizer" / "tokenizer.json"
    out = work / "datatrove"
    shutil.rmtree(out, ignore_errors=True)
    dt_wall, dt_cpu = _cpu_of(
        [str(peers_python()), str(DATATROVE), str(directory), str(out), str(tokenizer), "2"], work / "datatrove"
    )
    peer = json.loads((out / "result.json").read_text())
    dt_urls = set(peer["kept_urls"])
    dropped_by_peer = {url: f"datatrove {name}" for name, urls in peer["excluded"].items() for url in urls}
    dropped_here = _albor_fates(data, spec)
    return {
        "warc_mb": round(sum(p.stat().st_size for p in directory.glob("*.warc.gz")) / 1e6, 1),
        "albor": {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "kept": len(albor_urls)},
        "datatrove": {"wall_s": round(dt_wall, 1), "cpu_s": round(dt_cpu, 1), "kept": len(dt_urls), **peer["counts"]},
        "per_core_ratio": round(dt_cpu / cpu, 2),
        "kept_by_both": len(albor_urls & dt_urls),
        "kept_by_albor_only": dict(Counter(dropped_by_peer.get(u, EXTRACTION) for u in albor_urls - dt_urls)),
        "kept_by_datatrove_only": dict(Counter(dropped_here.get(u, "?") for u in dt_urls - albor_urls)),
    }


EXTRACTION = "datatrove's extraction (trafilatura: no text, or its time-out)"


def _albor_fates(data: Path, spec: Path) -> dict[str, str]:
    """Why albor left each page out, by URL: its ledgers' reasons (ingestion's skip, the
    hygiene rule, dedup)."""
    source = yaml.safe_load(spec.read_text())["sources"][0]["name"]
    fates: dict[str, str] = {}
    for stage in (f"ingested/{source}", f"filtered/{source}", "documents"):
        ledger = data / stage / "_ledger"
        if ledger.is_dir():
            for row in pq.read_table(ledger, columns=["file", "fate", "detail"]).to_pylist():
                rule = row["detail"].split(":")[0] if row["fate"] in ("filtered", "skipped") else row["fate"]
                fates.setdefault(row["file"], f"albor {stage.split('/')[0]}: {rule}")
    return fates


def datatrove_on_sample(work: Path) -> str:
    """What datatrove's reader does with the shipped sample, whose last record is cut short:
    the last line of its error, or "ok"."""
    try:
        _cpu_of([str(peers_python()), str(DATATROVE), str(SAMPLE), str(work), "", "1"], work)
    except RuntimeError as exc:
        return str(exc).strip().splitlines()[-1][:200]
    return "ok"


def bench_web(work: Path, copies: int, repeat: int) -> dict[str, Any]:
    """Extraction on the sample and on python3-doc `copies` times; the recipe on python3-doc
    once and `copies` times (the peer's reader fails on the sample's cut record)."""
    once, large = write_copies(work / "once", 1), write_copies(work / "large", copies)
    return {
        "extraction_small": bench_extraction(SAMPLE, work / "ex_small", repeat),
        "extraction_large": bench_extraction(large, work / "ex_large", repeat),
        "recipe_small": bench_recipe(once, work / "recipe_small"),
        "recipe_large": bench_recipe(large, work / "recipe_large"),
        "datatrove_on_sample": datatrove_on_sample(work / "dt_sample"),
    }

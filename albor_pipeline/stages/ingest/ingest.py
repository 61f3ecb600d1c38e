"""Source ingestion: Python files or JSONL/CSV/Parquet rows -> Parquet {text, source, file, sha256}.

Code files are decoded as strict UTF-8; a file that fails is skipped and counted by
reason, never mangled. Data files are held to their format: a malformed line or a
missing column is an `IngestError` naming the file and line.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa

from albor_pipeline.runtime.artifacts import Artifact, ParquetSink, StageManifest, record
from albor_pipeline.runtime.files import (
    Hashes,
    Location,
    SourceListing,
    file_digests,
    fingerprint_files,
    fingerprint_of,
    hash_files,
    join,
    list_source_files,
    name_of,
    read_bytes,
    skip_reason,
    source_root,
)
from albor_pipeline.runtime.layout import Layout, source_stage
from albor_pipeline.runtime.shardmap import StageIO, Step, TaskIO, map_shards, map_tasks, shards_of
from albor_pipeline.runtime.shards import MB, Shard, ShardWriter, shard_name
from albor_pipeline.runtime.taskstore import memo, session
from albor_pipeline.runtime.watchdog import reading
from albor_pipeline.spec import DOCUMENT_KINDS, EVAL_KINDS, OnError, RedactMode, SourceKind, SourceSpec
from albor_pipeline.stages.ingest.licences import detect_licences
from albor_pipeline.stages.ingest.synthetic import generate, read_words
from albor_pipeline.stages.ingest.web import PAGE_SCHEMA, Blocks, Extractor, Page, WebCounts, is_warc, page_batch
from albor_pipeline.summaries.ingest import IngestSummary, Removed
from albor_pipeline.text.base_eval import parse_base_item
from albor_pipeline.text.chat import ChatError, clean_conversation, conversation_json, parse_mc
from albor_pipeline.text.chat_formats import ALPACA_FIELDS, DEFAULT_FIELD, to_messages
from albor_pipeline.text.datafiles import DATA_READERS, IngestError, jsonl_objects, parquet_column, parse_json
from albor_pipeline.text.documents import BATCH_ROWS, DOC_SCHEMA
from albor_pipeline.text.ledger import LEDGER, LEDGER_SCHEMA, PAGES, is_side, ledger_name
from albor_pipeline.text.removal import REMOVED, Removal, Tombstone, write_tombstones
from albor_pipeline.text.secrets import Lines, candidate_lines, redact_path, redacted, redacted_json

BATCH_BYTES = 32 << 20
READ_CHUNK = 256  # code files read ahead at most
CONVERSATION_COLUMNS = ("messages", "conversations")
CHAT_COLUMNS = (*CONVERSATION_COLUMNS, *ALPACA_FIELDS)  # what a Parquet chat row is read with
REDACT_ROWS, REDACT_CHARS = 64, 1 << 20  # documents redacted together (one RE2 pass, one `memo` part), at most


@dataclass
class IngestResult:
    artifacts: list[Artifact]  # the shard set, in order
    summary: IngestSummary
    first: dict[str, str]  # reason -> where the listing first skipped for it (the log's, not the manifest's)
    source: Artifact  # the files it read, as `source_fingerprint` describes them


@dataclass
class Counts:
    """What ingestion left out (by reason) and, for chat, what cleaning changed (by action)."""

    skipped: Counter[str] = field(default_factory=Counter)
    cleanup: Counter[str] = field(default_factory=Counter)
    secrets: Counter[str] = field(default_factory=Counter)

    def add(self, other: Counts) -> None:
        self.skipped.update(other.skipped)
        self.cleanup.update(other.cleanup)
        self.secrets.update(other.secrets)


def _read_code_file(path: Location, max_chars: int) -> tuple[str, None] | tuple[None, str]:
    """(text, None) or (None, skip reason). Reads at most 4 bytes a character (UTF-8's
    widest) past `max_chars`: a longer file is too long whatever it holds, never read whole."""
    limit = 4 * max_chars
    try:
        with reading(path):
            data = read_bytes(path, limit + 1)
    except OSError as exc:
        return None, skip_reason(exc)
    if len(data) > limit:
        return None, "too_long"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, "not_utf8"


def _code_documents(root: Location, files: list[str], skipped: Counter, max_chars: int) -> Iterator[tuple[str, str]]:
    """Read files on a few threads, in order, a chunk at a time (memory stays bounded)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        for start in range(0, len(files), READ_CHUNK):
            chunk = files[start : start + READ_CHUNK]
            texts = pool.map(lambda r: _read_code_file(join(root, r), max_chars), chunk)
            for rel, (text, reason) in zip(chunk, texts):
                if text is None:
                    skipped[reason] += 1
                else:
                    yield rel, text


def _chat_rows(path: Location, rel: str, src: SourceSpec, skipped: Counter) -> Iterator[tuple[str, str, Any]]:
    """(where, file:row, row object) of a JSONL or Parquet chat file. A Parquet row holds the
    columns a chat format can use; a conversation stored as a JSON string is parsed."""
    field = src.messages_field or DEFAULT_FIELD.get(src.format)
    skip = src.on_error is OnError.skip
    if not name_of(path).endswith(".parquet"):
        for lineno, obj in jsonl_objects(path, skipped, src.max_chars, skip):
            yield f"{path}:{lineno}", f"{rel}:{lineno}", obj
        return
    with parquet_column(path, field, skipped) as pfile:
        wanted = {field, *CHAT_COLUMNS}
        columns = [name for name in pfile.schema_arrow.names if name in wanted] if pfile else []
        row = 0
        for batch in pfile.iter_batches(batch_size=BATCH_ROWS, columns=columns) if pfile else ():
            for obj in batch.to_pylist():
                row += 1
                try:
                    for name in {field, *CONVERSATION_COLUMNS} & obj.keys():
                        if isinstance(obj[name], str):  # a JSON string column
                            obj[name] = parse_json(obj[name], f"{path}#{row}: {name!r}")
                except IngestError:
                    if not skip:
                        raise
                    skipped["malformed"] += 1
                    continue
                yield f"{path}#{row}", f"{rel}#{row}", obj


def _conversations(src: SourceSpec, root: Location, files: list[str], counts: Counts) -> Iterator[tuple[str, str]]:
    """(file:row, conversation JSON) of a chat source in its format, cleaned; a malformed row is
    an error naming file and row, or with `on_error: skip` a counted skip."""
    for rel in files:
        for where, file_row, row in _chat_rows(join(root, rel), rel, src, counts.skipped):
            try:
                raw = to_messages(row, src.format, src.messages_field)
                messages = clean_conversation(raw, src.calculator, counts.cleanup)
            except ChatError as exc:
                if src.on_error is OnError.skip:
                    counts.skipped["malformed"] += 1
                    continue
                raise IngestError(f"{where}: {exc}") from None
            if messages is not None:
                yield file_row, conversation_json(messages)


def _synthetic(src: SourceSpec, root: Location, files: list[str], counts: Counts) -> Iterator[tuple[str, str]]:
    """(task#i, conversation JSON) of a synthetic task over the word list file(s)."""
    assert src.task is not None  # the spec requires it for this kind
    words: set[str] = set()
    for rel in files:
        try:
            words.update(read_words(read_bytes(join(root, rel)).decode("utf-8")))
        except OSError as exc:
            counts.skipped[skip_reason(exc)] += 1
    if not words:
        raise IngestError(f"source {src.name!r}: no usable words (lowercase a-z, one per line) in {src.path}")
    for i, messages in enumerate(generate(src.task, sorted(words), src.rows, src.seed)):
        yield f"{src.task.value}#{i}", conversation_json(messages)


def _items(
    src: SourceSpec, root: Location, files: list[str], counts: Counts, parse: Callable[[Any], dict[str, Any]]
) -> Iterator[tuple[str, str]]:
    """(file:line, item JSON) of an eval file's items as `parse` holds them to their format."""
    for rel in files:
        for lineno, obj in jsonl_objects(join(root, rel), counts.skipped, src.max_chars, src.on_error is OnError.skip):
            try:
                item = parse(obj)
            except ChatError as exc:
                if src.on_error is OnError.skip:
                    counts.skipped["malformed"] += 1
                    continue
                raise IngestError(f"{join(root, rel)}:{lineno}: {exc}") from None
            yield f"{rel}:{lineno}", _item_json(item)


def _item_json(item: dict[str, Any]) -> str:
    """An eval item's canonical JSON (its document's text)."""
    return json.dumps(item, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _mc_items(src: SourceSpec, root: Location, files: list[str], counts: Counts) -> Iterator[tuple[str, str]]:
    """Multiple-choice items (chat eval sets)."""
    return _items(src, root, files, counts, parse_mc)


def _base_items(src: SourceSpec, root: Location, files: list[str], counts: Counts) -> Iterator[tuple[str, str]]:
    """Base-model eval items, held to the source's `task_type`."""
    task = src.task_type
    assert task is not None  # the spec requires it for this kind
    return _items(src, root, files, counts, lambda obj: parse_base_item(obj, task))


def source_files(src: SourceSpec) -> SourceListing:
    """The files ingestion reads for `src` (also what its fingerprint covers)."""
    return list_source_files(src.path, src.include_globs, src.exclude, src.follow_symlinks)


def source_fingerprint(src: SourceSpec, cache_path: Path | None = None) -> Artifact:
    """The source as an input artifact: content fingerprint of exactly the files ingestion reads."""
    listing = source_files(src)
    files = listing.files
    digest, total = fingerprint_files(source_root(src.path), files, cache_path, listing.stats)
    return Artifact(path=source_stage(src.name), sha256=digest, bytes=total, rows=len(files))


def source_unchanged(src: SourceSpec, layout: Layout, manifest: StageManifest) -> bool:
    """Whether `src`'s files still have the content ingestion's `manifest` records it read: the
    fingerprint again, each file's digest trusted while its size, times and inode are the
    same. Whatever stops the listing (a source gone, a server down) says no: ingestion then
    runs and reports it."""
    recorded = [a.sha256 for a in manifest.inputs if a.path == source_stage(src.name)]
    try:
        now = source_fingerprint(src, layout.fingerprint_cache(src.name))
    except Exception:  # only whether to skip is decided here; the stage says what failed
        return False
    return recorded == [now.sha256]


SECRET_KINDS = (*DOCUMENT_KINDS, SourceKind.chat, *EVAL_KINDS)  # sources whose text ingestion redacts
_STRUCTURED_READERS = {
    SourceKind.chat: _conversations,
    SourceKind.synthetic: _synthetic,
    SourceKind.mc: _mc_items,
    SourceKind.base_eval: _base_items,
}


def iter_documents(src: SourceSpec, files: list[str], counts: Counts) -> Iterator[tuple[str, str]]:
    """Yield (file, text) for every document of `src` before length filtering; the text of a
    conversation or a multiple-choice item is its canonical JSON."""
    root = source_root(src.path)
    if src.kind is SourceKind.code:
        yield from _code_documents(root, files, counts.skipped, src.max_chars)
        return
    if src.kind in _STRUCTURED_READERS:
        yield from _STRUCTURED_READERS[src.kind](src, root, files, counts)
        return
    reader = DATA_READERS[src.kind]
    for rel in files:
        yield from reader(join(root, rel), rel, src.text_field, counts.skipped, src.max_chars)


@dataclass
class _Part:
    """One task's files, ingested: the shards it wrote and what it left out."""

    shards: list[Shard]
    counts: Counts
    text_bytes: int
    removed: list[Tombstone] = field(default_factory=list)  # left out on request (`removal`)


@dataclass(frozen=True)
class _IngestJob:
    """What every ingestion task needs: the source, its shards' size and its removal requests
    (and a web source's block lists, read)."""

    src: SourceSpec
    max_bytes: int
    removal: Removal | None = None
    blocks: Blocks | None = None


Doc = tuple[str, str, Page | None]  # (file, text, the web page it came from)


def _documents(job: _IngestJob, files: list[str], counts: Counts, web: WebCounts) -> Iterator[Doc]:
    """The task's documents before screening; a web source's with their pages."""
    src = job.src
    if src.kind is SourceKind.web:
        extractor = Extractor(src.name, src.web, job.blocks or Blocks())
        yield from extractor.documents(source_root(src.path), files, web)
        return
    for rel, text in iter_documents(src, files, counts):
        yield rel, text, None


def _ingest_group(job: _IngestJob, io: TaskIO, item: tuple[int, list[str], str | None]) -> _Part:
    """Task `item` = (index, files of one source, their content digest): its documents,
    length-filtered, hashed and written as shards `part-<index>-*`. A pure function of its
    files, so tasks run on any executor, on any node (its local sources must be mounted
    there); the digest makes a task reusable exactly while its files' bytes stay the same.
    A web source's task also writes its pages (`_pages/`) and what it left out (`_ledger/`)."""
    task, files, _ = item
    src = job.src
    counts = Counts()
    web = WebCounts(counts.skipped)
    cols: dict[str, list[str]] = {name: [] for name in DOC_SCHEMA.names}
    pages: list[tuple[str, Page]] = []
    text_bytes = pending = 0
    removed: list[Tombstone] = []
    with ShardWriter(io.directory, task, DOC_SCHEMA, job.max_bytes) as writer:
        for rel, text, page in _screened(src, _documents(job, files, counts, web), counts):
            encoded = text.encode("utf-8")
            sha256 = hashlib.sha256(encoded).hexdigest()
            if job.removal and (stone := job.removal.tombstone(src.name, rel, text, sha256)):
                counts.skipped["removed"] += 1
                removed.append(stone)
                continue
            text_bytes += len(encoded)
            pending += len(encoded)
            cols["text"].append(text)
            cols["source"].append(src.name)
            cols["file"].append(rel)
            cols["sha256"].append(sha256)
            if page is not None:
                pages.append((sha256, page.as_recorded(rel)))
            if len(cols["text"]) >= BATCH_ROWS or pending >= BATCH_BYTES:
                writer.write(pa.RecordBatch.from_pydict(cols, schema=DOC_SCHEMA), pending)
                cols = {name: [] for name in DOC_SCHEMA.names}
                pending = 0
        if cols["text"]:
            writer.write(pa.RecordBatch.from_pydict(cols, schema=DOC_SCHEMA), pending)
    shards = writer.shards
    if src.kind is SourceKind.web:
        shards = [*shards, *_web_sides(io.directory, task, pages, web)]
    return _Part(shards, counts, text_bytes, removed)


def _web_sides(directory: Path, task: int, pages: list[tuple[str, Page]], web: WebCounts) -> list[Shard]:
    """A web task's pages and ledger, beside its shards (a task that kept nothing writes them
    too: its ledger says why)."""
    name = shard_name(task, 0)
    with ParquetSink(directory / PAGES / name, PAGE_SCHEMA) as sink:
        sink.write(page_batch(pages))
    with ParquetSink(directory / ledger_name(name), LEDGER_SCHEMA) as ledger:
        ledger.write(web.ledger.batch())
    return [Shard.of(sink.path, sink.rows, directory), Shard.of(ledger.path, ledger.rows, directory)]


INGEST_GROUP = Step(_ingest_group)  # its item names its files' content (`_tasks`)


def _screened(src: SourceSpec, documents: Iterable[Doc], counts: Counts) -> Iterator[Doc]:
    """`documents` in order, less those outside the source's length bounds, with their secrets
    redacted (`_without_secrets`) a batch at a time."""
    structured = src.kind in _STRUCTURED_READERS  # length is a rendering matter (chat.max_tokens)
    batch: list[Doc] = []
    held = 0
    for rel, text, page in documents:
        n = len(text)
        if not structured and (n < src.min_chars or n > src.max_chars):
            counts.skipped["too_short" if n < src.min_chars else "too_long"] += 1
            continue
        batch.append((rel, text, page))
        held += n
        if len(batch) >= REDACT_ROWS or held >= REDACT_CHARS:
            yield from _redacted_batch(src, batch, counts)
            batch, held = [], 0
    yield from _redacted_batch(src, batch, counts)


def _redacted_batch(src: SourceSpec, batch: list[Doc], counts: Counts) -> Iterator[Doc]:
    """`_without_secrets` of each document of `batch`: one RE2 pass finds the batch's candidate
    lines (`candidate_lines`) and the detectors run on those alone (a conversation is
    redacted message by message). What it changed is kept per batch content (`memo`): a
    rebuild redacts again only the batches holding an edited file."""
    if not _scans(src.kind, src.hygiene.redact):
        yield from batch
        return
    content = hashlib.sha256()
    for rel, text, _ in batch:
        content.update(f"{len(rel)}:{rel}{len(text)}:".encode() + text.encode("utf-8", "surrogatepass"))
    setting = (src.kind, src.hygiene.redact)
    changes = memo(_redactions, setting, content.hexdigest(), partial(_redactions, setting, batch))
    counts.secrets.update(changes.found)
    if changes.dropped:
        counts.skipped["secrets"] += changes.dropped
    for i, (rel, text, page) in enumerate(batch):
        if i not in changes.changed:
            yield rel, text, page
        elif (kept := _without_secrets(*setting, rel, text, Counts(), _lines(setting[0], [text])[0])) is not None:
            yield *kept, page  # redacted again, alone: the store keeps which documents change, never their text


@dataclass(frozen=True)
class _Redactions:
    """Which documents of a batch redaction changes (rewrites or drops), and what it found."""

    changed: frozenset[int]
    found: Counter[str]
    dropped: int


def _scans(kind: SourceKind, mode: RedactMode) -> bool:
    """Whether ingestion scans a source's texts: under `redact` and `drop`; an eval set, which
    no hygiene stage sees, under `report` too (counted here)."""
    return kind in SECRET_KINDS and (
        mode in (RedactMode.redact, RedactMode.drop) or (mode is RedactMode.report and kind in EVAL_KINDS)
    )


def _lines(kind: SourceKind, texts: list[str]) -> list[Lines | None]:
    """Where the detectors look in each text (`candidate_lines`; a conversation or an eval
    item: everywhere, field by field)."""
    if texts and kind in DOCUMENT_KINDS:
        return list(candidate_lines(pa.array(texts, pa.large_string()), pii=False))
    return [None] * len(texts)


def _redactions(setting: tuple[SourceKind, RedactMode], batch: list[Doc]) -> _Redactions:
    counts = Counts()
    changed = set()
    for i, ((rel, text, _), where) in enumerate(zip(batch, _lines(setting[0], [t for _, t, _ in batch]))):
        if _without_secrets(*setting, rel, text, counts, where) != (rel, text):
            changed.add(i)
    return _Redactions(frozenset(changed), Counter(counts.secrets), counts.skipped["secrets"])


def _without_secrets(
    kind: SourceKind, mode: RedactMode, rel: str, text: str, counts: Counts, lines: Lines | None
) -> tuple[str, str] | None:
    """(file, text) with every secret in the text replaced by `<KEY>` (and secrets and PII in the
    file name), or None to drop the document (hygiene mode `drop`): a secret never reaches the
    data dir, `ingested/` included. An eval item loses its PII here too (no hygiene stage sees
    it). Under `report` both are kept as they are (an eval item's findings counted), under
    `off` unscanned. `lines`: where to look (`candidate_lines` of its batch)."""
    if not _scans(kind, mode):
        return rel, text
    if kind in EVAL_KINDS:
        cleaned, found = _redacted_item(text)
    else:
        cleaned, found = redacted(text, conversation=kind is SourceKind.chat, pii=False, lines=lines)
    counts.secrets.update(found)
    if mode is RedactMode.report:
        return rel, text
    if found and mode is RedactMode.drop:
        counts.skipped["secrets"] += 1
        return None
    return redact_path(rel), cleaned  # a name holding an address or a token is recorded redacted, as every path


def _redacted_item(text: str) -> tuple[str, Counter[str]]:
    """An eval item's JSON with its secrets and PII redacted string by string (`question`, each
    choice, `query`, `context`, ...); the findings by type."""
    item, found = redacted_json(json.loads(text))
    return (_item_json(item) if found else text), found


def file_groups(src: SourceSpec, listing: SourceListing, max_bytes: int) -> list[list[str]]:
    """Ingestion's tasks: consecutive files of up to `max_bytes` together (a bigger file alone),
    so a task writes about one shard; a WARC file alone (a crawl grows by files: adding one
    runs only its task); a chat/synthetic/multiple-choice source whole (a task's words span
    its files)."""
    if src.kind in _STRUCTURED_READERS:
        return [listing.files]
    groups: list[list[str]] = []
    held = 0
    for rel, size in zip(listing.files, listing.sizes, strict=True):
        alone = src.kind is SourceKind.web and (is_warc(rel) or (groups and is_warc(groups[-1][-1])))
        if not groups or held + size > max_bytes or alone:
            groups.append([])
            held = 0
        groups[-1].append(rel)
        held += size
    return groups


HASH_FILES = 2_000  # files a hashing task reads: ~0.15 s of opening and hashing small files


def _hash_files(root: Location, io: TaskIO, files: list[str]) -> Hashes:
    """A task hashing files the fingerprint cache does not know (a cold build: all of them)."""
    return hash_files(root, files)


HASH_TASK = Step(_hash_files, kept=False)


def _hash_on(io: StageIO, root: Location, files: list[str]) -> Hashes:
    """`files`' SHA-256s, spread over the stage's workers: on a cold build they are per-file
    work in the run's own process otherwise (~150 us a file, 20k files in site-packages)."""
    chunks = [files[i : i + HASH_FILES] for i in range(0, len(files), HASH_FILES)]
    hashed: dict[str, str] = {}
    failed: dict[str, str] = {}
    for done, skipped in map_tasks(HASH_TASK, root, chunks, io.root, io):
        hashed.update(done)
        failed.update(skipped)
    return hashed, failed


def _source(src: SourceSpec, listing: SourceListing, io: StageIO) -> tuple[Artifact, dict[str, str]]:
    """The source as `source_fingerprint` describes it, and its files' digests: the ones the
    fingerprint cache does not hold (a cold build: all) hashed on the stage's workers."""
    root = source_root(src.path)
    cache = Layout(io.root).fingerprint_cache(src.name)
    files = listing.files
    digests, total = file_digests(root, files, cache, partial(_hash_on, io, root), listing.stats)
    fingerprint = fingerprint_of(files, digests)
    return Artifact(path=source_stage(src.name), sha256=fingerprint, bytes=total, rows=len(files)), digests


def _tasks(groups: list[list[str]], digests: dict[str, str]) -> list[tuple[int, list[str], str | None]]:
    """Ingestion's task items; when the run reuses tasks, each names its files' content."""
    if session() is None:
        return [(i, files, None) for i, files in enumerate(groups)]
    tasks: list[tuple[int, list[str], str | None]] = []
    for i, group in enumerate(groups):
        content = "".join(f"{rel}\0{digests[rel]}\n" for rel in group)
        tasks.append((i, group, hashlib.sha256(content.encode()).hexdigest()))
    return tasks


def _documents_of(parts: list[_Part]) -> list[Shard]:
    """The shards of documents the tasks wrote (not a web source's pages and ledger)."""
    return [shard for shard in shards_of(parts) if not is_side(shard.name)]


def ingest_source(
    src: SourceSpec,
    out: Path,
    io: StageIO,
    *,
    shard_mb: float = 32,
    removal: Removal | None = None,
) -> IngestResult:
    """Write `src` as a shard set (directory `out`); raise on an empty source (nothing is
    replaced). Tasks write their shards wherever they run (`io.executor`); the set commits whole.
    With `removal`, the documents it names are left out and their tombstones written to
    `out/removed.parquet`, in task order."""
    progress = io.progress
    listing = source_files(src)
    files = listing.files
    counts = Counts(Counter(listing.skipped))
    for reason, where in listing.first.items():
        if progress:
            progress(f"{src.name}: skipped {listing.skipped[reason]} as {reason}, the first at {where}")
    max_bytes = int(shard_mb * MB)
    source, digests = _source(src, listing, io)
    groups = _tasks(file_groups(src, listing, max_bytes), digests)

    def ingested(parts: list[_Part]) -> str | None:
        if not parts[-1].shards:
            return None
        shards = _documents_of(parts)
        mb = sum(p.text_bytes for p in parts) / 1e6
        return f"{src.name}: {sum(s.rows for s in shards):,} documents in {len(shards)} shard(s), {mb:.1f} MB"

    def not_empty(staging: Path, parts: list[_Part]) -> None:
        """An empty source is an error (before the commit: the previous set is kept); the
        tombstones go beside the shards."""
        for part in parts:
            counts.add(part.counts)
        if not _documents_of(parts):
            reasons = ", ".join(f"{k}={v}" for k, v in sorted(counts.skipped.items())) or "no matching files"
            raise IngestError(
                f"source {src.name!r} produced 0 documents from {len(files)} file(s) under {src.path} ({reasons}); "
                "the previous materialization, if any, is kept"
            )
        if removal is not None:
            write_tombstones(staging / REMOVED, (stone for part in parts for stone in part.removed))

    web = src.kind is SourceKind.web
    job = _IngestJob(src, max_bytes, removal, Blocks.read(src.web) if web else None)
    parts = map_shards(INGEST_GROUP, job, groups, out, io, ingested, not_empty, subsets=[PAGES, LEDGER] if web else ())
    shards = _documents_of(parts)
    text_bytes = sum(part.text_bytes for part in parts)
    skipped = counts.skipped
    summary = IngestSummary(
        files=len(files),
        documents=sum(s.rows for s in shards),
        shards=len(shards),
        text_bytes=text_bytes,
        skipped=dict(sorted(skipped.items())),
        cleanup=dict(sorted(counts.cleanup.items())),
        secrets=dict(sorted(counts.secrets.items())),
        licences=detect_licences(src.path),
        removal=Removed(rules_sha256=removal.rules_sha256, removed=skipped["removed"]) if removal else None,
    )
    artifacts = [shard.artifact(out, io.root) for shard in shards_of(parts)]
    if removal is not None:
        artifacts.append(record(out / REMOVED, io.root, skipped["removed"]))
    return IngestResult(artifacts, summary, listing.first, source)

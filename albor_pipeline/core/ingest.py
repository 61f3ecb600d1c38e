"""Source ingestion: Python files or JSONL/CSV/Parquet rows -> Parquet {text, source, file, sha256}.

Code files are decoded as strict UTF-8; a file that fails is skipped and counted by
reason, never mangled. Data files are held to their format: a malformed line or a
missing column is an `IngestError` naming the file and line.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from albor_pipeline.core.artifacts import Artifact
from albor_pipeline.core.chat import ChatError, clean_conversation, conversation_json, parse_mc
from albor_pipeline.core.executor import INLINE, Executor
from albor_pipeline.core.files import (
    Location,
    SourceListing,
    fingerprint_files,
    join,
    list_source_files,
    name_of,
    open_binary,
    random_access,
    read_bytes,
    skip_reason,
    source_root,
)
from albor_pipeline.core.layout import source_stage
from albor_pipeline.core.secrets import redact_path, redacted
from albor_pipeline.core.shardmap import TaskIO, map_shards, shards_of
from albor_pipeline.core.shards import MB, Shard, ShardWriter
from albor_pipeline.core.stage import Progress
from albor_pipeline.core.tasks import generate, read_words
from albor_pipeline.core.watchdog import reading
from albor_pipeline.spec import DOCUMENT_KINDS, OnError, RedactMode, SourceKind, SourceSpec

DOC_SCHEMA = pa.schema([("text", pa.string()), ("source", pa.string()), ("file", pa.string()), ("sha256", pa.string())])
BATCH_ROWS = 2048
BATCH_BYTES = 32 << 20
READ_CHUNK = 256  # code files read ahead at most


class IngestError(ValueError):
    """Input that breaks its format's contract; the message names file and line."""


@dataclass
class IngestResult:
    artifacts: list[Artifact]  # the shard set, in order
    files: int
    text_bytes: int
    skipped: dict[str, int] = field(default_factory=dict)
    cleanup: dict[str, int] = field(default_factory=dict)  # chat: what cleaning changed, by action
    first: dict[str, str] = field(default_factory=dict)  # reason -> where the listing first skipped for it
    secrets: dict[str, int] = field(default_factory=dict)  # secrets redacted (or dropped), by type

    @property
    def rows(self) -> int:
        return sum(a.rows or 0 for a in self.artifacts)


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


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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


COMPRESSION = {".gz": "gzip", ".zst": "zstd"}  # data files read transparently by suffix


def _suffix(path: Location) -> str:
    return PurePosixPath(name_of(path)).suffix


def open_data_file(path: Location) -> IO[bytes]:
    """`path` as a binary stream, decompressed when it ends in .gz or .zst."""
    return open_binary(path, COMPRESSION.get(_suffix(path)))


@contextmanager
def _reading(path: Location, skipped: Counter) -> Iterator[IO[bytes] | None]:
    """Open a data file: None when it cannot be opened or is empty (counted by reason); a
    corrupt compressed stream is an `IngestError` naming the file."""
    try:
        fh = open_data_file(path)
    except OSError as exc:
        skipped[skip_reason(exc)] += 1
        yield None
        return
    try:
        with fh, reading(path):
            empty = _is_empty(fh)
            if empty:
                skipped["empty_file"] += 1
            yield None if empty else fh
    except IngestError:
        raise
    except OSError as exc:
        if _suffix(path) not in COMPRESSION:
            raise
        raise IngestError(f"{path}: not a readable {COMPRESSION[_suffix(path)]} file: {exc}") from None


def _is_empty(fh: IO[bytes]) -> bool:
    return not fh.peek(1) if isinstance(fh, io.BufferedReader) else False


def _jsonl_objects(path: Location, skipped: Counter) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of every non-blank line; a line that is not a JSON object is an error."""
    with _reading(path, skipped) as fh:
        if fh is None:
            return
        for lineno, raw in enumerate(fh, start=1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise IngestError(f"{where}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
            if not line.strip():
                skipped["blank_line"] += 1
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise IngestError(f"{where}: malformed JSON: {exc.msg} (column {exc.colno})") from None
            if not isinstance(obj, dict):
                raise IngestError(f"{where}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def _jsonl_documents(path: Location, rel: str, field_name: str, skipped: Counter) -> Iterator[tuple[str, str]]:
    for lineno, obj in _jsonl_objects(path, skipped):
        where = f"{path}:{lineno}"
        if field_name not in obj:
            raise IngestError(f"{where}: missing field {field_name!r} (has {sorted(obj)[:10]})")
        value = obj[field_name]
        if value is None:
            skipped["null_text"] += 1
            continue
        if not isinstance(value, str):
            raise IngestError(f"{where}: field {field_name!r} is {type(value).__name__}, expected a string")
        yield f"{rel}:{lineno}", value


def _first_bad_utf8_line(path: Location) -> int:
    with _reading(path, Counter()) as fh:
        if fh is None:
            return 0
        for lineno, raw in enumerate(fh, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return lineno
    return 0


def _csv_documents(path: Location, rel: str, field_name: str, skipped: Counter) -> Iterator[tuple[str, str]]:
    csv.field_size_limit(1 << 30)
    with _reading(path, skipped) as raw:
        if raw is None:
            return
        fh = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        reader = csv.reader(fh, strict=True)
        header: list[str] | None = None
        col = 0
        while True:
            start = reader.line_num + 1
            try:
                row = next(reader)
            except StopIteration:
                if header is None:
                    raise IngestError(f"{path}:1: empty CSV file (no header)") from None
                return
            except UnicodeDecodeError as exc:  # decoding runs ahead of the parser: find the line
                raise IngestError(f"{path}:{_first_bad_utf8_line(path)}: not valid UTF-8 ({exc.reason})") from None
            except csv.Error as exc:
                raise IngestError(f"{path}:{start}: CSV parse error: {exc}") from None
            if header is None:
                header = row
                if field_name not in header:
                    raise IngestError(f"{path}:1: missing column {field_name!r} (columns: {header})")
                col = header.index(field_name)
                continue
            if not row:
                skipped["blank_line"] += 1
                continue
            if len(row) != len(header):
                raise IngestError(f"{path}:{start}: expected {len(header)} fields, got {len(row)}")
            yield f"{rel}:{start}", row[col]


@contextmanager
def _parquet_column(path: Location, field_name: str, skipped: Counter) -> Iterator[pq.ParquetFile | None]:
    """A Parquet file holding column `field_name`: None when it cannot be opened or has no rows
    (counted by reason, as other data files); an unparsable file or a missing column is an error."""
    try:
        fh = random_access(path)
    except OSError as exc:
        skipped[skip_reason(exc)] += 1
        yield None
        return
    with fh, reading(path):
        if fh.seek(0, io.SEEK_END) == 0:
            skipped["empty_file"] += 1
            yield None
            return
        fh.seek(0)
        try:
            pfile = pq.ParquetFile(fh)
        except (pa.ArrowInvalid, OSError) as exc:
            raise IngestError(f"{path}: not a readable Parquet file: {exc}") from None
        if field_name not in pfile.schema_arrow.names:
            raise IngestError(f"{path}: missing column {field_name!r} (columns: {pfile.schema_arrow.names})")
        empty = pfile.metadata.num_rows == 0
        if empty:
            skipped["empty_file"] += 1
        yield None if empty else pfile


def _parquet_documents(path: Location, rel: str, field_name: str, skipped: Counter) -> Iterator[tuple[str, str]]:
    with _parquet_column(path, field_name, skipped) as pfile:
        if pfile is None:
            return
        kind = pfile.schema_arrow.field(field_name).type
        if not pa.types.is_string(kind) and not pa.types.is_large_string(kind):
            raise IngestError(f"{path}: column {field_name!r} is {kind}, expected string")
        row = 0
        for batch in pfile.iter_batches(batch_size=BATCH_ROWS, columns=[field_name]):
            for value in batch.column(0).to_pylist():
                row += 1
                if value is None:
                    skipped["null_text"] += 1
                    continue
                yield f"{rel}#{row}", value


def _chat_rows(path: Location, rel: str, field_name: str, skipped: Counter) -> Iterator[tuple[str, str, Any]]:
    """(where, file:row, raw messages) of a JSONL or Parquet chat file."""
    if name_of(path).endswith(".parquet"):
        with _parquet_column(path, field_name, skipped) as pfile:
            row = 0
            for batch in pfile.iter_batches(batch_size=BATCH_ROWS, columns=[field_name]) if pfile else ():
                for value in batch.column(0).to_pylist():
                    row += 1
                    if isinstance(value, str):  # a JSON string column
                        try:
                            value = json.loads(value)
                        except json.JSONDecodeError as exc:
                            raise IngestError(f"{path}#{row}: {field_name!r} is not valid JSON: {exc.msg}") from None
                    yield f"{path}#{row}", f"{rel}#{row}", value
        return
    for lineno, obj in _jsonl_objects(path, skipped):
        if field_name not in obj:
            raise IngestError(f"{path}:{lineno}: missing field {field_name!r} (has {sorted(obj)[:10]})")
        yield f"{path}:{lineno}", f"{rel}:{lineno}", obj[field_name]


def _conversations(src: SourceSpec, root: Location, files: list[str], counts: Counts) -> Iterator[tuple[str, str]]:
    """(file:row, conversation JSON) of a chat source, cleaned; a malformed row is an error
    naming file and row, or with `on_error: skip` a counted skip."""
    for rel in files:
        for where, file_row, raw in _chat_rows(join(root, rel), rel, src.messages_field, counts.skipped):
            try:
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


def _mc_items(src: SourceSpec, root: Location, files: list[str], counts: Counts) -> Iterator[tuple[str, str]]:
    """(file:line, item JSON) of a multiple-choice file."""
    for rel in files:
        for lineno, obj in _jsonl_objects(join(root, rel), counts.skipped):
            try:
                item = parse_mc(obj)
            except ChatError as exc:
                if src.on_error is OnError.skip:
                    counts.skipped["malformed"] += 1
                    continue
                raise IngestError(f"{join(root, rel)}:{lineno}: {exc}") from None
            yield f"{rel}:{lineno}", json.dumps(item, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


_DATA_READERS = {
    SourceKind.jsonl: _jsonl_documents,
    SourceKind.csv: _csv_documents,
    SourceKind.parquet: _parquet_documents,
}


def data_file_texts(path: Path, field_name: str, skipped: Counter) -> Iterator[tuple[str, str]]:
    """(file:row, text) of one field of a JSONL (plain, .gz, .zst) or Parquet file, with the
    same errors as a data source (e.g. a benchmark file for decontamination)."""
    kind = SourceKind.parquet if path.name.endswith(".parquet") else SourceKind.jsonl
    yield from _DATA_READERS[kind](path, path.name, field_name, skipped)


def source_files(src: SourceSpec) -> SourceListing:
    """The files ingestion reads for `src` (also what its fingerprint covers)."""
    return list_source_files(src.path, src.include_globs, src.exclude, src.follow_symlinks)


def source_fingerprint(src: SourceSpec, cache_path: Path | None = None) -> Artifact:
    """The source as an input artifact: content fingerprint of exactly the files ingestion reads."""
    files = source_files(src).files
    digest, total = fingerprint_files(source_root(src.path), files, cache_path)
    return Artifact(path=source_stage(src.name), sha256=digest, bytes=total, rows=len(files))


SECRET_KINDS = (*DOCUMENT_KINDS, SourceKind.chat)  # sources whose text ingestion redacts
_STRUCTURED_READERS = {SourceKind.chat: _conversations, SourceKind.synthetic: _synthetic, SourceKind.mc: _mc_items}


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
    reader = _DATA_READERS[src.kind]
    for rel in files:
        yield from reader(join(root, rel), rel, src.text_field, counts.skipped)


@dataclass
class _Part:
    """One task's files, ingested: the shards it wrote and what it left out."""

    shards: list[Shard]
    counts: Counts
    text_bytes: int


@dataclass(frozen=True)
class _IngestJob:
    """What every ingestion task needs: the source and its shards' size."""

    src: SourceSpec
    max_bytes: int


def _ingest_group(job: _IngestJob, io: TaskIO, item: tuple[int, list[str]]) -> _Part:
    """Task `item` = (index, files of one source): its documents, length-filtered, hashed and
    written as shards `part-<index>-*`. A pure function of its files, so tasks run on any
    executor, on any node (its local sources must be mounted there)."""
    task, files = item
    src = job.src
    counts = Counts()
    skipped = counts.skipped
    structured = src.kind in _STRUCTURED_READERS  # length is a rendering matter (chat.max_tokens)
    cols: dict[str, list[str]] = {name: [] for name in DOC_SCHEMA.names}
    text_bytes = pending = 0
    with ShardWriter(io.directory, task, DOC_SCHEMA, job.max_bytes) as writer:
        for rel, text in iter_documents(src, files, counts):
            n = len(text)
            if n < src.min_chars and not structured:
                skipped["too_short"] += 1
                continue
            if n > src.max_chars and not structured:
                skipped["too_long"] += 1
                continue
            redacted_text = _without_secrets(src, rel, text, counts)
            if redacted_text is None:
                continue
            rel, text = redacted_text
            encoded = text.encode("utf-8")
            text_bytes += len(encoded)
            pending += len(encoded)
            cols["text"].append(text)
            cols["source"].append(src.name)
            cols["file"].append(rel)
            cols["sha256"].append(hashlib.sha256(encoded).hexdigest())
            if len(cols["text"]) >= BATCH_ROWS or pending >= BATCH_BYTES:
                writer.write(pa.RecordBatch.from_pydict(cols, schema=DOC_SCHEMA), pending)
                cols = {name: [] for name in DOC_SCHEMA.names}
                pending = 0
        if cols["text"]:
            writer.write(pa.RecordBatch.from_pydict(cols, schema=DOC_SCHEMA), pending)
    return _Part(writer.shards, counts, text_bytes)


def _without_secrets(src: SourceSpec, rel: str, text: str, counts: Counts) -> tuple[str, str] | None:
    """(file, text) with every secret in the text replaced by `<KEY>` (and secrets and PII in the
    file name), or None to drop the document (hygiene mode `drop`): a secret never reaches the
    data dir, `ingested/` included. Under `report` and `off` both are kept as they are."""
    mode = src.hygiene.redact
    if mode not in (RedactMode.redact, RedactMode.drop) or src.kind not in SECRET_KINDS:
        return rel, text
    text, found = redacted(text, conversation=src.kind is SourceKind.chat, pii=False)
    rel = redact_path(rel)  # a name holding an address or a token is recorded redacted, as every path
    if found:
        counts.secrets.update(found)
        if mode is RedactMode.drop:
            counts.skipped["secrets"] += 1
            return None
    return rel, text


def file_groups(src: SourceSpec, listing: SourceListing, max_bytes: int) -> list[list[str]]:
    """Ingestion's tasks: consecutive files of up to `max_bytes` together (a bigger file alone),
    so a task writes about one shard; a chat/synthetic/multiple-choice source whole (a
    task's words span its files)."""
    if src.kind in _STRUCTURED_READERS:
        return [listing.files]
    groups: list[list[str]] = []
    held = 0
    for rel, size in zip(listing.files, listing.sizes, strict=True):
        if not groups or held + size > max_bytes:
            groups.append([])
            held = 0
        groups[-1].append(rel)
        held += size
    return groups


def ingest_source(
    src: SourceSpec,
    out: Path,
    data_root: Path,
    progress: Progress | None = None,
    executor: Executor = INLINE,
    shard_mb: float = 32,
) -> IngestResult:
    """Write `src` as a shard set (directory `out`); raise on an empty source (nothing is
    replaced). Tasks write their shards wherever they run; the set commits whole."""
    listing = source_files(src)
    files = listing.files
    counts = Counts(Counter(listing.skipped))
    for reason, where in listing.first.items():
        if progress:
            progress(f"{src.name}: skipped {listing.skipped[reason]} as {reason}, the first at {where}")
    max_bytes = int(shard_mb * MB)
    groups = list(enumerate(file_groups(src, listing, max_bytes)))

    def ingested(parts: list[_Part]) -> str | None:
        if not parts[-1].shards:
            return None
        shards = list(shards_of(parts))
        mb = sum(p.text_bytes for p in parts) / 1e6
        return f"{src.name}: {sum(s.rows for s in shards):,} documents in {len(shards)} shard(s), {mb:.1f} MB"

    def not_empty(parts: list[_Part]) -> None:
        """An empty source is an error (before the commit: the previous set is kept)."""
        for part in parts:
            counts.add(part.counts)
        if not any(part.shards for part in parts):
            reasons = ", ".join(f"{k}={v}" for k, v in sorted(counts.skipped.items())) or "no matching files"
            raise IngestError(
                f"source {src.name!r} produced 0 documents from {len(files)} file(s) under {src.path} ({reasons}); "
                "the previous materialization, if any, is kept"
            )

    job = _IngestJob(src, max_bytes)
    parts = map_shards(_ingest_group, job, groups, out, executor, ingested, progress, not_empty)
    shards = list(shards_of(parts))
    text_bytes = sum(part.text_bytes for part in parts)
    skipped = counts.skipped
    return IngestResult(
        artifacts=[shard.artifact(out, data_root) for shard in shards],
        files=len(files),
        text_bytes=text_bytes,
        skipped=dict(sorted(skipped.items())),
        cleanup=dict(sorted(counts.cleanup.items())),
        first=listing.first,
        secrets=dict(sorted(counts.secrets.items())),
    )

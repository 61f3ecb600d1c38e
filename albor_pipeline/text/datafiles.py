"""Text out of data files (JSONL, CSV, Parquet; .gz/.zst read transparently), held to
their format: a malformed line or a missing column is an `IngestError` naming file and line.

Shared by ingestion (data sources) and decontamination (benchmark files).
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO, Any, AnyStr

import pyarrow as pa
import pyarrow.parquet as pq

from albor_pipeline.runtime.files import Location, name_of, open_binary, random_access, skip_reason
from albor_pipeline.runtime.watchdog import reading
from albor_pipeline.text.documents import BATCH_ROWS


class IngestError(ValueError):
    """Input that breaks its format's contract; the message names file and line."""


COMPRESSION = {".gz": "gzip", ".zst": "zstd"}  # data files read transparently by suffix
# A line (a JSONL line's bytes, a CSV record's characters) holds at most this many per
# character of `max_chars`: a JSON-escaped astral character (`\ud83d\ude00`) is 12 bytes,
# so a text within `max_chars` fits whatever its escapes. A longer one is `too_long`, read
# past in pieces and never held whole (as a code file over 4 bytes a character).
LINE_BYTES_PER_CHAR = 12
PIECE = 1 << 16  # what a too-long line is read past in
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # a line without one parses to no lone surrogate


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
    except MemoryError:
        raise IngestError(f"{path}: out of memory while reading it") from None


def _is_empty(fh: IO[bytes]) -> bool:
    return not fh.peek(1) if isinstance(fh, io.BufferedReader) else False


def bounded_line(fh: IO[AnyStr], limit: int, ends: AnyStr) -> AnyStr | None:
    """The next line of `fh` (empty at its end), or None when it is longer than `limit` (its
    line ending, a character of `ends`, aside): then the rest of it is read past in pieces,
    so no line over `limit` is ever held whole."""
    line = fh.readline(limit + 2)  # room for the longest line ending, "\r\n"
    if len(line.rstrip(ends)) <= limit:
        return line
    while line and line[-1:] not in ends:
        line = fh.readline(PIECE)
    return None


def parse_json(text: str, where: str) -> Any:
    """`text` as JSON, or an `IngestError` naming `where`: malformed, nested deeper than the
    parser recurses, an integer past Python's 4,300 digits, or a lone surrogate escape
    (`\ud800`, which no UTF-8 text holds)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise IngestError(f"{where}: malformed JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise IngestError(f"{where}: malformed JSON: nested too deeply") from None
    except ValueError as exc:  # an integer over sys.get_int_max_str_digits()
        raise IngestError(f"{where}: malformed JSON: {exc}") from None
    if SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise IngestError(f"{where}: malformed JSON: a lone surrogate escape (\\ud800-\\udfff)") from None
    return value


def _json_object(raw: bytes, where: str) -> dict[str, Any] | None:
    """A JSONL line's object (None: a blank line), or an `IngestError` naming `where`."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IngestError(f"{where}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    if not line.strip():
        return None
    obj = parse_json(line, where)
    if not isinstance(obj, dict):
        raise IngestError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    return obj


def jsonl_objects(
    path: Location, skipped: Counter, max_chars: int, skip_malformed: bool = False
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of every non-blank line. A line that is not a JSON object is an
    error naming file and line, or with `skip_malformed` counted as `malformed`; a line over
    `LINE_BYTES_PER_CHAR` x `max_chars` bytes is counted as `too_long`, never held whole."""
    with _reading(path, skipped) as fh:
        lineno = 0
        while fh is not None and (raw := bounded_line(fh, LINE_BYTES_PER_CHAR * max_chars, b"\n")) != b"":
            lineno += 1
            try:
                obj = None if raw is None else _json_object(raw, f"{path}:{lineno}")
            except IngestError:
                if not skip_malformed:
                    raise
                skipped["malformed"] += 1
                continue
            if obj is not None:
                yield lineno, obj
            else:
                skipped["too_long" if raw is None else "blank_line"] += 1


def _jsonl_documents(
    path: Location, rel: str, field_name: str, skipped: Counter, max_chars: int
) -> Iterator[tuple[str, str]]:
    for lineno, obj in jsonl_objects(path, skipped, max_chars):
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
    """The line of `path`'s first invalid UTF-8 byte, decoded a piece at a time (a line may be
    longer than memory holds)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines = 1
    with _reading(path, Counter()) as fh:
        while fh is not None and (piece := fh.read(PIECE)):
            held = decoder.getstate()[0] + piece  # the bytes this decode sees: a split character's first
            try:
                decoder.decode(piece)
            except UnicodeDecodeError as exc:
                return lines + held.count(b"\n", 0, exc.start)
            lines += piece.count(b"\n")
    return 0


class TooLong(Exception):
    """A CSV record past its limit (`_RecordLines`); it is read past, never held whole."""


class _RecordLines:
    """A CSV file's lines for `csv.reader`, each record's (its lines since `record()`) at most
    `limit` characters together. Past it, the rest of the record is read past in pieces, up to
    a line end where the record's quotes are even (no quoted field, which may span lines, is
    open), and `TooLong` is raised: the reader resumes at the next record, never inside a
    field. Counts the lines read, those read past included."""

    def __init__(self, fh: IO[str], limit: int) -> None:
        self.fh, self.limit = fh, limit
        self.lines = self.held = self.quotes = 0

    def __iter__(self) -> _RecordLines:
        return self

    def __next__(self) -> str:
        room = max(self.limit - self.held, 0)
        line = self.fh.readline(room + 2)  # room for the longest line ending, "\r\n"
        if line == "":
            raise StopIteration
        if len(line.rstrip("\r\n")) > room:
            self._read_past(line)
            raise TooLong
        self.lines += 1
        self.held += len(line)
        self.quotes += line.count('"')
        return line

    def _read_past(self, piece: str) -> None:
        """Read past the rest of the record `piece` (its first piece over the limit) is in."""
        quotes = self.quotes
        while piece:
            quotes += piece.count('"')
            if piece[-1] in "\r\n":
                self.lines += 1
                if quotes % 2 == 0:
                    return
            piece = self.fh.readline(PIECE)

    def record(self) -> None:
        self.held = self.quotes = 0


def _csv_documents(
    path: Location, rel: str, field_name: str, skipped: Counter, max_chars: int
) -> Iterator[tuple[str, str]]:
    """The column `field_name` of each record; a record over `LINE_BYTES_PER_CHAR` x
    `max_chars` characters is counted as `too_long`, never held whole."""
    csv.field_size_limit(1 << 30)
    with _reading(path, skipped) as raw:
        if raw is None:
            return
        lines = _RecordLines(io.TextIOWrapper(raw, encoding="utf-8-sig", newline=""), LINE_BYTES_PER_CHAR * max_chars)
        reader = csv.reader(lines, strict=True)
        header: list[str] | None = None
        col = 0
        while True:
            start = lines.lines + 1
            lines.record()
            try:
                row = next(reader)
            except StopIteration:
                if header is None:
                    raise IngestError(f"{path}:1: empty CSV file (no header)") from None
                return
            except TooLong:
                if header is None:
                    raise IngestError(f"{path}:1: a header over {lines.limit:,} characters") from None
                skipped["too_long"] += 1
                continue
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
def parquet_column(path: Location, field_name: str | None, skipped: Counter) -> Iterator[pq.ParquetFile | None]:
    """A Parquet file holding column `field_name` (any columns when None): None when it cannot be
    opened or has no rows (counted by reason, as other data files); an unparsable file or a
    missing column is an error."""
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
        if field_name is not None and field_name not in pfile.schema_arrow.names:
            raise IngestError(f"{path}: missing column {field_name!r} (columns: {pfile.schema_arrow.names})")
        empty = pfile.metadata.num_rows == 0
        if empty:
            skipped["empty_file"] += 1
        try:
            yield None if empty else pfile
        except MemoryError:  # pyarrow's too: what the caller read of it
            raise IngestError(f"{path}: out of memory while reading it") from None


def _is_text(kind: pa.DataType) -> bool:
    """A string column, dictionary-encoded too (as pyarrow writes a categorical one)."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)


def _parquet_documents(
    path: Location, rel: str, field_name: str, skipped: Counter, max_chars: int
) -> Iterator[tuple[str, str]]:
    """The column `field_name` of each row (`max_chars` aside: Parquet has no lines)."""
    with parquet_column(path, field_name, skipped) as pfile:
        if pfile is None:
            return
        kind = pfile.schema_arrow.field(field_name).type
        if not _is_text(kind):
            raise IngestError(f"{path}: column {field_name!r} is {kind}, expected string")
        row = 0
        for batch in pfile.iter_batches(batch_size=BATCH_ROWS, columns=[field_name]):
            for value in batch.column(0).to_pylist():
                row += 1
                if value is None:
                    skipped["null_text"] += 1
                    continue
                yield f"{rel}#{row}", value


DATA_READERS = {
    "jsonl": _jsonl_documents,
    "csv": _csv_documents,
    "parquet": _parquet_documents,
}


def data_file_texts(path: Path, field_name: str, skipped: Counter, max_chars: int) -> Iterator[tuple[str, str]]:
    """(file:row, text) of one field of a JSONL (plain, .gz, .zst) or Parquet file, with the
    same errors as a data source (e.g. a benchmark file for decontamination)."""
    kind = "parquet" if path.name.endswith(".parquet") else "jsonl"
    yield from DATA_READERS[kind](path, path.name, field_name, skipped, max_chars)

"""Text out of data files (JSONL, CSV, Parquet; .gz/.zst read transparently), held to
their format: a malformed line or a missing column is an `IngestError` naming file and line.

Shared by ingestion (data sources) and decontamination (benchmark files).
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from albor_pipeline.runtime.files import Location, name_of, open_binary, random_access, skip_reason
from albor_pipeline.runtime.watchdog import reading
from albor_pipeline.text.documents import BATCH_ROWS


class IngestError(ValueError):
    """Input that breaks its format's contract; the message names file and line."""


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


def jsonl_objects(path: Location, skipped: Counter) -> Iterator[tuple[int, dict[str, Any]]]:
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
    for lineno, obj in jsonl_objects(path, skipped):
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
        yield None if empty else pfile


def _parquet_documents(path: Location, rel: str, field_name: str, skipped: Counter) -> Iterator[tuple[str, str]]:
    with parquet_column(path, field_name, skipped) as pfile:
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


DATA_READERS = {
    "jsonl": _jsonl_documents,
    "csv": _csv_documents,
    "parquet": _parquet_documents,
}


def data_file_texts(path: Path, field_name: str, skipped: Counter) -> Iterator[tuple[str, str]]:
    """(file:row, text) of one field of a JSONL (plain, .gz, .zst) or Parquet file, with the
    same errors as a data source (e.g. a benchmark file for decontamination)."""
    kind = "parquet" if path.name.endswith(".parquet") else "jsonl"
    yield from DATA_READERS[kind](path, path.name, field_name, skipped)

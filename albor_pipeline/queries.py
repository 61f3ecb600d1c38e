"""What `albor trace` and `albor exposure` take as a query: a document (a `[source:]path` or
glob, a SHA-256, a URL) or a sequence (`corpus/<split>:N`). Parsed here, apart from the
tracing itself, so a command that only parses them starts without the tracer's imports."""

from __future__ import annotations

import re
from fnmatch import translate
from pathlib import PurePosixPath

from albor_pipeline.runtime.layout import corpus_names
from albor_pipeline.spec import SPLITS


def glob_regex(pattern: str) -> str:
    """A file glob as a regular expression for Arrow (RE2 spells the end `$`, not `\\Z`)."""
    return "^" + translate(pattern).replace(r"\Z", "$")


SHA256 = re.compile(r"[0-9a-f]{64}")
SEQUENCE_QUERY = re.compile(r"corpus/([\w.-]+):(\d+)")


class TraceError(ValueError):
    """A query `albor trace` cannot answer; the message is the one line it prints."""


URL_QUERY = re.compile(r"(?:([A-Za-z0-9_]+):)?([a-z][a-z0-9+.-]*://.+)")


def document_query(query: str) -> tuple[str, str]:
    """(source or "", pattern) of a document query, the pattern a path, glob or SHA-256. An
    empty one, or a path no source's `file` can hold (absolute, or with `..`), is a `TraceError`,
    the same whether or not such a file exists: a trace never tells what lies outside the
    sources' roots."""
    if (url := URL_QUERY.fullmatch(query)) is not None:  # a web page: [source:]scheme://...
        return url[1] or "", url[2]
    source, _, pattern = query.rpartition(":") if ":" in query and not SHA256.fullmatch(query) else ("", "", query)
    if not pattern.strip():
        raise TraceError(f"{query!r}: an empty query; give a [source:]path or glob, a SHA-256 or corpus/<split>:N")
    if pattern.startswith("/") or ".." in PurePosixPath(pattern).parts:
        raise TraceError(f"{pattern}: not under any source's root (give a path or glob relative to it)")
    return source, pattern


def sequence_query(query: str) -> tuple[str, int] | None:
    """(corpus name, sequence number) of a `corpus/<name>:N` query, else None; a corpus no
    spec builds, or a number past int64 (the pieces' sequence numbers), is a `TraceError`."""
    found = SEQUENCE_QUERY.fullmatch(query)
    if found is None:
        return None
    name, digits = found[1], found[2]
    names = corpus_names(SPLITS)
    if name not in names:
        raise TraceError(f"corpus/{name}: no such corpus (one of {', '.join(f'corpus/{n}' for n in names)})")
    if len(digits.lstrip("0")) > 18:
        raise TraceError(f"corpus/{name} has no sequence {digits[:24]}{'...' if len(digits) > 24 else ''}")
    return name, int(digits)

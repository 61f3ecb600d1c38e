"""Removal requests at ingestion: a source's documents matching its `remove:` entry are not
written; each leaves a tombstone (`text/removal.py`) for `documents` to remove its
near-duplicates, and the count is in the source's summary, never the content."""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass

from albor_pipeline.runtime.artifacts import sha256_file
from albor_pipeline.runtime.files import matches
from albor_pipeline.spec import RemovalSpec, read_digests
from albor_pipeline.text.datafiles import IngestError
from albor_pipeline.text.removal import Tombstone, canonical_sha256
from albor_pipeline.text.shingles import shingles

_ROW = re.compile(r"(.+)[:#][0-9]+", re.DOTALL)  # a data file's row: `path:line` or `path#row`


@dataclass(frozen=True)
class Removal:
    """One source's removal requests as a task applies them: globs, digests (with those of
    its `sha256_file` as read now), the n-gram size of the tombstones' shingles (near
    dedup's) and the SHA-256 of the request list (`rules_sha256`, what reports show)."""

    paths: tuple[str, ...]
    digests: tuple[str, ...]  # sorted, unique
    ngram: int
    rules_sha256: str

    def tombstone(self, source: str, file: str, text: str, sha256: str) -> Tombstone | None:
        """The document's tombstone when a request names it (its file, its data file or its
        SHA-256), else None."""
        row = _ROW.fullmatch(file)
        named = matches(file, self.paths) or (row is not None and matches(row.group(1), self.paths))
        at = bisect_left(self.digests, sha256)
        if not named and self.digests[at : at + 1] != (sha256,):
            return None
        return Tombstone(source, file, sha256, self.ngram, shingles(text, self.ngram))


def resolve_removal(source: str, spec: RemovalSpec | None, ngram: int) -> Removal | None:
    """`spec` (the source's `remove:` entry) with its `sha256_file` read; None without one.
    Its `rules_sha256` is over the entry as canonical JSON, the file by its bytes' SHA-256."""
    if spec is None:
        return None
    listed = spec.sha256
    file_sha256 = None
    if spec.sha256_file is not None:
        try:
            listed += read_digests(spec.sha256_file)
        except ValueError as exc:
            raise IngestError(f"remove.{source}: {exc}") from None
        file_sha256 = sha256_file(spec.sha256_file)
    rules = {"paths": list(spec.paths), "sha256": list(spec.sha256), "sha256_file": file_sha256}
    return Removal(spec.paths, tuple(sorted(set(listed))), ngram, canonical_sha256(rules))

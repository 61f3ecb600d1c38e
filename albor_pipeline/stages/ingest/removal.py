"""Removal requests at ingestion: a source's documents matching its `remove:` entry are not
written; each leaves a tombstone (`text/removal.py`) for `documents` to remove its
near-duplicates, and the count is in the source's summary, never the content."""

from __future__ import annotations

from albor_pipeline.runtime.artifacts import sha256_file
from albor_pipeline.spec import RemovalSpec, read_digests
from albor_pipeline.text.datafiles import IngestError
from albor_pipeline.text.removal import Removal, canonical_sha256


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

"""Licences of a source, where they can be detected, for the dataset card.

A directory of installed packages has each distribution's metadata (License-Expression,
License, or a `License ::` classifier); anything else may have a LICENSE file at its
root. What cannot be read is "unknown": the card never guesses.
"""

from __future__ import annotations

from collections import Counter
from importlib import metadata
from pathlib import Path

from albor_pipeline.runtime.files import Location, is_file, join, read_bytes, source_root

LICENSE_FILES = ("LICENSE", "LICENSE.txt", "LICENSE.md", "COPYING", "LICENCE")
# Markers of the common licence texts, first match wins.
KNOWN_TEXTS = (
    ("PYTHON SOFTWARE FOUNDATION LICENSE", "PSF-2.0"),
    ("Apache License", "Apache-2.0"),
    ("MIT License", "MIT"),
    ("Permission is hereby granted, free of charge", "MIT"),
    ("GNU GENERAL PUBLIC LICENSE", "GPL"),
    ("GNU LESSER GENERAL PUBLIC LICENSE", "LGPL"),
    ("Mozilla Public License", "MPL-2.0"),
    ("Redistribution and use in source and binary forms", "BSD"),
)
UNKNOWN = "unknown"


def _field(meta: metadata.PackageMetadata, name: str) -> str:
    """A metadata field or "" (`meta[name]` raises KeyError under importlib_metadata's Message)."""
    values = meta.get_all(name) or []
    return str(values[0] or "").strip() if values else ""


def _distribution_licence(dist: metadata.Distribution) -> str:
    try:
        meta = dist.metadata
    except (OSError, ValueError):  # a dist-info without its METADATA file (a partial copy): no licence known
        return UNKNOWN
    if meta is None:
        return UNKNOWN
    expression = _field(meta, "License-Expression")
    if expression:
        return expression
    classifiers = [
        c.rsplit("::", 1)[-1].strip() for c in meta.get_all("Classifier") or [] if c.startswith("License ::")
    ]
    if classifiers:
        return " / ".join(sorted(set(classifiers)))
    text = _field(meta, "License")
    if text and "\n" not in text and len(text) <= 60:  # a name, not a pasted licence text
        return text
    return _text_licence(text) if text else UNKNOWN


def _text_licence(text: str) -> str:
    for marker, name in KNOWN_TEXTS:
        if marker.lower() in text.lower():
            return name
    return UNKNOWN


def detect_licences(path: Location) -> dict[str, int]:
    """Licence -> how many packages (or 1 for a root LICENSE file) under `path`."""
    root = source_root(path)
    if isinstance(root, Path):  # package metadata: only the dist-info/egg-info right under root
        dists = list(metadata.distributions(path=[str(root)]))
        if dists:
            return dict(sorted(Counter(_distribution_licence(d) for d in dists).items()))
    for name in LICENSE_FILES:
        candidate = join(root, name)
        try:  # licences are short: 1 MB is plenty; an unreadable one is as if absent
            if is_file(candidate):
                return {_text_licence(read_bytes(candidate, 1 << 20).decode("utf-8", errors="replace")): 1}
        except OSError:
            continue
    return {UNKNOWN: 1}

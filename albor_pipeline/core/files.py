"""Which files a source reads: one listing shared by ingestion and fingerprinting."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from albor_pipeline.core.artifacts import write_json

# Directory names never descended into (besides hidden ones), as DESIGN §4 says.
PRUNED_DIRS = frozenset({"__pycache__", "node_modules", "venv", ".venv"})


@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    """Translate a glob with `**` (any number of directories) into a regex."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def matches(relpath: str, patterns: Iterable[str]) -> bool:
    return any(_glob_regex(p).match(relpath) for p in patterns)


@dataclass
class SourceListing:
    """The files a source reads (sorted POSIX paths relative to its root) and what was left out."""

    files: list[str]
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> files


def _inside(path: str, root_real: str) -> bool:
    real = os.path.realpath(path)
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


def list_source_files(
    root: Path, include: Iterable[str], exclude: Iterable[str] = (), follow_symlinks: bool = False
) -> SourceListing:
    """The files under `root` that match `include` and not `exclude`.

    Hidden files and directories, `__pycache__`, `node_modules` and virtualenvs are
    skipped; directory symlinks are not followed, so a symlink loop cannot recurse. A
    file symlink that resolves outside `root` is left out and counted (`outside_root`)
    unless `follow_symlinks`. `root` may also be a single file.
    """
    include, exclude = tuple(include), tuple(exclude)
    skipped: Counter[str] = Counter()
    if root.is_file():
        parent = os.path.realpath(root.parent)
        if not follow_symlinks and root.is_symlink() and not _inside(str(root), parent):
            return SourceListing([], {"outside_root": 1})
        return SourceListing([root.name])
    if not root.is_dir():
        raise FileNotFoundError(f"source path does not exist or is not a directory: {root}")
    root_real = os.path.realpath(root)
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in PRUNED_DIRS)
        rel_dir = os.path.relpath(dirpath, root)
        prefix = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        for name in filenames:
            if name.startswith("."):
                continue
            rel = prefix + name
            if matches(rel, include) and not matches(rel, exclude):
                path = os.path.join(dirpath, name)
                if not follow_symlinks and os.path.islink(path) and not _inside(path, root_real):
                    skipped["outside_root"] += 1
                    continue
                found.append(rel)
    found.sort()
    return SourceListing(found, dict(skipped))


def source_root(path: Path) -> Path:
    """The directory `file` columns are relative to."""
    return path.parent if path.is_file() else path


def fingerprint_files(root: Path, files: list[str], cache_path: Path | None = None) -> tuple[str, int]:
    """(SHA-256 over (relative path, file SHA-256) pairs, total bytes): a content fingerprint.

    Per-file hashes are cached by (size, mtime_ns), so an unchanged tree is not re-read
    and touching a file without changing its bytes keeps the fingerprint.
    """
    cache: dict[str, list] = {}
    if cache_path is not None and cache_path.exists():
        try:
            cache = json.loads(cache_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            cache = {}
    new_cache: dict[str, list] = {}
    digest = hashlib.sha256()
    total = 0
    for rel in files:
        path = root / rel
        try:
            st = path.stat()
        except OSError:
            digest.update(f"{rel}\0unreadable\n".encode())
            continue
        key = [st.st_size, st.st_mtime_ns]
        total += st.st_size
        hit = cache.get(rel)
        if hit and hit[:2] == key:
            file_hash = hit[2]
        else:
            with open(path, "rb") as fh:
                file_hash = hashlib.file_digest(fh, "sha256").hexdigest()
        new_cache[rel] = [*key, file_hash]
        digest.update(f"{rel}\0{file_hash}\n".encode())
    if cache_path is not None and new_cache != cache:
        write_json(cache_path, new_cache)
    return digest.hexdigest(), total

"""Which files a source reads: one listing shared by ingestion and fingerprinting, on a
local path or an object store (`s3://bucket/prefix` through pyarrow.fs)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.fs as pafs

from albor_pipeline.core.artifacts import write_json

Location = Path | str
"""A local path, or an object-store URI: `s3://bucket/key` (credentials, region and endpoint
from the environment, as the AWS SDK reads them: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_DEFAULT_REGION, AWS_ENDPOINT_URL)."""


@lru_cache(maxsize=16)
def _filesystem(scheme_and_bucket: str) -> pafs.FileSystem:
    return pafs.FileSystem.from_uri(scheme_and_bucket)[0]


def remote(uri: str) -> tuple[pafs.FileSystem, str]:
    """(pyarrow filesystem, path in it) of an object-store URI; one filesystem per bucket."""
    scheme, _, rest = uri.partition("://")
    bucket = rest.split("/", 1)[0]
    return _filesystem(f"{scheme}://{bucket}"), rest.rstrip("/")


def join(root: Location, rel: str) -> Location:
    return root / rel if isinstance(root, Path) else f"{root.rstrip('/')}/{rel}"


def name_of(loc: Location) -> str:
    return loc.name if isinstance(loc, Path) else PurePosixPath(loc).name


def read_bytes(loc: Location) -> bytes:
    if isinstance(loc, Path):
        return loc.read_bytes()
    fs, path = remote(loc)
    with fs.open_input_stream(path) as fh:
        return bytes(fh.read())


def open_binary(loc: Location, compression: str | None = None) -> io.BufferedReader:
    """A buffered binary stream of `loc`, decompressed with `compression` (gzip, zstd)."""
    if isinstance(loc, Path):
        return open(loc, "rb") if compression is None else io.BufferedReader(pa.input_stream(str(loc), compression))
    fs, path = remote(loc)
    return io.BufferedReader(fs.open_input_stream(path, compression=compression))


def random_access(loc: Location) -> str | pafs.NativeFile:
    """What pyarrow's readers take for `loc` (a Parquet file needs random access)."""
    if isinstance(loc, Path):
        return str(loc)
    fs, path = remote(loc)
    return fs.open_input_file(path)


def _stat(loc: Location) -> tuple[int, int]:
    """(size, mtime_ns); OSError when it cannot be read."""
    if isinstance(loc, Path):
        st = loc.stat()
        return st.st_size, st.st_mtime_ns
    fs, path = remote(loc)
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.File:
        raise FileNotFoundError(loc)
    return int(info.size or 0), int(info.mtime_ns or 0)


def is_file(loc: Location) -> bool:
    if isinstance(loc, Path):
        return loc.is_file()
    fs, path = remote(loc)
    return bool(fs.get_file_info(path).type == pafs.FileType.File)


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
    sizes: list[int] = field(default_factory=list)  # bytes of each file, as listed


def _inside(path: str, root_real: str) -> bool:
    real = os.path.realpath(path)
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


def _list_remote(root: str, include: tuple[str, ...], exclude: tuple[str, ...]) -> SourceListing:
    """The object-store listing with the local rules: hidden and pruned names skipped."""
    fs, base = remote(root)
    if is_file(root):
        return SourceListing([PurePosixPath(base).name], sizes=[_stat(root)[0]])
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    if not infos and fs.get_file_info(base).type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"source path does not exist or is empty: {root}")
    found = []
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        rel = info.path[len(base) + 1 :]
        parts = rel.split("/")
        if any(p.startswith(".") for p in parts) or any(p in PRUNED_DIRS for p in parts[:-1]):
            continue
        if matches(rel, include) and not matches(rel, exclude):
            found.append((rel, int(info.size or 0)))
    found.sort()
    return SourceListing([rel for rel, _ in found], sizes=[size for _, size in found])


def list_source_files(
    root: Location, include: Iterable[str], exclude: Iterable[str] = (), follow_symlinks: bool = False
) -> SourceListing:
    """The files under `root` that match `include` and not `exclude`.

    Hidden files and directories, `__pycache__`, `node_modules` and virtualenvs are
    skipped; directory symlinks are not followed, so a symlink loop cannot recurse. A
    file symlink that resolves outside `root` is left out and counted (`outside_root`)
    unless `follow_symlinks`. `root` may also be a single file.
    """
    include, exclude = tuple(include), tuple(exclude)
    if not isinstance(root, Path):
        return _list_remote(root, include, exclude)
    skipped: Counter[str] = Counter()
    if root.is_file():
        parent = os.path.realpath(root.parent)
        if not follow_symlinks and root.is_symlink() and not _inside(str(root), parent):
            return SourceListing([], {"outside_root": 1})
        return SourceListing([root.name], sizes=[root.stat().st_size])
    if not root.is_dir():
        raise FileNotFoundError(f"source path does not exist or is not a directory: {root}")
    root_real = os.path.realpath(root)
    found: list[tuple[str, int]] = []
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
                try:
                    size = os.path.getsize(path)
                except OSError:  # a dangling symlink: ingestion reports it unreadable
                    size = 0
                found.append((rel, size))
    found.sort()
    return SourceListing([rel for rel, _ in found], dict(skipped), [size for _, size in found])


def source_root(path: Location) -> Location:
    """The directory `file` columns are relative to."""
    if not is_file(path):
        return path
    return path.parent if isinstance(path, Path) else path.rstrip("/").rsplit("/", 1)[0]


def fingerprint_files(root: Location, files: list[str], cache_path: Path | None = None) -> tuple[str, int]:
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
        path = join(root, rel)
        try:
            size, mtime_ns = _stat(path)
        except OSError:
            digest.update(f"{rel}\0unreadable\n".encode())
            continue
        key = [size, mtime_ns]
        total += size
        hit = cache.get(rel)
        if hit and hit[:2] == key:
            file_hash = hit[2]
        else:
            with open_binary(path) as fh:
                file_hash = hashlib.file_digest(fh, "sha256").hexdigest()
        new_cache[rel] = [*key, file_hash]
        digest.update(f"{rel}\0{file_hash}\n".encode())
    if cache_path is not None and new_cache != cache:
        write_json(cache_path, new_cache)
    return digest.hexdigest(), total

"""Which files a source reads: one listing shared by ingestion and fingerprinting, on a
local path or an object store (`s3://bucket/prefix` through pyarrow.fs)."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import re
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.fs as pafs

from albor_pipeline.runtime.artifacts import write_json
from albor_pipeline.runtime.watchdog import reading

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


class NotRegularFile(OSError):
    """A FIFO, socket or device where a file is read: never opened for reading (`open` of a
    FIFO blocks, a device never ends)."""


def skip_reason(exc: OSError) -> str:
    """The counted reason a file that raised `exc` when listed or opened is skipped."""
    if isinstance(exc, NotRegularFile):
        return "not_regular"
    return "symlink_loop" if exc.errno == errno.ELOOP else "unreadable"


def _regular(mode: int, path: str | Path) -> None:
    if not stat.S_ISREG(mode):
        raise NotRegularFile(errno.EINVAL, "not a regular file", str(path))


def open_regular(path: Path) -> io.BufferedReader:
    """`path` opened for reading, only if it is a regular file: checked before opening (opening
    a device can act on it), opened non-blocking (a FIFO would block `open`) and checked again
    on the open file, which may have been swapped in between. `NotRegularFile` otherwise."""
    _regular(os.stat(path).st_mode, path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        _regular(os.fstat(fd).st_mode, path)
        os.set_blocking(fd, True)
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(loc: Location, limit: int = -1) -> bytes:
    """The bytes of `loc`, at most `limit` of them when it is >= 0."""
    with open_binary(loc) as fh:
        return fh.read(limit)


def open_binary(loc: Location, compression: str | None = None) -> io.BufferedReader:
    """A buffered binary stream of `loc`, decompressed with `compression` (gzip, zstd)."""
    if isinstance(loc, Path):
        fh = open_regular(loc)
        return fh if compression is None else io.BufferedReader(pa.input_stream(fh, compression))
    fs, path = remote(loc)
    return io.BufferedReader(fs.open_input_stream(path, compression=compression))


def random_access(loc: Location) -> io.BufferedReader | pafs.NativeFile:
    """`loc` open for pyarrow's readers (a Parquet file needs random access); close it."""
    if isinstance(loc, Path):
        return open_regular(loc)
    fs, path = remote(loc)
    return fs.open_input_file(path)


def _os_stat(path: str) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _stat(loc: Location) -> list[int]:
    """[size, mtime_ns, ctime_ns, inode] (an object: [size, mtime_ns, 0, 0]); OSError when it
    cannot be read."""
    if isinstance(loc, Path):
        return _os_stat(str(loc))
    fs, path = remote(loc)
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.File:
        raise FileNotFoundError(loc)
    return [int(info.size or 0), int(info.mtime_ns or 0), 0, 0]


def is_file(loc: Location) -> bool:
    if isinstance(loc, Path):
        return loc.is_file()
    fs, path = remote(loc)
    return bool(fs.get_file_info(path).type == pafs.FileType.File)


# Directory names never descended into (besides hidden ones), as DESIGN §4 says.
PRUNED_DIRS = frozenset({"__pycache__", "node_modules", "venv", ".venv"})


def _glob_regex(pattern: str) -> str:
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
    return "".join(out) + r"\Z"


@lru_cache(maxsize=256)
def _globs_regex(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    """One regex matching what any of `patterns` matches (one `match` per path, not one per
    pattern: a 20k-file listing tests every path against include and exclude)."""
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{_glob_regex(p)})" for p in patterns), re.DOTALL)  # names may hold newlines


def matches(relpath: str, patterns: Iterable[str]) -> bool:
    regex = _globs_regex(tuple(patterns))
    return regex is not None and regex.match(relpath) is not None


@dataclass
class SourceListing:
    """The files a source reads (sorted POSIX paths relative to its root) and what was left out."""

    files: list[str]
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> files
    sizes: list[int] = field(default_factory=list)  # bytes of each file, as listed
    first: dict[str, str] = field(default_factory=dict)  # reason -> where it was first met, for the log
    stats: list[list[int]] = field(default_factory=list)  # a local file's `_stat` as listed (else none)


def _inside(path: str, root_real: str) -> bool:
    real = os.path.realpath(path)
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


def _list_remote(root: str, include: tuple[str, ...], exclude: tuple[str, ...]) -> SourceListing:
    """The object-store listing with the local rules: hidden and pruned names skipped."""
    with reading(root):
        return _listed_remote(root, include, exclude)


def _listed_remote(root: str, include: tuple[str, ...], exclude: tuple[str, ...]) -> SourceListing:
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


def _shown(path: str) -> str:
    """A path for messages: bytes that are not UTF-8 as `\\xNN`."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


@dataclass
class _Found:
    """A local listing as it is walked: (relative path, stat) of each file read, skips by reason."""

    root: str
    files: list[tuple[str, list[int]]] = field(default_factory=list)  # (relative path, `_stat`)
    skipped: Counter[str] = field(default_factory=Counter)
    first: dict[str, str] = field(default_factory=dict)

    def skip(self, reason: str, path: str) -> None:
        self.skipped[reason] += 1
        self.first.setdefault(reason, _shown(os.path.relpath(path, self.root)))

    def listing(self) -> SourceListing:
        self.files.sort()
        files, stats = [r for r, _ in self.files], [st for _, st in self.files]
        return SourceListing(files, dict(self.skipped), [st[0] for st in stats], self.first, stats)


def _add_file(found: _Found, path: str, rel: str, follow_symlinks: bool, root_real: str) -> None:
    """List `path` if ingestion may read it: a regular file (a FIFO blocks `open`, a device never
    ends), with a UTF-8 name (`file` values are text), inside the root unless `follow_symlinks`."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:  # os.walk's surrogate escapes: named with its bytes escaped
        found.skip("not_utf8_name", path)
        return
    try:
        st = os.lstat(path)  # one call for most files: a symlink alone is stat'ed again
        if stat.S_ISLNK(st.st_mode):
            if not follow_symlinks and not _inside(path, root_real):
                found.skip("outside_root", path)
                return
            st = os.stat(path)
        _regular(st.st_mode, path)
    except OSError as exc:
        found.skip(skip_reason(exc), path)
        return
    found.files.append((rel, [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]))


def list_source_files(
    root: Location, include: Iterable[str], exclude: Iterable[str] = (), follow_symlinks: bool = False
) -> SourceListing:
    """The files under `root` that match `include` and not `exclude`.

    Hidden files and directories, `__pycache__`, `node_modules` and virtualenvs are
    skipped; directory symlinks are not followed, so a symlink loop cannot recurse. Only
    regular files are listed, whatever `follow_symlinks` says; a file symlink that resolves
    outside `root` is left out unless `follow_symlinks`. What is left out is counted by
    reason (`not_regular`, `unreadable`, `symlink_loop`, `outside_root`, `not_utf8_name`,
    `unreadable_dir`). `root` may also be a single file.
    """
    include, exclude = tuple(include), tuple(exclude)
    if not isinstance(root, Path):
        return _list_remote(root, include, exclude)
    found = _Found(str(root.parent if root.is_file() else root))
    if root.is_file():  # a regular file, or a symlink to one
        _add_file(found, str(root), root.name, follow_symlinks, os.path.realpath(root.parent))
        return found.listing()
    if not root.is_dir():
        raise FileNotFoundError(f"source path does not exist or is not a directory or a file: {root}")
    root_real = os.path.realpath(root)

    def unreadable_dir(exc: OSError) -> None:
        found.skip("unreadable_dir", exc.filename or str(root))

    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable_dir):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in PRUNED_DIRS)
        rel_dir = os.path.relpath(dirpath, root)
        prefix = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        for name in sorted(filenames):  # the first skipped for a reason is the same every run
            rel = prefix + name
            if not name.startswith(".") and matches(rel, include) and not matches(rel, exclude):
                _add_file(found, os.path.join(dirpath, name), rel, follow_symlinks, root_real)
    return found.listing()


def source_root(path: Location) -> Location:
    """The directory `file` columns are relative to."""
    if not is_file(path):
        return path
    return path.parent if isinstance(path, Path) else path.rstrip("/").rsplit("/", 1)[0]


RACY_NS = 2_000_000_000  # a file changed this recently may change again unseen in the same tick


def fingerprint_files(
    root: Location, files: list[str], cache_path: Path | None = None, stats: list[list[int]] | None = None
) -> tuple[str, int]:
    """(SHA-256 over (relative path, file SHA-256) pairs, total bytes): a content fingerprint.
    `stats`: as `file_digests` takes them."""
    digests, total = file_digests(root, files, cache_path, stats=stats)
    return fingerprint_of(files, digests), total


def fingerprint_of(files: list[str], digests: dict[str, str]) -> str:
    """`fingerprint_files`' SHA-256 from the files' digests (`file_digests`)."""
    digest = hashlib.sha256()
    for rel in files:
        digest.update(f"{rel}\0{digests[rel]}\n".encode())
    return digest.hexdigest()


Hashes = tuple[dict[str, str], dict[str, str]]
"""({relative path: SHA-256}, {relative path: the reason ingestion skips it}) of files hashed."""


def hash_files(root: Location, files: Sequence[str]) -> Hashes:
    """Each file's SHA-256 (read whole), or why it could not be read."""
    hashed: dict[str, str] = {}
    failed: dict[str, str] = {}
    for rel in files:
        path = join(root, rel)
        try:
            with reading(path), open_binary(path) as fh:
                hashed[rel] = hashlib.file_digest(fh, "sha256").hexdigest()
        except OSError as exc:  # ingestion skips it for this reason too
            failed[rel] = skip_reason(exc)
    return hashed, failed


def file_digests(
    root: Location,
    files: list[str],
    cache_path: Path | None = None,
    hasher: Callable[[list[str]], Hashes] | None = None,
    stats: list[list[int]] | None = None,
) -> tuple[dict[str, str], int]:
    """({relative path: SHA-256, or the reason ingestion skips it}, total bytes).

    Per-file hashes are cached by (size, mtime, ctime, inode), as git's index does: an
    unchanged tree is not re-read, touching a file keeps the fingerprint, and an edit whose
    mtime is restored (`rsync -t`, an archive) still changes ctime. A file changed in the
    last RACY_NS is hashed but not cached, since an edit in the same clock tick looks alike.
    `hasher` hashes the files the cache does not hold (default: `hash_files` here; ingestion
    spreads them over its workers). `stats`: the files' `_stat`s as their listing took them
    (`SourceListing.stats`), so they are not taken twice.
    """
    cache: dict[str, list] = {}
    if cache_path is not None and cache_path.exists():
        try:
            cache = json.loads(cache_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            cache = {}
    keys: dict[str, list[int]] = {}
    digests: dict[str, str] = {}
    misses: list[str] = []
    local = os.path.join(str(root), "") if isinstance(root, Path) else None  # 20k Path objects cost 0.2 s
    listed = dict(zip(files, stats, strict=True)) if stats else {}
    for rel in files:
        try:
            keys[rel] = listed.get(rel) or (_os_stat(local + rel) if local is not None else _stat(join(root, rel)))
        except OSError as exc:  # ingestion skips it for this reason too
            digests[rel] = skip_reason(exc)
            continue
        hit = cache.get(rel)
        if hit and hit[:-1] == keys[rel]:
            digests[rel] = hit[-1]
        else:
            misses.append(rel)
    hashed, failed = (hasher or partial(hash_files, root))(misses) if misses else ({}, {})
    digests.update(failed)
    digests.update(hashed)
    now = time.time_ns()
    new_cache: dict[str, list] = {}
    for rel, key in keys.items():
        if rel in failed:
            continue
        hit = cache.get(rel)
        if hit is not None and hit[:-1] == key and hit[-1] == digests[rel]:
            new_cache[rel] = hit
        elif now - max(key[1], key[2]) >= RACY_NS:
            new_cache[rel] = [*key, digests[rel]]
    if cache_path is not None and (
        len(new_cache) != len(cache) or any(cache.get(r) is not v for r, v in new_cache.items())
    ):
        write_json(cache_path, new_cache, compact=True)
    return {rel: digests[rel] for rel in files}, sum(key[0] for rel, key in keys.items() if rel not in failed)

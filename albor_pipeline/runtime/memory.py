"""Handing freed memory back to the system.

Arrow's memory pool and glibc's malloc keep memory a step freed, for reuse. A pool worker
lives as long as its run, and the run's process runs every stage: what each keeps adds up
to a peak no single step needs. After each stage in the run's process, and after a worker's
task once the worker has grown by `GROWN_BYTES`, `release_memory` returns it.
"""

from __future__ import annotations

import ctypes
import gc
import os

import pyarrow as pa

try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL("libc.so.6")
except OSError:  # not glibc: nothing to trim
    _LIBC = None


def release_memory() -> None:
    """Return the memory Arrow's pool and malloc hold unused (a few ms)."""
    pa.default_memory_pool().release_unused()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


GROWN_BYTES = 64 << 20
"""How much a worker's resident memory grows before its next task's end hands memory back:
a trim walks the heap (a few ms), which small tasks (a reused one, a row group's) need not pay."""
_TRIMMED_AT = [0]  # resident bytes after this process's last trim
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):  # not Linux: always trim
        return _TRIMMED_AT[0] + GROWN_BYTES


def release_memory_if_grown() -> None:
    """`release_memory` when this process has grown by `GROWN_BYTES` since it last did."""
    if _resident_bytes() - _TRIMMED_AT[0] >= GROWN_BYTES:
        release_memory()
        _TRIMMED_AT[0] = _resident_bytes()


GC_THRESHOLDS = (50_000, 20, 20)
"""Cyclic garbage collected every 50,000 net allocations rather than CPython's 700. A run's
process holds millions of objects (Dagster's definitions, events and caches) that each full
collection walks, and a stage makes objects by the million (Arrow to Python, JSON): with the
defaults, the default spec's cold build spent 1.5 s of its run process in collections
(`gc.callbacks`), 0.3 s with these. Memory held by unreachable cycles meanwhile stays small."""


def collect_less() -> None:
    """`GC_THRESHOLDS` for this process: the run's (its code location's import) and the fork
    server's, which its workers inherit."""
    gc.set_threshold(*GC_THRESHOLDS)

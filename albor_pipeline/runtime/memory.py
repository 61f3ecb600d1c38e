"""Handing freed memory back to the system.

Arrow's memory pool and glibc's malloc keep memory a step freed, for reuse. A pool worker
lives as long as its run, and the run's process runs every stage: what each keeps adds up
to a peak no single step needs. After each task in a worker and each stage in the run's
process, `release_memory` returns it.
"""

from __future__ import annotations

import ctypes

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

"""One run per data dir: an advisory lock held for a run's whole lifetime.

`fcntl.flock` on the data dir's lock file: the OS releases it when the holding process
exits, however it dies, so a killed run never blocks the next one. While held, the
file names its holder (pid, run id), which a second run shows while it waits or fails.
Whoever takes the lock removes the temp files of runs that died: no writer is alive.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from albor_pipeline.core.artifacts import remove_temps
from albor_pipeline.core.layout import Layout
from albor_pipeline.core.stage import Progress


class DataDirBusy(RuntimeError):
    """Another live run holds the data dir (and `on_busy` is `fail`)."""


def _holder(fd: int) -> str:
    text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    return text or "another process (no holder recorded yet)"


@contextmanager
def exclusive(path: Path, holder: str, wait: bool = True, log: Progress = print) -> Iterator[None]:
    """Hold an flock on `path` for the block, recording `holder` in it while held.

    `wait`: block until the current holder is done (logging who it is), else raise `DataDirBusy`.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = _holder(fd)
            if not wait:
                raise DataDirBusy(
                    f"data dir {path.parent} is in use by {other}; one run per data dir "
                    "(set locking.on_busy: wait to queue behind it)"
                ) from None
            log(f"waiting for data dir {path.parent}: in use by {other}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode(), 0)
        yield
    finally:
        # The holder text stays until the next holder overwrites it: a run that finds the
        # lock taken at the moment of a hand-over still reads a name, not an empty file.
        os.close(fd)  # releases the lock


@contextmanager
def data_dir_lock(layout: Layout, holder: str, wait: bool = True, log: Progress = print) -> Iterator[list[Path]]:
    """Hold `layout`'s data dir for the block; yields the dead runs' temp paths it removed."""
    with exclusive(layout.lock_file, holder, wait, log):
        yield remove_temps(layout.root)

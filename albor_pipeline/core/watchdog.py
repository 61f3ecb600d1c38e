"""A time limit per stage, so a hung stage fails (naming what it was on) instead of holding
the data dir's lock forever.

The limit is SIGALRM in the step's process: a read blocked on a FIFO or spinning on a device
is interrupted there, the stage raises `StageTimeout`, its commit is undone, and the run
releases the lock. Readers note the file they are on (`reading`) and executors the tasks in
flight (`in_flight`), so the error says where it hung.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

_READING: list[str] = []  # the file this process is reading, innermost last
_IN_FLIGHT: list[Callable[[], list[str]]] = []  # the tasks this process waits for, oldest first


class StageTimeout(RuntimeError):
    """A stage ran past its time limit; the message names the stage and what it was on."""


@contextmanager
def reading(path: str | Path) -> Iterator[None]:
    """Note that this process is reading `path` (for a time-out's message)."""
    _READING.append(str(path))
    try:
        yield
    finally:
        _READING.pop()


@contextmanager
def in_flight(tasks: Callable[[], list[str]]) -> Iterator[None]:
    """Note the tasks an executor waits for during the block (described only on a time-out)."""
    _IN_FLIGHT.append(tasks)
    try:
        yield
    finally:
        _IN_FLIGHT.remove(tasks)


def _where() -> str:
    if _READING:
        return f" while reading {_READING[-1]}"
    tasks = [task for described in _IN_FLIGHT for task in described()]
    if tasks:
        more = f" and {len(tasks) - 1} more" if len(tasks) > 1 else ""
        return f" waiting for task {tasks[0]}{more}"
    return ""


@contextmanager
def time_limit(seconds: float | None, stage: str) -> Iterator[None]:
    """Raise `StageTimeout` in this thread after `seconds` (None: no limit). Only the main
    thread receives signals: elsewhere the block runs unlimited (Dagster runs a step's op in
    its process's main thread)."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(_signum: int, _frame: FrameType | None) -> None:
        raise StageTimeout(
            f"stage {stage} exceeded its time limit of {seconds:g} s{_where()} "
            "(execution.stage_timeout_s); its outputs were left as they were"
        )

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

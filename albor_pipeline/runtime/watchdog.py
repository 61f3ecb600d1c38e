"""A time limit per stage, so a hung stage fails (naming what it was on) instead of holding
the data dir's lock forever.

The limit is SIGALRM in the step's process: a read blocked on a FIFO or spinning on a device
is interrupted there, the stage raises `StageTimeout`, its commit is undone, and the run
releases the lock. Readers note the file they are on (`reading`) and executors the tasks in
flight (`in_flight`), so the error says where it hung.

A run's helper processes (pool workers, the fork server) watch the run (`exit_with`): a
SIGKILLed run cannot stop them itself. A run watches the processes it cannot do without
(`watch_processes`: a local Ray's), so their death is named, not silent.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType

_READING: dict[int, str] = {}  # thread -> the file it is reading
_IN_FLIGHT: list[Callable[[], list[str]]] = []  # the tasks this process waits for, oldest first


class StageTimeout(RuntimeError):
    """A stage ran past its time limit; the message names the stage and what it was on."""


@contextmanager
def reading(path: str | Path) -> Iterator[None]:
    """Note that this thread is reading `path` (for a time-out's message)."""
    thread = threading.get_ident()
    outer = _READING.get(thread)
    _READING[thread] = str(path)
    try:
        yield
    finally:
        if outer is None:
            del _READING[thread]
        else:
            _READING[thread] = outer


@contextmanager
def in_flight(tasks: Callable[[], list[str]]) -> Iterator[None]:
    """Note the tasks an executor waits for during the block (described only on a time-out)."""
    _IN_FLIGHT.append(tasks)
    try:
        yield
    finally:
        _IN_FLIGHT.remove(tasks)


def _where() -> str:
    files = sorted(_READING.values())
    if files:
        return f" while reading {files[0]}"
    tasks = [task for described in _IN_FLIGHT for task in described()]
    if tasks:
        more = f" and {len(tasks) - 1} more" if len(tasks) > 1 else ""
        return f" waiting for task {tasks[0]}{more}"
    return ""


GRACE_S = 10.0
"""How long a stage past its limit may take to unwind before its process is ended."""
EXIT_TIMEOUT = 124  # as timeout(1): the process was ended at its time limit
LOG_WAIT_S = 2.0  # how long the hard limit waits for its message to reach the step's log


@contextmanager
def time_limit(seconds: float | None, stage: str, log: Callable[[str], object] = print) -> Iterator[None]:
    """Fail the block after `seconds` (None: no limit), naming `stage` and what it was on.

    At the limit, SIGALRM raises `StageTimeout` in this thread: a Python-level wait (a FIFO,
    a pool task) unwinds, undoing the stage's commit. A wait inside native code (an S3 call
    to a server that never answers) cannot be interrupted: if the block has not returned
    `GRACE_S` later, the error goes to `log` and stderr and the process ends (exit 124), which
    releases the data dir's lock; the next lock holder undoes the commit. Only the main thread
    receives signals, so elsewhere only the second, hard limit applies.
    """
    if not seconds:
        yield
        return

    def message() -> str:
        return (
            f"stage {stage} exceeded its time limit of {seconds:g} s{_where()} "
            "(execution.stage_timeout_s); the data dir keeps each stage's last commit"
        )

    def expired(_signum: int, _frame: FrameType | None) -> None:
        raise StageTimeout(message())

    def hard() -> None:
        text = f"{message()}; ending the process, stuck in native code for {GRACE_S:g} s more"
        print(f"albor: {text}", file=sys.stderr, flush=True)
        logging = threading.Thread(target=log, args=(text,), daemon=True)  # the log may block (a hung database)
        logging.start()
        logging.join(LOG_WAIT_S)
        os._exit(EXIT_TIMEOUT)

    timer = threading.Timer(seconds + GRACE_S, hard)
    timer.daemon = True
    timer.start()
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGALRM, expired) if main else None
    if main:
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        timer.cancel()
        if main:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def exit_with(run: int, started: str | None, every: float) -> None:
    """End this process (exit 1) within `every` seconds of process `run` (started at `started`)
    ending, however it ends: a thread looks every `every` seconds."""

    def watch() -> None:
        while start_time(run) == started if started is not None else _exists(run):
            time.sleep(every)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-run", daemon=True).start()


def start_time(pid: int) -> str | None:
    """When process `pid` started (`/proc/<pid>/stat`'s 22nd field: a reused pid differs), or
    None when it has exited (gone, or a zombie nobody reaped) or there is no `/proc`."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


def _exists(pid: int) -> bool:
    """Whether process `pid` exists, where there is no `/proc` to tell a zombie or a reused pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch_processes(processes: dict[int, str], on_exit: Callable[[str], None]) -> Callable[[], None]:
    """Call `on_exit("<name> (pid N)")` from a thread the moment the first of `processes`
    (pid -> name) exits; returns what stops the watch (before they are ended on purpose).

    Through pidfds (Linux 5.3+), which wake a poll as the process exits: a local Ray's raylet
    takes the run process down with it within a second, and the name must be out first.
    Where there are none, nothing is watched."""
    if not hasattr(os, "pidfd_open"):
        return lambda: None
    stop_r, stop_w = os.pipe()
    names: dict[int, str] = {}  # pidfd -> "<name> (pid N)"
    for pid, name in processes.items():
        with suppress(OSError):  # gone already, or no pidfds in this kernel
            names[os.pidfd_open(pid)] = f"{name} (pid {pid})"

    def watch() -> None:
        poller = select.poll()
        for fd in (stop_r, *names):
            poller.register(fd, select.POLLIN)
        ready = [fd for fd, _ in poller.poll()]
        if stop_r not in ready:
            on_exit(names[ready[0]])

    thread = threading.Thread(target=watch, name="watch-processes", daemon=True)
    thread.start()

    once = threading.Lock()  # taken by the first stop, never released

    def stop() -> None:
        """Idempotent: a second call must not write to, or close, fds closed (maybe reused) by the first."""
        if not once.acquire(blocking=False):
            return
        os.write(stop_w, b"x")
        thread.join()
        for fd in (stop_r, stop_w, *names):
            os.close(fd)

    return stop

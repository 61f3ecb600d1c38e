"""One run per data dir: an advisory lock held for a run's whole lifetime.

`fcntl.flock` on the data dir's lock file and on the data dir itself (the file can be
deleted while held): the OS releases them when the holding process exits, however it dies,
so a killed run never blocks the next one. While held, the file names its holder (pid,
run id), which a second run shows while it waits or fails.
Whoever takes the lock finishes or undoes the commits of runs that died, then removes
their temp files: no writer is alive.

A data dir in a bucket is locked in the bucket itself (`bucket_lock`), so runs on
different machines, each with its own working copy, also take it one at a time.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

from albor_pipeline.runtime.artifacts import remove_temps
from albor_pipeline.runtime.commit import recover_commits
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.stagerun import Progress


class DataDirBusy(RuntimeError):
    """Another live run holds the data dir (and `on_busy` is `fail`); `holder` names it."""

    def __init__(self, message: str, holder: str = "another run") -> None:
        super().__init__(message)
        self.holder = holder


def _holder(fd: int) -> str:
    text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    return text or "another process (no holder recorded yet)"


def _flock(fd: int, named: int, path: Path, wait: bool, log: Progress) -> None:
    """flock `fd`; when it is taken, `wait` (logging the holder recorded in `named`) or raise."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = _holder(named)
        if not wait:
            raise DataDirBusy(
                f"data dir {path.parent} is in use by {other}; one run per data dir "
                "(set locking.on_busy: wait to queue behind it)",
                other,
            ) from None
        log(f"waiting for data dir {path.parent}: in use by {other}")
        fcntl.flock(fd, fcntl.LOCK_EX)


def _is_at(fd: int, path: Path) -> bool:
    """Whether the open file `fd` is still the one at `path` (not deleted, not replaced)."""
    try:
        at = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (at.st_dev, at.st_ino)


@contextmanager
def exclusive(path: Path, holder: str, wait: bool = True, log: Progress = print) -> Iterator[None]:
    """Hold an flock on `path` for the block, recording `holder` in it while held.

    `wait`: block until the current holder is done (logging who it is), else raise `DataDirBusy`.
    The lock is on `path`'s directory too: a file can be deleted while held, and the next
    run's open would create a new one that nobody holds. The file's own lock is what reaches
    other machines on a network filesystem; a file deleted or replaced while this waited
    for it is opened again, so the lock held is always the one at `path`.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    directory = os.open(path.parent, os.O_RDONLY)
    fd = -1
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        _flock(directory, fd, path, wait, log)
        _flock(fd, fd, path, wait, log)
        while not _is_at(fd, path):
            os.close(fd)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            _flock(fd, fd, path, wait, log)
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode(), 0)
        yield
    finally:
        # The holder text stays until the next holder overwrites it: a run that finds the
        # lock taken at the moment of a hand-over still reads a name, not an empty file.
        if fd >= 0:
            os.close(fd)  # closing releases a lock
        os.close(directory)


@contextmanager
def data_dir_lock(layout: Layout, holder: str, wait: bool = True, log: Progress = print) -> Iterator[list[Path]]:
    """Hold `layout`'s data dir for the block; yields the dead runs' temp paths it removed,
    after finishing or undoing the commits they left (`runtime/commit.py`)."""
    with exclusive(layout.lock_file, holder, wait, log):
        for line in recover_commits(layout.root, layout.pending_commits()):
            log(f"a run that died mid-commit: {line}")
        yield remove_temps(layout.root)


LEASE_SECONDS = 120.0
"""How long a bucket lock lasts unless its holder renews it (every quarter of that)."""
POLL_SECONDS = 5.0


@dataclass
class BucketLease:
    """A held bucket lock: its object's current ETag, renewed by a thread; `lost` if renewing
    found someone else's lock there (this run stalled past the lease and was taken over)."""

    key: str
    etag: str
    lease: float
    renewed: float = field(default_factory=time.monotonic)  # the last write that kept it ours
    lost: str | None = None
    stop: threading.Event = field(default_factory=threading.Event)

    def check(self) -> None:
        """Raise unless the lease is surely still ours: called before a manifest (a commit) is
        written. Renewals that failed for a whole lease (the bucket unreachable) may have let
        another run take it without this one hearing of it, so that counts as lost too."""
        if self.lost:
            raise DataDirLost(self.lost)
        idle = time.monotonic() - self.renewed
        if idle > self.lease:
            raise DataDirLost(f"this run could not renew its lock for {idle:.0f} s; not committing")


class DataDirLost(RuntimeError):
    """This run's bucket lock expired and another run took the data dir: it must not commit."""


def _s3() -> Any:
    try:
        import boto3
    except ImportError:
        raise RuntimeError(
            "a data dir in a bucket is locked through S3 conditional writes: pip install 'albor-pipeline[s3]' (boto3)"
        ) from None
    return boto3.client("s3")  # credentials, region and AWS_ENDPOINT_URL from the environment


def _refused(exc: Exception) -> bool:
    """S3's answer to a failed condition (412), or to a concurrent conditional write (409)."""
    status = getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status in (409, 412)


@contextmanager
def bucket_lock(
    uri: str,
    holder: str,
    wait: bool = True,
    log: Progress = print,
    lease: float = LEASE_SECONDS,
    busy: str = "one run per data dir (set locking.on_busy: wait to queue behind it)",
) -> Iterator[BucketLease]:
    """Hold the lock object `<uri>/.albor.lock` for the block, so runs on any machines take a
    bucket data dir one at a time.

    S3 has no flock, so the lock is a lease: created only if absent (`If-None-Match: *`),
    renewed by its holder every `lease / 4` seconds (`If-Match` its ETag), deleted at the
    end. A run that died leaves it, and it is stale once the bucket's own clock shows it
    unrenewed for `lease` seconds (no two machines' clocks are compared); the next run
    takes it over with one conditional write, so two runs can never both take it.
    `busy`: what the error says to do when the lock is taken and `wait` is off.
    """
    bucket, _, prefix = uri.partition("://")[2].partition("/")
    key = f"{prefix.rstrip('/')}/.albor.lock".lstrip("/")
    s3 = _s3()
    told = False
    while True:
        body = json.dumps({"holder": holder, "lease_s": lease, "token": uuid.uuid4().hex}).encode()
        try:
            etag = s3.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")["ETag"]
            break
        except Exception as exc:
            if not _refused(exc):
                raise
        try:
            current = s3.get_object(Bucket=bucket, Key=key)
        except s3.exceptions.NoSuchKey:
            continue  # released meanwhile
        other = json.loads(current["Body"].read())
        now = parsedate_to_datetime(current["ResponseMetadata"]["HTTPHeaders"]["date"])
        idle = (now - current["LastModified"]).total_seconds()
        if idle > float(other.get("lease_s", lease)):
            try:
                etag = s3.put_object(Bucket=bucket, Key=key, Body=body, IfMatch=current["ETag"])["ETag"]
            except Exception as exc:
                if not _refused(exc):
                    raise
                continue  # another run took it first
            log(f"data dir {uri}: took over the lock of {other['holder']}, unrenewed for {idle:.0f} s (that run died)")
            break
        if not wait:
            raise DataDirBusy(f"data dir {uri} is in use by {other['holder']}; {busy}")
        if not told:
            log(f"waiting for data dir {uri}: in use by {other['holder']}")
            told = True
        time.sleep(POLL_SECONDS)

    held = BucketLease(key, etag, lease)

    def renew() -> None:
        while not held.stop.wait(lease / 4):
            body = json.dumps({"holder": holder, "lease_s": lease, "token": uuid.uuid4().hex}).encode()
            try:
                held.etag = s3.put_object(Bucket=bucket, Key=key, Body=body, IfMatch=held.etag)["ETag"]
                held.renewed = time.monotonic()
            except Exception as exc:
                if _refused(exc) or "NoSuchKey" in str(exc):
                    held.lost = f"data dir {uri}: this run's lock expired and another run took it; not committing"
                    log(held.lost)
                    return
                # a transient error: retry at the next beat, well within the lease

    beat = threading.Thread(target=renew, name="bucket-lock", daemon=True)
    beat.start()
    try:
        yield held
    finally:
        held.stop.set()
        beat.join()
        if not held.lost:
            with suppress(Exception):  # not ours any more, or unreachable: it goes stale
                s3.delete_object(Bucket=bucket, Key=key, IfMatch=held.etag)

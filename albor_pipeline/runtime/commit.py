"""A stage's commit, atomic with its manifest: a rollback journal over the final names it replaces.

A stage writes each output under a temp name, then puts it in place. Outside a stage that is
one rename. Inside a stage (`run_stage`), the stage's journal records each replacement
before making it, and keeps the replaced bytes under a backup name. The journal is then
sealed with the SHA-256 of the manifest about to be written, and the manifest lands. So
at any kill:
- the manifest on disk equals the seal: the commit happened; roll forward (drop backups);
- it does not: roll back (put every backup in place, remove names that were new).

Both are done by `recover`: the stage itself on an error, the next holder of the data dir's
lock, and `albor verify`. A directory is swapped with `renameat2(RENAME_EXCHANGE)`, so a
reader of the final name sees the whole old set or the whole new set, never a gap. Where
the filesystem cannot exchange, two renames leave a short gap, which the journal still covers.
Backups are not temp names: removing a dead run's temps never removes committed data.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import shutil
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

FAULT_ENV = "ALBOR_FAULT"
"""`point[:N][@stage]`: SIGKILL this process at the N-th pass through `fault(point)` (in
`stage`'s commit only, with `@stage`). For the kill tests; unset, the hook does nothing."""

TEMP_SUFFIX = ".tmp"
BACKUP_SUFFIX = ".albor-old"
_HITS: Counter[str] = Counter()
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_LIBC = ctypes.CDLL(None, use_errno=True)


def fault(point: str, stage: str = "") -> None:
    """Die here when `ALBOR_FAULT` names this point: the kill-at-every-step tests' hook."""
    wanted = os.environ.get(FAULT_ENV)
    if not wanted:
        return
    wanted, _, where = wanted.partition("@")
    name, _, nth = wanted.partition(":")
    if name == point and where in ("", stage):
        _HITS[point] += 1
        if _HITS[point] >= int(nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def exchange(a: Path, b: Path) -> bool:
    """Swap two names atomically (files or directories); False where the filesystem cannot."""
    renameat2 = getattr(_LIBC, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def remove(path: Path) -> None:
    """Remove a file or a whole directory, if there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def swap_in(staged: Path, final: Path) -> None:
    """`staged` becomes `final` (replacing it) with no moment where `final` is missing; the
    old bytes end up under `staged`, for the caller to keep or remove."""
    if final.exists() or final.is_symlink():
        if not exchange(staged, final):
            aside = final.with_name(f".{final.name}.{os.getpid()}.aside{TEMP_SUFFIX}")
            os.rename(final, aside)
            os.rename(staged, final)
            os.rename(aside, staged)
    else:
        os.rename(staged, final)


def backup_of(final: Path) -> Path:
    return final.with_name(f".{final.name}{BACKUP_SUFFIX}")


def _in_temp(path: Path, root: Path) -> bool:
    """Whether `path` lies inside a temp directory (a staging dir): not a final name."""
    parts = path.relative_to(root).parts[:-1]
    return any(p.startswith(".") and p.endswith(TEMP_SUFFIX) for p in parts)


@dataclass
class Journal:
    """One stage's commit record under the data dir `root` (see the module docstring)."""

    stage: str
    path: Path
    root: Path
    manifest: Path
    finals: set[str]

    @classmethod
    def open(cls, stage: str, path: Path, root: Path, manifest: Path) -> Journal:
        """A new journal; one a dead run left under this name is recovered first."""
        if path.exists():
            recover_journal(path, root, manifest)
        return cls(stage, path, root, manifest, set())

    def _append(self, entry: dict[str, object]) -> None:
        new = not self.path.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if new:
            fsync_dir(self.path.parent)

    def covers(self, final: Path) -> bool:
        return final.is_relative_to(self.root) and not _in_temp(final, self.root)

    def replace(self, staged: Path, final: Path) -> None:
        """Put `staged` at `final`, keeping what `final` held until the manifest lands."""
        rel = final.relative_to(self.root).as_posix()
        if rel in self.finals:  # replaced twice in one stage: the first backup stays the old bytes
            swap_in(staged, final)
            remove(staged)
            return
        existed = final.exists() or final.is_symlink()
        backup = backup_of(final)
        remove(backup)  # a leftover no journal names (recovery ran when the lock was taken)
        self._append(
            {
                "final": rel,
                "staged": staged.name,
                "backup": backup.name if existed else None,
                "old_ino": os.lstat(final).st_ino if existed else None,  # where the committed bytes are
            }
        )
        self.finals.add(rel)
        fault("commit-journaled", self.stage)
        if not existed:
            os.rename(staged, final)
        elif exchange(staged, final):
            fault("commit-swapped", self.stage)
            os.rename(staged, backup)
        else:  # no exchange here: the old set goes to its backup name first (a moment without the name)
            os.rename(final, backup)
            fault("commit-swapped", self.stage)
            os.rename(staged, final)
        fsync_dir(final.parent)
        fault("commit-backed-up", self.stage)
        if existed:
            fault("commit-replaced", self.stage)  # the same, past a new name (a kept version's facts)

    def seal(self, manifest: bytes) -> None:
        """Name the manifest that commits this stage; from here a kill rolls forward once it lands."""
        if self.finals:
            self._append({"manifest": hashlib.sha256(manifest).hexdigest()})
            fault("commit-sealed", self.stage)

    def finish(self) -> None:
        """The manifest landed: drop the backups, then the journal."""
        if self.path.exists():
            fault("commit-manifest-written", self.stage)
            recover_journal(self.path, self.root, self.manifest)


def _entries(path: Path) -> list[dict[str, object]]:
    """The journal's complete lines (a torn last line was never acted on)."""
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return entries


def journal_finals(path: Path) -> list[str]:
    """The final names (relative to the data dir) a pending commit is replacing."""
    try:
        return [str(e["final"]) for e in _entries(path) if "final" in e]
    except FileNotFoundError:  # finished meanwhile
        return []


def _ino(path: Path) -> int | None:
    try:
        return os.lstat(path).st_ino
    except FileNotFoundError:
        return None


def _roll_back(root: Path, entry: dict[str, object]) -> None:
    """Undo one replacement, whichever step it (or an earlier, interrupted roll-back) reached:
    the committed bytes are found by their inode, put back under the final name, and the other
    names holding this stage's bytes removed. Safe to repeat at any point."""
    final = root / str(entry["final"])
    if entry["backup"] is None:  # the name was new: whatever is there is this stage's
        remove(final)
        return
    names = [final.with_name(str(entry[key])) for key in ("backup", "staged")]
    old_ino = entry.get("old_ino")
    old = next((p for p in names if _ino(p) == old_ino), None)
    if old is not None:  # not yet back under the final name
        if not (final.exists() or final.is_symlink()):
            os.rename(old, final)
        elif exchange(old, final):
            pass  # `old` now holds this stage's bytes, removed below
        else:
            remove(final)
            os.rename(old, final)
        fsync_dir(final.parent)
        fault("commit-rolled-back")
    if _ino(final) == old_ino:
        for name in names:
            remove(name)


def recover_journal(path: Path, root: Path, manifest: Path) -> str:
    """Roll one stage's journal forward or back (see the module docstring); what was done."""
    entries = _entries(path)
    seal = next((e["manifest"] for e in entries if "manifest" in e), None)
    replaced = [e for e in entries if "final" in e]
    landed = manifest.is_file() and hashlib.sha256(manifest.read_bytes()).hexdigest() == seal
    for entry in reversed(replaced):
        if landed:
            if entry["backup"] is not None:
                remove((root / str(entry["final"])).with_name(str(entry["backup"])))
        else:
            _roll_back(root, entry)
    path.unlink()
    fsync_dir(path.parent)
    return f"{'rolled forward' if landed else 'rolled back'} {len(replaced)} output(s)"


def recover_commits(root: Path, pending: list[tuple[str, Path, Path]]) -> list[str]:
    """Finish or undo every commit a dead run left (`Layout.pending_commits`); only while
    holding the data dir's lock, before its temps are removed. A line per stage."""
    return [f"{stage}: {recover_journal(journal, root, manifest)}" for stage, journal, manifest in pending]


_ACTIVE: Journal | None = None
_ACTIVE_LOCK = threading.Lock()


@contextmanager
def journaled(journal: Journal) -> Iterator[None]:
    """Route this process's final-name replacements under `journal.root` through `journal`."""
    global _ACTIVE
    with _ACTIVE_LOCK:
        _ACTIVE = journal
    try:
        yield
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE = None


def put_in_place(staged: Path, final: Path) -> None:
    """`staged` becomes `final`: through the active stage's journal when `final` is one of
    its final names, else directly (the replaced bytes are removed)."""
    journal = _ACTIVE
    if journal is not None and journal.covers(final):
        journal.replace(staged, final)
        return
    if staged.is_dir():
        swap_in(staged, final)
        remove(staged)
    else:
        os.replace(staged, final)
    fsync_dir(final.parent)

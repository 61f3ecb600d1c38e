"""What this code is: the libraries its output bytes depend on and one hash over them and
every module of the package. The task store names a task's code with it, Dagster shows it as
every asset's code version and provenance lists the same libraries, so the three never
disagree about what changed."""

from __future__ import annotations

import hashlib
import re
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

# Beside the package's own dependencies: the package itself (provenance names its version).
EXTRA_LIBRARIES = ("albor-pipeline",)


def libraries() -> list[str]:
    """This package's own dependencies (not its extras): the libraries its output bytes may
    depend on (an upgrade of the secret detectors changes what is redacted, of pyarrow what a
    shard's bytes are, of matplotlib what a chart is)."""
    try:
        required = metadata.requires("albor-pipeline") or []
    except metadata.PackageNotFoundError:
        required = []
    names = {re.split(r"[<>=!~; \[]", req, maxsplit=1)[0] for req in required if "extra ==" not in req}
    return sorted(names | set(EXTRA_LIBRARIES))


def library_versions() -> dict[str, str]:
    """Each of `libraries()` with its installed version ("not installed" where it is not):
    read once per process, as `CODE_VERSION` is (every stage's metadata shows them)."""
    return dict(_installed())


@lru_cache(maxsize=1)
def _installed() -> tuple[tuple[str, str], ...]:
    versions = []
    for lib in libraries():
        try:
            versions.append((lib, metadata.version(lib)))
        except metadata.PackageNotFoundError:
            versions.append((lib, "not installed"))
    return tuple(versions)


def code_version() -> str:
    """SHA-256 over the interpreter's version, every module of this package and the versions of
    `libraries()`: any change to them is new code."""
    digest = hashlib.sha256(sys.version.encode())
    package = Path(__file__).resolve().parents[1]
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    for lib, version in library_versions().items():
        digest.update(f"{lib}={'-' if version == 'not installed' else version}\n".encode())
    return digest.hexdigest()


CODE_VERSION = code_version()
"""Taken when the package is imported, as its modules are: an edit during a run makes no
task entry under the new code's identity from the old code's work."""

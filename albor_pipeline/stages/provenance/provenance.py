"""PROVENANCE.md over every artifact, and its verification.

`provenance.json` (`summaries/provenance.py`) lists each artifact (path relative to the
output root, SHA-256, bytes, rows, producing stage) plus each stage's config and inputs;
`PROVENANCE.md` says the same for people, with full hashes: each stage's section, then every
artifact. `verify` re-hashes every listed file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from albor_pipeline.runtime.artifacts import TEMP_SUFFIX, StageManifest, iter_manifests, sha256_file
from albor_pipeline.runtime.bucket import IO_THREADS, Bucket
from albor_pipeline.runtime.commit import BACKUP_SUFFIX, journal_finals
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.report import table
from albor_pipeline.summaries.provenance import Built, Section


def _artifacts(built: Built) -> list[str]:
    rows = [
        [f"`{a['path']}`", f"`{a['sha256']}`", a["bytes"], a["rows"] if a["rows"] is not None else "", a["stage"]]
        for a in built.artifacts
    ]
    return ["## Artifacts", "", *table(["path", "sha256", "bytes", "rows", "stage"], rows)]


def _versions(built: Built) -> list[str]:
    return ["## Library versions", "", *table(["library", "version"], [[k, v] for k, v in built.versions.items()])]


HEADER = [
    "# Provenance",
    "",
    "Every artifact of the last complete build with its full SHA-256. `albor verify` re-checks "
    "them and lists any stage rebuilt since (stale here).",
    "",
]


def render_markdown(prov: dict[str, Any], sections: Sequence[Section]) -> str:
    """PROVENANCE.md: the stages' `sections` in graph order, then every artifact and the library versions."""
    built = Built.of(prov)
    return "\n".join([*HEADER, *(line for section in (*sections, _artifacts, _versions) for line in section(built))])


@dataclass
class VerifyRow:
    path: str
    expected: str
    actual: str | None  # None: missing
    committing: bool = False  # its stage was committing while a run held the data dir

    @property
    def status(self) -> str:
        if self.committing:
            return "committing"
        if self.actual is None:
            return "MISSING"
        return "ok" if self.actual == self.expected else "CHANGED"


@dataclass
class VerifyReport:
    """What the stages recorded, checked against the files (see `verify`)."""

    files: list[VerifyRow]
    unrecorded: list[str]  # files under the data dir that no stage recorded
    stale: dict[str, list[str]]  # stage -> upstream stages rebuilt after it ran
    temps: list[str]  # left by runs that died; the next run removes them
    unreferenced: int = 0  # a bucket's objects no manifest names (older versions): not failures
    producers: dict[str, str] = field(default_factory=dict)  # output path -> its stage's manifest file

    @property
    def failed(self) -> list[str]:
        return [f"{r.status}: {r.path}" for r in self.files if r.status not in ("ok", "committing")] + [
            f"UNRECORDED: {p}" for p in self.unrecorded
        ]


_NOT_ARTIFACTS = ("manifests", "cache", "versions")  # bookkeeping under the data dir, not stage outputs


def verify(root: Path, running: bool = False) -> VerifyReport:
    """Re-hash every output each stage recorded in its manifest, and find stale stages.

    Checks what the stages actually recorded (so it holds after a failed or killed run,
    when provenance.json describes an older build). A stage is stale when an input it
    recorded no longer matches what its producer recorded last: the producer was rebuilt
    after it, as Dagster would mark it.

    `running`: a run holds the data dir. A stage that was committing while its files were
    hashed (a pending journal, or its manifest replaced meanwhile) is checked again, and
    reported as `committing` rather than CHANGED if it still is: never a false alarm.
    """
    layout = Layout(root)
    for _ in range(VERIFY_PASSES if running else 1):
        before = _commit_state(layout)
        report = _verify_pass(layout)
        after = _commit_state(layout)
        moving = {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}
        moving |= {name for name, digest in after.items() if digest == PENDING}
        finals = [final for _, journal, _ in layout.pending_commits() for final in journal_finals(journal)]
        report = replace(
            report,
            files=[_committing(r, moving, report.producers) for r in report.files],
            unrecorded=[p for p in report.unrecorded if not any(p == f or p.startswith(f + "/") for f in finals)],
        )
        if not running or not report.failed or not moving:
            return report
    return report


VERIFY_PASSES = 3
PENDING = "pending"


def _commit_state(layout: Layout) -> dict[str, str]:
    """Each manifest's digest (by file name), or PENDING while its stage's commit is under way."""
    state = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in layout.manifests_dir.glob("*.json")}
    state.update({manifest.name: PENDING for _, _, manifest in layout.pending_commits()})
    return state


def _committing(row: VerifyRow, moving: set[str], producers: dict[str, str]) -> VerifyRow:
    return replace(row, committing=True) if row.status != "ok" and producers.get(row.path) in moving else row


def _hash_if_there(path: Path) -> str | None:
    """The file's SHA-256, or None when it is missing (or vanished while being read)."""
    try:
        return sha256_file(path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def _verify_pass(layout: Layout) -> VerifyReport:
    root = layout.root
    manifests = list(iter_manifests(layout))
    if not manifests:
        raise FileNotFoundError(f"nothing materialized under {root} (no stage manifests in {layout.manifests_dir})")
    rows = []
    producers = {}  # output path -> its stage's manifest file name
    for m in manifests:
        for art in m.outputs:
            rows.append(VerifyRow(art.path, art.sha256, _hash_if_there(root / art.path)))
            producers[art.path] = layout.manifest(m.stage).name
    unrecorded, temps = [], []
    found = (Path(d, name) for d, _, names in os.walk(root) for name in names)  # a vanishing dir is skipped
    for path in sorted(found):
        rel = path.relative_to(root)
        if rel.parts[0] in _NOT_ARTIFACTS or path == layout.lock_file:
            continue
        if any(part.startswith(".") and part.endswith((TEMP_SUFFIX, BACKUP_SUFFIX)) for part in rel.parts):
            temps.append(rel.as_posix())
        elif rel.as_posix() not in producers:
            unrecorded.append(rel.as_posix())
    return VerifyReport(rows, unrecorded, stale_stages(manifests), temps, producers=producers)


def verify_bucket(bucket: Bucket) -> VerifyReport:
    """`verify` for a data dir in a bucket: every object a manifest there names is re-hashed
    (streamed, nothing is downloaded to disk). Its working copy plays no part."""
    manifests = bucket.manifests()
    if not manifests:
        raise FileNotFoundError(f"nothing materialized under {bucket.uri} (no stage manifests)")
    arts = {(a.path, a.sha256): a for m in manifests for a in m.outputs}
    with ThreadPoolExecutor(IO_THREADS) as pool:
        actual = dict(zip(arts, pool.map(bucket.hash_object, (sha for _, sha in arts))))
    rows = [VerifyRow(path, sha, actual[(path, sha)]) for path, sha in sorted(arts)]
    named = {sha for _, sha in arts}
    unreferenced = sum(sha not in named for sha in bucket.objects())
    return VerifyReport(rows, [], stale_stages(manifests), [], unreferenced)


def stale_stages(manifests: list[StageManifest]) -> dict[str, list[str]]:
    """Stage -> the upstream stages whose current outputs differ from what it read."""
    producer = {art.path: (m.stage, art.sha256) for m in manifests for art in m.outputs}
    stale = {}
    for m in manifests:
        rebuilt = {producer[a.path][0] for a in m.inputs if a.path in producer and producer[a.path][1] != a.sha256}
        if rebuilt:
            stale[m.stage] = sorted(rebuilt)
    return stale

"""A corpus's data versions, and the small facts of each kept after its bytes are rebuilt.

A version is the corpus stage's data version: the SHA-256 over its outputs' hashes in its
manifest (what Dagster shows as the asset's data version), so a rebuild to the same bytes
is the same version. A loader state names the version it read (`dataset.Batches`).

Before a build replaces a corpus, its committed version's facts are copied to
`versions/<stage>/<version>/`: the manifest, `index.json` and the ledger (the pieces table,
the documents table and the fates table, `lineage.py`; the last two in chunks the versions
share, `registry.py`). They are what `albor exposure` needs to say which
documents an old checkpoint saw. The copy commits with the new build (the stage's
journal): a failed build leaves the old version current, its facts where they were.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from albor_pipeline.runtime.artifacts import Artifact, StageManifest, check_recorded, sha256_file, staged_dir
from albor_pipeline.runtime.bucket import Bucket
from albor_pipeline.runtime.layout import Layout, corpus_names, corpus_stage
from albor_pipeline.runtime.shards import read_files
from albor_pipeline.runtime.stagerun import Fetch
from albor_pipeline.spec import SPLITS
from albor_pipeline.stages.corpus.lineage import DOCUMENTS, FATES, PIECES
from albor_pipeline.stages.corpus.registry import (
    CHUNKS,
    FATE_CHUNKS,
    OBJECTS,
    keep_documents,
    keep_fates,
    kept_problems,
    load_documents,
    load_fates,
    referenced,
)
from albor_pipeline.text.sequences import INDEX_FILE

MANIFEST = "manifest.json"
FACTS = (INDEX_FILE, PIECES, DOCUMENTS, FATES)  # under the corpus dir, and under a kept version's dir
SHORT = 12  # hex digits a version is shown by


@dataclass(frozen=True)
class Version:
    """One version of a corpus stage: its manifest and where its facts are (the live corpus
    dir for the current version until a rebuild keeps them)."""

    stage: str
    manifest: StageManifest
    facts: Path
    current: bool

    @property
    def id(self) -> str:
        return self.manifest.data_version

    def fact(self, name: str) -> Path | None:
        """The fact `name` (`FACTS`), or None when the build wrote none (`audit.ledger: false`)."""
        path = self.facts / name
        return path if path.is_file() else None

    def documents(self, columns: list[str] | None = None) -> pa.Table | None:
        """The documents table (the live file, or a kept version's chunks); None without one."""
        if (path := self.fact(DOCUMENTS)) is not None:
            return read_files([path], columns)
        if (self.facts / CHUNKS).is_file():
            return load_documents(self.facts.parent.parent / OBJECTS, self.facts, columns)
        return None

    def fates(self) -> pa.Table | None:
        """The fates table (the live file, or a kept version's chunks); None without one
        (a build without the ledger, or from before corpora kept their fates)."""
        if (path := self.fact(FATES)) is not None:
            return read_files([path])
        if (self.facts / FATE_CHUNKS).is_file():
            return load_fates(self.facts.parent.parent / OBJECTS, self.facts)
        return None


def versions_dir(layout: Layout, stage: str) -> Path:
    return layout.versions_dir / stage.replace("/", "__")


def _stage_of(kept: Path) -> str:
    """The stage whose kept version's directory is `kept` (the inverse of `versions_dir`)."""
    return kept.parent.name.replace("__", "/")


def _current(layout: Layout, stage: str) -> StageManifest | None:
    try:
        return StageManifest.model_validate_json(layout.manifest(stage).read_bytes())
    except FileNotFoundError:
        return None


def _facts(manifest: StageManifest) -> list[Artifact]:
    """The outputs of a corpus manifest that are its facts."""
    return [a for a in manifest.outputs if a.path in {f"{manifest.stage}/{name}" for name in FACTS}]


def keep_version(layout: Layout, stage: str, fetch: Fetch | None = None) -> Path | None:
    """Copy the committed version's facts of `stage` under `versions/` (once per version),
    each checked against its manifest's SHA-256 (a bucket's working copy: `fetch`ed first);
    None when nothing is committed, or a fact no longer has its recorded bytes (then there
    is nothing true to keep)."""
    manifest = _current(layout, stage)
    if manifest is None:
        return None
    target = versions_dir(layout, stage) / manifest.data_version
    if target.is_dir():
        return target
    if fetch is not None:
        check_recorded(layout.root, _facts(manifest), fetch)
    recorded = {a.path: a.sha256 for a in manifest.outputs}
    names = [name for name in FACTS if f"{stage}/{name}" in recorded]
    sources = {name: layout.stage_dir(stage) / name for name in names}
    if any(not p.is_file() or sha256_file(p) != recorded[f"{stage}/{n}"] for n, p in sources.items()):
        return None
    with staged_dir(target) as tmp:
        for name, path in sources.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            if name == DOCUMENTS:  # chunks shared with the other versions (`registry.py`)
                keep_documents(path, target.parent.parent / OBJECTS, tmp)
            elif name == FATES:
                keep_fates(path, target.parent.parent / OBJECTS, tmp)
            else:
                shutil.copyfile(path, tmp / name)
        (tmp / MANIFEST).write_bytes(layout.manifest(stage).read_bytes())
    return target


def kept_version(stage: str, directory: Path) -> Version:
    """The version whose facts `keep_version` kept in `directory`."""
    return Version(stage, StageManifest.model_validate_json((directory / MANIFEST).read_bytes()), directory, False)


def versions(layout: Layout, stage: str) -> list[Version]:
    """Every version of `stage` the data dir knows: the kept ones and the current one."""
    current = _current(layout, stage)
    found = {}
    root = versions_dir(layout, stage)
    for entry in sorted(root.iterdir()) if root.is_dir() else []:
        if (entry / MANIFEST).is_file() and not entry.name.startswith("."):
            version = kept_version(stage, entry)
            found[version.id] = version
    if current is not None:
        kept = found.get(current.data_version)
        found[current.data_version] = Version(stage, current, kept.facts if kept else layout.stage_dir(stage), True)
    return list(found.values())


def find_version(layout: Layout, stage: str, version: str) -> Version:
    """The version of `stage` whose id starts with `version` (empty: the current one); a clear
    error when the data dir does not know it (built elsewhere, or its facts were dropped by `albor gc --versions`)."""
    matches = [v for v in versions(layout, stage) if (v.id.startswith(version) if version else v.current)]
    if len(matches) != 1:
        known = ", ".join(v.id[:SHORT] + (" (current)" if v.current else "") for v in versions(layout, stage))
        what = "is ambiguous" if matches else "is not kept in this data dir"
        raise LookupError(f"{stage} version {version[:SHORT]} {what}; known: {known or 'none'}")
    return matches[0]


def kept_versions(layout: Layout) -> list[Path]:
    """The directories of every kept version's facts, of every corpus."""
    root = layout.versions_dir
    found = root.glob("*/*") if root.is_dir() else []
    return sorted(p for p in found if p.is_dir() and not p.name.startswith(".") and p.parent.name != OBJECTS)


def kept_bytes(layout: Layout) -> int:
    """Bytes the kept versions' facts take, their shared chunks included (`albor gc` reports them)."""
    root = layout.versions_dir
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.is_dir() else 0


def kept_files(layout: Layout, stage: str, current: str) -> list[Path]:
    """The files of `stage`'s kept versions other than `current`, and the chunks they name,
    in the order a reader can trust them: chunks, each version's facts, its manifest last (a
    directory without one is no version). What a bucket data dir publishes (`Bucket.push_files`)."""
    dirs = [d for d in kept_versions(layout) if d.parent == versions_dir(layout, stage) and d.name != current]
    chunks = [layout.versions_dir / OBJECTS / name for name in sorted(referenced(dirs))]
    facts = [p for d in dirs for p in sorted(d.rglob("*")) if p.is_file() and p.name != MANIFEST]
    return [*chunks, *facts, *(d / MANIFEST for d in dirs)]


def pull_facts(bucket: Bucket) -> Layout:
    """A bucket data dir's corpus versions in its working copy, for `albor exposure` and
    `albor diff`: its manifests, every kept version's facts, and each corpus's current
    facts (checked against its manifest). The working copy's layout."""
    bucket.pull()
    bucket.pull_files(bucket.layout.versions_dir.name, MANIFEST)
    for stage in map(corpus_stage, corpus_names(SPLITS)):
        if (manifest := _current(bucket.layout, stage)) is not None:
            check_recorded(bucket.layout.root, _facts(manifest), bucket.fetch)
    return bucket.layout


def version_problems(layout: Layout) -> list[str]:
    """Every kept version's facts that no longer have their recorded bytes: the copied ones
    against the version's manifest, the chunked ones against their names and listing."""
    problems = []
    kept = kept_versions(layout)
    for directory in kept:
        version = kept_version(_stage_of(directory), directory)
        recorded = {a.path: a.sha256 for a in version.manifest.outputs}
        for name in (INDEX_FILE, PIECES):
            path, sha = directory / name, recorded.get(f"{version.stage}/{name}")
            if sha is not None and (not path.is_file() or sha256_file(path) != sha):
                problems.append(f"{path}: missing, or not the SHA-256 its version's manifest records")
    return problems + kept_problems(layout.versions_dir / OBJECTS, kept)


def drop_versions(layout: Layout) -> tuple[int, int]:
    """Remove the kept facts of every version that is not its corpus's current one (their
    checkpoints' exposure can then no longer be answered): (versions, bytes) removed. The
    caller holds the data dir's lock."""
    dropped = size = 0
    for entry in kept_versions(layout):
        current = _current(layout, _stage_of(entry))
        if current is None or current.data_version != entry.name:
            size += sum(p.stat().st_size for p in entry.rglob("*") if p.is_file())
            shutil.rmtree(entry)
            dropped += 1
    objects = layout.versions_dir / OBJECTS
    used = referenced(kept_versions(layout))
    for chunk in sorted(objects.glob("*.parquet")) if objects.is_dir() else []:
        if chunk.name not in used:
            size += chunk.stat().st_size
            chunk.unlink()
    return dropped, size

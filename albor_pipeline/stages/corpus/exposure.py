"""Which items, documents and tokens a loader state's reader served, over the corpus
version it read.

A loader state (`Batches.state_dict()`, saved as JSON with a checkpoint) lists every
stretch of the shuffled epochs its reader served (`dataset.Served`): epoch, permutation
positions [first, stop), items a step and the first step. The permutation is seeded, so the
state alone names every item served and the step that served it, across epochs and
resumes at other world sizes. The version's kept facts (`versions.py`) name the documents:
the pieces table those of each sequence, the documents table who each is. Nothing is
re-encoded and no token is read. `albor exposure` (`albor_pipeline/exposure.py`) asks
these questions; the corpus stage asks them of the registered checkpoints when removal
requests apply (`removal_report`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import BaseModel

from albor_pipeline.dataset import Served
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.shards import read_files
from albor_pipeline.stages.corpus.lineage import DOCUMENTS, PIECES
from albor_pipeline.stages.corpus.versions import SHORT, Version, find_version
from albor_pipeline.summaries.corpus import CheckpointRemovals
from albor_pipeline.text.removal import Removal
from albor_pipeline.text.sequences import INDEX_FILE

STATE_KEYS = ("epoch", "consumed", "seed", "shuffle", "items")
NO_PIECES = np.zeros((0, 3), dtype=np.int64)  # a document no sequence holds (a budget's cut, a dropped remainder)


class ExposureError(ValueError):
    """A state or a version that cannot be answered; the message says why."""


class LoaderState(BaseModel):
    """A saved `Batches.state_dict()`, and the file it came from."""

    path: str
    corpus: str = ""
    version: str = ""
    step: int = 0
    epoch: int
    consumed: int
    seed: int
    shuffle: bool
    items: int
    chunks: int = 1
    served: list[Served] = []

    def stretches(self) -> list[Served]:
        """What the reader served; a state from before stretches were recorded served every
        item of its earlier epochs and the first `consumed` of its epoch, steps unknown (-1)."""
        if self.served or not (self.epoch or self.consumed):
            return self.served
        return [Served(e, 0, self.items, 0, -1) for e in range(self.epoch)] + [
            Served(self.epoch, 0, self.consumed, 0, -1)
        ]


class DocumentExposure(BaseModel):
    source: str
    file: str
    sha256: str
    served: bool
    servings: int  # items holding a piece of it, times served
    first_step: int | None  # the first step whose batch held it (None: not served, or unknown)
    epochs: list[int]  # epochs that served it
    sequences: list[int]  # the corpus's sequences holding it that were served


class SourceDiet(BaseModel):
    source: str
    tokens: int  # tokens served (a sequence served twice counts twice)
    documents: int  # the source's documents in the corpus
    seen: int  # of them, with a piece served
    share_seen: float
    epochs: float  # tokens served / the source's tokens in the corpus


class Diet(BaseModel):
    state: str
    corpus: str
    version: str
    step: int
    items_served: int
    tokens: int
    sources: list[SourceDiet]


def read_states(paths: list[str]) -> list[LoaderState]:
    """The loader states in `paths`: JSON files, or directories searched for them (a JSON
    file there that is not a loader state is passed over); in path order."""
    found: list[LoaderState] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found += [s for f in sorted(path.rglob("*.json")) if (s := _state(f, strict=False)) is not None]
        elif (state := _state(path, strict=True)) is not None:
            found.append(state)
    return found


def _state(path: Path, strict: bool) -> LoaderState | None:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        if strict:
            raise ExposureError(f"{path}: not a readable JSON loader state ({exc})") from None
        return None
    if not isinstance(raw, dict) or any(k not in raw for k in STATE_KEYS):
        if strict:
            raise ExposureError(f"{path}: not a loader state (Batches.state_dict() saved as JSON)")
        return None
    return LoaderState.model_validate({**raw, "path": str(path)})


class _Permutations:
    """Each epoch's order and its inverse, made once per (seed, epoch, items)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, int, int, bool], tuple[np.ndarray, np.ndarray]] = {}

    def get(self, state: LoaderState, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        key = (state.seed, epoch, state.items, state.shuffle)
        if key not in self._cache:
            n = state.items
            order = np.random.default_rng([state.seed, epoch]).permutation(n) if state.shuffle else np.arange(n)
            inverse = np.empty(n, dtype=np.int64)
            inverse[order] = np.arange(n)
            if len(self._cache) >= 16:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = (order, inverse)
        return self._cache[key]


class _Read:
    """One state with the corpus version it read."""

    def __init__(self, state: LoaderState, version: Version, seq_len: int) -> None:
        self.state, self.version, self.seq_len = state, version, seq_len
        self.chunk_len = seq_len // max(state.chunks, 1)

    def items(self, pieces: np.ndarray) -> np.ndarray:
        """The items (sequences, or chunks of them) holding pieces (sequence, offset, length)."""
        if self.state.chunks == 1 or not len(pieces):
            return np.unique(pieces[:, 0]) if len(pieces) else np.zeros(0, np.int64)
        first = pieces[:, 1] // self.chunk_len
        last = (pieces[:, 1] + pieces[:, 2] - 1) // self.chunk_len
        span = [seq * self.state.chunks + np.arange(a, b + 1) for seq, a, b in zip(pieces[:, 0], first, last)]
        return np.unique(np.concatenate(span))

    def tokens(self, counts: np.ndarray, seq: np.ndarray, offset: np.ndarray, length: np.ndarray) -> np.ndarray:
        """Tokens served of each piece: its tokens in each item, times that item's servings."""
        if self.state.chunks == 1:
            return length * counts[seq]
        served = np.zeros(len(seq), dtype=np.int64)
        for c in range(self.state.chunks):
            lo, hi = c * self.chunk_len, (c + 1) * self.chunk_len
            inside = np.clip(np.minimum(offset + length, hi) - np.maximum(offset, lo), 0, None)
            served += inside * counts[seq * self.state.chunks + c]
        return served


class Exposures:
    """Exposure answers for states over their corpus versions in one data dir; each epoch's
    permutation is made once."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.permutations = _Permutations()
        self._versions: dict[tuple[str, str], tuple[Version, int]] = {}  # (stage, id) -> the version, its seq_len

    def read(self, state: LoaderState, corpus: str = "") -> _Read:
        """The state with the corpus version it read (the current one when it names none)."""
        stage = state.corpus or corpus or "corpus/train"
        if (stage, state.version) not in self._versions:
            try:
                version = find_version(self.layout, stage, state.version)
            except LookupError as exc:
                raise ExposureError(f"{state.path}: {exc}") from None
            seq_len = int(json.loads(fact(version, INDEX_FILE).read_text())["seq_len"])
            self._versions[stage, state.version] = version, seq_len
        return _Read(state, *self._versions[stage, state.version])

    def documents(self, read: _Read, copies: Copies) -> list[DocumentExposure]:
        """Each document of `copies` (`copies_of` the version the state read): its exposure."""
        return [self._document(read, key, pieces) for key, pieces in copies.items()]

    def _document(self, read: _Read, key: tuple[str, str, str], pieces: np.ndarray) -> DocumentExposure:
        """One document's exposure, from its pieces (sequence, offset, length)."""
        items = read.items(pieces)
        servings, steps, epochs, served = 0, [], set(), np.zeros(len(items), dtype=bool)
        for stretch in read.state.stretches():
            _, inverse = self.permutations.get(read.state, stretch.epoch)
            at = inverse[items]
            hit = (at >= stretch.first) & (at < stretch.stop)
            if hit.any():
                servings += int(hit.sum())
                epochs.add(stretch.epoch)
                served |= hit
                if stretch.first_step >= 0:
                    steps.append(stretch.first_step + int((at[hit].min() - stretch.first) // stretch.per_step))
        return DocumentExposure(
            source=key[0],
            file=key[1],
            sha256=key[2],
            served=servings > 0,
            servings=servings,
            first_step=min(steps) if steps else None,
            epochs=sorted(epochs),
            sequences=sorted({int(i) // read.state.chunks for i in items[served]}),
        )

    def diet(self, state: LoaderState, corpus: str = "") -> Diet:
        """What the checkpoint saw, per source: tokens, documents seen and epochs."""
        read = self.read(state, corpus)
        counts = np.zeros(state.items, dtype=np.int64)
        for stretch in state.stretches():
            order, _ = self.permutations.get(state, stretch.epoch)
            counts += np.bincount(order[stretch.first : stretch.stop], minlength=state.items)
        sources, code = _source_codes(read.version)
        served_tokens = np.zeros(len(sources), dtype=np.int64)
        total_tokens = np.zeros(len(sources), dtype=np.int64)
        in_corpus, seen = np.zeros(len(code), dtype=bool), np.zeros(len(code), dtype=bool)
        columns = ["sequence", "offset", "length", "row"]
        for batch in pq.ParquetFile(fact(read.version, PIECES)).iter_batches(batch_size=1 << 16, columns=columns):
            seq, offset, length, row = (batch.column(k).to_numpy().astype(np.int64) for k in range(4))
            tokens = read.tokens(counts, seq, offset, length)
            served_tokens += np.bincount(code[row], weights=tokens, minlength=len(sources)).astype(np.int64)
            total_tokens += np.bincount(code[row], weights=length, minlength=len(sources)).astype(np.int64)
            in_corpus[row] = True
            seen[row[tokens > 0]] = True
        rows = [
            _source_diet(name, served_tokens[k], total_tokens[k], in_corpus & (code == k), seen & (code == k))
            for k, name in enumerate(sources)
        ]
        return Diet(
            state=state.path,
            corpus=read.version.stage,
            version=read.version.id[:SHORT],
            step=state.step,
            items_served=int(counts.sum()),
            tokens=int(served_tokens.sum()),
            sources=[r for r in rows if r.documents],
        )


Copies = dict[tuple[str, str, str], np.ndarray]
"""(source, file, SHA-256) -> the pieces (sequence, offset, length) of every copy of the
document in the corpus (the mix may repeat a document)."""


def copies_of(version: Version, docs: pa.Table) -> Copies:
    """The pieces of each document of `docs` (rows of the version's documents table)."""
    pieces = _pieces_of(version, docs.column("row").to_numpy())
    held: dict[tuple[str, str, str], list[np.ndarray]] = {}
    for row in docs.to_pylist():
        held.setdefault((row["source"], row["file"], row["sha256"]), []).append(pieces.get(row["row"], NO_PIECES))
    return {key: np.concatenate(parts) for key, parts in held.items()}


def removed(version: Version, removals: Mapping[str, Removal]) -> pa.Table:
    """The rows of the version's documents table that removal requests name (by source:
    its file, data file or SHA-256, as ingestion matches them)."""
    table = documents_of(version)
    keep = [
        name in removals and removals[name].names(file, sha)
        for name, file, sha in zip(*(table.column(c).to_pylist() for c in ("source", "file", "sha256")))
    ]
    return table.filter(pa.array(keep, pa.bool_()))


def removal_report(
    layout: Layout, stage: str, states: list[LoaderState], removals: Mapping[str, Removal]
) -> list[CheckpointRemovals]:
    """For each registered state that read `stage`: how many of the documents the removal
    requests name it was served (counts only: the requests' content stays out of reports)."""
    exposures, report = Exposures(layout), []
    for state in states:
        if (state.corpus or "corpus/train") != stage:
            continue
        try:
            read = exposures.read(state)
            found = exposures.documents(read, copies_of(read.version, removed(read.version, removals)))
        except ExposureError as exc:
            report.append(
                CheckpointRemovals(
                    state=state.path, step=state.step, version=state.version[:SHORT], requested=0, seen=0, note=str(exc)
                )
            )
            continue
        seen = sum(d.served for d in found)
        version = read.version.id[:SHORT]
        report.append(
            CheckpointRemovals(state=state.path, step=state.step, version=version, requested=len(found), seen=seen)
        )
    return report


def _source_diet(name: str, served: int, total: int, docs: np.ndarray, seen: np.ndarray) -> SourceDiet:
    documents, saw = int(docs.sum()), int(seen.sum())
    return SourceDiet(
        source=name,
        tokens=int(served),
        documents=documents,
        seen=saw,
        share_seen=round(saw / documents, 6) if documents else 0.0,
        epochs=round(served / total, 6) if total else 0.0,
    )


def fact(version: Version, name: str) -> Path:
    """A fact of the version; a clear error when its build kept no ledger."""
    path = version.fact(name)
    if path is None:
        raise ExposureError(
            f"{version.stage} version {version.id[:SHORT]} has no {name}: it was built without the ledger "
            "(audit.ledger: false), so which documents its sequences hold is not recorded"
        )
    return path


def documents_of(version: Version, columns: list[str] | None = None) -> pa.Table:
    """The version's documents table; a clear error when its build kept no ledger."""
    table = version.documents(columns)
    if table is None:
        fact(version, DOCUMENTS)  # raises, saying why
        raise ExposureError(f"{version.stage} version {version.id[:SHORT]}: no documents table")
    return table


def _pieces_of(version: Version, rows: np.ndarray) -> dict[int, np.ndarray]:
    """(sequence, offset, length) of every piece of the documents `rows`, by row."""
    if not len(rows):
        return {}
    table = read_files([fact(version, PIECES)], ["sequence", "offset", "length", "row"])
    table = table.filter(pc.is_in(table.column("row"), value_set=pa.array(rows, pa.int64())))
    cols = np.stack([table.column(k).to_numpy().astype(np.int64) for k in ("sequence", "offset", "length")], axis=1)
    row = table.column("row").to_numpy()
    return {int(r): cols[row == r] for r in np.unique(row)}


def _source_codes(version: Version) -> tuple[list[str], np.ndarray]:
    """The sources of the version's documents, and each row's source as an index into them."""
    table = documents_of(version, ["row", "source"])
    encoded = table.column("source").combine_chunks().dictionary_encode()
    code = np.empty(table.num_rows, dtype=np.int32)
    code[table.column("row").to_numpy()] = encoded.indices.to_numpy()
    return [str(v) for v in encoded.dictionary.to_pylist()], code

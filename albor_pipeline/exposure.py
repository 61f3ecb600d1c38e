"""`albor exposure`: which training checkpoints saw a document, and what one checkpoint saw.

A loader state (`Batches.state_dict()`, saved as JSON with a checkpoint) lists every
stretch of the shuffled epochs its reader served (`dataset.Served`): epoch, permutation
positions [first, stop), items a step and the first step. The permutation is seeded, so the
state alone names every item served and the step that served it, across epochs and
resumes at other world sizes. The corpus version the state read (its data version) has
its ledger kept (`stages/corpus/versions.py`): the pieces table names the documents of each
sequence, the documents table who each is. Nothing is re-encoded and no token is read.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import BaseModel

from albor_pipeline.dataset import Served
from albor_pipeline.runtime.layout import Layout, corpus_stage
from albor_pipeline.spec import PipelineSpec, read_digests
from albor_pipeline.stages.corpus.lineage import DOCUMENTS, PIECES
from albor_pipeline.stages.corpus.versions import SHORT, Version, find_version
from albor_pipeline.text.sequences import INDEX_FILE
from albor_pipeline.trace import SHA256, TraceError, document_query, glob_regex, sequence_query

STATE_KEYS = ("epoch", "consumed", "seed", "shuffle", "items")
_NONE = np.zeros((0, 3), dtype=np.int64)  # a document no sequence holds (a budget's cut, a dropped remainder)


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


class CheckpointExposure(BaseModel):
    state: str
    corpus: str
    version: str
    step: int
    documents: list[DocumentExposure]


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
            raise TraceError(f"{path}: not a readable JSON loader state ({exc})") from None
        return None
    if not isinstance(raw, dict) or any(k not in raw for k in STATE_KEYS):
        if strict:
            raise TraceError(f"{path}: not a loader state (Batches.state_dict() saved as JSON)")
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

    def __init__(self, state: LoaderState, version: Version) -> None:
        self.state, self.version = state, version
        self.seq_len = int(json.loads(_fact(version, INDEX_FILE).read_text())["seq_len"])
        self.chunk_len = self.seq_len // max(state.chunks, 1)

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


class Exposure:
    """Exposure questions over one data dir's corpus versions."""

    def __init__(self, spec: PipelineSpec, layout: Layout) -> None:
        self.spec, self.layout = spec, layout
        self.permutations = _Permutations()

    def read(self, state: LoaderState, corpus: str = "") -> _Read:
        """The state with the corpus version it read (the current one when it names none)."""
        stage = state.corpus or corpus or corpus_stage("train")
        return _Read(state, find_version(self.layout, stage, state.version))

    def documents(self, query: str, version: Version) -> pa.Table:
        """The rows of the version's documents table `query` names (a [source:]path or glob, a
        SHA-256, corpus/<split>:N, or `remove`: the spec's removal requests)."""
        table = pq.read_table(_fact(version, DOCUMENTS))
        if query == "remove":
            return table.filter(self._removal_mask(table))
        if (seq := sequence_query(query)) is not None:
            if corpus_stage(seq[0]) != version.stage:
                return table.slice(0, 0)
            pieces = pq.read_table(_fact(version, PIECES), columns=["sequence", "row"])
            rows = pieces.filter(pc.equal(pieces.column("sequence"), seq[1])).column("row")
            return table.filter(pc.is_in(table.column("row"), value_set=rows.combine_chunks()))
        source, pattern = document_query(query)
        if SHA256.fullmatch(pattern):
            mask = pc.equal(table.column("sha256"), pattern)
        else:
            mask = pc.match_substring_regex(table.column("file"), glob_regex(pattern))
        if source:
            mask = pc.and_(mask, pc.equal(table.column("source"), source))
        return table.filter(mask)

    def _removal_mask(self, table: pa.Table) -> pa.Array:
        mask = pa.array(np.zeros(table.num_rows, dtype=bool))
        for name, request in self.spec.remove.items():
            wanted = [*request.sha256, *(read_digests(request.sha256_file) if request.sha256_file else ())]
            hit = pc.is_in(table.column("sha256"), value_set=pa.array(wanted, pa.string()))
            for glob in request.paths:
                hit = pc.or_(hit, pc.match_substring_regex(table.column("file"), glob_regex(glob)))
            mask = pc.or_(mask, pc.and_(hit, pc.equal(table.column("source"), name)))
        return pc.fill_null(mask, False)

    def exposure(self, query: str, states: list[LoaderState], corpus: str = "") -> list[CheckpointExposure]:
        """For each state, each document `query` names in the version it read: served or not,
        from which step, in which epochs and sequences."""
        out = []
        for state in states:
            read = self.read(state, corpus)
            docs = self.documents(query, read.version)
            pieces = _pieces_of(read.version, docs.column("row").to_numpy())
            copies: dict[tuple[str, str, str], list[np.ndarray]] = {}  # the mix may repeat a document
            for row in docs.to_pylist():
                copies.setdefault((row["source"], row["file"], row["sha256"]), []).append(pieces.get(row["row"], _NONE))
            found = [self._document(read, key, np.concatenate(held)) for key, held in copies.items()]
            out.append(
                CheckpointExposure(
                    state=state.path,
                    corpus=read.version.stage,
                    version=read.version.id[:SHORT],
                    step=state.step,
                    documents=found,
                )
            )
        return out

    def _document(self, read: _Read, key: tuple[str, str, str], pieces: np.ndarray) -> DocumentExposure:
        """One document's exposure in one state, from its pieces (sequence, offset, length)
        in every copy of it the corpus holds."""
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
        for batch in pq.ParquetFile(_fact(read.version, PIECES)).iter_batches(
            batch_size=1 << 16, columns=["sequence", "offset", "length", "row"]
        ):
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


def _fact(version: Version, name: str) -> Path:
    """A fact of the version; a clear error when its build kept no ledger."""
    path = version.fact(name)
    if path is None:
        raise TraceError(
            f"{version.stage} version {version.id[:SHORT]} has no {name}: it was built without the ledger "
            "(audit.ledger: false), so which documents its sequences hold is not recorded"
        )
    return path


def _pieces_of(version: Version, rows: np.ndarray) -> dict[int, np.ndarray]:
    """(sequence, offset, length) of every piece of the documents `rows`, by row."""
    if not len(rows):
        return {}
    table = pq.read_table(
        _fact(version, PIECES),
        columns=["sequence", "offset", "length", "row"],
        filters=[("row", "in", rows.tolist())],
    )
    cols = np.stack([table.column(k).to_numpy().astype(np.int64) for k in ("sequence", "offset", "length")], axis=1)
    row = table.column("row").to_numpy()
    return {int(r): cols[row == r] for r in np.unique(row)}


def _source_codes(version: Version) -> tuple[list[str], np.ndarray]:
    """The sources of the version's documents, and each row's source as an index into them."""
    table = pq.read_table(_fact(version, DOCUMENTS), columns=["row", "source"])
    encoded = table.column("source").combine_chunks().dictionary_encode()
    code = np.empty(table.num_rows, dtype=np.int32)
    code[table.column("row").to_numpy()] = encoded.indices.to_numpy()
    return [str(v) for v in encoded.dictionary.to_pylist()], code


def exposure_lines(found: list[CheckpointExposure], query: str) -> list[str]:
    """`albor exposure`'s readable answer: per checkpoint, each document's exposure."""
    lines = []
    for cp in found:
        lines.append(f"{cp.state}: step {cp.step:,}, {cp.corpus} version {cp.version}")
        if not cp.documents:
            lines.append(f"  {query}: no document of this version matches")
        for doc in cp.documents:
            name = f"{doc.source}:{doc.file}"
            if not doc.served:
                lines.append(f"  {name}: not served")
                continue
            since = f"from step {doc.first_step:,}" if doc.first_step is not None else "step unknown (an older state)"
            seqs = ", ".join(map(str, doc.sequences[:8])) + (", ..." if len(doc.sequences) > 8 else "")
            epochs = ", ".join(map(str, doc.epochs))
            lines.append(f"  {name}: served {since}, epoch(s) {epochs}, {doc.servings} item(s); sequences {seqs}")
    return lines


def diet_lines(diet: Diet) -> list[str]:
    """`albor exposure --state`'s readable answer: what the checkpoint saw, by source."""
    lines = [
        f"{diet.state}: step {diet.step:,}, {diet.corpus} version {diet.version}: "
        f"{diet.items_served:,} item(s) served, {diet.tokens:,} tokens",
        f"  {'source':<20} {'tokens':>14} {'documents':>10} {'seen':>10} {'share':>7} {'epochs':>8}",
    ]
    for s in diet.sources:
        lines.append(
            f"  {s.source:<20} {s.tokens:>14,} {s.documents:>10,} {s.seen:>10,} {s.share_seen:>7.1%} {s.epochs:>8.3f}"
        )
    return lines

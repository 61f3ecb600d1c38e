"""`albor exposure`: which training checkpoints saw a document, and what one checkpoint saw.

The answers come from the loader states alone and the corpus versions they read
(`stages/corpus/exposure.py`); this module turns a query (what `albor trace` takes, or
`remove`: the spec's removal requests) into the version's documents, and prints.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from albor_pipeline.queries import SHA256, document_query, glob_regex, sequence_query
from albor_pipeline.runtime.layout import Layout, corpus_stage
from albor_pipeline.runtime.shards import read_files
from albor_pipeline.spec import PipelineSpec
from albor_pipeline.stages.corpus.exposure import (
    Diet,
    DocumentExposure,
    Exposures,
    LoaderState,
    copies_of,
    documents_of,
    fact,
    removed,
)
from albor_pipeline.stages.corpus.lineage import PIECES
from albor_pipeline.stages.corpus.versions import SHORT, Version
from albor_pipeline.stages.ingest.removal import resolve_removal


class CheckpointExposure(BaseModel):
    state: str
    corpus: str
    version: str
    step: int
    documents: list[DocumentExposure]


class Exposure:
    """`albor exposure`'s questions over one data dir."""

    def __init__(self, spec: PipelineSpec, layout: Layout) -> None:
        self.spec, self.exposures = spec, Exposures(layout)

    def documents(self, query: str, version: Version) -> pa.Table:
        """The rows of the version's documents table `query` names (a [source:]path or glob, a
        SHA-256, corpus/<split>:N, or `remove`: the spec's removal requests)."""
        if query == "remove":
            ngram = self.spec.near_dedup.ngram
            removals = {name: resolve_removal(name, r, ngram) for name, r in self.spec.remove.items()}
            return removed(version, {k: v for k, v in removals.items() if v is not None})
        table = documents_of(version)
        if (seq := sequence_query(query)) is not None:
            if corpus_stage(seq[0]) != version.stage:
                return table.slice(0, 0)
            pieces = read_files([fact(version, PIECES)], ["sequence", "row"])
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

    def exposure(self, query: str, states: list[LoaderState], corpus: str = "") -> list[CheckpointExposure]:
        """For each state, each document `query` names in the version it read: served or not,
        from which step, in which epochs and sequences (each version's documents found once)."""
        out, found = [], {}
        for state in states:
            read = self.exposures.read(state, corpus)
            version = read.version
            if version.id not in found:
                found[version.id] = copies_of(version, self.documents(query, version))
            documents = self.exposures.documents(read, found[version.id])
            out.append(
                CheckpointExposure(
                    state=state.path,
                    corpus=version.stage,
                    version=version.id[:SHORT],
                    step=state.step,
                    documents=documents,
                )
            )
        return out

    def diet(self, state: LoaderState, corpus: str = "") -> Diet:
        return self.exposures.diet(state, corpus)


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

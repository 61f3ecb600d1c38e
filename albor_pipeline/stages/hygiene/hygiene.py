"""Per-source hygiene: quality signals scored once, rules decided over them, then PII redaction.

Each ingested shard's signals (`families.py`: code, language, prose, the classifier's
score) and redaction findings are written beside the output (`_signals/<shard>`, read by
`albor whatif` too), a part of the shard's task kept under the signals' settings, never a
threshold; inside it each row group's values per family and its findings are kept under
their own identity. The rules (`rules.py`: the presets and plain rules of
`hygiene.rules`) drop a document and count it by reason; the ledger names the signal's
value.

The output is a view (`text/documents.py`): each shard lists its kept documents and their
rows in a shard of texts (`_text/<shard>`: every ingested document, redacted), which no
rule decides. A rule's or threshold's change links the signal shards and the shards of
texts, and writes the views and ledgers from the signals: it reads no text.

E-mails, public IP addresses and phone numbers are replaced by placeholders
(`text/secrets.py`); `drop` removes the document instead and `report` only counts.
Secrets were already redacted by ingestion, which never writes one; under `report`,
ingestion keeps them and hygiene counts them here. A conversation is redacted message by
message.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import cached_property, partial
from itertools import groupby
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from albor_pipeline.runtime.artifacts import Artifact, ParquetSink
from albor_pipeline.runtime.shardmap import StageIO, Step, TaskIO, map_shards, shards_of, shared_outcome
from albor_pipeline.runtime.shards import Shard, row_group_sha256, shard_files
from albor_pipeline.runtime.taskstore import InputFile, memo
from albor_pipeline.spec import DOCUMENT_KINDS, AuditSpec, HygieneSpec, ProseParams, RedactMode, SourceKind
from albor_pipeline.stages.hygiene.families import FAMILIES, Family, families_of, signal_schema
from albor_pipeline.stages.hygiene.histograms import signal_histograms
from albor_pipeline.stages.hygiene.language import check_languages
from albor_pipeline.stages.hygiene.rules import (
    SECRETS_OR_PII,
    conds,
    decide,
    detail,
    reason,
    signal_columns,
    signals_read,
    unknown_signals,
    value_at,
)
from albor_pipeline.summaries.hygiene import HygieneSummary
from albor_pipeline.text.classifier import ModelRef
from albor_pipeline.text.documents import DOC_SCHEMA, VIEW_SCHEMA, Rows, text_sha256
from albor_pipeline.text.ledger import LEDGER, LEDGER_SCHEMA, SIGNALS, TEXTS, LedgerRows, is_side, ledger_name
from albor_pipeline.text.removal import carry_tombstones, tombstone_artifacts
from albor_pipeline.text.secrets import candidate_lines, redact_path, redacted, scanner

HYGIENE_KINDS = (*DOCUMENT_KINDS, SourceKind.chat)  # sources with a filtered/<name> stage
EXAMPLES = 5  # file paths kept per reason
T = TypeVar("T")


@dataclass
class HygieneResult:
    artifacts: list[Artifact]  # the shard set, one shard per input shard
    summary: HygieneSummary


@dataclass
class _Chunk:
    """The accounting of a shard's documents after hygiene (what a task returns)."""

    documents_in: int = 0
    scanned: int = 0  # documents whose text was scored or redacted now (not reused from the store)
    redacted: int = 0
    removed: Counter[str] = field(default_factory=Counter)
    findings: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    ledger: LedgerRows = field(default_factory=LedgerRows)  # the documents not passed on unchanged
    shards: list[Shard] = field(default_factory=list)  # the output shard and its ledger, once written

    def note(self, reason: str, file: str) -> None:
        if len(self.examples[reason]) < EXAMPLES:
            self.examples[reason].append(redact_path(file))

    def add(self, other: _Chunk) -> None:
        """Add `other`'s accounting (not its rows) to this one's."""
        self.documents_in += other.documents_in
        self.scanned += other.scanned
        self.redacted += other.redacted
        self.removed.update(other.removed)
        self.findings.update(other.findings)
        for why, files in other.examples.items():
            self.examples[why] = (self.examples[why] + files)[:EXAMPLES]


@dataclass
class _Redaction:
    """What redaction found in a row group's documents: each document's findings by type, the
    new text of those it changed, and the redacted path of those whose path holds one. Kept
    under the row group's identity (`memo`), as the signal families are: a rebuild scans
    again only the row groups whose bytes changed."""

    counts: list[dict[str, int]]
    changed: dict[int, str]
    paths: dict[int, str]


@dataclass(frozen=True)
class _RedactJob:
    conversations: bool
    scan_secrets: bool


def _redact(job: _RedactJob, texts: pa.Array, strings: list[str], files: list[str]) -> _Redaction:
    """Every document's findings, and its redacted text where it has any (a conversation
    message by message)."""
    lines = [None] * len(strings) if job.conversations else candidate_lines(texts, secrets=job.scan_secrets)
    out = _Redaction([], {}, {})
    for i, (text, where) in enumerate(zip(strings, lines)):
        cleaned, counts = redacted(text, job.conversations, secrets=job.scan_secrets, lines=where)
        out.counts.append(dict(counts))
        if counts:
            out.changed[i] = cleaned
    for i, file in enumerate(files):
        if (path := redact_path(file)) != file:
            out.paths[i] = path
    return out


def _scored(step: Any, job: Any, group: str, compute: Callable[[], T], fresh: list[bool]) -> T:
    """`memo` of a row group's scoring, noting in `fresh` whether it ran now (read the text)."""

    def run() -> T:
        fresh.append(True)
        return compute()

    return memo(step, job, group, run)


@dataclass
class _Group:
    """One row group of an ingested shard, read only as far as its scoring needs: the text
    only when a signal or redaction is not kept under the group's identity (`key`)."""

    file: pq.ParquetFile
    index: int
    key: str  # its SHA-256 (`row_group_sha256`)
    found: dict[_RedactJob, _Redaction] = field(default_factory=dict)  # its findings, once a pass

    @cached_property
    def table(self) -> pa.Table:
        return self.file.read_row_group(self.index, columns=DOC_SCHEMA.names)

    @cached_property
    def strings(self) -> list[str]:
        return cast(list[str], self.table.column("text").to_pylist())

    def texts(self) -> pa.Array:
        return self.table.column("text").combine_chunks()


def _redaction(job: _RedactJob, group: _Group, fresh: list[bool]) -> _Redaction:
    """A row group's redaction findings, kept under its identity: the shard of texts and the
    rules' decisions share them (in one pass, without a task store, too)."""
    if job not in group.found:
        files = lambda: cast(list[str], group.table.column("file").to_pylist())  # noqa: E731
        run = lambda: _redact(job, group.texts(), group.strings, files())  # noqa: E731
        group.found[job] = _scored(_redact, job, group.key, run, fresh)
    return group.found[job]


def _texts_table(job: _RedactJob | None, group: _Group, fresh: list[bool]) -> pa.Table:
    """A row group as its shard of texts holds it: redacted by `job`, or as ingested."""
    return _as_written(group.table, _redaction(job, group, fresh) if job is not None else None)


def _chars(texts: pa.Array) -> pa.Array:
    return pc.utf8_length(texts).cast(pa.int64())


@dataclass(frozen=True)
class _ScoreJob:
    """What a shard's signals are scored with, never a rule's threshold: its families (by
    name), their parameters, and how its findings are counted (`redact`; None: redaction off)."""

    families: tuple[str, ...]
    prose: ProseParams | None
    model: ModelRef | None
    redact: _RedactJob | None

    @property
    def scored(self) -> tuple[Family, ...]:
        return tuple(f for f in FAMILIES if f.name in self.families)

    @property
    def schema(self) -> pa.Schema:
        return signal_schema(self.scored)


def _signals(job: _ScoreJob, group: _Group, fresh: list[bool]) -> pa.RecordBatch:
    """A row group's signals (each family's scored now or reused) and its redaction findings.
    The text is read, and becomes Python strings, only when something is scored now."""
    shas = group.file.read_row_group(group.index, columns=["sha256"]).column(0).combine_chunks()
    cols: dict[str, Any] = {
        "sha256": shas,
        "chars": _scored(_chars, None, group.key, lambda: _chars(group.texts()), fresh),
    }
    for family in job.scored:
        params = {"prose": job.prose, "model": job.model}.get(family.uses)
        cols |= _scored(family.score, params, group.key, partial(_score, family, group, params), fresh)
    counts: list[dict[str, int]] = [{} for _ in range(len(shas))]
    if job.redact is not None:
        counts = _redaction(job.redact, group, fresh).counts
    cols["findings"] = [sum(c.values()) for c in counts]
    cols["findings_by_type"] = [_counts(c) if c else "" for c in counts]
    return pa.RecordBatch.from_pydict(cols, schema=job.schema)


def _score(family: Family, group: _Group, params: Any) -> dict[str, list[Any]]:
    return family.score(group.texts(), group.strings, params)


@dataclass(frozen=True)
class _Copy:
    """A shard of texts to write: redacted by `redact`, or as ingested (None)."""

    redact: _RedactJob | None


@dataclass(frozen=True)
class _Pass:
    """What a pass over an ingested shard wrote (`_one_pass`): its shard of texts, its signals."""

    texts: Shard | None
    signals: Shard | None
    groups: tuple[str, ...]  # each ingested row group's SHA-256: its signals' and findings' keys
    scanned: int  # documents scored now (a signal or finding not kept under its group's identity)

    @property
    def shards(self) -> tuple[Shard, ...]:
        return tuple(s for s in (self.texts, self.signals) if s is not None)


def _one_pass(io: TaskIO, path: InputFile, copy: _Copy | None, score: _ScoreJob | None) -> _Pass:
    """An ingested shard's signals (`score`) and its shard of texts (`copy`), row group by row
    group: each group is read, and redacted, once for both."""
    local = str(io.local(path))
    file = pq.ParquetFile(local)
    keys: list[str] = []
    scanned = 0
    with ExitStack() as stack:
        signals = stack.enter_context(ParquetSink(io.directory / SIGNALS / path.name, score.schema)) if score else None
        texts = stack.enter_context(ParquetSink(io.directory / TEXTS / path.name, DOC_SCHEMA)) if copy else None
        for index in range(file.num_row_groups):
            group = _Group(file, index, row_group_sha256(local, index))
            keys.append(group.key)
            fresh: list[bool] = []
            if score is not None and signals is not None:
                signals.write(_signals(score, group, fresh))
            if copy is not None and texts is not None:
                texts.write(_texts_table(copy.redact, group, fresh))
            scanned += file.metadata.row_group(index).num_rows if fresh else 0
    shard = lambda sink: Shard.of(sink.path, sink.rows, io.directory) if sink is not None else None  # noqa: E731
    return _Pass(shard(texts), shard(signals), tuple(keys), scanned)


def _copy_shard(job: _Copy, io: TaskIO, path: InputFile) -> _Pass:
    """Every document of an ingested shard into its shard of texts, row group by row group. No
    rule decides any of it, so a rule's change reuses it whole, and the views of the kept
    documents point into it."""
    return _one_pass(io, path, job, None)


def _score_shard(job: _ScoreJob, io: TaskIO, path: InputFile) -> _Pass:
    """An ingested shard's signal shard: reused whole while its bytes and `job` stay the same
    (a rule's change), and family by family, row group by row group, when `job` changes (a
    signal added scores only that signal)."""
    return _one_pass(io, path, None, job)


COPY_SHARD = Step(_copy_shard)
SCORE_SHARD = Step(_score_shard)


@dataclass
class _Ingested:
    """An ingested shard, and its shard of texts, read by row only for the documents the
    ledger and the examples name (those removed or redacted)."""

    rows: Rows  # the ingested shard
    texts: Path  # its shard of texts
    groups: tuple[str, ...]  # its row groups' SHA-256s

    def group_of(self, row: int) -> int:
        return int(np.searchsorted(self.rows.ends, row, side="right"))

    def meta(self, rows: list[int]) -> list[dict[str, Any]]:
        return self.rows.take(np.array(rows, np.int64), ["file", "sha256"]).to_pylist()

    def removed_texts(self, job: _CleanJob, rows: list[int]) -> dict[int, str]:
        """The removed documents' texts for the ledger (`audit.keep_removed`), ascending `rows`,
        a row group at a time, redacted even under `report` (from the findings kept under
        their row group's identity): the only text a rule's change reads, and only then."""
        if not (job.audit.ledger and job.audit.keep_removed and job.spec.redact is not RedactMode.off):
            return {}
        found: dict[int, str] = {}
        texts = Rows(self.texts)
        for g, members in groupby(rows, self.group_of):
            at = np.array(list(members), np.int64)
            if job.texts_job is None:  # `report`: the shard of texts holds them as ingested
                group, start = _Group(self.rows.file, g, self.groups[g]), int(self.rows.ends[g - 1]) if g else 0
                changed = _redaction(job.redact_job, group, []).changed
                strings = group.table.column("text").take(pa.array(at - start)).to_pylist()
                found |= {i: changed.get(i - start, text) for i, text in zip(at.tolist(), strings)}
            else:
                found |= dict(zip(at.tolist(), texts.take(at, ["text"]).column(0).to_pylist()))
        return found


def _decided(job: _CleanJob, signals: pa.Table, written: pa.Table, ingested: _Ingested) -> tuple[np.ndarray, _Chunk]:
    """Which documents of a shard the rules keep, decided over its signals, and its accounting.
    Only the documents removed or redacted pass through Python, in the order of the ingested
    row groups, each group's removals before its redactions. `written`: the shard of texts'
    `source, file, sha256` (the redacted ones)."""
    cs = conds(job.spec.rules, job.spec.redact)
    cols = signal_columns(signals, [f.name for f in signals.schema if f.name not in ("sha256", "findings_by_type")])
    decided = decide(cs, cols, signals.num_rows)
    by_type = signals.column("findings_by_type")
    chunk = _Chunk(documents_in=signals.num_rows)
    for i in np.flatnonzero(cols["findings"] > 0).tolist():
        if decided[i] < 0 or cs[decided[i]].reason == SECRETS_OR_PII:
            chunk.findings.update(_parsed(by_type[i].as_py()))
    removed = np.flatnonzero(decided >= 0).tolist()
    redacted = np.flatnonzero((decided < 0) & (cols["findings"] > 0)).tolist()
    if job.spec.redact is not RedactMode.redact:
        redacted = []
    rows = sorted(
        [(i, 0) for i in removed] + [(i, 1) for i in redacted], key=lambda e: (ingested.group_of(e[0]), e[1], e[0])
    )
    meta = ingested.meta([i for i, _ in rows])
    texts = ingested.removed_texts(job, removed)
    for (i, kind), doc in zip(rows, meta):
        if kind == 0:
            cond, value = cs[decided[i]], value_at(cols[cs[decided[i]].signal], i)
            why, fate, what, sha_out = reason(cond, value), "filtered", detail(cond, value), None
        else:
            why, fate, what, sha_out = "redacted", "redacted", by_type[i].as_py(), written.column("sha256")[i].as_py()
        chunk.note(why, doc["file"])
        if kind == 0:
            chunk.removed[why] += 1
        else:
            chunk.redacted += 1
        if job.audit.ledger:
            source, path = written.column("source")[i].as_py(), written.column("file")[i].as_py()
            chunk.ledger.add(source, path, doc["sha256"], fate, what, sha_out, texts.get(i))
    return decided < 0, chunk


def _parsed(counts: str) -> dict[str, int]:
    """Findings by type from `_counts`' text (`email=2, ip=1`)."""
    return {k: int(v) for k, v in (item.split("=") for item in counts.split(", "))} if counts else {}


def _as_written(table: pa.Table, red: _Redaction | None) -> pa.Table:
    """`table`'s documents as the shard of texts holds them: redacted by `red` (their text, path
    and SHA-256, for the columns it has), or as they are."""
    if red is None:
        return table
    shas = {i: text_sha256(text) for i, text in red.changed.items()}
    new = {"text": red.changed, "file": red.paths, "sha256": shas}
    columns = [_replaced(table.column(c).combine_chunks(), new.get(c, {})) for c in table.column_names]
    return pa.table(columns, names=table.column_names)


def _replaced(column: pa.Array, new: dict[int, str]) -> pa.Array:
    """`column` with the values at `new`'s indices replaced by `new`'s values."""
    if not new:
        return column
    mask = np.zeros(len(column), dtype=bool)
    order = sorted(new)
    mask[order] = True
    return pc.replace_with_mask(column, pa.array(mask), pa.array([new[i] for i in order], column.type))


def _counts(counts: dict[str, int]) -> str:
    """Redactions by type, as the ledger's detail (`email=2, ip=1`): counts, never the text."""
    return ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))


@dataclass(frozen=True)
class _CleanJob:
    spec: HygieneSpec
    kind: SourceKind
    scan_secrets: bool  # False when ingestion already redacted (or dropped) them
    audit: AuditSpec = field(default_factory=AuditSpec)  # the ledger; removed documents' text in it
    model: ModelRef | None = None  # the quality classifier, when a rule reads its score

    @property
    def conversations(self) -> bool:
        return self.kind is SourceKind.chat

    @property
    def redact_job(self) -> _RedactJob:
        return _RedactJob(self.conversations, self.scan_secrets)

    @property
    def texts_job(self) -> _RedactJob | None:
        """How the shard of texts is redacted: as the output is (`redact`), or so that no
        finding is written even where its document is dropped (`drop`); None: as ingested."""
        return self.redact_job if self.spec.redact in (RedactMode.redact, RedactMode.drop) else None

    @property
    def reads(self) -> frozenset[str]:
        """The signals the rules compare: their families are scored too."""
        return frozenset(signals_read(self.spec.rules, self.spec.redact))

    @property
    def score_job(self) -> _ScoreJob:
        families = families_of(self.kind, self.spec.rules, self.reads)
        uses = {f.uses for f in families}  # only what a scored family reads is part of the identity
        prose, model = (self.spec.signals if "prose" in uses else None), (self.model if "model" in uses else None)
        redact = self.redact_job if self.spec.redact is not RedactMode.off else None
        return _ScoreJob(tuple(f.name for f in families), prose, model, redact)

    @property
    def signal_schema(self) -> pa.Schema:
        return self.score_job.schema


def _clean_shard(job: _CleanJob, io: TaskIO, path: InputFile) -> _Chunk:
    """One input shard after hygiene: its shard of texts and its signals, then the view of its
    kept documents (the output shard of the same name) and its ledger: a pure function of the
    shard, so it runs on any executor, on any node (the shard map's `io`). With a task store
    the shard of texts and the signals are parts of their own, reused while the shard and
    their settings stay the same, so a rule's change reads only numbers; without one both are
    written in one pass. Memory is bounded by a shard's signals and a row group of texts."""
    if io.store is not None:
        texts, texts_reused = shared_outcome(COPY_SHARD, _Copy(job.texts_job), io, path)
        scores, signals_reused = shared_outcome(SCORE_SHARD, job.score_job, io, path)
    else:
        texts = scores = _one_pass(io, path, _Copy(job.texts_job), job.score_job)
        texts_reused = signals_reused = False
    assert texts.texts is not None and scores.signals is not None
    name = path.name
    written = pq.ParquetFile(io.directory / TEXTS / name).read(columns=["source", "file", "sha256"])
    ingested = _Ingested(Rows(io.local(path)), io.directory / TEXTS / name, scores.groups)
    signals = pq.ParquetFile(io.directory / SIGNALS / name).read()
    keep, chunk = _decided(job, signals, written, ingested)
    chunk.scanned = max(
        0 if texts_reused else texts.scanned, 0 if signals_reused else scores.scanned
    )  # a redaction, a signal
    with ParquetSink(io.directory / name, VIEW_SCHEMA) as sink:
        sink.write(written.append_column("row", pa.array(np.arange(len(keep)))).filter(pa.array(keep)))
    chunk.shards = [Shard.of(sink.path, sink.rows), scores.signals, texts.texts]
    if job.audit.ledger:
        with ParquetSink(io.directory / ledger_name(name), LEDGER_SCHEMA) as ledger:
            ledger.write(chunk.ledger.batch())
        chunk.shards.append(Shard.of(ledger.path, ledger.rows, io.directory))
    return chunk


CLEAN_SHARD = Step(_clean_shard)


def clean_source(
    ingested: Path,
    spec: HygieneSpec,
    out: Path,
    io: StageIO,
    *,
    kind: SourceKind = SourceKind.code,
    scan_secrets: bool = True,
    audit: AuditSpec | None = None,
    model: ModelRef | None = None,
) -> HygieneResult:
    """Score, filter and redact one source's shard set into the shard set `out`; every input
    is kept or counted. A task per shard on `io.executor`; the set commits whole, so the output
    does not depend on where the tasks ran. `kind`: the source's (a chat source's documents are
    canonical JSON conversations). Each output shard has its signal shard (`_signals/`).
    `scan_secrets`: False when ingestion already redacted or dropped them (its recorded mode).
    Each output shard has its ledger shard (`text/ledger.py`): what was filtered (the rule) or
    redacted (counts by type), unless `audit.ledger` is off; `audit.keep_removed` adds removed
    documents' redacted text."""
    inputs = [InputFile(str(p)) for p in shard_files(ingested)]
    job = _CleanJob(spec.for_kind(kind), kind, scan_secrets, audit or AuditSpec(), model)
    check_languages(spec.rules.languages)
    check_rules(job)

    def done(chunks: list[_Chunk]) -> str:
        removed = sum(sum(c.removed.values()) for c in chunks)
        return (
            f"hygiene: {sum(c.documents_in for c in chunks):,} documents, {removed:,} removed, "
            f"{sum(c.redacted for c in chunks):,} redacted, {sum(c.scanned for c in chunks):,} scored now "
            f"({len(chunks)}/{len(inputs)} shards)"
        )

    def carry(staging: Path, _: list[_Chunk]) -> None:
        carry_tombstones(ingested, staging)  # ingestion's removals, for `documents`

    subsets = [SIGNALS, TEXTS, *([LEDGER] if job.audit.ledger else [])]
    chunks = map_shards(CLEAN_SHARD, job, inputs, out, io, done, carry, subsets=subsets)
    total = _Chunk()
    for chunk in chunks:
        total.add(chunk)
    shards = list(shards_of(chunks))
    signal_shards = sorted((s for s in shards if Path(s.name).parent.name == SIGNALS), key=lambda s: s.name)
    summary = HygieneSummary(
        documents_in=total.documents_in,
        kept=sum(shard.rows for shard in shards if not is_side(shard.name)),
        scanned=total.scanned,
        removed=dict(sorted(total.removed.items())),
        findings=dict(sorted(total.findings.items())),
        redacted_documents=total.redacted,
        examples=dict(sorted(total.examples.items())),
        signals=signal_histograms(
            [out / s.name for s in signal_shards],
            [s.sha256 for s in signal_shards],
            conds(job.spec.rules, spec.redact),
            total.removed,
        ),
    )
    return HygieneResult(
        [*(shard.artifact(out, io.root) for shard in shards), *tombstone_artifacts(out, io.root)], summary
    )


def check_rules(job: _CleanJob) -> None:
    """A clear error for a rule naming a signal the source does not score, before any work."""
    if "quality_score" in job.reads and job.model is None:
        raise ValueError("hygiene.rules read quality_score: the spec needs quality.classifier (docs/quality.md)")
    scored = {f.name for f in job.signal_schema}
    if unknown := unknown_signals(conds(job.spec.rules, job.spec.redact), scored):
        raise ValueError(
            f"hygiene.rules: no signal {', '.join(unknown)} for a {job.kind.value} source; "
            f"it scores {', '.join(sorted(scored - {'sha256', 'findings_by_type'}))} (docs/quality.md)"
        )


def rescan(shards: Path, sample: int = 2000) -> dict[str, int]:
    """Findings left in the first `sample` documents of a set of shards of texts (the check), a
    row group at a time, each kept under its own identity (a rebuild re-scans the changed ones)."""
    left: Counter[str] = Counter()
    seen = 0
    for path in shard_files(shards):
        for group in range(pq.ParquetFile(path).num_row_groups):
            if seen >= sample:
                return dict(left)
            rows, found = memo(
                _rescan_row_group,
                sample - seen,
                row_group_sha256(path, group),
                partial(_rescan_row_group, sample - seen, path, group),
            )
            left.update(found)
            seen += rows
    return dict(left)


def _rescan_row_group(limit: int, path: Path, group: int) -> tuple[int, Counter[str]]:
    """(documents scanned, findings) of the first `limit` documents of a row group."""
    texts = pq.ParquetFile(path).read_row_group(group, columns=["text"]).column(0).combine_chunks().slice(0, limit)
    left: Counter[str] = Counter()
    for text, lines in zip(texts.to_pylist(), candidate_lines(texts)):
        left.update(scanner().scan(text, lines=lines).counts)
    return len(texts), left

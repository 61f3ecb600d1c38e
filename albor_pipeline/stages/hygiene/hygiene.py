"""Per-source hygiene: quality signals scored once, rules decided over them, then PII redaction.

Each row group's signals (`families.py`: code, language, prose, the classifier's score) and
its redaction findings are kept under their own identity, so a rebuild after a threshold
change scores no text. The rules (`rules.py`: the presets and plain rules of
`hygiene.rules`) drop a document and count it by reason; the ledger names the signal's
value. The signals are written beside the output (`_signals/<shard>`) for `albor whatif`.

The output is a view (`text/documents.py`): each shard lists its kept documents and their
rows in a shard of texts (`_text/<shard>`: every ingested document, redacted), which no
rule decides. A rule's or threshold's change rewrites the views, signals and ledgers from
what is kept, and links the shards of texts: it reads no text.

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
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from albor_pipeline.runtime.artifacts import Artifact, ParquetSink
from albor_pipeline.runtime.shardmap import StageIO, Step, TaskIO, map_shards, shards_of, shared_task
from albor_pipeline.runtime.shards import Shard, row_group_sha256, shard_files
from albor_pipeline.runtime.taskstore import InputFile, memo
from albor_pipeline.spec import DOCUMENT_KINDS, AuditSpec, HygieneSpec, RedactMode, SourceKind
from albor_pipeline.stages.hygiene.families import Family, families_of, signal_schema
from albor_pipeline.stages.hygiene.histograms import signal_histograms
from albor_pipeline.stages.hygiene.language import check_languages
from albor_pipeline.stages.hygiene.rules import (
    SECRETS_OR_PII,
    conds,
    decide,
    detail,
    reason,
    signals_read,
    unknown_signals,
)
from albor_pipeline.summaries.hygiene import HygieneSummary
from albor_pipeline.text.classifier import ModelRef
from albor_pipeline.text.documents import DOC_SCHEMA, VIEW_SCHEMA, text_sha256
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
    """The accounting of documents after hygiene (a row group's, or a shard's: what a task returns)."""

    documents_in: int = 0
    scanned: int = 0  # documents whose text was scored now (not reused from the store)
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


def _texts_table(job: _RedactJob | None, group: _Group) -> pa.Table:
    """A row group as its shard of texts holds it: redacted by `job`, or as ingested."""
    return _as_written(group.table, _redaction(job, group, []) if job is not None else None)


def _chars(texts: pa.Array) -> pa.Array:
    return pc.utf8_length(texts).cast(pa.int64())


def _signals(job: _CleanJob, group: _Group, shas: pa.Array, fresh: list[bool]) -> _Signals:
    """A row group's signals (each family's scored now or reused) and its redaction findings.
    The text is read, and becomes Python strings, only when something is scored now."""
    cols: dict[str, Any] = {
        "sha256": shas,
        "chars": _scored(_chars, None, group.key, lambda: _chars(group.texts()), fresh),
    }
    for family in families_of(job.kind, job.spec.rules, job.reads):
        params = {"prose": job.spec.signals, "model": job.model}.get(family.uses)
        score = partial(_score, family, group, params)
        cols |= _scored(family.score, params, group.key, score, fresh)
    redaction = _Redaction([{} for _ in range(len(shas))], {}, {})
    if job.spec.redact is not RedactMode.off:
        redaction = _redaction(job.redact_job, group, fresh)
    cols["findings"] = [sum(c.values()) for c in redaction.counts]
    cols["findings_by_type"] = [_counts(c) for c in redaction.counts]
    return _Signals(cols, redaction)


def _score(family: Family, group: _Group, params: Any) -> dict[str, list[Any]]:
    return family.score(group.texts(), group.strings, params)


@dataclass
class _Signals:
    cols: dict[str, Any]
    redaction: _Redaction


@dataclass(frozen=True)
class _Texts:
    """An ingested shard's shard of texts (`_text/<name>`) and its row groups' identities."""

    shards: tuple[Shard, ...]
    groups: tuple[str, ...]  # each ingested row group's SHA-256: its signals' and findings' keys


def _copy_shard(job: _RedactJob | None, io: TaskIO, path: InputFile) -> _Texts:
    """Every document of an ingested shard into its shard of texts, redacted (`job`; None: as
    ingested, under `report` and `off`), row group by row group. No rule decides any of it, so
    a rule's change reuses it whole, and the views of the kept documents point into it."""
    local = str(io.local(path))
    keys = []
    with ParquetSink(io.directory / TEXTS / path.name, DOC_SCHEMA) as sink:
        file = pq.ParquetFile(local)
        for index in range(file.num_row_groups):
            group = _Group(file, index, row_group_sha256(local, index))
            keys.append(group.key)
            sink.write(_texts_table(job, group))
    return _Texts((Shard.of(sink.path, sink.rows, io.directory),), tuple(keys))


COPY_SHARD = Step(_copy_shard)


def _clean_row_group(job: _CleanJob, group: _Group, first: int) -> tuple[pa.Table, pa.RecordBatch, _Chunk]:
    """Row group `group` after hygiene: the view of its kept documents (their rows in the shard
    of texts, from row `first`), its signals and its accounting. The signals and findings are
    scored once per row group's bytes and the rules decided over them, so a rule's change reads
    no text; only the documents removed or redacted pass through Python."""
    ingested = group.file.read_row_group(group.index, columns=["source", "file", "sha256"])
    fresh: list[bool] = []
    scored = _signals(job, group, ingested.column("sha256").combine_chunks(), fresh)
    n, red = ingested.num_rows, scored.redaction
    written = _as_written(ingested, red if job.texts_job is not None else None)
    cs = conds(job.spec.rules, job.spec.redact)
    values = {name: np.asarray(v) for name, v in scored.cols.items()}
    decided = decide(cs, values, n)
    chunk = _Chunk(documents_in=n, scanned=n if fresh else 0)
    files, sources, shas = (ingested.column(c).to_pylist() for c in ("file", "source", "sha256"))
    paths, shas_out = written.column("file").to_pylist(), written.column("sha256")
    removed = _removed_texts(job, red, group, decided)
    for i, k in enumerate(decided.tolist()):
        if k < 0 or cs[k].reason == SECRETS_OR_PII:
            chunk.findings.update(red.counts[i])
        if k < 0:
            continue
        value = values[cs[k].signal][i].item()
        chunk.removed[reason(cs[k], value)] += 1
        chunk.note(reason(cs[k], value), files[i])
        if job.audit.ledger:
            chunk.ledger.add(sources[i], paths[i], shas[i], "filtered", detail(cs[k], value), text=removed.get(i))
    keep = decided < 0
    for i in (i for i in sorted(red.changed) if keep[i]) if job.spec.redact is RedactMode.redact else ():
        chunk.redacted += 1
        chunk.note("redacted", files[i])
        if job.audit.ledger:
            chunk.ledger.add(sources[i], paths[i], shas[i], "redacted", _counts(red.counts[i]), shas_out[i].as_py())
    view = written.append_column("row", pa.array(np.arange(first, first + n))).filter(pa.array(keep))
    return view, pa.RecordBatch.from_pydict(scored.cols, schema=job.signal_schema), chunk


def _as_written(table: pa.Table, red: _Redaction | None) -> pa.Table:
    """`table`'s documents as the shard of texts holds them: redacted by `red` (their text, path
    and SHA-256, for the columns it has), or as they are."""
    if red is None:
        return table
    shas = {i: text_sha256(text) for i, text in red.changed.items()}
    new = {"text": red.changed, "file": red.paths, "sha256": shas}
    columns = [_replaced(table.column(c).combine_chunks(), new.get(c, {})) for c in table.column_names]
    return pa.table(columns, names=table.column_names)


def _removed_texts(job: _CleanJob, red: _Redaction, group: _Group, decided: np.ndarray) -> dict[int, str]:
    """The removed documents' texts for the ledger (`audit.keep_removed`), redacted even under
    `report`: the only text a rule's change reads, and only then."""
    if not (job.audit.ledger and job.audit.keep_removed and job.spec.redact is not RedactMode.off):
        return {}
    rows = np.flatnonzero(decided >= 0).tolist()
    texts = group.table.column("text").take(pa.array(rows, pa.int64())).to_pylist()
    return {i: red.changed.get(i, text) for i, text in zip(rows, texts)}


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
    def signal_schema(self) -> pa.Schema:
        return signal_schema(families_of(self.kind, self.spec.rules, self.reads))


def _clean_shard(job: _CleanJob, io: TaskIO, path: InputFile) -> _Chunk:
    """One input shard after hygiene: its shard of texts, then the view of its kept documents
    (the output shard of the same name), their signals and ledger, a row group at a time
    (memory bounded by a row group, 256 documents from ingestion): a pure function of the
    shard, so it runs on any executor, on any node (the shard map's `io`). With a task store
    the shard of texts is a part of its own (`_copy_shard`), reused while the shard and the
    redaction settings stay the same; without one it is written in the same pass."""
    local, name = str(io.local(path)), path.name
    ingested = pq.ParquetFile(local)
    total = _Chunk()
    with ExitStack() as stack:
        texts = shared_task(COPY_SHARD, job.texts_job, io, path) if io.store is not None else None
        copy = None if texts else stack.enter_context(ParquetSink(io.directory / TEXTS / name, DOC_SCHEMA))
        keys = texts.groups if texts else [row_group_sha256(local, i) for i in range(ingested.num_row_groups)]
        sink = stack.enter_context(ParquetSink(io.directory / name, VIEW_SCHEMA))
        signals = stack.enter_context(ParquetSink(io.directory / SIGNALS / name, job.signal_schema))
        ledger_path = io.directory / ledger_name(name)
        ledger = stack.enter_context(ParquetSink(ledger_path, LEDGER_SCHEMA)) if job.audit.ledger else None
        for index, key in enumerate(keys):
            group = _Group(ingested, index, key)
            if copy is not None:
                copy.write(_texts_table(job.texts_job, group))
            view, scored, chunk = _clean_row_group(job, group, total.documents_in)
            sink.write(view)
            signals.write(scored)
            if ledger is not None:
                ledger.write(chunk.ledger.batch())
            total.add(chunk)
    if texts is None:
        assert copy is not None
        texts = _Texts((Shard.of(copy.path, copy.rows, io.directory),), tuple(keys))
    total.shards = [Shard.of(sink.path, sink.rows), Shard.of(signals.path, signals.rows, io.directory), *texts.shards]
    if ledger is not None:
        total.shards.append(Shard.of(ledger.path, ledger.rows, io.directory))
    return total


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

"""Per-source hygiene: heuristic quality filters, then PII redaction.

Filters (thresholds from the StarCoder data card where it gives one) drop a document
and count it by reason: a line longer than 1,000 characters, a mean line length over
100, an alphanumeric fraction under 0.25, an auto-generated marker in the first lines,
or mostly numeric literals and hex/base64 blobs (data, not code); for a text source with
`languages`, a language not listed (counted as `language:<code>`).

E-mails, public IP addresses and phone numbers are replaced by placeholders
(`text/secrets.py`); `drop` removes the document instead and `report` only counts.
Secrets were already redacted by ingestion, which never writes one; under `report`,
ingestion keeps them and hygiene counts them here. A conversation is redacted message by
message.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from albor_pipeline.runtime.artifacts import Artifact, ParquetSink
from albor_pipeline.runtime.shardmap import StageIO, Step, TaskIO, map_shards, shards_of
from albor_pipeline.runtime.shards import Shard, row_group_sha256, shard_files
from albor_pipeline.runtime.taskstore import InputFile, memo
from albor_pipeline.spec import DOCUMENT_KINDS, AuditSpec, HygieneSpec, RedactMode, SourceKind
from albor_pipeline.stages.hygiene.filters import filter_reason, measure_batch
from albor_pipeline.stages.hygiene.language import check_languages
from albor_pipeline.summaries.hygiene import HygieneSummary
from albor_pipeline.text.documents import DOC_SCHEMA, text_sha256
from albor_pipeline.text.ledger import LEDGER, LEDGER_SCHEMA, LedgerRows, is_ledger, ledger_name
from albor_pipeline.text.removal import carry_tombstones, tombstone_artifacts
from albor_pipeline.text.secrets import Lines, candidate_lines, redact_path, redacted, scanner

HYGIENE_KINDS = (*DOCUMENT_KINDS, SourceKind.chat)  # sources with a filtered/<name> stage
EXAMPLES = 5  # file paths kept per reason


@dataclass
class HygieneResult:
    artifacts: list[Artifact]  # the shard set, one shard per input shard
    summary: HygieneSummary


@dataclass
class _Chunk:
    """The accounting of documents after hygiene (a row group's, or a shard's: what a task returns)."""

    documents_in: int = 0
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
        self.redacted += other.redacted
        self.removed.update(other.removed)
        self.findings.update(other.findings)
        for reason, files in other.examples.items():
            self.examples[reason] = (self.examples[reason] + files)[:EXAMPLES]


@dataclass
class _Decided:
    """What hygiene decided for one row group, without the text it passes on: its accounting
    and ledger rows, the rows it keeps, and the new text of those redaction changed. Kept
    under the row group's own identity (`memo`): a rebuild cleans again only the row groups
    whose bytes changed, and the shard is written from the decisions."""

    chunk: _Chunk
    kept: list[int]
    changed: dict[int, str]


def _decide(job: _CleanJob, table: pa.Table, rows: dict[str, list[Any]]) -> _Decided:
    """Filter and redact a row group's documents (`table`, and its `rows` as Python values), in
    a worker process or in-process. Conversations skip the filters (made for code) and are
    redacted message by message."""
    decided = _Decided(_Chunk(), [], {})
    chunk = decided.chunk
    texts = table.column("text")
    spec, conversations = job.spec, job.conversations
    # The batch's regex passes at once (Arrow's RE2); conversations are redacted message by message.
    measured = [None] * len(texts) if conversations else measure_batch(texts, rows["text"])
    scan = not conversations and spec.redact is not RedactMode.off
    lines = candidate_lines(texts, secrets=job.scan_secrets) if scan else [None] * len(texts)
    for i, (text, source, file, sha, stats, where) in enumerate(
        zip(rows["text"], rows["source"], rows["file"], rows["sha256"], measured, lines)
    ):
        chunk.documents_in += 1
        reason = None if conversations else filter_reason(text, spec.filters, stats)
        counts: dict[str, int] = {}
        if reason is None and spec.redact is not RedactMode.off:
            cleaned, counts = redacted(text, conversations, secrets=job.scan_secrets, lines=where)
            chunk.findings.update(counts)
            if counts and spec.redact is RedactMode.drop:
                reason = "secrets_or_pii"
            elif counts and spec.redact is RedactMode.redact:
                text = decided.changed[i] = cleaned
                chunk.redacted += 1
                chunk.note("redacted", file)
        if reason is not None:
            chunk.removed[reason] += 1
            chunk.note(reason, file)
            if job.audit.ledger:
                kept = _kept_text(text, job, conversations, where) if job.audit.keep_removed else None
                chunk.ledger.add(source, _out_path(job, file), sha, "filtered", reason, text=kept)
            continue
        decided.kept.append(i)
        if i in decided.changed and job.audit.ledger:
            chunk.ledger.add(source, _out_path(job, file), sha, "redacted", _counts(counts), text_sha256(text))
    return decided


def _out_path(job: _CleanJob, file: str) -> str:
    """A document's path as hygiene passes it on: PII in it redacted unless `redact` keeps it."""
    return redact_path(file) if job.spec.redact in (RedactMode.redact, RedactMode.drop) else file


def _clean_row_group(job: _CleanJob, path: str, group: int) -> tuple[pa.RecordBatch, _Chunk]:
    """Row group `group` of the shard `path` after hygiene, and its accounting; the decisions
    reused from the store while the row group's bytes stay the same."""
    table = pq.ParquetFile(path).read_row_group(group)
    rows = table.to_pydict()
    decided = memo(_decide, job, row_group_sha256(path, group), lambda: _decide(job, table, rows))
    cols: dict[str, list[Any]] = {name: [] for name in DOC_SCHEMA.names}
    for i in decided.kept:
        text = decided.changed.get(i, rows["text"][i])
        cols["text"].append(text)
        cols["source"].append(rows["source"][i])
        cols["file"].append(_out_path(job, rows["file"][i]))
        cols["sha256"].append(text_sha256(text) if i in decided.changed else rows["sha256"][i])
    return pa.RecordBatch.from_pydict(cols, schema=DOC_SCHEMA), decided.chunk


def _counts(counts: dict[str, int]) -> str:
    """Redactions by type, as the ledger's detail (`email=2, ip=1`): counts, never the text."""
    return ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))


def _kept_text(text: str, job: _CleanJob, conversations: bool, lines: Lines | None) -> str | None:
    """A removed document's text as `audit.keep_removed` keeps it: after redaction, so a
    reviewer never reads a secret or PII (None under `redact: off`: then nothing is kept)."""
    if job.spec.redact is RedactMode.off:
        return None
    return redacted(text, conversations, secrets=job.scan_secrets, lines=lines)[0]


@dataclass(frozen=True)
class _CleanJob:
    spec: HygieneSpec
    conversations: bool
    scan_secrets: bool  # False when ingestion already redacted (or dropped) them
    audit: AuditSpec = field(default_factory=AuditSpec)  # the ledger; removed documents' text in it


def _clean_shard(job: _CleanJob, io: TaskIO, path: InputFile) -> _Chunk:
    """Filter and redact one input shard into the output shard of the same name, a row group
    at a time (memory bounded by a row group, 256 documents from ingestion): a pure function
    of the shard, so it runs on any executor, on any node (the shard map's `io`)."""
    local = str(io.local(path))
    groups = pq.ParquetFile(local).num_row_groups
    total = _Chunk()
    name = path.name
    with ExitStack() as stack:
        sink = stack.enter_context(ParquetSink(io.directory / name, DOC_SCHEMA))
        ledger_path = io.directory / ledger_name(name)
        ledger = stack.enter_context(ParquetSink(ledger_path, LEDGER_SCHEMA)) if job.audit.ledger else None
        for group in range(groups):
            batch, chunk = _clean_row_group(job, local, group)
            sink.write(batch)
            if ledger is not None:
                ledger.write(chunk.ledger.batch())
            total.add(chunk)
    total.shards = [Shard.of(sink.path, sink.rows)]
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
    conversations: bool = False,
    scan_secrets: bool = True,
    audit: AuditSpec | None = None,
) -> HygieneResult:
    """Filter and redact one source's shard set into the shard set `out`; every input is kept
    or counted. A task per shard on `io.executor`; the set commits whole, so the output does
    not depend on where the tasks ran. `conversations`: a chat source's canonical JSON.
    `scan_secrets`: False when ingestion already redacted or dropped them (its recorded mode).
    Each output shard has its ledger shard (`text/ledger.py`): what was filtered (the rule) or
    redacted (counts by type), unless `audit.ledger` is off; `audit.keep_removed` adds removed
    documents' redacted text."""
    inputs = [InputFile(str(p)) for p in shard_files(ingested)]
    check_languages(spec.filters.languages)

    def done(chunks: list[_Chunk]) -> str:
        removed = sum(sum(c.removed.values()) for c in chunks)
        return (
            f"hygiene: {sum(c.documents_in for c in chunks):,} documents, {removed:,} removed, "
            f"{sum(c.redacted for c in chunks):,} redacted ({len(chunks)}/{len(inputs)} shards)"
        )

    job = _CleanJob(spec, conversations, scan_secrets, audit or AuditSpec())

    def carry(staging: Path, _: list[_Chunk]) -> None:
        carry_tombstones(ingested, staging)  # ingestion's removals, for `documents`

    chunks = map_shards(CLEAN_SHARD, job, inputs, out, io, done, carry, subsets=[LEDGER] if job.audit.ledger else [])
    total = _Chunk()
    for chunk in chunks:
        total.add(chunk)
    shards = list(shards_of(chunks))
    summary = HygieneSummary(
        documents_in=total.documents_in,
        kept=sum(shard.rows for shard in shards if not is_ledger(shard.name)),
        removed=dict(sorted(total.removed.items())),
        findings=dict(sorted(total.findings.items())),
        redacted_documents=total.redacted,
        examples=dict(sorted(total.examples.items())),
    )
    return HygieneResult(
        [*(shard.artifact(out, io.root) for shard in shards), *tombstone_artifacts(out, io.root)], summary
    )


def rescan(shards: Path, sample: int = 2000) -> dict[str, int]:
    """Findings left in the first `sample` documents of a hygiene shard set (the check), a row
    group at a time, each kept under its own identity (a rebuild re-scans the changed ones)."""
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
    texts = pq.ParquetFile(path).read_row_group(group, columns=["text"]).column(0).slice(0, limit)
    left: Counter[str] = Counter()
    for text, lines in zip(texts.to_pylist(), candidate_lines(texts)):
        left.update(scanner().scan(text, lines=lines).counts)
    return len(texts), left

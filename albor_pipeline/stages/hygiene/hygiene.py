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
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from albor_pipeline.runtime.artifacts import Artifact, ParquetSink
from albor_pipeline.runtime.shardmap import StageIO, TaskIO, map_shards, shards_of
from albor_pipeline.runtime.shards import Shard, iter_batches, shard_files
from albor_pipeline.spec import DOCUMENT_KINDS, AuditSpec, HygieneSpec, RedactMode, SourceKind
from albor_pipeline.stages.hygiene.filters import filter_reason, measure_batch
from albor_pipeline.stages.hygiene.language import check_languages
from albor_pipeline.stages.hygiene.report import HygieneSummary
from albor_pipeline.text.documents import BATCH_ROWS, DOC_SCHEMA, text_sha256
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
    """One batch of documents after hygiene, with its accounting (what a worker returns)."""

    cols: dict[str, list[Any]]
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


def _clean_chunk(path: str, groups: list[int], job: _CleanJob) -> _Chunk:
    """Filter and redact row groups `groups` of `path` (in a worker process, or in-process).
    Conversations skip the filters (made for code) and are redacted message by message."""
    chunk = _Chunk({name: [] for name in DOC_SCHEMA.names})
    table = pq.ParquetFile(path).read_row_groups(groups)
    rows, texts = table.to_pydict(), table.column("text")
    spec, conversations = job.spec, job.conversations
    redact_files = spec.redact in (RedactMode.redact, RedactMode.drop)
    # The batch's regex passes at once (Arrow's RE2); conversations are redacted message by message.
    measured = [None] * len(texts) if conversations else measure_batch(texts, rows["text"])
    scan = not conversations and spec.redact is not RedactMode.off
    lines = candidate_lines(texts, secrets=job.scan_secrets) if scan else [None] * len(texts)
    for text, source, file, sha, stats, where in zip(
        rows["text"], rows["source"], rows["file"], rows["sha256"], measured, lines
    ):
        chunk.documents_in += 1
        original = text
        reason = None if conversations else filter_reason(text, spec.filters, stats)
        counts: dict[str, int] = {}
        if reason is None and spec.redact is not RedactMode.off:
            cleaned, counts = redacted(text, conversations, secrets=job.scan_secrets, lines=where)
            chunk.findings.update(counts)
            if counts and spec.redact is RedactMode.drop:
                reason = "secrets_or_pii"
            elif counts and spec.redact is RedactMode.redact:
                text = cleaned
                chunk.redacted += 1
                chunk.note("redacted", file)
        path = redact_path(file) if redact_files else file
        if reason is not None:
            chunk.removed[reason] += 1
            chunk.note(reason, file)
            if job.audit.ledger:
                kept = _kept_text(text, job, conversations, where) if job.audit.keep_removed else None
                chunk.ledger.add(source, path, sha, "filtered", reason, text=kept)
            continue
        out_sha = sha if text is original else text_sha256(text)
        if counts and spec.redact is RedactMode.redact and job.audit.ledger:
            chunk.ledger.add(source, path, sha, "redacted", _counts(counts), out_sha)
        chunk.cols["text"].append(text)
        chunk.cols["source"].append(source)
        chunk.cols["file"].append(path)
        chunk.cols["sha256"].append(out_sha)
    return chunk


def _counts(counts: dict[str, int]) -> str:
    """Redactions by type, as the ledger's detail (`email=2, ip=1`): counts, never the text."""
    return ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))


def _kept_text(text: str, job: _CleanJob, conversations: bool, lines: Lines | None) -> str | None:
    """A removed document's text as `audit.keep_removed` keeps it: after redaction, so a
    reviewer never reads a secret or PII (None under `redact: off`: then nothing is kept)."""
    if job.spec.redact is RedactMode.off:
        return None
    return redacted(text, conversations, secrets=job.scan_secrets, lines=lines)[0]


CHUNK_ROW_GROUPS = max(1, BATCH_ROWS // 256)  # ingestion writes 256-row groups: ~2k documents a chunk


@dataclass(frozen=True)
class _CleanJob:
    spec: HygieneSpec
    conversations: bool
    scan_secrets: bool  # False when ingestion already redacted (or dropped) them
    audit: AuditSpec = field(default_factory=AuditSpec)  # the ledger; removed documents' text in it


def _clean_shard(job: _CleanJob, io: TaskIO, path: str) -> _Chunk:
    """Filter and redact one input shard into the output shard of the same name, a chunk of
    row groups at a time (memory bounded by a chunk): a pure function of the shard, so it
    runs on any executor, on any node (the shard map's `io`)."""
    local = str(io.local(path))
    groups = pq.ParquetFile(local).num_row_groups
    total = _Chunk({})
    name = Path(path).name
    with ExitStack() as stack:
        sink = stack.enter_context(ParquetSink(io.directory / name, DOC_SCHEMA))
        ledger_path = io.directory / ledger_name(name)
        ledger = stack.enter_context(ParquetSink(ledger_path, LEDGER_SCHEMA)) if job.audit.ledger else None
        for start in range(0, groups, CHUNK_ROW_GROUPS):
            part = list(range(start, min(start + CHUNK_ROW_GROUPS, groups)))
            chunk = _clean_chunk(local, part, job)
            sink.write(pa.RecordBatch.from_pydict(chunk.cols, schema=DOC_SCHEMA))
            if ledger is not None:
                ledger.write(chunk.ledger.batch())
            total.add(chunk)
    total.shards = [Shard.of(sink.path, sink.rows)]
    if ledger is not None:
        total.shards.append(Shard.of(ledger.path, ledger.rows, io.directory))
    return total


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
    inputs = [str(p) for p in shard_files(ingested)]
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

    chunks = map_shards(
        _clean_shard,
        job,
        inputs,
        out,
        io.executor,
        done,
        io.progress,
        carry,
        subsets=[LEDGER] if job.audit.ledger else [],
    )
    total = _Chunk({})
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
    """Findings left in the first `sample` documents of a hygiene shard set (the check)."""
    left: Counter[str] = Counter()
    seen = 0
    for batch in iter_batches(shards, ["text"], BATCH_ROWS):
        texts = batch.column(0).slice(0, sample - seen)
        for text, lines in zip(texts.to_pylist(), candidate_lines(texts)):
            left.update(scanner().scan(text, lines=lines).counts)
        seen += len(texts)
        if seen >= sample:
            break
    return dict(left)

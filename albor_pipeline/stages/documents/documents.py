"""Exact dedup across sources and content-hash holdout assignment.

A document's split is a function of (split seed, its SHA-256) alone, so splits are
disjoint by construction and a document never moves when other documents come or go.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from albor_pipeline.runtime import hashpart
from albor_pipeline.runtime.artifacts import TEMP_SUFFIX, Artifact, ParquetSink, file_sha256, write_array
from albor_pipeline.runtime.shardmap import StageIO, Step, TaskIO, map_shards, map_tasks
from albor_pipeline.runtime.shards import Shard, shard_name
from albor_pipeline.runtime.taskstore import InputFile
from albor_pipeline.spec import SPLITS, AuditSpec, HoldoutSpec, NearDedupSpec
from albor_pipeline.stages.documents.decontam import Decontaminator
from albor_pipeline.stages.documents.fates import NONE_SPOOLED, Fates, SpooledFates, ten_thousandths
from albor_pipeline.stages.documents.lsh import LshJob
from albor_pipeline.stages.documents.minhash import MAX_HASH, Signer
from albor_pipeline.stages.documents.neardup import NearDupIndex
from albor_pipeline.stages.documents.removal import RemovalIndex, drop_removed
from albor_pipeline.summaries.documents import (
    BenchmarkFacts,
    Decontaminated,
    DocumentsSummary,
    NearDuplicates,
    Removals,
)
from albor_pipeline.text.documents import DOC_SCHEMA, iter_documents, read_documents, sha_keys
from albor_pipeline.text.ledger import LEDGER, LEDGER_SCHEMA, LedgerRows, is_ledger
from albor_pipeline.text.removal import Tombstone
from albor_pipeline.text.secrets import redact_path
from albor_pipeline.text.shingles import word_hashes


def split_of(sha256_hex: str, holdout: HoldoutSpec) -> str:
    """`u = H(seed, sha256)` in [0, 1): val below val_fraction, then test, else train."""
    digest = hashlib.sha256(f"{holdout.seed}:{sha256_hex}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    if u < holdout.val_fraction:
        return "val"
    if u < holdout.val_fraction + holdout.test_fraction:
        return "test"
    return "train"


@dataclass
class DocumentsResult:
    # split -> its shard set, a shard per input shard; LEDGER and SIGNATURES -> theirs
    artifacts: dict[str, list[Artifact]]
    summary: DocumentsSummary


@dataclass(frozen=True)
class _ScanJob:
    """What every row group's scan needs: the signer and the benchmarks (with the group's
    bytes and rows, a scan task's identity: it is reused while they stay the same)."""

    signer: Signer | None
    decon: Decontaminator | None
    removal: RemovalIndex | None = None


SCAN_MIN_GROUPS = 8  # a local pool's start-up pays off from ~2k documents


@dataclass(frozen=True)
class _ScanItem:
    task: int
    first: int  # the scan's number of its first document
    input: int
    group: int  # row group of the input
    group_row: int  # the input row of the group's first row
    rows: np.ndarray  # the group's rows to scan (exact-unique documents), int32


@dataclass(frozen=True)
class _GroupScan:
    """A row group's scan: its signatures' file (with near dedup) and its benchmark hits by
    the group's document index."""

    shards: tuple[Shard, ...]
    hits: dict[int, list[str]]
    removed: dict[int, tuple[str, str]] = field(default_factory=dict)  # removal requests' matches


def _scan_group(job: _ScanJob, io: TaskIO, item: tuple[str, int, np.ndarray]) -> _GroupScan:
    """Row group `group` of input `path` (its exact-unique `rows`): each document's words
    hashed once for its MinHash signature (saved as `<source>-<shard>-g<group>.npy`), its
    benchmark hits and its match with a removed document. A pure function of the group's
    bytes, for any executor."""
    path, group, rows = item
    hashing = job.signer is not None or job.decon is not None
    table = read_documents(Path(path), ["sha256", *(["text"] if hashing else [])], group=group, local=io.local)
    sigs, hits, removed = [], {}, {}
    for k, row in enumerate(rows.tolist()):
        words = word_hashes(table.column("text")[row].as_py()) if hashing else None
        sig = job.signer.signature(words) if job.signer is not None and words is not None else None
        if sig is not None:
            sigs.append(sig)
        if job.decon and words is not None and (found := job.decon.hits(words)):
            hits[k] = found
        if job.removal and (hit := job.removal.match(table.column("sha256")[row].as_py(), sig, words)):
            removed[k] = hit
    if not sigs:
        return _GroupScan((), hits, removed)
    out = io.directory / _signatures_name(path, group)
    write_array(out, np.stack(sigs), npy=True)
    shard = Shard.of(out, len(sigs), io.directory)
    io.spool(out)  # on a node without the run's copy: uploaded, and gone from here
    return _GroupScan((shard,), hits, removed)


def _signatures_name(path: str, group: int) -> str:
    return f"{Path(path).parent.name}-{Path(path).stem}-g{group:05d}.npy"


def _scan_reads(job: _ScanJob, io: TaskIO, item: tuple[str, int, np.ndarray]) -> dict[str, object]:
    """What a scan task scans (its identity): its settings and its rows' texts by their SHA-256
    (the `sha256` column, the text's own hash), not its shard's bytes: a rebuild scans again
    only the row groups holding an edited document, not every group of its shard."""
    path, group, rows = item
    shas = pq.ParquetFile(io.local(path)).read_row_group(group, columns=["sha256"]).column(0)
    return {
        "signer": job.signer,
        "decontamination": job.decon.reads() if job.decon else None,
        "removal": job.removal.reads() if job.removal else None,
        "texts": shas.take(pa.array(rows, pa.int64())).to_pylist(),
        "file": _signatures_name(path, group),
    }


SCAN_GROUP = Step(_scan_group, _scan_reads, inline_below=SCAN_MIN_GROUPS)


def _spool_group(lsh: LshJob, io: TaskIO, item: tuple[int, int, str, np.ndarray | None]) -> np.ndarray:
    """Scan task `task`'s signatures (documents `first`, ...) spooled for LSH, or in a
    survivors' round only those `keep` says: the partition offsets."""
    task, first, sigs, keep = item
    return lsh.spool_signatures(task, first, np.load(io.local(sigs)), io, keep)


SPOOL_GROUP = Step(_spool_group, kept=False)


class _Locator:
    """(input, row) of scanned documents, from the scan's items and their `rows` (every item's
    rows, which the items view: a 4-byte row per document, held once)."""

    def __init__(self, items: list[_ScanItem], rows: np.ndarray) -> None:
        self.documents = len(rows)
        self.firsts = np.array([it.first for it in items] + [self.documents], dtype=np.int64)
        self.inputs = np.array([it.input for it in items], dtype=np.int64)
        self.group_rows = np.array([it.group_row for it in items], dtype=np.int64)
        self.rows = rows

    def __call__(self, docs: np.ndarray) -> np.ndarray:
        items = np.searchsorted(self.firsts, docs, side="right") - 1
        return np.stack([self.inputs[items], self.group_rows[items] + self.rows[docs]], axis=1)

    def one(self, doc: int) -> tuple[int, int]:
        i, row = self(np.array([doc]))[0].tolist()
        return i, row


def _drop(scan: _Scan, docs: dict[int, str], where: _Locator, fate: str) -> None:
    """Drop the scanned documents `docs` (a few: removal requests' copies, contaminated train
    documents), noting each one's detail for the ledger."""
    by_input: dict[int, list[tuple[int, int]]] = {}
    for doc, detail in docs.items():
        i, row = where.one(doc)
        scan.codes[i][row] = DROPPED
        by_input.setdefault(i, []).append((row, scan.fates.text(detail)))
    for i, noted in by_input.items() if scan.ledger else ():
        rows, texts = np.array(noted, dtype=np.int64).reshape(-1, 2).T
        scan.fates.add(i, rows, fate, texts)


def _identities(inputs: list[tuple[str, Path]], wanted: dict[int, list[int]]) -> dict[tuple[int, int], str]:
    """`sha256 (source:file)` of the (input, row) documents named, reading each input's two
    columns once (the near-duplicate representatives a ledger names)."""
    out = {}
    for i, rows in wanted.items():
        picked = pq.read_table(inputs[i][1], columns=["file", "sha256"]).take(pa.array(rows, pa.int64())).to_pydict()
        for row, file, sha in zip(rows, picked["file"], picked["sha256"], strict=True):
            out[(i, row)] = f"{sha} ({inputs[i][0]}:{file})"
    return out


def _file_of(inputs: list[tuple[str, Path]], i: int, row: int) -> str:
    """`source:file` of one document, read when a report names it (a few examples), redacted
    as every recorded path is."""
    return f"{inputs[i][0]}:{redact_path(pq.read_table(inputs[i][1], columns=['file']).column(0)[row].as_py())}"


def _scan_items(inputs: list[tuple[str, Path]], codes: list[np.ndarray]) -> tuple[list[_ScanItem], np.ndarray]:
    """A scan task per row group holding exact-unique documents, numbering them in order, and
    all their rows, counted first and then filled in place (each item's `rows` is a view)."""
    groups: list[tuple[int, int, int, int]] = []  # (input, row group, its first row, its last + 1)
    for i, (_, path) in enumerate(inputs):
        meta = pq.ParquetFile(path).metadata
        start = 0
        for group in range(meta.num_row_groups):
            groups.append((i, group, start, start + meta.row_group(group).num_rows))
            start = groups[-1][3]
    kept = [int(np.count_nonzero(codes[i][start:end] != DROPPED)) for i, _, start, end in groups]
    every = np.zeros(sum(kept), np.int32)
    items: list[_ScanItem] = []
    docs = 0
    for (i, group, start, end), n in zip(groups, kept):
        if n:
            every[docs : docs + n] = np.flatnonzero(codes[i][start:end] != DROPPED)
            items.append(_ScanItem(len(items), docs, i, group, start, every[docs : docs + n]))
            docs += n
    return items, every


@dataclass(frozen=True)
class _Scan:
    """What the scan works on and with, by name: the inputs (source, Parquet shard) and their
    split `codes` (which its steps update in place), where and how its tasks run, the steps
    to take (each None when off), and whether a ledger is kept (near dedup then names each
    removed member's representative) with the fates it records."""

    inputs: list[tuple[str, Path]]
    codes: list[np.ndarray]
    spool: Path  # the scan's signature files and LSH spool; its parent holds the shingle spool
    io: StageIO
    near: NearDedupSpec | None
    decon: Decontaminator | None
    removal: RemovalIndex | None
    ledger: bool
    fates: Fates  # each step notes the fates of what it drops (with the ledger)


@dataclass(frozen=True)
class _Found:
    """What the scan tasks found, by scanned document (`_Locator`): benchmark hits and removal
    requests' matches (an entry per hit or match, not per document); with near dedup, the
    index then holds the LSH candidates."""

    hits: dict[int, list[str]]
    removed: dict[int, tuple[str, str]]  # how it matched (`exact`, `near`), the tombstone's SHA-256
    signed: list[tuple[int, int, str]] = field(default_factory=list)  # (task, first, signatures file)


@dataclass(frozen=True)
class _Scanned:
    """What the scan found (its items say where its signatures are spooled, for the split writers)."""

    near: NearDuplicates | None
    decontaminated: Decontaminated | None
    items: list[_ScanItem]
    removal: Removals | None


def _scan(scan: _Scan) -> _Scanned:
    """One pass over the exact-unique documents finds what each step needs (`_find`); then
    three steps decide in order, each on the codes the one before left: removal requests'
    copies go, then near-duplicate clusters of the rest, then train documents holding
    benchmark text. Each notes its drops' fates in `scan.fates`: a step drops only documents
    the ones before kept, so no two decide on the same document."""
    items, rows = _scan_items(scan.inputs, scan.codes)
    where = _Locator(items, rows)
    near = scan.near
    index = NearDupIndex(near.ngram, near.num_perm, near.bands, near.threshold) if near else None
    found = _find(scan, items, where, index)
    removed = _remove(scan, scan.removal, where, found.removed) if scan.removal else None
    clustered = _near_dedup(scan, near, index, where, found) if near and index else None
    decontaminated = _decontaminate(scan, scan.decon, where, found.hits) if scan.decon else None
    return _Scanned(near=clustered, decontaminated=decontaminated, items=items, removal=removed)


def _find(scan: _Scan, items: list[_ScanItem], where: _Locator, index: NearDupIndex | None) -> _Found:
    """A task per row group (`_scan_group`, words hashed once per document) finds each step's
    evidence at once: benchmark hits, removal requests' matches and (with near dedup) MinHash
    signatures, whose LSH candidates then go into `index`."""
    job = _ScanJob(index.signer if index else None, scan.decon, scan.removal)
    groups = [(str(scan.inputs[it.input][1]), it.group, it.rows) for it in items]
    scanned = map_tasks(SCAN_GROUP, job, groups, scan.spool, scan.io)
    hits = {it.first + k: names for it, group in zip(items, scanned) for k, names in group.hits.items()}
    removed = {it.first + k: hit for it, group in zip(items, scanned) for k, hit in group.removed.items()}
    if index:
        signed = [(it.task, it.first, str(scan.spool / g.shards[0].name)) for it, g in zip(items, scanned) if g.shards]
        _candidates(scan, index, where, signed, None)
        return _Found(hits, removed, signed)
    return _Found(hits, removed)


def _candidates(
    scan: _Scan, index: NearDupIndex, where: _Locator, signed: list[tuple[int, int, str]], keep: np.ndarray | None
) -> None:
    """The LSH candidates of the scanned documents (or of those `keep` says) into `index`."""
    lsh = index.lsh(scan.spool, where.documents)
    items = [(t, f, sigs, None if keep is None else keep[f : where.firsts[t + 1]]) for t, f, sigs in signed]
    waves = map_tasks(SPOOL_GROUP, lsh, items, scan.spool, scan.io)
    stacked = np.stack(waves) if waves else np.zeros((0, lsh.partitions + 1), np.int64)
    index.find_candidates(lsh, stacked, where.firsts, scan.io)


def _remove(scan: _Scan, removal: RemovalIndex, where: _Locator, matched: dict[int, tuple[str, str]]) -> Removals:
    """Removal requests' copies go first, so near dedup clusters only what they leave. Each
    fate names the tombstone its document matched, exactly or as a near-duplicate."""
    names, file_of = [name for name, _ in scan.inputs], partial(_file_of, scan.inputs)
    report = drop_removed(matched, where.one, names, scan.codes, DROPPED, file_of, len(removal.sha256))
    why = "{} copy of a document removed by request (sha256 {})"
    _drop(scan, {doc: why.format(*hit) for doc, hit in sorted(matched.items())}, where, "removed")
    return report


def _near_dedup(
    scan: _Scan, spec: NearDedupSpec, index: NearDupIndex, where: _Locator, found: _Found
) -> NearDuplicates:
    """Cluster near-duplicates among the documents the removal requests left (a candidate pair
    with a removed document goes: its copy is gone already); members either leave (remove)
    or take their representative's split (cluster-aware holdout). The representative is the
    first member in spec order, as in exact dedup. Each removed member's fate names its
    representative (with the ledger) and the best Jaccard that joined it. Members are handled
    as arrays, an input at a time: no Python object per member."""
    inputs, codes = scan.inputs, scan.codes
    removed = np.fromiter(found.removed, dtype=np.int64, count=len(found.removed))
    if len(removed):
        index.pairs = index.pairs[~np.isin(index.pairs, removed).any(axis=1)]
    if scan.io.progress:
        scan.io.progress(f"documents: {where.documents:,} signatures, {len(index.pairs):,} LSH candidate pairs")
    index.verify_shards([str(p) for _, p in inputs], where, scan.spool.parent, scan.io)
    _survivor_rounds(scan, index, where, found.signed)
    reps, members = index.clusters.members()  # by representative, the representative first
    firsts = np.flatnonzero(np.concatenate((reps[:1] == reps[:1], reps[1:] != reps[:-1])))  # where each cluster starts
    sizes = Counter(np.diff(np.append(firsts, len(reps))).tolist())
    moved = members != reps
    member_at, rep_docs = where(members[moved]), reps[moved]
    dropped: Counter[str] = Counter()
    if spec.remove:
        texts = _representative_texts(scan, where, rep_docs) if scan.ledger else np.zeros(len(rep_docs), np.int64)
        best = ten_thousandths(_best_jaccard(index.verified, members[moved], spec.threshold))
        for i in np.unique(member_at[:, 0]).tolist():
            mine = member_at[:, 0] == i
            codes[i][member_at[mine, 1]] = DROPPED
            dropped[inputs[i][0]] += int(mine.sum())
            if scan.ledger:
                scan.fates.add(i, member_at[mine, 1], "near_duplicate", texts[mine], best[mine])
    else:
        rep_at = where(rep_docs)
        split = np.zeros(len(rep_docs), np.uint8)
        for i in np.unique(rep_at[:, 0]).tolist():
            mine = rep_at[:, 0] == i
            split[mine] = codes[i][rep_at[mine, 1]]
        for i in np.unique(member_at[:, 0]).tolist():
            mine = member_at[:, 0] == i
            codes[i][member_at[mine, 1]] = split[mine]
    examples = [(int(v["a"]), int(v["b"]), round(float(v["score"]), 4)) for v in index.verified[:5]]
    return NearDuplicates(
        removed=dict(sorted(dropped.items())),
        clusters=sum(sizes.values()),
        cluster_sizes={str(k): v for k, v in sorted(sizes.items())},
        candidate_pairs=len(index.scored),
        verified_pairs=len(index.verified),
        examples=[(_file_of(inputs, *where.one(a)), _file_of(inputs, *where.one(b)), j) for a, b, j in examples],
    )


def _survivor_rounds(scan: _Scan, index: NearDupIndex, where: _Locator, signed: list[tuple[int, int, str]]) -> None:
    """`NearDupIndex.rounds` over the scan's spooled signatures, its pairs scored in tasks."""
    candidates = partial(_candidates, scan, index, where, signed)
    files = [str(p) for _, p in scan.inputs]
    verify = partial(index.verify_shards, files, where, scan.spool.parent, scan.io)
    for joined in index.rounds(where.documents, candidates, verify):
        if scan.io.progress:
            scan.io.progress(f"documents: a survivors' round joined {joined:,} more pairs")


def _representative_texts(scan: _Scan, where: _Locator, rep_docs: np.ndarray) -> np.ndarray:
    """Per removed member, the index of its representative's `sha256 (source:file)` among the
    fates' texts: a text per cluster, each representative input's two columns read once."""
    roots = np.unique(rep_docs)
    at = where(roots)
    wanted = {i: at[at[:, 0] == i, 1].tolist() for i in np.unique(at[:, 0]).tolist()}
    names = _identities(scan.inputs, wanted)
    texts = np.array([scan.fates.text(names[(i, row)]) for i, row in at.tolist()], dtype=np.int64)
    return texts[np.searchsorted(roots, rep_docs)]


def _best_jaccard(verified: np.ndarray, docs: np.ndarray, default: float) -> np.ndarray:
    """Per document of `docs`, the best Jaccard of the verified pairs that joined it (`default`
    for one no pair names)."""
    if not len(verified):
        return np.full(len(docs), default)
    ends = np.concatenate([verified["a"], verified["b"]])
    scores = np.concatenate([verified["score"], verified["score"]])
    order = np.lexsort((scores, ends))  # by document, then score: a document's best is its last
    ends, scores = ends[order], scores[order]
    last = np.flatnonzero(np.append(ends[1:] != ends[:-1], True))
    ends, scores = ends[last], scores[last]
    k = np.minimum(np.searchsorted(ends, docs), len(ends) - 1)
    return np.where(ends[k] == docs, scores[k], default)


def _decontaminate(scan: _Scan, decon: Decontaminator, where: _Locator, hits: dict[int, list[str]]) -> Decontaminated:
    """Train documents sharing an n-gram with a benchmark go (only train must not contain eval
    text), decided last: a near-duplicate kept takes its representative's split, so only then
    is its split known. Each fate names the benchmarks."""
    inputs, codes = scan.inputs, scan.codes
    dropped: Counter[str] = Counter()
    per_benchmark: Counter[str] = Counter()
    examples: list[tuple[str, str]] = []
    train: dict[int, str] = {}
    for doc, names in sorted(hits.items()):
        i, row = where.one(doc)
        if codes[i][row] != SPLIT_CODES["train"]:
            continue
        train[doc] = ", ".join(names)
        dropped[inputs[i][0]] += 1
        per_benchmark.update(names)
        if len(examples) < 5:
            examples.append((_file_of(inputs, i, row), ", ".join(names)))
    _drop(scan, train, where, "decontaminated")
    return Decontaminated(
        ngram=decon.n,
        benchmarks={n: BenchmarkFacts(**r, train_dropped=per_benchmark[n]) for n, r in decon.report().items()},
        dropped=dict(sorted(dropped.items())),
        examples=examples,
    )


SPLIT_CODES = {split: np.uint8(k) for k, split in enumerate(SPLITS)}
SIGNATURES = "minhash"  # the set's subdirectory of signature files, with near dedup (`signature_file`)
DROPPED = np.uint8(255)  # a document's split code once dedup or decontamination drops it
_KEY_RECORD = np.dtype([("hi", "<u8"), ("lo", "<u8"), ("doc", "<i8")])
REPEAT = np.dtype([("input", "<i4"), ("row", "<i4"), ("kept", "<i4")])
"""An exact repeat: its input and row there, and the input holding the first document with its
SHA-256 (12 bytes: the run's process holds a partition's repeats, not a Python object each)."""


@dataclass(frozen=True)
class _KeyJob:
    spool: str
    partitions: int
    holdout: HoldoutSpec
    firsts: np.ndarray  # each input's first document number, then the total


def _key_shard(job: _KeyJob, io: TaskIO, item: tuple[int, str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Input shard i's SHA-256 keys scattered by hash partition, tagged with their global
    document index (`first` is the shard's first); returns the partition offsets and each
    document's split code (its split is a function of its hash alone)."""
    i, path, first = item
    keys, codes = [], []
    for batch in pq.ParquetFile(io.local(path)).iter_batches(batch_size=65536, columns=["sha256"]):
        keys.append(sha_keys(batch.column(0)))
        codes += [SPLIT_CODES[split_of(sha, job.holdout)] for sha in batch.column(0).to_pylist()]
    words = np.concatenate(keys).view(np.uint64).reshape(-1, 2) if keys else np.zeros((0, 2), np.uint64)
    records = np.empty(len(words), _KEY_RECORD)
    records["hi"], records["lo"] = words[:, 0], words[:, 1]
    records["doc"] = np.arange(first, first + len(words))
    part = words[:, 0] % np.uint64(job.partitions)
    offsets = hashpart.scatter(io, job.spool, "keys", i, records, part, job.partitions)
    return offsets, np.array(codes, dtype=np.uint8)


KEY_SHARD = Step(_key_shard, kept=False)


def _repeats(job: _KeyJob, io: TaskIO, item: tuple[int, np.ndarray, np.ndarray]) -> np.ndarray:
    """Every repeat in one hash partition (REPEAT records, by document): its records arrive in
    document order, so a stable sort puts each key's first document first."""
    records = hashpart.gather(io.node, job.spool, "keys", item[1], item[2])
    if records is None:
        return np.zeros(0, REPEAT)
    order = np.lexsort((records["lo"], records["hi"]))  # stable: documents stay ascending per key
    hi, lo, doc = records["hi"][order], records["lo"][order], records["doc"][order]
    starts = np.concatenate(([True], (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])))
    first = doc[starts][np.cumsum(starts) - 1][~starts]
    doc = doc[~starts]
    by_doc = np.argsort(doc, kind="stable")
    doc, first = doc[by_doc], first[by_doc]
    out = np.zeros(len(doc), REPEAT)
    out["input"] = np.searchsorted(job.firsts, doc, side="right") - 1
    out["row"] = doc - job.firsts[out["input"]]
    out["kept"] = np.searchsorted(job.firsts, first, side="right") - 1
    return out


REPEATS = Step(_repeats, kept=False)


@dataclass
class ExactDedup:
    """Exact dedup of a list of inputs, documents numbered in input order."""

    codes: list[np.ndarray]  # per input, each document's split code; DROPPED for a repeat
    repeats: list[np.ndarray]  # a hash partition's REPEAT records each, by document


def exact_dedup(paths: list[Path], holdout: HoldoutSpec, spool_dir: Path, io: StageIO) -> ExactDedup:
    """Exact dedup over every document of `paths` in order, by hash partitioning: a task per
    input scatters its 128-bit SHA-256 keys, a task per partition finds the repeats. Only the
    repeats and a byte per document reach this process, never a key per document."""
    rows = [pq.ParquetFile(path).metadata.num_rows for path in paths]
    firsts = np.concatenate(([0], np.cumsum(rows, dtype=np.int64)))
    partitions = hashpart.partition_count(int(firsts[-1]), _KEY_RECORD.itemsize)
    with tempfile.TemporaryDirectory(prefix=".albor-keys-", suffix=TEMP_SUFFIX, dir=spool_dir) as spool:
        job = _KeyJob(spool, partitions, holdout, firsts)
        items = [(i, str(path), int(firsts[i])) for i, path in enumerate(paths)]
        scattered = map_tasks(KEY_SHARD, job, items, Path(spool), io)
        offsets = np.stack([o for o, _ in scattered]) if scattered else np.zeros((0, 2), np.int64)
        parts = hashpart.partition_items(offsets)
        found = map_tasks(REPEATS, job, parts, Path(spool), io)
    codes = [c if c.flags.writeable else np.array(c) for _, c in scattered]  # Ray hands back read-only arrays
    for part in found:
        for i in np.unique(part["input"]).tolist():
            codes[i][part["row"][part["input"] == i]] = DROPPED
    return ExactDedup(codes, found)


@dataclass(frozen=True)
class _SplitShards:
    """Input shard i's documents as shard i of each split's set, in SPLITS order, then (with
    near dedup) their MinHash signatures, a file per split shard."""

    shards: tuple[Shard, ...]  # `<split>/part-….parquet`, `_ledger/part-….parquet`, then `minhash/<split>/part-….npy`


@dataclass(frozen=True)
class _SignatureJob:
    """Where the scan spooled its signatures, and their width."""

    spool: str
    num_perm: int


SigParts = tuple[tuple[int, int, np.ndarray], ...]  # (scan task, its group's first row, its rows) of an input


def signature_file(split_shard: str) -> str:
    """`minhash/<split>/part-….npy`: the signatures of the split shard `<split>/part-….parquet`,
    a row each in its order, kept so the near-leak check need not recompute them."""
    return f"{SIGNATURES}/{Path(split_shard).with_suffix('.npy').as_posix()}"


def _write_signatures(job: _SignatureJob, io: TaskIO, i: int, codes: np.ndarray, parts: SigParts) -> list[Shard]:
    """Input shard `i`'s scanned signatures, from the scan's spool files, as one file per split
    shard, rows in the shard's order (every written document was scanned: exact duplicates,
    near duplicates and contaminated documents are the ones not written)."""
    sigs = np.full((len(codes), job.num_perm), MAX_HASH, np.uint64)
    for task, group_row, rows in parts:
        sigs[group_row + rows] = np.load(io.local(hashpart.spool_file(job.spool, "sigs", task)))
    out = []
    for split in SPLITS:
        path = io.directory / signature_file(f"{split}/{shard_name(i)}")
        write_array(path, sigs[codes == SPLIT_CODES[split]], npy=True)
        out.append(Shard.of(path, int((codes == SPLIT_CODES[split]).sum()), io.directory))
    return out


@dataclass(frozen=True)
class _SplitItem:
    """Input shard `index` (`path`): its documents' split codes, where the scan spooled their
    signatures, and why each dropped one was dropped (its ledger)."""

    index: int
    path: str
    codes: np.ndarray
    parts: SigParts
    fates: SpooledFates
    audit: AuditSpec


def _write_splits(job: _SignatureJob | None, io: TaskIO, item: _SplitItem) -> _SplitShards:
    """Input shard `item` written as shard `index` of each split's set (possibly empty, so
    every split has a shard per input shard), with its ledger shard: a pure function of the
    shard, its codes and fates, so it runs on any executor, on any node."""
    i, codes = item.index, item.codes
    ledger = LedgerRows()
    fates = item.fates.load(io.local(item.fates.path) if item.fates.path else None)
    with ExitStack() as stack:
        sinks = [stack.enter_context(ParquetSink(io.directory / s / shard_name(i), DOC_SCHEMA)) for s in SPLITS]
        start = 0
        for batch in iter_documents(Path(item.path), DOC_SCHEMA.names, io.local):
            mine = codes[start : start + batch.num_rows]
            for split, sink in zip(SPLITS, sinks):
                sink.write(batch.filter(pa.array(mine == SPLIT_CODES[split])))
            dropped = np.flatnonzero(mine == DROPPED).tolist() if item.audit.ledger else []
            if dropped:
                rows = batch.take(pa.array(dropped)).to_pydict()
                for k, row in enumerate(dropped):
                    fate, detail = fates.of(start + row)
                    text = rows["text"][k] if item.audit.keep_removed else None
                    ledger.add(rows["source"][k], rows["file"][k], rows["sha256"][k], fate, detail, text=text)
            start += batch.num_rows
    written = [Shard.of(sink.path, sink.rows, io.directory) for sink in sinks]
    if item.audit.ledger:
        with ParquetSink(io.directory / LEDGER / shard_name(i), LEDGER_SCHEMA) as sink:
            sink.write(ledger.batch())
        written.append(Shard.of(sink.path, sink.rows, io.directory))
    signatures = _write_signatures(job, io, i, codes, item.parts) if job is not None else []
    return _SplitShards((*written, *signatures))


def _split_reads(job: _SignatureJob | None, io: TaskIO, item: _SplitItem) -> dict[str, object]:
    """What a split-writing task writes from (its identity): its input shard and its
    documents' codes and fates (the item; the fates' file by content), and with near dedup the
    scan's signature files it copies rows of, by content (they sit in this run's spool)."""
    sigs = [file_sha256(io.local(hashpart.spool_file(job.spool, "sigs", t))) for t, _, _ in item.parts] if job else []
    return {
        "shard": (item.index, InputFile(item.path)),
        "codes": item.codes,
        "parts": item.parts,
        "fates": (file_sha256(io.local(item.fates.path)) if item.fates.path else None, item.fates.texts),
        "audit": item.audit,
        "num_perm": job.num_perm if job else None,
        "signatures": sigs,
    }


WRITE_SPLITS = Step(_write_splits, _split_reads)


def _sealed(fates: Fates, io: StageIO, i: int) -> SpooledFates:
    """Input `i`'s fates as its writer reads them, sent where the task runs."""
    spooled = fates.seal(i)
    if spooled.path is not None:
        io.offer(Path(spooled.path))
    return spooled


def _exact_fates(exact: ExactDedup, names: list[str], fates: Fates | None) -> dict[str, int]:
    """Repeats counted by `kept <- dropped` source, and (with `fates`) each repeat's fate: the
    source whose copy (the first in spec order) stays. A partition's repeats at a time, each
    let go once noted (to the fates' spool): then this process holds a byte per document."""
    duplicates: Counter[str] = Counter()
    texts = np.array([fates.text(name) for name in names] if fates is not None else [], dtype=np.int64)
    while exact.repeats:
        part = exact.repeats.pop()
        pairs, counts = np.unique(np.stack([part["kept"], part["input"]], axis=1), axis=0, return_counts=True)
        for (kept, dropped), n in zip(pairs.tolist(), counts.tolist()):
            duplicates[f"{names[kept]} <- {names[dropped]}"] += n
        if fates is not None:
            for i in np.unique(part["input"]).tolist():
                mine = part["input"] == i
                fates.add(i, part["row"][mine], "duplicate", texts[part["kept"][mine]])
    return dict(sorted(duplicates.items()))


def build_documents(
    inputs: list[tuple[str, Path]],
    holdout: HoldoutSpec,
    out_dir: Path,
    io: StageIO,
    *,
    near: NearDedupSpec | None = None,
    decon: Decontaminator | None = None,
    tombstones: list[Tombstone] | None = None,
    audit: AuditSpec | None = None,
) -> DocumentsResult:
    """Dedup `inputs` (source name, Parquet shard) in order and write each split as a shard set
    under `out_dir` (shard i of a split holds input shard i's documents of it, written by a
    task on the shard map): exact duplicates first, then (with `near`) near-duplicate clusters,
    then (with `decon`) train documents sharing an n-gram with a benchmark; with `tombstones`
    (documents removed at ingestion, `removal.py`), their exact copies and (with `near`)
    near-duplicates are removed before near dedup. Each global step is hash-partitioned over
    tasks; this process holds a byte per document (its split), and each dropped document's
    fate (11 bytes, `fates.py`) waits in a spool file until its input's writer takes it. Each
    split shard's ledger (`_ledger/part-…`, unless `audit.ledger` is off) says why its input's
    other documents were dropped; `audit.keep_removed` keeps their text there."""
    progress, audit = io.progress, audit or AuditSpec()
    exact = exact_dedup([path for _, path in inputs], holdout, out_dir.parent, io)
    near = near if near is not None and near.enabled else None
    removal = RemovalIndex(tombstones, near) if tombstones is not None else None
    with tempfile.TemporaryDirectory(prefix=".albor-minhash-", suffix=TEMP_SUFFIX, dir=out_dir.parent) as spool:
        fates = Fates(Path(spool))
        duplicates = _exact_fates(exact, [name for name, _ in inputs], fates if audit.ledger else None)
        codes = exact.codes
        del exact  # its repeats are counted and noted: this process keeps a byte per document
        scan = _Scan(
            inputs=inputs,
            codes=codes,
            spool=Path(spool),
            io=io,
            near=near,
            decon=decon,
            removal=removal,
            ledger=audit.ledger,
            fates=fates,
        )
        scanned = _scan(scan) if near or decon or removal else None
        job = _SignatureJob(spool, near.num_perm) if near and scanned else None
        parts: list[list[tuple[int, int, np.ndarray]]] = [[] for _ in inputs]
        for it in scanned.items if job and scanned else []:
            parts[it.input].append((it.task, it.group_row, it.rows))
        items = [
            _SplitItem(
                i, str(path), codes[i], tuple(parts[i]), _sealed(fates, io, i) if audit.ledger else NONE_SPOOLED, audit
            )
            for i, (_, path) in enumerate(inputs)
        ]
        subsets = [
            *SPLITS,
            *([LEDGER] if audit.ledger else []),
            *([f"{SIGNATURES}/{s}" for s in SPLITS] if job else []),
        ]
        written = map_shards(WRITE_SPLITS, job, items, out_dir, io, subsets=subsets)
    rows: dict[str, Counter] = {s: Counter() for s in SPLITS}
    shards: dict[str, list[Artifact]] = {s: [] for s in [*SPLITS, SIGNATURES]}
    shards[LEDGER] = []
    for (name, _), split_shards in zip(inputs, written):
        for split, shard in zip(SPLITS, split_shards.shards):
            shards[split].append(shard.artifact(out_dir, io.root))
            rows[split][name] += shard.rows
        rest = split_shards.shards[len(SPLITS) :]
        shards[LEDGER] += [s.artifact(out_dir, io.root) for s in rest if is_ledger(s.name)]
        shards[SIGNATURES] += [s.artifact(out_dir, io.root) for s in rest if not is_ledger(s.name)]
    if progress:
        progress(f"documents: {len(inputs)} input shard(s) split")
    summary = DocumentsSummary(
        rows={s: dict(rows[s]) for s in SPLITS},
        duplicates=duplicates,
        near_duplicates=scanned.near if scanned else None,
        decontaminated=scanned.decontaminated if scanned else None,
        removal=scanned.removal if scanned else None,
    )
    return DocumentsResult(shards, summary)

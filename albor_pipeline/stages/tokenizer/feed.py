"""The trainer's text, a task per row group of the train split: each row group's documents
(capped at `doc_cap` characters, long runs cut by `split_long_runs`) as one UTF-8 file, every
part followed by `SEPARATOR`. The files in row-group order are the byte stream one serial pass
would write, so the trainer sees the same text; a rebuild writes again only the row groups
holding an edited document (the task store keeps the others), and a cold build writes them on
every worker instead of in the run's process.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from albor_pipeline.runtime.shardmap import StageIO, Step, TaskIO, map_tasks
from albor_pipeline.runtime.shards import Shard, SpoolItem, row_group_sha256, row_groups

SEPARATOR = b"\xff"  # never inside UTF-8 text: it parts the documents handed to gigatoken's trainer
LONG_RUN = 1000  # bytes: the longest run of one character class a trainer sees whole
PROGRESS_SECONDS = 5.0
_ASCII_SPACE = np.zeros(256, dtype=bool)
_ASCII_SPACE[list(b" \t\n\r\x0b\x0c")] = True


def split_long_runs(text: str, limit: int = LONG_RUN) -> list[str]:
    """For training only: `text` cut inside every run of more than `limit` bytes of ASCII
    whitespace, or of anything else, every `limit` bytes (moved back to a character start),
    each part then counted as its own text. No pre-token reaching the trainer is longer
    than `limit` bytes, so a 1 MB run of one letter costs what ordinary code does (BPE
    training is superlinear in a pre-token's length); text without such a run, i.e.
    nearly all code, comes back whole. Encoding is not affected."""
    if len(text) <= limit:
        return [text]
    raw = text.encode("utf-8")
    data = np.frombuffer(raw, dtype=np.uint8)
    space = _ASCII_SPACE[data]
    change = np.flatnonzero(space[1:] != space[:-1]) + 1
    starts = np.concatenate(([0], change))
    ends = np.concatenate((change, [len(data)]))
    long = np.flatnonzero(ends - starts > limit)
    if not len(long):
        return [text]
    cuts = []
    for i in long:
        cut = int(starts[i])
        while ends[i] - cut > limit:
            cut += limit
            while data[cut] & 0xC0 == 0x80:  # a UTF-8 continuation byte: back to the character start
                cut -= 1
            cuts.append(cut)
    bounds = [0, *cuts, len(raw)]
    return [raw[a:b].decode("utf-8") for a, b in pairwise(bounds) if b > a]


def text_bytes(texts: Sequence[str]) -> bytes:
    """What the trainer reads of `texts`: each part (`split_long_runs`) in UTF-8, then `SEPARATOR`."""
    parts = [part.encode("utf-8") for text in texts for part in split_long_runs(text)]
    return SEPARATOR.join(parts) + SEPARATOR if parts else b""


@dataclass(frozen=True)
class FeedJob:
    """How every row group's text is cut, and where its file goes."""

    doc_cap: int | None
    spool: str


@dataclass(frozen=True)
class TextChunk:
    """A row group's training text: its file, and the documents and characters it holds."""

    docs: int
    chars: int
    shards: tuple[Shard, ...] = ()  # its text file, as the task store keeps it


def text_file(spool: str | Path, task: int) -> Path:
    return Path(spool) / f"text-{task:06d}.txt"


def _group_texts(path: str | Path, index: int, doc_cap: int | None) -> list[str]:
    texts: list[str] = pq.ParquetFile(path).read_row_group(index, columns=["text"]).column(0).to_pylist()
    return [t[:doc_cap] for t in texts] if doc_cap else texts


def train_text(job: FeedJob, io: TaskIO, item: SpoolItem) -> TextChunk:
    """One row group's training text, written to its file in the spool."""
    path, index = item.group
    texts = _group_texts(io.local(path), index, job.doc_cap)
    out = text_file(io.directory, item.task)
    out.write_bytes(text_bytes(texts))
    shard = Shard.of(out, len(texts), io.directory)
    if not io.node.shared():  # only the run's process reads it: sent only from a node without its copy
        io.spool(out)
    return TextChunk(len(texts), sum(map(len, texts)), (shard,))


def train_text_reads(job: FeedJob, io: TaskIO, item: SpoolItem) -> dict[str, object]:
    """What a text task reads (its identity): its row group's bytes, so a rebuild writes again
    only the row groups holding an edited document."""
    path, index = item.group
    return {"doc_cap": job.doc_cap, "row_group": row_group_sha256(io.node.local(path), index), "task": item.task}


TRAIN_TEXT = Step(train_text, train_text_reads, inline_below=4)


@dataclass(frozen=True)
class Feed:
    """The trainer's input: its text files in order, and the documents and characters fed."""

    files: list[Path]
    docs: int
    chars: int


def feed_files(train: Path, spool: Path, io: StageIO, doc_cap: int | None, max_chars: int | None) -> Feed:
    """The training text of `train` (a Parquet file or shard set) as files in `spool`, a task
    per row group; with `max_chars`, the files up to that many characters, the last row group
    cut in this process where the budget ends (as one serial pass would). Under a budget the
    tasks run in waves of the row groups the rest of it can reach (by their text's size in
    the footers), so the text past the budget is never read."""
    items = [SpoolItem(group, task) for task, group in enumerate(row_groups(train))]
    spool.mkdir(parents=True, exist_ok=True)
    start, last = time.perf_counter(), [time.perf_counter()]

    job = FeedJob(doc_cap, str(spool))
    done: list[tuple[SpoolItem, TextChunk]] = []

    def rate(wave: list[TextChunk]) -> str | None:
        if time.perf_counter() - last[0] < PROGRESS_SECONDS:
            return None
        last[0] = time.perf_counter()
        fed = [c for _, c in done] + wave
        return f"tokenizer: fed {sum(c.docs for c in fed):,} documents, {sum(c.chars for c in fed) / 1e6:.1f}M chars"

    while len(done) < len(items) and (max_chars is None or sum(c.chars for _, c in done) < max_chars):
        left = None if max_chars is None else max_chars - sum(c.chars for _, c in done)
        wave = _reach(items[len(done) :], left, doc_cap)
        chunks = map_tasks(TRAIN_TEXT, job, wave, spool, io, rate)
        for item in wave:
            io.receive(text_file(spool, item.task))
        done += zip(wave, chunks, strict=True)
    if io.progress:
        io.progress(f"tokenizer: text of {len(done)} row groups ready in {time.perf_counter() - start:.1f} s")
    return _within(done, job, max_chars)


def _reach(items: list[SpoolItem], budget: int | None, doc_cap: int | None) -> list[SpoolItem]:
    """The first of `items` (at least one) up to the one whose text's size, with what comes
    before it, reaches `budget` characters: a character is at least a byte, so the budget
    ends no earlier (a footer that undercounts, e.g. a dictionary page, only takes more)."""
    if budget is None:
        return items
    reach, footers = 0, {}
    for n, item in enumerate(items, 1):
        path, index = item.group
        if path not in footers:
            footers[path] = pq.ParquetFile(path).metadata
        group = footers[path].row_group(index)
        size = next(group.column(c) for c in range(group.num_columns) if group.column(c).path_in_schema == "text")
        reach += min(size.total_uncompressed_size, group.num_rows * (doc_cap or size.total_uncompressed_size))
        if reach >= budget:
            return items[:n]
    return items


def _within(chunks: list[tuple[SpoolItem, TextChunk]], job: FeedJob, max_chars: int | None) -> Feed:
    """The chunks' files up to `max_chars` characters: whole row groups while the budget goes
    on past them, then the row group where it ends rewritten with its documents cut at the
    budget (`budgeted`: an exact fit drops the empty documents after it)."""
    files, docs, chars = [], 0, 0
    for item, chunk in chunks:
        if max_chars is not None and chars + chunk.chars >= max_chars:
            kept = list(budgeted(_group_texts(*item.group, job.doc_cap), max_chars - chars))
            if kept:  # a file of its own: the task's may be the store's link
                partial = text_file(job.spool, item.task).with_suffix(".cut.txt")
                partial.write_bytes(text_bytes(kept))
                files.append(partial)
            return Feed(files, docs + len(kept), chars + sum(map(len, kept)))
        files.append(text_file(job.spool, item.task))
        docs, chars = docs + chunk.docs, chars + chunk.chars
    return Feed(files, docs, chars)


def budgeted(texts: list[str], budget: int) -> Iterator[str]:
    """`texts` in order up to `budget` characters, the last one cut; none once it is spent
    (empty texts after an exact fit included): the one rule for a character budget."""
    for text in texts:
        if budget <= 0:
            return
        yield text[:budget]
        budget -= min(len(text), budget)


def chunk_texts(files: Sequence[Path]) -> Iterator[list[str]]:
    """The parts in `files`, a file at a time (for a trainer that reads text, not files)."""
    for path in files:
        data = path.read_bytes()
        if data:
            yield [part.decode("utf-8") for part in data[:-1].split(SEPARATOR)]

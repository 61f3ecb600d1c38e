"""Decontamination: train documents that share a long word n-gram with an eval item go.

An item's text is its fields joined by newlines (a prompt and its reference solution form
one stretch of code). N-grams are over `text/shingles.word_hashes` words: lowercased runs of
[a-z0-9_], so whitespace, punctuation and case changes do not hide a copy. An item with
fewer than n words has no n-gram and cannot match; it is counted as `too_short`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from albor_pipeline.runtime.artifacts import Artifact, sha256_file
from albor_pipeline.runtime.layout import benchmark_stage
from albor_pipeline.runtime.shards import parquet_files
from albor_pipeline.runtime.taskstore import InputFile, memo
from albor_pipeline.spec import MAX_CHARS, BenchmarkSpec, DecontaminateSpec
from albor_pipeline.text.datafiles import IngestError, data_file_texts
from albor_pipeline.text.shingles import ngrams, word_hashes


def benchmark_fingerprint(spec: BenchmarkSpec) -> Artifact:
    """The benchmark file as an input artifact under its stable name (`benchmark/<name>`)."""
    return Artifact(path=benchmark_stage(spec.name), sha256=sha256_file(spec.path), bytes=spec.path.stat().st_size)


@dataclass(frozen=True)
class Benchmark:
    name: str
    ngrams: np.ndarray  # sorted unique n-gram hashes of all its items
    items: int
    too_short: int


def load_benchmark(spec: BenchmarkSpec, n: int) -> Benchmark:
    """Read every item of `spec` (all `fields` are required on every row) into its n-gram set.
    Every item's n-grams matter, so an item the reader would skip (over the line cap, a null
    field) is an error naming the file, not a count."""
    where = f"decontaminate.benchmarks.{spec.name}"
    if not spec.path.is_file():
        raise IngestError(f"{where}: no such file {spec.path}")
    skipped: Counter[str] = Counter()  # an unreadable or empty file reads as no items: say why
    columns = []
    for field in spec.fields:
        read: Counter[str] = Counter()
        columns.append(list(data_file_texts(spec.path, field, read, MAX_CHARS)))
        skipped |= read  # a line skipped is skipped for every field: counted once
    if not columns[0]:
        why = f" ({', '.join(sorted(skipped))})" if skipped else ""
        raise IngestError(f"{where}: {spec.path} has no items{why}")
    lost = {why: n for why, n in sorted(skipped.items()) if why != "blank_line"}
    if lost:
        counts = ", ".join(f"{why}: {n}" for why, n in lost.items())
        raise IngestError(
            f"{where}: {spec.path}: {sum(lost.values())} item(s) unread ({counts}); a benchmark is read whole"
        )
    grams: list[np.ndarray] = []
    too_short = 0
    for parts in zip(*columns, strict=True):
        found = ngrams(word_hashes("\n".join(text for _, text in parts)), n, short=False)
        too_short += not len(found)
        grams.append(found)
    merged = np.unique(np.concatenate(grams)) if grams else np.zeros(0, dtype=np.uint64)
    return Benchmark(spec.name, merged, len(columns[0]), too_short)


def decontamination_reads(spec: DecontaminateSpec) -> dict[str, Any]:
    """What a decontamination depends on: its settings, and its benchmark files by content."""
    return {"spec": spec, "benchmarks": [InputFile(str(b.path)) for b in spec.benchmarks]}


class Decontaminator:
    """Which benchmarks a text shares an n-gram with."""

    def __init__(self, spec: DecontaminateSpec) -> None:
        self.n, self.spec = spec.ngram, spec
        self.benchmarks = [load_benchmark(b, spec.ngram) for b in spec.benchmarks]
        self.inputs = [benchmark_fingerprint(b) for b in spec.benchmarks]  # what provenance records as read

    def __bool__(self) -> bool:
        return bool(self.benchmarks)

    def reads(self) -> dict[str, Any]:
        """What a task using it reads (part of the task's identity): its settings and its benchmarks."""
        return decontamination_reads(self.spec)

    def hits(self, words: np.ndarray) -> list[str]:
        """The benchmarks (by name) sharing an n-gram with a text of these `word_hashes`."""
        if not self.benchmarks:
            return []
        grams = ngrams(words, self.n, short=False)
        return [b.name for b in self.benchmarks if len(grams) and _any_in(grams, b.ngrams)]

    def report(self) -> dict[str, dict[str, int]]:
        return {b.name: {"items": b.items, "ngrams": len(b.ngrams), "too_short": b.too_short} for b in self.benchmarks}


def _any_in(needles: np.ndarray, sorted_haystack: np.ndarray) -> bool:
    if not len(sorted_haystack):
        return False
    at = np.searchsorted(sorted_haystack, needles).clip(max=len(sorted_haystack) - 1)
    return bool((sorted_haystack[at] == needles).any())


def contaminated(path: Path, spec: DecontaminateSpec) -> Counter[str]:
    """Per benchmark, how many documents of the Parquet file or shard set at `path` share an
    n-gram with it: a row group at a time, each kept under its texts' SHA-256s (`memo`), so a
    rebuild scans again only the row groups holding an edited document."""
    found: Counter[str] = Counter()
    decon: list[Decontaminator] = []  # built once, and only if a row group is scanned
    reads = decontamination_reads(spec)
    for file in parquet_files(path):
        parquet = pq.ParquetFile(file)
        for group in range(parquet.num_row_groups):
            texts = parquet.read_row_group(group, columns=["sha256"]).column(0).to_pylist()
            found.update(memo(_group_hits, reads, texts, partial(_group_hits, spec, file, group, decon)))
    return found


def _group_hits(spec: DecontaminateSpec, path: Path, group: int, decon: list[Decontaminator]) -> Counter[str]:
    """Per benchmark, how many documents of one row group share an n-gram with it."""
    if not decon:
        decon.append(Decontaminator(spec))
    found: Counter[str] = Counter()
    for text in pq.ParquetFile(path).read_row_group(group, columns=["text"]).column(0).to_pylist():
        found.update(decon[0].hits(word_hashes(text)))
    return found

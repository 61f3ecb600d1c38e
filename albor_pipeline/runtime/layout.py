"""Stage names and where every stage's files live under the data dir.

The one map from a stage to its files: a producer writes where `Layout` says and a
consumer reads where it says, so no module retypes another stage's paths or names.
A stage's name is its asset key joined by "/" (`fim/train`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DOCUMENTS = "documents"
CONVERSATIONS = "conversations"
TOKENIZER = "tokenizer"
QUALITY_CLASSIFIER = "quality_classifier"
STATS = "stats"
PROVENANCE = "provenance"


def source_stage(name: str) -> str:
    """The observable source (its data version is the files' content fingerprint)."""
    return f"source/{name}"


def benchmark_stage(name: str) -> str:
    """An observable benchmark file of `decontaminate` (data version: its SHA-256)."""
    return f"benchmark/{name}"


def ingested_stage(name: str) -> str:
    return f"ingested/{name}"


def filtered_stage(name: str) -> str:
    """A document source after hygiene (filters, secrets/PII redaction)."""
    return f"filtered/{name}"


def mixed_stage(split: str) -> str:
    return f"mixed/{split}"


def fim_stage(split: str) -> str:
    return f"fim/{split}"


def corpus_stage(split: str) -> str:
    return f"corpus/{split}"


def chat_mixed_stage(split: str) -> str:
    return f"chat_mixed/{split}"


def sft_stage(split: str) -> str:
    return f"sft/{split}"


def eval_stage(name: str) -> str:
    return f"eval/{name}"


def long_split(split: str) -> str:
    """The length-staged subset of a split: `corpus/long_<split>`, files in `corpus/long_<split>/`."""
    return f"long_{split}"


def corpus_names(splits: tuple[str, ...]) -> list[str]:
    """Every corpus a spec can build, in report order: the splits, then their long subsets."""
    return [*splits, *map(long_split, splits)]


@dataclass(frozen=True)
class Layout:
    """Paths of every stage's outputs, manifests and caches under one data dir."""

    root: Path

    def stage_dir(self, stage: str) -> Path:
        """Where stage `stage` (its asset key joined by "/") keeps its files: `<root>/<stage>`. A
        new stage needs no function here: it writes `stage_dir(its name)`."""
        return self.root / stage

    def ingested(self, source: str) -> Path:
        """A shard set (`runtime/shards.py`): a directory of `part-*.parquet`."""
        return self.stage_dir(ingested_stage(source))

    def filtered(self, source: str) -> Path:
        """A shard set, one shard per ingested shard."""
        return self.stage_dir(filtered_stage(source))

    @property
    def documents_dir(self) -> Path:
        return self.stage_dir(DOCUMENTS)

    def documents(self, split: str) -> Path:
        """A shard set, a shard per filtered shard."""
        return self.documents_dir / split

    def mixed(self, split: str) -> Path:
        """A shard set, in mix order (shards of about `shard_mb`)."""
        return self.stage_dir(mixed_stage(split))

    def fim(self, split: str) -> Path:
        """A shard set, a shard per mixed shard."""
        return self.stage_dir(fim_stage(split))

    @property
    def tokenizer_dir(self) -> Path:
        return self.stage_dir(TOKENIZER)

    @property
    def tokenizer_json(self) -> Path:
        return self.tokenizer_dir / "tokenizer.json"

    @property
    def tokenizer_report(self) -> Path:
        return self.tokenizer_dir / "report.json"

    def corpus_dir(self, split: str) -> Path:
        return self.stage_dir(corpus_stage(split))

    @property
    def conversations_dir(self) -> Path:
        return self.stage_dir(CONVERSATIONS)

    def conversations(self, split: str) -> Path:
        """A shard set, a shard per ingested shard."""
        return self.conversations_dir / split

    def chat_mixed(self, split: str) -> Path:
        """A shard set, as `mixed`."""
        return self.stage_dir(chat_mixed_stage(split))

    def sft_dir(self, split: str) -> Path:
        return self.stage_dir(sft_stage(split))

    def eval_set(self, name: str) -> Path:
        return self.root / "eval" / f"{name}.parquet"

    @property
    def provenance_json(self) -> Path:
        return self.root / "provenance.json"

    @property
    def provenance_md(self) -> Path:
        return self.root / "PROVENANCE.md"

    @property
    def dataset_card(self) -> Path:
        """A Hugging Face dataset card: `datasets.load_dataset(root, config)` reads its header."""
        return self.root / "README.md"

    @property
    def manifests_dir(self) -> Path:
        return self.root / "manifests"

    def manifest(self, stage: str) -> Path:
        return self.manifests_dir / f"{stage.replace('/', '__')}.json"

    @property
    def versions_dir(self) -> Path:
        """Earlier corpus versions' small facts (`stages/corpus/versions.py`), kept for
        `albor exposure` and `albor diff`: bookkeeping, not a stage's outputs."""
        return self.root / "versions"

    @property
    def journals_dir(self) -> Path:
        """Commits under way: a stage's journal lives here until its manifest lands (`runtime/commit.py`)."""
        return self.manifests_dir / ".pending"

    def journal(self, stage: str) -> Path:
        return self.journals_dir / f"{stage.replace('/', '__')}.jsonl"

    def pending_commits(self) -> list[tuple[str, Path, Path]]:
        """(stage, journal, manifest) of every commit a run left unfinished."""
        found = sorted(self.journals_dir.glob("*.jsonl")) if self.journals_dir.is_dir() else []
        return [(j.stem.replace("__", "/"), j, self.manifests_dir / f"{j.stem}.json") for j in found]

    @property
    def lock_file(self) -> Path:
        """Held by the one run writing this data dir (`runtime/lock.py`)."""
        return self.root / ".albor.lock"

    @property
    def task_store(self) -> Path:
        """Per-shard tasks' outputs kept for reuse (`runtime/taskstore.py`)."""
        return self.root / "cache" / "tasks"

    def stage_identity(self, stage: str) -> Path:
        """The identity a stage's current outputs were made under (`runtime/stagerun.py`)."""
        return self.root / "cache" / "stages" / f"{stage.replace('/', '__')}.json"

    def check_outcome(self, stage: str, check: str) -> Path:
        """The last outcome of a stage's check and the identity it was taken under
        (`runtime/checks.py`)."""
        return self.root / "cache" / "checks" / f"{stage.replace('/', '__')}#{check}.json"

    @property
    def digests(self) -> Path:
        """The SHA-256 of the data dir's files as runs took them, by size, times and inode
        (`artifacts.load_digests`)."""
        return self.root / "cache" / "digests.json"

    def fingerprint_cache(self, source: str) -> Path:
        """Per-file hashes of a source, cached by (size, mtime)."""
        return self.root / "cache" / "fingerprints" / f"{source}.json"

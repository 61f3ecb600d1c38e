"""The pipeline spec: one YAML file describes sources and every stage's settings.

The models here are the single source of defaults: Dagster run config, the CLI and
tests all start from a validated `PipelineSpec`.
"""

from __future__ import annotations

import os
import re
import site
import sysconfig
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from albor_pipeline.core.vocab import SPECIALS

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SPEC = REPO_ROOT / "data" / "pipeline.yaml"
DEFAULT_DATA_DIR = REPO_ROOT / "data" / "artifacts"
SPLITS = ("train", "val", "test")


class SpecError(ValueError):
    """A spec that cannot be used; the message names the offending key."""


M = TypeVar("M", bound=BaseModel)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceKind(str, Enum):
    code = "code"
    jsonl = "jsonl"
    csv = "csv"
    parquet = "parquet"
    chat = "chat"  # conversations `{messages: [{role, content}]}` in JSONL or Parquet rows
    synthetic = "synthetic"  # seeded generated conversations (`task`) over a word list at `path`
    mc = "mc"  # multiple-choice eval items `{question, choices, answer}` in JSONL


DOCUMENT_KINDS = (SourceKind.code, SourceKind.jsonl, SourceKind.csv, SourceKind.parquet)
CHAT_KINDS = (SourceKind.chat, SourceKind.synthetic)


class OnError(str, Enum):
    error = "error"  # a malformed row stops ingestion, naming file and line
    skip = "skip"  # a malformed row is skipped and counted


class SyntheticTask(str, Enum):
    spelling_bee = "spelling_bee"  # nanochat's SpellingBee: count a letter, check with a python call
    simple_spelling = "simple_spelling"  # nanochat's SimpleSpelling: spell a word letter by letter


class SourceSpec(_Model):
    """A local directory of Python files, a set of JSONL/CSV/Parquet data files, chat or
    multiple-choice files, or a synthetic chat task over a word list."""

    name: str = Field(pattern=r"^[A-Za-z0-9_]+$")
    kind: SourceKind
    path: Path
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    text_field: str = "text"
    min_chars: int = Field(50, ge=0)
    max_chars: int = Field(100_000, gt=0)
    # A file symlink that resolves outside `path` is skipped (counted as outside_root) unless set.
    follow_symlinks: bool = False
    # chat: the field holding the conversation; `<<expr=result>>` in assistant text -> python
    # and python_output parts (nanochat's GSM8K calculator); what a malformed row does.
    messages_field: str = "messages"
    calculator: bool = False
    on_error: OnError = OnError.error
    # synthetic: the task, how many conversations and the seed (`path` is the word list).
    task: SyntheticTask | None = None
    rows: int = Field(1000, gt=0)
    seed: int = 0

    @model_validator(mode="after")
    def _check_task(self) -> SourceSpec:
        if (self.kind is SourceKind.synthetic) != (self.task is not None):
            raise ValueError("task: required for kind synthetic, and only for it")
        return self

    @model_validator(mode="after")
    def _check_bounds(self) -> SourceSpec:
        if self.min_chars > self.max_chars:
            raise ValueError("min_chars must be <= max_chars")
        return self

    @property
    def include_globs(self) -> tuple[str, ...]:
        if self.include:
            return self.include
        if self.kind is SourceKind.code:
            return ("**/*.py",)
        if self.kind is SourceKind.parquet:
            return ("**/*.parquet",)
        if self.kind is SourceKind.synthetic:
            return ("**/*.txt",)
        ext = self.kind.value if self.kind in (SourceKind.jsonl, SourceKind.csv) else "jsonl"
        return (
            *(f"**/*.{ext}{suffix}" for suffix in ("", ".gz", ".zst")),
            *(("**/*.parquet",) if self.kind is SourceKind.chat else ()),
        )


class HoldoutSpec(_Model):
    """Content-hash split assignment: a document's split depends only on its text."""

    val_fraction: float = Field(0.02, ge=0, lt=1)
    test_fraction: float = Field(0.01, ge=0, lt=1)
    seed: int = 0

    @model_validator(mode="after")
    def _check_sum(self) -> HoldoutSpec:
        if self.val_fraction + self.test_fraction >= 1:
            raise ValueError("val_fraction + test_fraction must be < 1")
        return self


class MixUnit(str, Enum):
    rows = "rows"  # weights are shares of rows: the seed's `alimentar mix` counting
    chars = "chars"  # weights are shares of characters: long and short documents weigh by size


class SplitMixSpec(_Model):
    """Weighted mix of one split. `weights` empty means equal weights over all sources."""

    seed: int = 42
    rows: int | None = Field(None, gt=0)
    weights: dict[str, float] = {}
    repeat: dict[str, float] = {}
    upsample: bool = True
    unit: MixUnit = MixUnit.rows

    @field_validator("weights", "repeat")
    @classmethod
    def _positive(cls, value: dict[str, float]) -> dict[str, float]:
        for name, weight in value.items():
            if not weight > 0:
                raise ValueError(f"{name}: must be > 0, got {weight}")
        return value


class MixSpec(_Model):
    train: SplitMixSpec = SplitMixSpec(seed=42)
    val: SplitMixSpec = SplitMixSpec(seed=123, rows=500, upsample=False)
    test: SplitMixSpec = SplitMixSpec(seed=456, rows=200, upsample=False)

    def for_split(self, split: str) -> SplitMixSpec:
        return getattr(self, split)


class FimFormat(str, Enum):
    psm = "psm"
    spm = "spm"
    mixed = "mixed"


class FimSpec(_Model):
    rate: float = Field(0.5, ge=0, le=1)
    format: FimFormat = FimFormat.psm
    spm_rate: float = Field(0.5, ge=0, le=1)
    seed: int = 42
    min_chars: int = Field(10, ge=0)
    splits: tuple[str, ...] = SPLITS

    @field_validator("splits")
    @classmethod
    def _known_splits(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(value) - set(SPLITS))
        if unknown:
            raise ValueError(f"unknown split(s) {unknown}; expected a subset of {list(SPLITS)}")
        return value


class RetrainPolicy(str, Enum):
    on_change = "on_change"
    manual = "manual"


MIN_VOCAB_SIZE = 256 + len(SPECIALS)  # the byte alphabet + the specials at ids 0-3


class TokenizerSpec(_Model):
    vocab_size: int = Field(
        32_768,
        ge=MIN_VOCAB_SIZE,
        description=f"learned vocabulary incl. specials; at least the 256-byte alphabet + {len(SPECIALS)} specials",
    )
    min_frequency: int = Field(2, ge=0)
    max_chars: int | None = Field(None, gt=0)
    doc_cap: int | None = Field(None, gt=0)
    retrain: RetrainPolicy = RetrainPolicy.on_change
    baselines: tuple[Path, ...] = ()  # other tokenizer.json files to compare against
    # GPT-2's ranks (tiktoken format) for the comparison; `make install` fetches them from PyPI.
    gpt2_ranks: Path | None = None


class RemainderPolicy(str, Enum):
    drop = "drop"
    pad = "pad"


class ExportFormat(str, Enum):
    parquet = "parquet"
    megatron = "megatron"
    nanogpt = "nanogpt"


class Packing(str, Enum):
    concat = "concat"  # documents back to back, cut every seq_len tokens (seed 000)
    best_fit = "best_fit"  # whole documents into seq_len bins, padded; only longer ones are split


class LongSpec(_Model):
    """Length staging (seed 003): documents of at least `min_chars` characters, packed again at
    their own `seq_len` into `corpus/long_<split>`; the reader cuts any corpus into shorter chunks."""

    min_chars: int = Field(32_000, gt=0)  # the document's characters before FIM (seed 003's filter)
    seq_len: int = Field(32_768, gt=1)


class CorpusSpec(_Model):
    seq_len: int = Field(2048, gt=1)
    remainder: RemainderPolicy = RemainderPolicy.drop
    formats: tuple[ExportFormat, ...] = (ExportFormat.parquet,)
    shard_sequences: int = Field(50_000, gt=0)
    encoder: str = Field("auto", pattern="^(auto|hf|tiktoken)$")
    bos: bool = False  # prepend <s> to every document (nanochat); </s> after every document always
    packing: Packing = Packing.concat
    best_fit_window: int = Field(1024, gt=0)  # documents packed together by best_fit (bounds memory)
    long: LongSpec | None = None  # also build corpus/long_<split> (length staging)


class ChatTokens(_Model):
    """The chat special tokens (nanochat's set), appended after the FIM sentinels."""

    user_start: str = "<|user_start|>"
    user_end: str = "<|user_end|>"
    assistant_start: str = "<|assistant_start|>"
    assistant_end: str = "<|assistant_end|>"
    python_start: str = "<|python_start|>"
    python_end: str = "<|python_end|>"
    output_start: str = "<|output_start|>"
    output_end: str = "<|output_end|>"

    @model_validator(mode="after")
    def _distinct(self) -> ChatTokens:
        values = list(self.model_dump().values())
        if len(set(values)) != len(values) or any(not v.strip() for v in values):
            raise ValueError("chat tokens must be distinct, non-blank strings")
        return self


class Overlong(str, Enum):
    skip = "skip"  # a conversation longer than max_tokens is left out (counted)
    truncate = "truncate"  # cut to max_tokens, as nanochat's render_conversation does


class SftFormat(str, Enum):
    parquet = "parquet"
    nanochat = "nanochat"  # flat token .bin shards with parallel _mask.bin shards + a JSON sidecar


class ChatSpec(_Model):
    """Chat/SFT: how conversations render (nanochat semantics) and which sft/<split> exist."""

    tokens: ChatTokens = ChatTokens()
    max_tokens: int = Field(2048, gt=1)
    overlong: Overlong = Overlong.skip
    splits: tuple[str, ...] = ("train", "val")
    formats: tuple[SftFormat, ...] = (SftFormat.parquet, SftFormat.nanochat)
    shard_tokens: int = Field(50_000_000, gt=0)  # tokens per nanochat .bin shard

    @field_validator("splits")
    @classmethod
    def _known_splits(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(value) - set(SPLITS))
        if unknown:
            raise ValueError(f"unknown split(s) {unknown}; expected a subset of {list(SPLITS)}")
        return value


_CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,?-]+$")


class AutomationSpec(_Model):
    observe_cron: str = "0 * * * *"
    # How often the automation sensor evaluates; a change advances one stage per tick
    # (each stage waits for its parents' new data versions).
    sensor_interval_seconds: int = Field(30, ge=5, le=86400)

    @field_validator("observe_cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        fields = value.split()
        if len(fields) != 5 or not all(_CRON_FIELD.match(f) for f in fields):
            raise ValueError(f"must be a 5-field cron string like '0 * * * *', got {value!r}")
        return value


class OnBusy(str, Enum):
    wait = "wait"
    fail = "fail"


class LockingSpec(_Model):
    """One run per data dir: a second run waits for the first (default) or fails at once."""

    on_busy: OnBusy = OnBusy.wait


class PipelineSpec(_Model):
    sources: tuple[SourceSpec, ...] = Field(min_length=1)
    holdout: HoldoutSpec = HoldoutSpec()
    mix: MixSpec = MixSpec()
    fim: FimSpec = FimSpec()
    tokenizer: TokenizerSpec = TokenizerSpec()
    corpus: CorpusSpec = CorpusSpec()
    chat: ChatSpec = ChatSpec()
    automation: AutomationSpec = AutomationSpec()
    locking: LockingSpec = LockingSpec()

    @model_validator(mode="after")
    def _cross_checks(self) -> PipelineSpec:
        names = [s.name for s in self.sources]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"sources: duplicate name(s) {dupes}")
        if not self.sources_of(*DOCUMENT_KINDS):
            raise ValueError("sources: at least one code/jsonl/csv/parquet source (the tokenizer trains on documents)")
        mixed = [s.name for s in self.sources if s.kind is not SourceKind.mc]  # eval sets are never mixed
        for split in SPLITS:
            mix = self.mix.for_split(split)
            for key in ("weights", "repeat"):
                for name in getattr(mix, key):
                    if name not in mixed:
                        raise ValueError(f"mix.{split}.{key}.{name}: unknown source (known: {mixed})")
            missing = [n for n in mixed if mix.weights and n not in mix.weights and n not in mix.repeat]
            if missing:
                raise ValueError(f"mix.{split}.weights: no weight or repeat given for source(s) {missing}")
        return self

    def sources_of(self, *kinds: SourceKind) -> list[SourceSpec]:
        """The sources of these kinds, in spec order (documents, chat, eval sets)."""
        return [s for s in self.sources if s.kind in kinds]

    def source(self, name: str) -> SourceSpec:
        for src in self.sources:
            if src.name == name:
                return src
        raise KeyError(name)


def path_variables() -> dict[str, str]:
    """Placeholders a spec path may use, so one spec works on every machine."""
    return {
        "stdlib": sysconfig.get_paths()["stdlib"],
        "site_packages": sysconfig.get_paths()["purelib"] or site.getsitepackages()[0],
    }


def _resolve_path(raw: Any, base: Path) -> Any:
    if not isinstance(raw, str):
        return raw
    expanded = Path(os.path.expanduser(raw.format(**path_variables())))
    return expanded if expanded.is_absolute() else (base / expanded).resolve()


def _format_error(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"]).lstrip(".")
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(lines)


def apply_overrides(section: M, overrides: dict[str, Any], where: str) -> M:
    """`section` with `overrides` (e.g. run config) applied, validated by the same model,
    so a bad override fails with the message a bad spec would give."""
    try:
        return type(section).model_validate({**section.model_dump(), **overrides})
    except ValidationError as err:
        raise SpecError(f"{where}: {_format_error(err)}") from None


def parse_spec(raw: dict[str, Any], base_dir: Path) -> PipelineSpec:
    """Validate a spec mapping; relative paths resolve against `base_dir`."""
    if not isinstance(raw, dict):
        raise SpecError("spec: expected a mapping at the top level")
    raw = dict(raw)
    try:
        sources = [dict(s) for s in raw.get("sources") or []]
    except (TypeError, ValueError) as exc:
        raise SpecError("sources: expected a list of mappings") from exc
    for src in sources:
        if "path" in src:
            try:
                src["path"] = _resolve_path(src["path"], base_dir)
            except (KeyError, IndexError) as exc:
                raise SpecError(f"sources[{sources.index(src)}].path: unknown placeholder {exc}") from exc
    raw["sources"] = sources
    tok = dict(raw.get("tokenizer") or {})
    if tok.get("baselines"):
        tok["baselines"] = [_resolve_path(p, base_dir) for p in tok["baselines"]]
    if tok.get("gpt2_ranks"):
        tok["gpt2_ranks"] = _resolve_path(tok["gpt2_ranks"], base_dir)
    if tok:
        raw["tokenizer"] = tok
    try:
        return PipelineSpec.model_validate(raw)
    except ValidationError as err:
        raise SpecError(_format_error(err)) from None


def load_spec(path: str | os.PathLike[str] | None = None) -> PipelineSpec:
    """Load the spec at `path`, else `$ALBOR_SPEC`, else the shipped default."""
    spec_path = Path(path or os.environ.get("ALBOR_SPEC") or DEFAULT_SPEC).resolve()
    try:
        raw = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"spec file not found: {spec_path}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{spec_path}: invalid YAML: {exc}") from None
    try:
        return parse_spec(raw, spec_path.parent)
    except SpecError as exc:
        raise SpecError(f"{spec_path}: {exc}") from None


def data_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The output root: `path`, else `$ALBOR_DATA_DIR`, else `data/artifacts`."""
    return Path(path or os.environ.get("ALBOR_DATA_DIR") or DEFAULT_DATA_DIR).resolve()

"""What a rule change would remove or restore, answered from the stored signals alone.

`whatif` reads one source's signal shards (`filtered/<source>/_signals/`, as the current
build wrote them), decides them under the build's rules and under the proposed ones, and
counts per rule the documents, characters and estimated tokens that would be removed or
restored. The same conditions decide a rebuild (`rules.py`), so its counts are what the
rebuild then removes. For each rule the proposal adds or changes, a few documents just past
its threshold and a few just inside it are shown as redacted excerpts: the only text read.

Memory is bounded by a shard's signal columns and a few examples per rule.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import yaml
from pydantic import BaseModel, ValidationError

from albor_pipeline.runtime.artifacts import read_manifest
from albor_pipeline.runtime.layout import TOKENIZER, Layout, filtered_stage
from albor_pipeline.runtime.markdown import markdown_table
from albor_pipeline.spec import HygieneSpec, PipelineSpec, SourceKind, SpecError
from albor_pipeline.stages.hygiene.hygiene import HYGIENE_KINDS
from albor_pipeline.stages.hygiene.rules import Cond, conds, decide, reason, signal_columns, value_at
from albor_pipeline.text.ledger import SIGNALS
from albor_pipeline.text.secrets import redact_path, redacted

EXCERPT_CHARS = 160


class Amount(BaseModel):
    documents: int = 0
    chars: int = 0
    tokens: int = 0  # estimated: characters at the tokenizer's bytes per token


class Example(BaseModel):
    file: str
    value: int | float | str  # the signal's value (a length, a share, a language)
    excerpt: str


class RuleEffect(BaseModel):
    rule: str  # the reason a document gets (`gopher_repetition.dup_line_frac`)
    removed: Amount = Amount()  # kept by the current build, removed under the proposal
    restored: Amount = Amount()  # removed by the current build, kept under the proposal


class SourceWhatIf(BaseModel):
    source: str
    documents: int
    kept_now: int
    kept_after: int
    removed_after: dict[str, int]  # reason -> documents, under the proposal (what a rebuild's summary shows)
    rules: list[RuleEffect]
    past: dict[str, list[Example]]  # changed rule -> documents just past its threshold (dropped)
    inside: dict[str, list[Example]]  # ... and just inside it (kept by it)
    chars_per_token: float


class WhatIfError(ValueError):
    """A proposal the stored signals cannot answer (a clear message says what would)."""


@dataclass
class _Near:
    """The documents nearest a rule's threshold on one side: (distance, shard, row, value)."""

    limit: int
    items: list[tuple[float, int, str, int, Any]] = field(default_factory=list)
    count: int = 0

    def offer(self, distance: float, shard: str, row: int, value: Any) -> None:
        self.count += 1
        item = (-distance, -self.count, shard, row, value)  # a max-heap of the nearest `limit`
        if len(self.items) < self.limit:
            heapq.heappush(self.items, item)
        elif item > self.items[0]:
            heapq.heapreplace(self.items, item)

    def nearest(self) -> list[tuple[str, int, Any]]:
        return [(shard, row, value) for _, _, shard, row, value in sorted(self.items, reverse=True)]


def _changed(now: list[Cond], after: list[Cond]) -> list[Cond]:
    """The proposal's rules that are new or compare differently."""
    before = {c.reason: (c.op, repr(c.limit)) for c in now}
    return [c for c in after if before.get(c.reason) != (c.op, repr(c.limit))]


def _distance(cond: Cond, values: np.ndarray) -> np.ndarray:
    """How far each value is from the rule's threshold (0 where it is not a number)."""
    if values.dtype.kind not in "iufb" or not isinstance(cond.limit, (int, float)):
        return np.zeros(len(values))
    out = np.abs(values.astype(np.float64) - float(cond.limit))
    return np.where(np.isnan(out), math.inf, out)


def current_hygiene(layout: Layout, source: str) -> HygieneSpec:
    """The hygiene the source's current build ran with (its manifest's config)."""
    config = dict(read_manifest(layout, filtered_stage(source)).config)
    config.pop("audit", None)
    return HygieneSpec.model_validate(config)


def whatif(
    layout: Layout,
    source: str,
    kind: SourceKind,
    proposed: HygieneSpec,
    examples: int = 3,
    cpt: float = 4.0,
) -> SourceWhatIf:
    """The effect of `proposed` on `source`'s current build (`layout`), from its signals."""
    current = current_hygiene(layout, source)
    return compare(layout.filtered(source), layout.ingested(source), current, proposed.for_kind(kind), examples, cpt)


def compare(
    filtered: Path, ingested: Path, current: HygieneSpec, proposed: HygieneSpec, examples: int = 3, cpt: float = 4.0
) -> SourceWhatIf:
    """The effect of `proposed` on a hygiene set built with `current` (`filtered`, from the
    shard set `ingested`)."""
    source = filtered.name
    if proposed.signals != current.signals:
        raise WhatIfError(f"{source}: the proposal changes hygiene.signals, which scores again: rebuild to see it")
    now, after = conds(current.rules, current.redact), conds(proposed.rules, proposed.redact)
    shards = sorted((filtered / SIGNALS).glob("*.parquet"))
    if not shards:
        raise WhatIfError(f"{source}: no signal shards in {filtered / SIGNALS}: rebuild hygiene first")
    stored = set(pq.read_schema(shards[0]).names)
    if missing := sorted({c.signal for c in after} - stored):
        raise WhatIfError(
            f"{source}: the build did not score {', '.join(missing)} (its families: "
            "turn the preset on and rebuild to score them once; docs/quality.md)"
        )
    return _tally(source, shards, now, after, examples, cpt, ingested)


def _tally(
    source: str, shards: list[Path], now: list[Cond], after: list[Cond], examples: int, cpt: float, ingested: Path
) -> SourceWhatIf:
    """Decide every shard's documents both ways and count the differences per rule."""
    wanted = sorted({"chars", *(c.signal for c in now), *(c.signal for c in after)})
    effects: dict[str, RuleEffect] = {}
    removed_after: Counter[str] = Counter()
    changed = _changed(now, after)
    past = {c.reason: _Near(examples) for c in changed}
    inside = {c.reason: _Near(examples) for c in changed}
    documents = kept_now = kept_after = 0
    for path in shards:
        table = pq.ParquetFile(path).read(columns=wanted)
        cols = signal_columns(table, wanted)
        rows = table.num_rows
        first_now, first_after = decide(now, cols, rows), decide(after, cols, rows)
        documents += rows
        kept_now += int((first_now < 0).sum())
        kept_after += int((first_after < 0).sum())
        for i in np.flatnonzero(first_now != first_after).tolist():
            was, will = int(first_now[i]), int(first_after[i])
            if will >= 0 and was < 0:
                _add(effects, _reason(after[will], cols, i), cols["chars"][i], cpt, "removed")
            elif was >= 0 and will < 0:
                _add(effects, _reason(now[was], cols, i), cols["chars"][i], cpt, "restored")
        removed_after.update(_reason(after[k], cols, i) for i, k in enumerate(first_after.tolist()) if k >= 0)
        for cond in changed:
            mask, distance = cond.mask(cols), _distance(cond, cols[cond.signal])
            for near, rows in ((past[cond.reason], np.flatnonzero(mask)), (inside[cond.reason], np.flatnonzero(~mask))):
                for i in _nearest(rows, distance, examples):
                    near.offer(float(distance[i]), path.name, i, value_at(cols[cond.signal], i))
    texts = _Excerpts(ingested)
    return SourceWhatIf(
        source=source,
        documents=documents,
        kept_now=kept_now,
        kept_after=kept_after,
        removed_after=dict(sorted(removed_after.items())),
        rules=sorted(effects.values(), key=lambda e: e.rule),
        past={r: texts.examples(near) for r, near in past.items()},
        inside={r: texts.examples(near) for r, near in inside.items()},
        chars_per_token=cpt,
    )


def _nearest(rows: np.ndarray, distance: np.ndarray, k: int) -> list[int]:
    """The `k` of `rows` nearest the threshold (a shard's candidates, before the heap)."""
    if k <= 0 or not len(rows):
        return []
    if len(rows) > k:
        rows = rows[np.argpartition(distance[rows], k - 1)[:k]]
    return sorted(rows.tolist())


def _reason(cond: Cond, cols: dict[str, np.ndarray], i: int) -> str:
    return reason(cond, value_at(cols[cond.signal], i))


def _add(effects: dict[str, RuleEffect], rule: str, chars: int, cpt: float, side: str) -> None:
    effect = effects.setdefault(rule, RuleEffect(rule=rule))
    amount: Amount = getattr(effect, side)
    amount.documents += 1
    amount.chars += int(chars)
    amount.tokens = round(amount.chars / cpt)


class _Excerpts:
    """Redacted excerpts of a few documents, read from the source's ingested shards (a signal
    shard's rows are its ingested shard's, in order)."""

    def __init__(self, ingested: Path) -> None:
        self.directory = ingested

    def examples(self, near: _Near) -> list[Example]:
        out = []
        for shard, row, value in near.nearest():
            table = pq.ParquetFile(self.directory / shard).read(columns=["text", "file"]).slice(row, 1)
            text, file = table.column("text")[0].as_py(), table.column("file")[0].as_py()
            excerpt = " ".join(redacted(text[: EXCERPT_CHARS * 2])[0].split())[:EXCERPT_CHARS]
            out.append(Example(file=redact_path(file), value=value, excerpt=excerpt))
        return out


def effect_rows(answer: SourceWhatIf) -> list[dict[str, Any]]:
    """The per-rule table (the CLI's and Dagster's)."""
    return [
        {
            "rule": e.rule,
            "removed docs": e.removed.documents,
            "removed chars": e.removed.chars,
            "removed ~tokens": e.removed.tokens,
            "restored docs": e.restored.documents,
            "restored chars": e.restored.chars,
            "restored ~tokens": e.restored.tokens,
        }
        for e in answer.rules
    ]


def whatif_lines(answers: list[SourceWhatIf]) -> list[str]:
    """The readable answer: per source, the kept counts, the table, then the examples."""
    lines: list[str] = []
    for a in answers:
        delta = a.kept_after - a.kept_now
        lines.append(
            f"{a.source}: {a.documents:,} documents; kept now {a.kept_now:,}, after {a.kept_after:,} ({delta:+,})"
        )
        lines += [markdown_table(effect_rows(a)) or "no document changes fate", ""]
        for rule, past in a.past.items():
            for side, shown in (("just past (dropped)", past), ("just inside (kept)", a.inside.get(rule, []))):
                if shown:
                    lines.append(f"  {rule}, {side}:")
                    lines += [f"    {_shown(e.value)}  {e.file}  {e.excerpt!r}" for e in shown]
        lines.append("")
    if answers:
        lines.append(f"(~tokens: characters / {answers[0].chars_per_token:.2f}, the tokenizer's bytes per token)")
    return lines


def _shown(value: int | float | str) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def proposal(items: Sequence[str], rules_yaml: str = "") -> dict[str, Any]:
    """The proposed hygiene keys: a YAML document's `hygiene:` mapping, then each
    `hygiene.<key>...=<YAML value>` item on top (`albor whatif --set`, the Dagster preview)."""
    changes: dict[str, Any] = {}
    if rules_yaml.strip():
        loaded = yaml.safe_load(rules_yaml) or {}
        if not isinstance(loaded, dict) or set(loaded) - {"hygiene"}:
            raise SpecError("proposed rules: expected a mapping with one key, hygiene (the spec's keys under it)")
        changes = loaded.get("hygiene") or {}
    for item in items:
        key, sep, value = item.partition("=")
        parts = key.strip().split(".")
        if not sep or parts[0] != "hygiene" or len(parts) < 2:
            raise SpecError(f"{item!r}: expected hygiene.<key>...=<YAML value>, e.g. hygiene.rules.c4=null")
        node = changes
        for part in parts[1:-1]:
            node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else node
        node[parts[-1]] = yaml.safe_load(value)
    return changes


def merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`base` with `changes` laid over it, mapping by mapping (a None or a scalar replaces). A
    key under what `base` has off (None) leaves it off: a preset's threshold changes the
    sources that have the preset; setting the preset itself (`{}`) turns it on."""
    out = dict(base)
    for key, value in changes.items():
        if isinstance(value, dict) and key in out and out[key] is None and value:
            continue
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merged(out[key], value) if both else value
    return out


def answer_all(
    spec: PipelineSpec, layout: Layout, changes: dict[str, Any], sources: Sequence[str] = (), examples: int = 3
) -> list[SourceWhatIf]:
    """`whatif` of every source with hygiene (or those named), the same changes laid over each
    source's current hygiene."""
    known = spec.sources_of(*HYGIENE_KINDS)
    if unknown := sorted(set(sources) - {s.name for s in known}):
        raise SpecError(f"{', '.join(unknown)}: no such source with hygiene in the spec")
    cpt = chars_per_token(layout)
    answers = []
    for src in (s for s in known if not sources or s.name in sources):
        try:
            proposed = HygieneSpec.model_validate(
                merged(current_hygiene(layout, src.name).model_dump(mode="json"), changes)
            )
        except ValidationError as exc:
            raise SpecError(f"{src.name}: the proposed hygiene is not valid: {exc}") from exc
        answers.append(whatif(layout, src.name, src.kind, proposed, examples, cpt))
    return answers


def chars_per_token(layout: Layout) -> float:
    """The built tokenizer's bytes per token on val (characters are counted as bytes), else 4."""
    try:
        value = read_manifest(layout, TOKENIZER).summary.get("bytes_per_token")
    except FileNotFoundError:
        return 4.0
    return float(value) if value else 4.0

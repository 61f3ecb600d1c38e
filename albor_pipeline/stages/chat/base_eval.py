"""Base-model eval sets (`eval/<name>` of a `base_eval` source): every item rendered few-shot
as nanochat's CORE renders it, tokenized with BOS first, with the continuation span of each
sequence, so a trainer scores a base model by the summed log-probability of the span."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from albor_pipeline.runtime.artifacts import Artifact, ParquetSink, record
from albor_pipeline.runtime.checks import CheckOutcome
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.shards import read_shards
from albor_pipeline.summaries.chat import BaseEvalSummary
from albor_pipeline.text.base_eval import BASE_EVAL_SCHEMA, BaseTask, fewshot, render_prompts, spans
from albor_pipeline.text.encode import encode_lists, pick_encoder
from albor_pipeline.text.vocab import BOS, added_tokens, id_bytes, load_tokenizer


@dataclass
class BaseEvalResult:
    artifact: Artifact
    summary: BaseEvalSummary


def build_base_eval(
    ingested_path: Path,
    tokenizer_path: Path,
    task: BaseTask,
    shots: int,
    delimiter: str,
    encoder_choice: str,
    out: Path,
    io: StageIO,
) -> BaseEvalResult:
    """Render and tokenize every item of `ingested_path` into `out`."""
    table = read_shards(ingested_path, ["text", "sha256"])
    items = [json.loads(t) for t in table.column("text").to_pylist()]
    if shots >= len(items):
        raise ValueError(f"num_fewshot {shots} needs more than {shots} items; the set has {len(items)}")
    tok = load_tokenizer(str(tokenizer_path))
    draws = [fewshot(i, len(items), shots) for i in range(len(items))]
    prompts = [render_prompts(item, task, delimiter, [items[j] for j in d]) for item, d in zip(items, draws)]
    encoder, _ = pick_encoder(tok, encoder_choice, [p[0][:8192] for p in prompts[:64]])
    encoded = iter(encode_lists(encoder, [p for group in prompts for p in group]))
    bos = added_tokens(tok)[BOS]
    columns: dict[str, list[Any]] = {name: [] for name in BASE_EVAL_SCHEMA.names}
    for item, group, draw in zip(items, prompts, draws):
        sequences, starts, ends = spans([[bos, *next(encoded)] for _ in group], task)
        columns["input_ids"].append(sequences)
        columns["starts"].append(starts)
        columns["ends"].append(ends)
        columns["gold"].append(item.get("gold", 0))
        columns["fewshot"].append(draw)
    columns["sha256"] = table.column("sha256").to_pylist()
    columns["item"] = table.column("text").to_pylist()
    with ParquetSink(out, BASE_EVAL_SCHEMA) as sink:
        sink.write(pa.table(columns, schema=BASE_EVAL_SCHEMA))
    lengths = [len(s) for group in columns["input_ids"] for s in group]
    summary = BaseEvalSummary(
        task_type=task.value,
        num_fewshot=shots,
        continuation_delimiter=delimiter,
        items=len(items),
        sequences=len(lengths),
        tokens=sum(lengths),
        longest=max(lengths, default=0),
    )
    return BaseEvalResult(record(out, io.root, rows=len(items)), summary)


def check_continuations(path: Path, tokenizer_path: Path, task: BaseTask, delimiter: str) -> CheckOutcome:
    """Every sequence is BOS then exactly its prompt (re-rendered from the stored item and
    shots), and its span is the answer: a choice's end (multiple choice), the shared
    continuation (schema), or the continuation (language modelling)."""
    tok = load_tokenizer(str(tokenizer_path))
    table = id_bytes(tok)
    rows = pq.read_table(path).to_pylist()
    items = [json.loads(r["item"]) for r in rows]
    bos = added_tokens(tok)[BOS]
    bad, first = 0, list[str]()
    for row, item in zip(rows, items):
        prompts = render_prompts(item, task, delimiter, [items[j] for j in row["fewshot"]])
        answers = {
            BaseTask.multiple_choice: [delimiter + c for c in item.get("choices", [])],
            BaseTask.schema: [item.get("continuation", "")] * len(prompts),
            BaseTask.language_modeling: [item.get("continuation", "")],
        }[task]
        parted = task is BaseTask.language_modeling or spans(row["input_ids"], task)[1] == row["starts"]
        for ids, start, end, prompt, answer in zip(
            row["input_ids"], row["starts"], row["ends"], prompts[-len(row["input_ids"]) :], answers
        ):
            span = b"".join(table[i] for i in ids[start:end])
            whole = ids[:1] == [bos] and b"".join(table[i] for i in ids[1:]) == prompt.encode("utf-8")
            if not (whole and parted and 0 < start < end == len(ids) and _is_answer(span, answer, task, delimiter)):
                bad += 1
                if len(first) < 5:
                    first.append(f"{row['sha256'][:12]}: {'span' if whole else 'prompt'} mismatch")
                break
    return CheckOutcome(
        bool(rows) and not bad,
        f"{bad} of {len(rows)} items have a sequence that is not its prompt or a span that is not its answer",
        {"items": len(rows), "bad": bad, "first_bad": first},
    )


def _is_answer(span: bytes, answer: str, task: BaseTask, delimiter: str) -> bool:
    """A multiple-choice span is the end of its choice where the choices part (a shared start is
    context); a schema span holds the shared continuation; an LM span is the continuation,
    with the delimiter the stripped prompt left out."""
    text = answer.encode("utf-8")
    if task is BaseTask.multiple_choice:
        return bool(span) and text.endswith(span)
    if task is BaseTask.schema:
        return span.endswith(text)
    return span.endswith(text) and (delimiter + answer).encode("utf-8").endswith(span)

"""SFT data and chat-eval sets: conversations rendered to ids + loss mask (nanochat semantics).

`sft/<split>/part-00000.parquet` holds one row per conversation {input_ids, loss_mask,
source, sha256, messages}; the nanochat export writes the same tokens as flat `.bin`
shards with parallel `_mask.bin` shards and `sft.json`. `eval/<name>.parquet` holds
multiple-choice items rendered for completion (ending after `<|assistant_start|>`)
with the id of each answer letter. Memory is bounded by a batch of conversations.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer

from albor_pipeline.runtime.artifacts import Artifact, ParquetSink, atomic_path, record, write_json
from albor_pipeline.runtime.shardmap import StageIO, output_set
from albor_pipeline.runtime.shards import iter_batches, read_shards
from albor_pipeline.spec import ChatSpec, ChatTokens, Overlong, SftFormat
from albor_pipeline.stages.chat.report import EvalSummary, SftSourceFacts, SftSummary
from albor_pipeline.text.chat import ChatIds, Message, Piece, mc_labels, mc_prompt, render_pieces
from albor_pipeline.text.encode import Encoder, encode_lists, pick_encoder
from albor_pipeline.text.vocab import token_dtype

SFT_SCHEMA = pa.schema(
    [
        ("input_ids", pa.list_(pa.uint32())),
        ("loss_mask", pa.list_(pa.uint8())),
        ("source", pa.string()),
        ("sha256", pa.string()),
        ("messages", pa.string()),
    ]
)
EVAL_SCHEMA = pa.schema(
    [
        ("input_ids", pa.list_(pa.uint32())),
        ("choice_token_ids", pa.list_(pa.uint32())),
        ("answer", pa.int32()),
        ("sha256", pa.string()),
        ("item", pa.string()),
    ]
)
SIDECAR = "sft.json"
BATCH_ROWS = 1024


def encode_pieces(batch: list[list[Piece]], encoder: Encoder) -> list[tuple[np.ndarray, np.ndarray]]:
    """(ids, mask) of each rendered conversation; every text piece in one encoder batch."""
    texts = [p for pieces in batch for p, _ in pieces if isinstance(p, str)]
    encoded = iter(encode_lists(encoder, texts))
    out = []
    for pieces in batch:
        ids: list[int] = []
        mask: list[int] = []
        for piece, m in pieces:
            new = [piece] if isinstance(piece, int) else next(encoded)
            ids += new
            mask += [m] * len(new)
        out.append((np.array(ids, dtype=np.uint32), np.array(mask, dtype=np.uint8)))
    return out


def _rows(path: Path) -> Iterator[tuple[list[str], list[str], list[str]]]:
    for batch in iter_batches(path, ["text", "source", "sha256"], BATCH_ROWS):
        yield batch.column(0).to_pylist(), batch.column(1).to_pylist(), batch.column(2).to_pylist()


def _sample(path: Path) -> list[str]:
    """Text pieces of the first conversations: what `pick_encoder` checks gigatoken on."""
    texts: list[str] = []
    for conversations, _, _ in _rows(path):
        for raw in conversations[:32]:
            for message in json.loads(raw):
                content = message["content"]
                texts += [content] if isinstance(content, str) else [p["text"] for p in content]
        break
    return [t[:8192] for t in texts]


@dataclass
class SftResult:
    artifacts: list[Artifact]
    summary: SftSummary
    encoder: str  # the asset's metadata, not a recorded fact


class _BinShards:
    """nanochat export: `shard_NNNNN.bin` + `shard_NNNNN_mask.bin`, a new pair every `shard_tokens`."""

    def __init__(self, out_dir: Path, dtype: np.dtype, shard_tokens: int, stack: ExitStack) -> None:
        self.out_dir, self.dtype, self.shard_tokens, self.stack = out_dir, dtype, shard_tokens, stack
        self.shards: list[dict[str, Any]] = []
        self._files: tuple[BinaryIO, BinaryIO] | None = None

    def _open(self, name: str) -> BinaryIO:
        """A file committed (renamed into place) only when the whole stage succeeds."""
        path = self.stack.enter_context(atomic_path(self.out_dir / name))
        return self.stack.enter_context(path.open("wb"))

    def write(self, ids: np.ndarray, mask: np.ndarray) -> None:
        if self._files is None or self.shards[-1]["tokens"] >= self.shard_tokens:
            name = f"shard_{len(self.shards):05d}"
            self.shards.append({"file": f"{name}.bin", "mask": f"{name}_mask.bin", "tokens": 0, "conversations": 0})
            self._files = (self._open(f"{name}.bin"), self._open(f"{name}_mask.bin"))
        self._files[0].write(ids.astype(self.dtype).tobytes())
        self._files[1].write(mask.tobytes())
        self.shards[-1]["tokens"] += len(ids)
        self.shards[-1]["conversations"] += 1


def build_sft(
    mixed_path: Path,
    tokenizer_path: Path,
    spec: ChatSpec,
    encoder_choice: str,
    out_dir: Path,
    io: StageIO,
) -> SftResult:
    """Render one split's mixed conversations into `out_dir` (replaced as one set, or not at all)."""
    tok = Tokenizer.from_file(str(tokenizer_path))
    ids = ChatIds.of(tok, spec.tokens)
    encoder, encoder_note = pick_encoder(tok, encoder_choice, _sample(mixed_path))
    dtype = token_dtype(tok.get_vocab_size(with_added_tokens=True))
    sources: dict[str, Counter[str]] = defaultdict(Counter)
    totals: Counter[str] = Counter()
    with output_set(out_dir) as staging, ExitStack() as stack:
        sink = stack.enter_context(ParquetSink(staging / "part-00000.parquet", SFT_SCHEMA, BATCH_ROWS))
        bins = _BinShards(staging, dtype, spec.shard_tokens, stack) if SftFormat.nanochat in spec.formats else None
        for conversations, names, shas in _rows(mixed_path):
            parsed: list[list[Message]] = [json.loads(c) for c in conversations]
            rendered = encode_pieces([render_pieces(m, ids) for m in parsed], encoder)
            cols: dict[str, list[Any]] = {name: [] for name in SFT_SCHEMA.names}
            for raw, messages, source, sha, (tokens, mask) in zip(conversations, parsed, names, shas, rendered):
                if len(tokens) > spec.max_tokens:
                    if spec.overlong is Overlong.skip:
                        totals["skipped_overlong"] += 1
                        continue
                    tokens, mask = tokens[: spec.max_tokens], mask[: spec.max_tokens]
                    totals["truncated"] += 1
                cols["input_ids"].append(tokens)
                cols["loss_mask"].append(mask)
                cols["source"].append(source)
                cols["sha256"].append(sha)
                cols["messages"].append(raw)
                if bins:
                    bins.write(tokens, mask)
                stats = sources[source]
                stats["conversations"] += 1
                stats["turns"] += len(messages)
                stats["tokens"] += len(tokens)
                stats["trained_tokens"] += int(mask.sum())
            sink.write(pa.RecordBatch.from_pydict(cols, schema=SFT_SCHEMA))
            if io.progress:
                io.progress(f"sft: {sink.rows:,} conversations rendered")
        rows = sink.rows
        tokens_total = sum(s["tokens"] for s in sources.values())
        if bins:
            sidecar = {
                "dtype": dtype.name,
                "conversations": rows,
                "tokens": tokens_total,
                "bos_id": ids.bos,
                "max_tokens": spec.max_tokens,
                "shards": bins.shards,
            }
            write_json(staging / SIDECAR, sidecar)
    names_out = ["part-00000.parquet"]
    if bins:
        names_out += [n for shard in bins.shards for n in (shard["file"], shard["mask"])] + [SIDECAR]
    artifacts = [record(out_dir / n, io.root, rows=rows if n.endswith(".parquet") else None) for n in names_out]
    trained = sum(s["trained_tokens"] for s in sources.values())
    summary = SftSummary(
        conversations=rows,
        tokens=tokens_total,
        trained_tokens=trained,
        trained_fraction=round(trained / tokens_total, 4) if tokens_total else 0.0,
        skipped_overlong=totals["skipped_overlong"],
        truncated=totals["truncated"],
        sources={name: SftSourceFacts.of(facts) for name, facts in sorted(sources.items())},
    )
    return SftResult(artifacts, summary, encoder_note)


@dataclass
class EvalResult:
    artifact: Artifact
    summary: EvalSummary


def label_ids(encoder: Encoder, labels: list[str]) -> dict[str, int]:
    """The id of each answer label as the model emits it after `<|assistant_start|>`: "A", no space."""
    encoded = dict(zip(labels, encode_lists(encoder, labels), strict=True))
    split = sorted(label for label, ids in encoded.items() if len(ids) != 1)
    if split:
        raise ValueError(f"the tokenizer splits the answer labels {split} into several tokens")
    return {label: int(ids[0]) for label, ids in encoded.items()}


def build_eval(
    ingested_path: Path,
    tokenizer_path: Path,
    tokens: ChatTokens,
    encoder_choice: str,
    out: Path,
    io: StageIO,
    *,
    max_tokens: int = 2048,
) -> EvalResult:
    """Render every multiple-choice item for completion into `out`, with its own answer labels
    when it has them; a prompt over `max_tokens` is cut there, as nanochat's render_for_completion
    cuts (counted)."""
    tok = Tokenizer.from_file(str(tokenizer_path))
    ids = ChatIds.of(tok, tokens)
    items = read_shards(ingested_path, ["text", "sha256"])
    parsed = [json.loads(t) for t in items.column("text").to_pylist()]
    labels = [mc_labels(i) for i in parsed]
    prompts = [[{"role": "user", "content": mc_prompt(i["question"], i["choices"], k)}] for i, k in zip(parsed, labels)]
    encoder, _ = pick_encoder(tok, encoder_choice, [p[0]["content"] for p in prompts[:64]])
    # nanochat's render_for_completion: the conversation cut at max_tokens, then <|assistant_start|>.
    rendered = [r[0] for r in encode_pieces([render_pieces(p, ids) for p in prompts], encoder)]
    prompt_ids = [np.append(r[:max_tokens], ids.assistant_start) for r in rendered]
    label_id = label_ids(encoder, sorted({label for k in labels for label in k}))
    table = pa.table(
        {
            "input_ids": prompt_ids,
            "choice_token_ids": [[label_id[label] for label in k] for k in labels],
            "answer": [i["answer"] for i in parsed],
            "sha256": items.column("sha256"),
            "item": items.column("text"),
        },
        schema=EVAL_SCHEMA,
    )
    with ParquetSink(out, EVAL_SCHEMA) as sink:
        sink.write(table)
    return EvalResult(
        record(out, io.root, rows=table.num_rows),
        EvalSummary(
            items=table.num_rows,
            tokens=sum(len(r) for r in prompt_ids),
            truncated=sum(len(r) > max_tokens for r in rendered),
            choices={str(k): v for k, v in sorted(Counter(len(i["choices"]) for i in parsed).items())},
        ),
    )

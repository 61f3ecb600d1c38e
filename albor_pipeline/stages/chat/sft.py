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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

from albor_pipeline.runtime.artifacts import Artifact, ParquetSink, atomic_path, record, staged_dir, write_json
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.shards import iter_batches, read_shards
from albor_pipeline.spec import ChatSpec, ChatTokens, Overlong, SftFormat, SftPacking
from albor_pipeline.stages.chat.pack import Conversation, batched, best_fit, packed_batch
from albor_pipeline.summaries.chat import EvalSummary, PackedFacts, SftSourceFacts, SftSummary
from albor_pipeline.text.chat import (
    EVAL_SCHEMA,
    SFT_SCHEMA,
    ChatIds,
    Message,
    Piece,
    mc_labels,
    mc_prompt,
    render_pieces,
)
from albor_pipeline.text.encode import Encoder, encode_lists, pick_encoder
from albor_pipeline.text.sequences import INDEX_FILE, INDEX_FORMAT, PACKED_SCHEMA, ROW_GROUP_SEQUENCES
from albor_pipeline.text.vocab import BOS, EOS, PAD, added_tokens, load_tokenizer, token_dtype

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
    left = 32
    for conversations, _, _ in _rows(path):
        for raw in conversations[:left]:
            for message in json.loads(raw):
                content = message["content"]
                texts += [content] if isinstance(content, str) else [p["text"] for p in content]
        left -= min(left, len(conversations))
        if not left:
            break
    return [t[:8192] for t in texts]


@dataclass
class SftResult:
    artifacts: list[Artifact]
    summary: SftSummary
    encoder: str  # the asset's metadata, not a recorded fact


class _BinShards:
    """nanochat export: `shard_NNNNN.bin` + `shard_NNNNN_mask.bin`, a new pair every `shard_tokens`."""

    def __init__(self, out_dir: Path, dtype: np.dtype, spec: ChatSpec, stack: ExitStack) -> None:
        self.out_dir, self.dtype, self.shard_tokens, self.stack = out_dir, dtype, spec.shard_tokens, stack
        self.unit = "rows" if spec.packing is SftPacking.best_fit else "conversations"
        self.shards: list[dict[str, Any]] = []
        self._files: tuple[BinaryIO, BinaryIO] | None = None

    def _open(self, name: str) -> BinaryIO:
        """A file committed (renamed into place) only when the whole stage succeeds."""
        path = self.stack.enter_context(atomic_path(self.out_dir / name))
        return self.stack.enter_context(path.open("wb"))

    def write(self, ids: np.ndarray, mask: np.ndarray) -> None:
        if self._files is None or self.shards[-1]["tokens"] >= self.shard_tokens:
            name = f"shard_{len(self.shards):05d}"
            self.shards.append({"file": f"{name}.bin", "mask": f"{name}_mask.bin", "tokens": 0, self.unit: 0})
            self._files = (self._open(f"{name}.bin"), self._open(f"{name}_mask.bin"))
        self._files[0].write(ids.astype(self.dtype).tobytes())
        self._files[1].write(mask.tobytes())
        self.shards[-1]["tokens"] += len(ids)
        self.shards[-1][self.unit] += 1


@dataclass
class _Render:
    """One split's rendering: what it needs, and what it counts as conversations stream by."""

    spec: ChatSpec
    ids: ChatIds
    encoder: Encoder
    sources: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    totals: Counter[str] = field(default_factory=Counter)

    def conversations(self, mixed_path: Path) -> Iterator[Conversation]:
        """The split's conversations rendered, in mix order; an overlong one skipped or cut,
        and (packed) one with no trained token left after a cut dropped, all counted."""
        spec = self.spec
        for conversations, names, shas in _rows(mixed_path):
            parsed: list[list[Message]] = [json.loads(c) for c in conversations]
            rendered = encode_pieces([render_pieces(m, self.ids) for m in parsed], self.encoder)
            for raw, messages, source, sha, (tokens, mask) in zip(conversations, parsed, names, shas, rendered):
                if len(tokens) > spec.max_tokens:
                    if spec.overlong is Overlong.skip:
                        self.totals["skipped_overlong"] += 1
                        continue
                    tokens, mask = tokens[: spec.max_tokens], mask[: spec.max_tokens]
                    self.totals["truncated"] += 1
                if spec.packing is SftPacking.best_fit and not mask.any():
                    self.totals["untrained"] += 1
                    continue
                stats = self.sources[source]
                stats["conversations"] += 1
                stats["turns"] += len(messages)
                stats["tokens"] += len(tokens)
                stats["trained_tokens"] += int(mask.sum())
                yield Conversation(tokens, mask, source, sha, raw)

    def summary(self, packed: PackedFacts | None) -> SftSummary:
        tokens = sum(s["tokens"] for s in self.sources.values())
        trained = sum(s["trained_tokens"] for s in self.sources.values())
        return SftSummary(
            conversations=sum(s["conversations"] for s in self.sources.values()),
            tokens=tokens,
            trained_tokens=trained,
            trained_fraction=round(trained / tokens, 4) if tokens else 0.0,
            skipped_overlong=self.totals["skipped_overlong"],
            truncated=self.totals["truncated"],
            untrained=self.totals["untrained"],
            packed=packed,
            sources={name: SftSourceFacts.of(facts) for name, facts in sorted(self.sources.items())},
        )


def _write_rows(render: _Render, mixed_path: Path, sink: ParquetSink, bins: _BinShards | None, io: StageIO) -> None:
    """One row per conversation."""
    for chunk in batched(render.conversations(mixed_path), BATCH_ROWS):
        columns = {
            "input_ids": [c.ids for c in chunk],
            "loss_mask": [c.mask for c in chunk],
            "source": [c.source for c in chunk],
            "sha256": [c.sha256 for c in chunk],
            "messages": [c.messages for c in chunk],
        }
        sink.write(pa.RecordBatch.from_pydict(columns, schema=SFT_SCHEMA))
        for c in chunk:
            if bins:
                bins.write(c.ids, c.mask)
        if io.progress:
            io.progress(f"sft: {sink.rows:,} conversations rendered")


def _write_packed(
    render: _Render, mixed_path: Path, sink: ParquetSink, bins: _BinShards | None, io: StageIO
) -> PackedFacts:
    """Rows of conversations packed best-fit, each `row_tokens` long."""
    spec, capacity = render.spec, render.spec.row_tokens
    rows = pad = 0
    packed = best_fit(render.conversations(mixed_path), capacity, spec.pack_window)
    for chunk in batched(packed, ROW_GROUP_SEQUENCES * 8):
        batch = packed_batch(list(chunk), capacity, render.ids.bos)
        sink.write(batch)
        rows += batch.num_rows
        pad += capacity * batch.num_rows - sum(map(sum, batch.column("doc_lens").to_pylist()))
        if bins:
            for ids, mask in zip(batch.column("input_ids").to_numpy(False), batch.column("loss_mask").to_numpy(False)):
                bins.write(ids, mask)
        if io.progress:
            io.progress(f"sft: {rows:,} packed rows")
    fill = round(1 - pad / (rows * capacity), 4) if rows else 0.0
    return PackedFacts(rows=rows, row_tokens=capacity, padding_tokens=pad, fill=fill)


def build_sft(
    mixed_path: Path,
    tokenizer_path: Path,
    spec: ChatSpec,
    encoder_choice: str,
    out_dir: Path,
    io: StageIO,
) -> SftResult:
    """Render one split's mixed conversations into `out_dir` (replaced as one set, or not at
    all): a row per conversation, or with `packing: best_fit` packed rows and their reader index."""
    tok = load_tokenizer(str(tokenizer_path))
    encoder, encoder_note = pick_encoder(tok, encoder_choice, _sample(mixed_path))
    render = _Render(spec, ChatIds.of(tok, spec.tokens), encoder)
    dtype = token_dtype(tok.get_vocab_size(with_added_tokens=True))
    pack = spec.packing is SftPacking.best_fit
    names = ["part-00000.parquet"]
    with staged_dir(out_dir) as staging, ExitStack() as stack:
        schema, group = (PACKED_SCHEMA, ROW_GROUP_SEQUENCES) if pack else (SFT_SCHEMA, BATCH_ROWS)
        sink = stack.enter_context(ParquetSink(staging / names[0], schema, group))
        bins = _BinShards(staging, dtype, spec, stack) if SftFormat.nanochat in spec.formats else None
        packed = _write_packed(render, mixed_path, sink, bins, io) if pack else None
        if not pack:
            _write_rows(render, mixed_path, sink, bins, io)
        summary = render.summary(packed)
        if pack:
            write_json(staging / INDEX_FILE, _index(spec, sink.rows, added_tokens(tok), summary))
            names.append(INDEX_FILE)
        if bins:
            sidecar = {
                "dtype": dtype.name,
                "conversations": summary.conversations,
                "tokens": summary.tokens,
                "bos_id": render.ids.bos,
                "max_tokens": spec.max_tokens,
                "packing": spec.packing.value,
                **({"rows": sink.rows, "row_tokens": spec.row_tokens} if pack else {}),
                "shards": bins.shards,
            }
            write_json(staging / SIDECAR, sidecar)
            names += [n for shard in bins.shards for n in (shard["file"], shard["mask"])] + [SIDECAR]
        rows = sink.rows
    artifacts = [record(out_dir / n, io.root, rows=rows if n.endswith(".parquet") else None) for n in names]
    return SftResult(artifacts, summary, encoder_note)


def _index(spec: ChatSpec, rows: int, special: dict[str, int], summary: SftSummary) -> dict[str, Any]:
    """The reader index of packed rows (`albor_pipeline.dataset.Sequences` opens them as a corpus
    dir, with `loss_mask` masking the targets)."""
    return {
        "format": INDEX_FORMAT,
        "seq_len": spec.row_tokens,
        "packing": spec.packing.value,
        "loss_mask": True,
        "documents": summary.conversations,
        "tokens": summary.tokens,
        "special_ids": {"bos": special[BOS], "eos": special[EOS], "pad": special[PAD]},
        "bos": True,
        "parquet": {
            "sequences": rows,
            "shard_sequences": max(rows, 1),
            "row_group_sequences": ROW_GROUP_SEQUENCES,
            "shards": [{"file": "part-00000.parquet", "sequences": rows}],
        },
        "streams": {},
    }


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
    tok = load_tokenizer(str(tokenizer_path))
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

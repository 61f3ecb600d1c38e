"""Training-side readers of a corpus dir (`corpus/<split>`, `corpus/long_<split>`) or of
packed SFT rows (`sft/<split>` with `chat.packing: best_fit`).

- `Sequences(dir)`: map-style, O(1) random access through the corpus stage's `index.json`,
  over the Parquet shards or the token-stream exports. Item i is a dict of numpy arrays:
  `input_ids`, `position_ids` (restarting at every document, so attention can be kept
  inside documents), and with `xy=True` `targets` (the next tokens, `IGNORE_INDEX` where
  the next token is padding or unknown). `chunk_len` serves `seq_len / chunk_len` chunks
  of every sequence (a 4k stage from 32k sequences) with no re-tokenization. Packed SFT
  rows add `loss_mask`, and their targets are `IGNORE_INDEX` where the target's mask is 0.
- `Batches(sequences, batch_size, seed, rank, world_size)`: one rank's batches of a
  seeded per-epoch shuffle, disjoint from and together complete with the other ranks'.
  Item b is batch b, so a plain `torch.utils.data.DataLoader(batches, batch_size=None)`
  yields the same batches for any number of workers, and `state_dict()` /
  `load_state_dict()` resume exactly after any batch.

torch is optional: nothing here imports it until `Batches.loader()` is called.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow.parquet as pq

from albor_pipeline.runtime.artifacts import StageManifest
from albor_pipeline.runtime.bucket import is_remote
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.readcache import DEFAULT_CACHE_BYTES, BucketDir, ReadCache, default_cache_dir
from albor_pipeline.text.sequences import INDEX_FILE, INDEX_FORMAT

IGNORE_INDEX = -100  # torch.nn.functional.cross_entropy's default ignore_index
SOURCES = ("parquet", "tokens", "megatron")  # the Parquet shards, the nanoGPT and Megatron streams
STREAM_FILES = {"tokens": "tokens.bin", "megatron": "megatron.bin"}


class _Files:
    """The files of one corpus dir: on disk, or in a bucket data dir through a bounded local
    cache that checks each file against the manifest's SHA-256 before it is used."""

    def __init__(self, location: str | Path, cache_dir: str | Path | None, cache_bytes: int) -> None:
        self.bucket: BucketDir | None = None
        self.stage, self.version = "", ""  # the corpus stage and its data version, when a manifest records them
        if is_remote(str(location)):
            self.where = str(location).rstrip("/")
            self.bucket = BucketDir.locate(self.where, INDEX_FILE)
            self.cache = ReadCache(self.bucket.root, Path(cache_dir or default_cache_dir()), cache_bytes)
            self.stage, self.version = self.bucket.rel, self.bucket.version
        else:
            self.where = str(location)
            self.stage, self.version = _recorded(Path(location))

    def path(self, name: str) -> Path:
        """A local path holding file `name` (fetched into the cache first from a bucket)."""
        if self.bucket is None:
            return Path(self.where) / name
        return self.cache.path(self.bucket.artifact(name))

    def size(self, name: str) -> int:
        return self.path(name).stat().st_size if self.bucket is None else self.bucket.artifact(name).bytes

    def __str__(self) -> str:
        return self.where


def _recorded(directory: Path) -> tuple[str, str]:
    """(stage, data version) of the data dir manifest that records `directory`'s index, or
    ("", "") for a corpus dir outside a data dir (a copy: its version is unknown)."""
    directory = directory.resolve()
    for root in directory.parents:
        stage = directory.relative_to(root).as_posix()
        try:
            manifest = StageManifest.model_validate_json(Layout(root).manifest(stage).read_bytes())
        except (OSError, ValueError):
            continue
        if any(a.path == f"{stage}/{INDEX_FILE}" for a in manifest.outputs):
            return stage, manifest.data_version
    return "", ""


class _ParquetSequences:
    """Sequence i of the Parquet shards: one row-group read (32 sequences), a few cached."""

    CACHE = 8  # row groups (and open shards) kept per process: sequential reads decode each group once

    def __init__(self, files: _Files, index: dict[str, Any]) -> None:
        parquet = index["parquet"]
        self.files, self.seq_len = files, int(index["seq_len"])
        self.shards = [(s["file"], int(s["sequences"])) for s in parquet["shards"]]
        self.per_shard, self.per_group = int(parquet["shard_sequences"]), int(parquet["row_group_sequences"])
        self.sequences = int(parquet["sequences"])
        self.pad = int(index["special_ids"]["pad"])
        self.contiguous = index["packing"] == "concat"  # sequence i + 1 continues sequence i
        self.columns = ["input_ids", "doc_lens", *(["loss_mask"] if index.get("loss_mask") else [])]
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._files: OrderedDict[int, pq.ParquetFile] = OrderedDict()
        self._groups: OrderedDict[tuple[int, int], tuple[np.ndarray, ...]] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:  # DataLoader workers (spawn) open their own files
        return {k: v for k, v in self.__dict__.items() if k not in ("_files", "_groups")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def _file(self, shard: int) -> pq.ParquetFile:
        if os.getpid() != self._pid:  # a forked worker: never share the parent's open files
            self._reset()
        if shard in self._files:
            self._files.move_to_end(shard)
            return self._files[shard]
        name, rows = self.shards[shard]
        handle = pq.ParquetFile(self.files.path(name))
        if handle.metadata.num_rows != rows:
            raise ValueError(
                f"{self.files}/{name}: {handle.metadata.num_rows} sequences, {INDEX_FILE} says {rows}; "
                "the corpus dir mixes two builds"
            )
        self._files[shard] = handle
        if len(self._files) > self.CACHE:  # a bounded read cache may evict a shard: hold few open
            self._files.popitem(last=False)
        return handle

    def _group(self, shard: int, group: int) -> tuple[np.ndarray, ...]:
        """(ids as rows x seq_len, all doc_lens, each row's offset into them[, loss masks as rows
        x seq_len]) of one row group."""
        key = (shard, group)
        if key in self._groups:
            self._groups.move_to_end(key)
            return self._groups[key]
        table = self._file(shard).read_row_group(group, columns=self.columns, use_threads=False)
        ids = table.column("input_ids").combine_chunks()
        lens = table.column("doc_lens").combine_chunks()
        value: tuple[np.ndarray, ...] = (
            ids.values.to_numpy().reshape(len(ids), self.seq_len),
            lens.values.to_numpy(),
            lens.offsets.to_numpy(),
        )
        if "loss_mask" in self.columns:
            value += (table.column("loss_mask").combine_chunks().values.to_numpy().reshape(len(ids), self.seq_len),)
        self._groups[key] = value
        if len(self._groups) > self.CACHE:
            self._groups.popitem(last=False)
        return value

    def read(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, doc_lens) of sequence i."""
        shard, row = divmod(i, self.per_shard)
        group, row = divmod(row, self.per_group)
        ids, lens, offsets = self._group(shard, group)[:3]
        return ids[row], lens[offsets[row] : offsets[row + 1]].astype(np.int64)

    def loss_mask(self, i: int) -> np.ndarray | None:
        """The loss mask of sequence i (packed SFT rows), or None for a corpus."""
        if "loss_mask" not in self.columns:
            return None
        shard, row = divmod(i, self.per_shard)
        group, row = divmod(row, self.per_group)
        mask: np.ndarray = self._group(shard, group)[3][row]
        return mask

    def next_token(self, i: int) -> int | None:
        if not self.contiguous or i + 1 >= self.sequences:
            return None
        token = int(self.read(i + 1)[0][0])
        return None if token == self.pad else token


class _StreamSequences:
    """Sequence i of a token stream: tokens [i * seq_len, (i + 1) * seq_len) of a memmap.

    Documents end at EOS (the stream has no padding and no other EOS: a literal `</s>` in
    text is ordinary tokens), so a window's doc_lens come from its EOS positions.
    """

    contiguous = True

    def __init__(self, files: _Files, index: dict[str, Any], source: str) -> None:
        name = STREAM_FILES[source]
        stream = index["streams"].get(name)
        if stream is None:
            raise ValueError(f"{files}: no {name} (add `{source}` to corpus.formats)")
        self.files, self.name, self.seq_len = files, name, int(index["seq_len"])
        self.tokens = int(stream["tokens"])
        size = files.size(name)
        if size != self.tokens * np.dtype(stream["dtype"]).itemsize:
            raise ValueError(f"{files}/{name}: {size} bytes, {INDEX_FILE} says {self.tokens} {stream['dtype']} tokens")
        self.dtype, self.eos = np.dtype(stream["dtype"]), int(index["special_ids"]["eos"])
        self.sequences = self.tokens // self.seq_len
        self._map: np.memmap | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_map": None}

    @property
    def _tokens(self) -> np.memmap:
        if self._map is None:
            self._map = np.memmap(self.files.path(self.name), dtype=self.dtype, mode="r")
        return self._map

    def read(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(self._tokens[i * self.seq_len : (i + 1) * self.seq_len])
        ends = np.flatnonzero(ids == self.eos) + 1
        if not len(ends) or ends[-1] != len(ids):
            ends = np.append(ends, len(ids))  # the last piece goes on in the next window
        return ids, np.diff(ends, prepend=0)

    def loss_mask(self, i: int) -> None:
        """The streams carry no loss mask."""
        return None

    def next_token(self, i: int) -> int | None:
        at = (i + 1) * self.seq_len
        return int(self._tokens[at]) if at < self.tokens else None


def _read_index(files: _Files) -> dict[str, Any]:
    """A corpus dir's `index.json`, with an error that says what is wrong."""
    try:
        index: dict[str, Any] = json.loads(files.path(INDEX_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{files}/{INDEX_FILE}: not found; is {files} a corpus dir (corpus/<split>)?") from None
    if index.get("format") != INDEX_FORMAT:
        raise ValueError(f"{files}/{INDEX_FILE}: format {index.get('format')!r}, expected {INDEX_FORMAT!r}")
    return index


class Sequences:
    """Random access to the sequences (or `chunk_len` chunks of them) of one corpus dir.

    `source`: "parquet" (the shards, with their stored doc_lens), "tokens" or "megatron"
    (the stream exports, cut every seq_len). `dtype`: of `input_ids` (int64 by default:
    what `torch.nn.Embedding` takes). `xy`: add `targets`, the next token at every
    position; past a chunk's end that is the next chunk's first token, or the next
    sequence's where packing is contiguous (concat), else `IGNORE_INDEX`.

    `directory` may be a dir of a bucket data dir (`s3://bucket/prefix/corpus/train`): its
    files come through a local cache (`cache_dir`, default `~/.cache/albor/objects`) of at
    most `cache_bytes`, each checked against the manifest's SHA-256 when it is fetched.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        source: str = "parquet",
        chunk_len: int | None = None,
        xy: bool = False,
        dtype: npt.DTypeLike = np.int64,
        cache_dir: str | Path | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        files = _Files(directory, cache_dir, cache_bytes)
        self.index = _read_index(files)
        # The corpus (`corpus/train`) and its data version, as its data dir's manifest records
        # them ("" for a copied corpus dir): a loader state names them (`Batches.state_dict`).
        self.stage, self.version = files.stage, files.version
        if source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
        if source == "parquet" and self.index["parquet"] is None:
            raise ValueError(f"{directory}: no Parquet shards (add `parquet` to corpus.formats)")
        self.backend = (
            _ParquetSequences(files, self.index) if source == "parquet" else _StreamSequences(files, self.index, source)
        )
        self.seq_len = self.backend.seq_len
        self.chunk_len = chunk_len or self.seq_len
        if self.chunk_len <= 0 or self.seq_len % self.chunk_len:
            raise ValueError(f"chunk_len {chunk_len} must divide seq_len {self.seq_len}")
        self.chunks = self.seq_len // self.chunk_len
        self.xy, self.dtype = xy, np.dtype(dtype)
        self.pad = int(self.index["special_ids"]["pad"])

    def __len__(self) -> int:
        return self.backend.sequences * self.chunks

    def _locate(self, index: int) -> tuple[int, int]:
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"item {index} out of range for {n} items")
        return divmod(index, self.chunks)

    def doc_lens(self, index: int) -> np.ndarray:
        """The document pieces of item `index`, in order, summing to its non-pad length."""
        seq, chunk = self._locate(index)
        return _recut(self.backend.read(seq)[1], chunk * self.chunk_len, self.chunk_len)

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        seq, chunk = self._locate(index)
        ids, lens = self.backend.read(seq)
        start, length = chunk * self.chunk_len, self.chunk_len
        x = ids[start : start + length]
        pieces = _recut(lens, start, length)
        segments = np.append(pieces, length - pieces.sum()) if pieces.sum() < length else pieces
        item = {
            "input_ids": x.astype(self.dtype),
            "position_ids": np.arange(length) - np.repeat(np.cumsum(segments) - segments, segments),
        }
        mask = self.backend.loss_mask(seq)
        if mask is not None:
            item["loss_mask"] = mask[start : start + length]
        if self.xy:
            after = int(ids[start + length]) if start + length < self.seq_len else self.backend.next_token(seq)
            targets = np.empty(length, dtype=np.int64)
            targets[:-1] = x[1:]
            targets[-1] = IGNORE_INDEX if after is None else after
            targets[targets == self.pad] = IGNORE_INDEX
            if mask is not None:  # packed SFT: train only where the target's mask is 1 (nanochat's rule)
                targets[np.append(mask[start + 1 : start + length + 1], 0)[:length] == 0] = IGNORE_INDEX
            item["targets"] = targets
        return item


def _recut(lens: np.ndarray, start: int, length: int) -> np.ndarray:
    """The document pieces inside [start, start + length) of a sequence with pieces `lens`."""
    ends = np.cumsum(lens)
    stop = min(start + length, int(ends[-1]) if len(ends) else 0)
    if stop <= start:
        return np.zeros(0, dtype=np.int64)
    inner = ends[(ends > start) & (ends < stop)]
    return np.diff(np.concatenate([[start], inner, [stop]])).astype(np.int64)


@dataclass
class _Position:
    epoch: int = 0
    start: int = 0  # items of the epoch's permutation consumed before this order began (a resume)
    batch: int = 0  # batches of this order already consumed
    step: int = 0  # batches this reader (and the states it resumed) yielded before this order began


class Served(NamedTuple):
    """Items a reader served in one stretch of one epoch: permutation positions
    [first, stop), `per_step` of them a step (world size x batch size), the first at step
    `first_step`. A state lists every stretch since the reader's first batch, so it alone
    says which items a checkpoint saw and when (`albor exposure`)."""

    epoch: int
    first: int
    stop: int
    per_step: int
    first_step: int


class Batches:
    """One rank's batches of `sequences`, reshuffled every epoch, resumable after any batch.

    Epoch e's order is a permutation seeded by (seed, e); rank r takes items r, r + W,
    r + 2W, ... of it (W = world_size), so ranks are disjoint and together complete
    (`drop_last` trims every rank to the same number of full batches). Item b is a dict
    of stacked arrays plus `cu_seqlens` (int32 segment starts over the flattened batch,
    for varlen attention) and `index` (the items it holds). Iterating, or `loader()`,
    runs the rest of the current epoch and moves the position past every batch it yields.

    Ranks that step together have, after b batches each, consumed exactly the first
    W * batch_size * b items of the permutation. That prefix is all a resume needs, so a
    state taken at one world size or batch size resumes at another: the new ranks deal out
    the rest of the permutation the same way.
    """

    def __init__(
        self,
        sequences: Sequences,
        batch_size: int,
        *,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = True,
        drop_last: bool = False,
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {batch_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        self.sequences, self.batch_size = sequences, batch_size
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.shuffle, self.drop_last = shuffle, drop_last
        self.position = _Position()
        self.served: list[Served] = []  # the stretches before the current order (`Served`)
        self._order: tuple[int, int, np.ndarray] | None = None

    def order(self, epoch: int | None = None) -> np.ndarray:
        """This rank's items of `epoch` (default: the current one, from where it resumed), in batch order."""
        epoch = self.position.epoch if epoch is None else epoch
        start = self.position.start if epoch == self.position.epoch else 0
        if self._order is None or self._order[:2] != (epoch, start):
            n = len(self.sequences)
            every = np.random.default_rng([self.seed, epoch]).permutation(n) if self.shuffle else np.arange(n)
            rest = every[start:]
            mine = rest[self.rank :: self.world_size]
            if self.drop_last:
                mine = mine[: len(rest) // self.world_size // self.batch_size * self.batch_size]
            self._order = (epoch, start, mine)
        return self._order[2]

    def __len__(self) -> int:
        return -(-len(self.order()) // self.batch_size)

    def __getitem__(self, batch: int) -> dict[str, np.ndarray]:
        if not 0 <= batch < len(self):
            raise IndexError(f"batch {batch} out of range for {len(self)} batches")
        chosen = self.order()[batch * self.batch_size : (batch + 1) * self.batch_size]
        items = [self.sequences[int(i)] for i in chosen]
        out = {key: np.stack([item[key] for item in items]) for key in items[0]}
        starts = np.flatnonzero(out["position_ids"].reshape(-1) == 0)
        out["cu_seqlens"] = np.append(starts, out["position_ids"].size).astype(np.int32)
        out["index"] = chosen.astype(np.int64)
        return out

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its first batch."""
        self._close()
        self.position = _Position(epoch, step=self.step())

    def _advance(self) -> None:
        self.position.batch += 1
        if self.position.batch >= len(self):
            self._close()
            self.position = _Position(self.position.epoch + 1, step=self.step())

    def step(self) -> int:
        """Batches this reader yielded, the states it resumed from included: the training step."""
        return self.position.step + self.position.batch

    def _stretch(self) -> Served | None:
        """The current order's served items, or None before its first batch."""
        pos = self.position
        if not pos.batch:
            return None
        return Served(pos.epoch, pos.start, self.consumed(), self.world_size * self.batch_size, pos.step)

    def _close(self) -> None:
        if (stretch := self._stretch()) is not None:
            self.served.append(stretch)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for batch in range(self.position.batch, len(self)):
            item = self[batch]
            self._advance()
            yield item

    def loader(self, **dataloader_kwargs: Any) -> Iterator[Any]:
        """The rest of the current epoch through a plain `torch.utils.data.DataLoader`
        (`num_workers`, `pin_memory`, ... pass through); batches come as tensors, in the
        same order for any number of workers."""
        from torch.utils.data import DataLoader

        start = self.position.batch
        # Any map-style object (len + getitem) is a dataset to DataLoader; its stubs want the class.
        dataset: Any = self
        loader: DataLoader[Any] = DataLoader(
            dataset, batch_size=None, sampler=range(start, len(self)), **dataloader_kwargs
        )
        for batch in loader:
            self._advance()
            yield batch

    def consumed(self) -> int:
        """Items of the current epoch's permutation consumed by all ranks together."""
        step = self.world_size * self.batch_size * self.position.batch
        return min(len(self.sequences), self.position.start + step)

    def state_dict(self) -> dict[str, Any]:
        """Where the next batch comes from, and what the order depends on (checked on load)."""
        stretch = self._stretch()
        return {
            "epoch": self.position.epoch,
            "batch": self.position.batch,
            "start": self.position.start,
            "consumed": self.consumed(),
            "step": self.step(),
            "served": [list(s) for s in [*self.served, *([stretch] if stretch else [])]],
            "corpus": self.sequences.stage,
            "version": self.sequences.version,
            "chunks": self.sequences.chunks,
            "seed": self.seed,
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "items": len(self.sequences),
        }

    def load_state_dict(self, state: dict[str, Any], *, other_version: bool = False) -> None:
        """Continue where `state` was taken: the rest of its epoch, each item exactly once
        across this reader's ranks, whatever world size, batch size or drop_last it was taken with.

        With the same settings the next batch is the one an uninterrupted run yields next.
        The seed, shuffle and corpus size fix the permutation, so they must match; and the
        corpus's data version must be the one the state read, unless `other_version` (a
        rebuilt corpus puts other tokens at the same items).
        """
        mine = self.state_dict()
        saved, now = state.get("version") or "", mine["version"]
        if saved and now and saved != now and not other_version:
            raise ValueError(
                f"the state read {state.get('corpus') or 'the corpus'} at data version {saved[:12]}; "
                f"{mine['corpus']} is now version {now[:12]} (rebuilt since): its items hold other tokens. "
                "Resume on the version the state read, or pass other_version=True to continue on this one"
            )
        differ = {k: (state.get(k), mine[k]) for k in ("seed", "shuffle", "items") if state.get(k) != mine[k]}
        if differ:
            detail = ", ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in differ.items())
            raise ValueError(f"cannot resume a different permutation ({detail})")
        # A state from before `consumed` was recorded started its epoch at item 0.
        step = int(state["world_size"]) * int(state["batch_size"]) * int(state["batch"])
        consumed = int(state.get("consumed", step))
        epoch = int(state["epoch"])
        self.served = [Served(*map(int, s)) for s in state.get("served", [])]
        at = int(state.get("step", state["batch"]))
        self.position = (
            _Position(epoch, consumed, step=at) if consumed < len(self.sequences) else _Position(epoch + 1, step=at)
        )

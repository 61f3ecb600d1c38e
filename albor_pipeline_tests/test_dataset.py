"""The training-side reader over real corpora (stdlib `email` code, a tokenizer trained on
`asyncio`): random access, chunk views, rank partitions and exact resume through a real
torch DataLoader with 0, 1 and 2 worker processes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from albor_pipeline.dataset import IGNORE_INDEX, Batches, Sequences
from albor_pipeline.runtime.artifacts import StageManifest, record, sha256_file
from albor_pipeline.runtime.bucket import Bucket, BucketError
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.spec import CorpusSpec
from albor_pipeline.stages.corpus import checks
from albor_pipeline.stages.corpus.checks import check_min_chars, token_chars
from albor_pipeline.stages.corpus.corpus import build_corpus
from albor_pipeline.text.vocab import EOS, PAD

SEQ_LEN = 128
FORMATS = ["parquet", "megatron", "nanogpt"]


@pytest.fixture(scope="module")
def corpora(pipeline: tuple[Path, list[str]]) -> dict[str, Path]:
    """concat, best_fit and a long subset of the same FIM'd documents."""
    tmp, _ = pipeline
    fim, tok = tmp / "fim", tmp / "tok" / "tokenizer.json"
    specs = {
        "concat": (CorpusSpec(seq_len=SEQ_LEN, formats=FORMATS, shard_sequences=50), 0),  # several shards
        "best_fit": (CorpusSpec(seq_len=SEQ_LEN, packing="best_fit", best_fit_window=16, formats=FORMATS), 0),
        "long": (CorpusSpec(seq_len=4 * SEQ_LEN, formats=FORMATS, shard_sequences=7), 6000),
    }
    out = {}
    for name, (spec, min_chars) in specs.items():
        out[name] = tmp / f"dataset_{name}"
        build_corpus(fim, tok, spec, out[name], StageIO(tmp), min_chars=min_chars)
    return out


def _stored(directory: Path) -> tuple[list[list[int]], list[list[int]]]:
    table = pq.read_table(sorted(directory.glob("part-*.parquet")))
    return table.column("input_ids").to_pylist(), table.column("doc_lens").to_pylist()


@pytest.mark.parametrize("name", ["concat", "best_fit", "long"])
def test_random_access_returns_the_stored_sequences_and_boundaries(corpora, name):
    ids, lens = _stored(corpora[name])
    ds = Sequences(corpora[name], xy=True)
    assert len(ds) == len(ids) > 0
    pad = ds.pad
    for i in [0, 1, len(ds) // 2, len(ds) - 1, -1]:
        item = ds[i]
        assert item["input_ids"].tolist() == ids[i] and item["input_ids"].dtype == np.int64
        assert ds.doc_lens(i).tolist() == lens[i]
        # position ids count from 0 in every document piece, and again in the padding
        expected = [p for n in lens[i] for p in range(n)]
        expected += list(range(len(ids[i]) - len(expected)))
        assert item["position_ids"].tolist() == expected
        # targets: the next token; padding (and what follows a bin) is ignored
        nxt = [*ids[i][1:], ids[i + 1][0] if name != "best_fit" and i not in (-1, len(ds) - 1) else pad]
        assert item["targets"].tolist() == [IGNORE_INDEX if t == pad else t for t in nxt]
    with pytest.raises(IndexError):
        ds[len(ds)]
    assert Sequences(corpora[name], dtype=np.uint16)[0]["input_ids"].dtype == np.uint16


@pytest.mark.parametrize("source", ["tokens", "megatron"])
def test_stream_exports_serve_the_same_sequences_as_the_shards(corpora, source):
    shards = Sequences(corpora["concat"], xy=True)
    stream = Sequences(corpora["concat"], source=source, xy=True)
    assert len(stream) == len(shards)
    for i in range(len(shards)):
        a, b = shards[i], stream[i]
        assert a["input_ids"].tolist() == b["input_ids"].tolist()
        assert a["position_ids"].tolist() == b["position_ids"].tolist()
        assert shards.doc_lens(i).tolist() == stream.doc_lens(i).tolist()
        if i < len(shards) - 1:  # the stream still holds the dropped remainder after the last one
            assert a["targets"].tolist() == b["targets"].tolist()


@pytest.mark.parametrize("name", ["concat", "best_fit", "long"])
def test_chunk_views_are_slices_of_the_full_sequences(corpora, name):
    full = Sequences(corpora[name], xy=True)
    for chunk_len in (SEQ_LEN // 4, SEQ_LEN // 2):
        chunks = Sequences(corpora[name], chunk_len=chunk_len, xy=True)
        k = full.seq_len // chunk_len
        assert len(chunks) == k * len(full)
        for i in range(len(chunks)):
            seq, c = divmod(i, k)
            whole, part = full[seq], chunks[i]
            window = slice(c * chunk_len, (c + 1) * chunk_len)
            assert part["input_ids"].tolist() == whole["input_ids"][window].tolist()
            assert part["targets"].tolist() == whole["targets"][window].tolist()
            # doc_lens re-cut: the same document boundaries, plus the chunk edges
            ends = set(np.cumsum(full.doc_lens(seq)).tolist())
            nonpad = max(ends, default=0)
            inside = sorted({e - c * chunk_len for e in ends if c * chunk_len < e < (c + 1) * chunk_len})
            stop = min(chunk_len, nonpad - c * chunk_len)
            expected = np.diff([0, *[e for e in inside if e < stop], stop]).tolist() if stop > 0 else []
            assert chunks.doc_lens(i).tolist() == expected
    with pytest.raises(ValueError, match="must divide seq_len"):
        Sequences(corpora[name], chunk_len=SEQ_LEN // 3)


def test_long_subset_holds_only_long_documents(pipeline, corpora, monkeypatch, local2):
    tmp, docs = pipeline
    tok = tmp / "tok" / "tokenizer.json"
    long = sorted(corpora["long"].glob("part-*.parquet"))
    meta = json.loads((corpora["long"] / "index.json").read_text())
    assert meta["min_chars"] == 6000 and meta["documents"] == sum(len(d) >= 6000 for d in docs)
    outcome = check_min_chars(long, tok, 6000)
    assert outcome.passed, outcome.description
    # Honest: the same check fails on the full corpus, which holds short documents.
    shards = sorted(corpora["concat"].glob("part-*.parquet"))
    full = check_min_chars(shards, tok, 6000)
    assert not full.passed and full.metadata["short"] > 0
    # Shards checked one per task, documents continued across shards joined: the same counts
    # as one pass over the whole token stream, inline and on two processes.
    tokenizer = Tokenizer.from_file(str(tok))
    stream = np.concatenate([np.array(ids) for ids in _stored(corpora["concat"])[0]])
    stream = stream[stream != tokenizer.token_to_id(PAD)]
    ends = np.flatnonzero(stream == tokenizer.token_to_id(EOS)) + 1
    per_doc = np.diff(np.cumsum(token_chars(tokenizer)[stream])[ends - 1], prepend=0)
    whole = {"documents": len(per_doc), "short": int((per_doc < 6000).sum()), "shortest_chars": int(per_doc.min())}
    assert len(shards) > 1 and full.metadata == {**whole, "min_chars": 6000}
    last_ids = [pq.read_table(p, columns=["input_ids"]).column(0)[-1].as_py()[-1] for p in shards[:-1]]
    assert any(i != tokenizer.token_to_id(EOS) for i in last_ids)  # a document continues into the next shard
    pooled = check_min_chars(shards, tok, 6000, local2)
    assert (pooled.passed, pooled.description, pooled.metadata) == (full.passed, full.description, full.metadata)
    monkeypatch.setattr(checks, "CHECK_BATCH", 7)  # a shard read in several batches: the same
    assert check_min_chars(shards, tok, 6000).metadata == full.metadata
    assert check_min_chars(long, tok, 6000, local2).metadata == outcome.metadata
    # Several shards (7 sequences each): random access crosses shard edges.
    assert len(long) > 1 and Sequences(corpora["long"])[7]["input_ids"].tolist() == _stored(corpora["long"])[0][7]


@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_are_disjoint_and_complete(corpora, world_size):
    ds = Sequences(corpora["concat"], chunk_len=SEQ_LEN // 2)
    ranks = [Batches(ds, 5, seed=7, rank=r, world_size=world_size) for r in range(world_size)]
    seen = [np.concatenate([b["index"] for b in rank]) for rank in ranks]
    together = np.concatenate(seen)
    assert sorted(together.tolist()) == list(range(len(ds)))  # complete, nothing twice
    assert max(map(len, seen)) - min(map(len, seen)) <= 1
    # drop_last: every rank the same number of full batches, still disjoint
    even = [Batches(ds, 5, seed=7, rank=r, world_size=world_size, drop_last=True) for r in range(world_size)]
    sizes = {len(e) for e in even}
    batches = [b for e in even for b in e]
    assert len(sizes) == 1 and all(len(b["index"]) == 5 for b in batches)
    flat = np.concatenate([b["index"] for b in batches])
    assert len(set(flat.tolist())) == len(flat)


def test_each_epoch_is_a_seeded_shuffle(corpora):
    ds = Sequences(corpora["concat"])
    a, b, c = Batches(ds, 4, seed=1), Batches(ds, 4, seed=1), Batches(ds, 4, seed=2)
    assert a.order(0).tolist() == b.order(0).tolist() != c.order(0).tolist()
    assert a.order(1).tolist() != a.order(0).tolist()
    assert sorted(a.order(1).tolist()) == list(range(len(ds)))
    assert Batches(ds, 4, shuffle=False).order(3).tolist() == list(range(len(ds)))
    # In-process iteration runs the rest of the epoch and moves to the next one.
    first = [x["index"].tolist() for x in a]
    assert a.state_dict()["epoch"] == 1 and a.state_dict()["batch"] == 0
    assert [i for x in first for i in x] == a.order(0).tolist()


def test_batches_carry_varlen_boundaries(corpora):
    ds = Sequences(corpora["best_fit"], xy=True)
    batch = Batches(ds, 3, seed=0)[0]
    assert batch["input_ids"].shape == batch["targets"].shape == batch["position_ids"].shape == (3, SEQ_LEN)
    starts = []
    for row, i in enumerate(batch["index"].tolist()):
        pieces = ds.doc_lens(i).tolist()
        pad = SEQ_LEN - sum(pieces)
        bounds = np.cumsum([0, *pieces, *([pad] if pad else [])])[:-1] + row * SEQ_LEN
        starts += bounds.tolist()
    assert batch["cu_seqlens"].tolist() == [*starts, 3 * SEQ_LEN]
    assert batch["cu_seqlens"].dtype == np.int32


def _contents(batches):
    return [(b["index"].tolist(), np.asarray(b["input_ids"]).tolist()) for b in batches]


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_resume_after_k_batches_yields_exactly_the_uninterrupted_batches(corpora, workers):
    """Interrupt a torch DataLoader run with `workers` processes after k batches, save the
    state, and resume in a fresh reader with a different worker count."""
    pytest.importorskip("torch")

    def reader() -> Batches:
        return Batches(Sequences(corpora["concat"], xy=True, chunk_len=SEQ_LEN // 2), 3, seed=5, rank=1, world_size=2)

    reference = reader()
    reference.set_epoch(2)
    full = _contents(reference.loader(num_workers=0))
    assert len(full) > 8 and reference.state_dict()["epoch"] == 3
    for k in (1, 4, len(full) - 1):
        first = reader()
        first.set_epoch(2)
        run = first.loader(num_workers=workers)
        head = _contents(next(run) for _ in range(k))
        state = json.loads(json.dumps(first.state_dict()))  # what a checkpoint would hold
        run.close()
        resumed = reader()
        resumed.load_state_dict(state)
        tail = _contents(resumed.loader(num_workers=(workers + 1) % 3))
        assert head + tail == full, f"k={k}"
        assert resumed.state_dict()["epoch"] == 3


def test_resume_refuses_a_different_permutation(corpora):
    ds = Sequences(corpora["concat"])
    state = Batches(ds, 4, seed=1).state_dict()
    with pytest.raises(ValueError, match=r"seed: saved 1, now 2"):
        Batches(ds, 4, seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match=r"shuffle: saved True, now False"):
        Batches(ds, 4, seed=1, shuffle=False).load_state_dict(state)
    with pytest.raises(ValueError, match=r"items: saved \d+, now \d+"):
        Batches(Sequences(corpora["concat"], chunk_len=SEQ_LEN // 2), 4, seed=1).load_state_dict(state)


def _run_ranks(world_size: int, batch_size: int, ds: Sequences, state=None, steps=None, drop_last=False):
    """Ranks stepping together (as data-parallel training does): the items each step serves
    (its batch's `index`, read from the order a batch reads: this checks which items, not
    their bytes), and rank 0's state after the last step."""
    kw = {"seed": 3, "world_size": world_size, "drop_last": drop_last}
    ranks = [Batches(ds, batch_size, rank=r, **kw) for r in range(world_size)]
    for rank in ranks:
        rank.set_epoch(1)
        if state is not None:
            rank.load_state_dict(json.loads(json.dumps(state)))
    served = []
    for step in range(max(map(len, ranks)) if steps is None else steps):
        served += [i for r in ranks if step < len(r) for i in r.order()[step * batch_size : (step + 1) * batch_size]]
        for rank in ranks:
            if step < len(rank):
                rank.position.batch += 1  # what iterating does, without reading the batch twice
    return served, ranks[0].state_dict()


@pytest.mark.parametrize(("world_size", "batch_size"), [(2, 3), (3, 3), (3, 2), (4, 3), (1, 5)])
def test_a_state_resumes_on_another_world_size(corpora, world_size, batch_size):
    """Stop 4 ranks of 3-item batches after 2 steps, resume on other ranks and batch sizes:
    the epoch is the uninterrupted one's items, each exactly once."""
    ds = Sequences(corpora["concat"], chunk_len=SEQ_LEN // 4)
    epoch = Batches(ds, 3, seed=3).order(1).tolist()
    assert len(epoch) > 4 * 3 * 2 + 10
    head, state = _run_ranks(4, 3, ds, steps=2)
    assert state["consumed"] == 24 and sorted(head) == sorted(epoch[:24])
    tail, end = _run_ranks(world_size, batch_size, ds, state=state)
    assert sorted(head + tail) == sorted(epoch), "an item repeated or skipped"
    assert set(tail) == set(epoch[24:])
    assert (end["epoch"], end["consumed"]) == (1, len(ds))
    # A second change of world size mid-way through the rest: still exactly once.
    more, again = _run_ranks(world_size, batch_size, ds, state=state, steps=1)
    rest, _ = _run_ranks(2, 2, ds, state=again)
    assert sorted(head + more + rest) == sorted(epoch)
    # drop_last on the new ranks serves a prefix of the rest, no item twice.
    trimmed, _ = _run_ranks(world_size, batch_size, ds, state=state, drop_last=True)
    assert sorted(trimmed) == sorted(epoch[24 : 24 + len(trimmed)]) and len(set(trimmed)) == len(trimmed)


def test_a_state_at_the_end_of_an_epoch_resumes_at_the_next(corpora):
    ds = Sequences(corpora["concat"], chunk_len=SEQ_LEN // 4)
    whole, state = _run_ranks(2, 4, ds)
    assert sorted(whole) == list(range(len(ds))) and state["consumed"] == len(ds)
    resumed = Batches(ds, 5, seed=3, rank=0, world_size=3)
    resumed.load_state_dict(state)
    assert resumed.position.epoch == 2 and resumed.order().tolist() == Batches(ds, 1, seed=3).order(2).tolist()[0::3]


def test_reader_errors_say_what_is_wrong(corpora, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"is .* a corpus dir"):
        Sequences(tmp_path)
    with pytest.raises(ValueError, match="source must be one of"):
        Sequences(corpora["concat"], source="arrow")
    only_shards = tmp_path / "only_shards"
    shutil.copytree(corpora["concat"], only_shards)
    index = json.loads((only_shards / "index.json").read_text())
    index["streams"] = {}
    (only_shards / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=r"no tokens.bin \(add `tokens` to corpus.formats\)"):
        Sequences(only_shards, source="tokens")
    # A shard from another build under the same index: refused, never silently mixed.
    mixed = tmp_path / "mixed"
    shutil.copytree(corpora["concat"], mixed)
    table = pq.read_table(mixed / "part-00000.parquet")
    pq.write_table(table.slice(0, table.num_rows - 1), mixed / "part-00000.parquet")
    with pytest.raises(ValueError, match="mixes two builds"):
        Sequences(mixed)[0]
    with pytest.raises(ValueError, match="rank must be in"):
        Batches(Sequences(corpora["concat"]), 2, rank=2, world_size=2)


def _publish(corpus: Path, tmp_path: Path, uri: str) -> Layout:
    """`corpus` as the committed stage corpus/train of the bucket data dir at `uri`."""
    layout = Layout(tmp_path / "work")
    shutil.copytree(corpus, layout.root / "corpus" / "train")
    files = sorted(p for p in (layout.root / "corpus" / "train").iterdir() if p.is_file())
    manifest = StageManifest(stage="corpus/train", outputs=[record(p, layout.root) for p in files])
    Bucket(uri, layout).publish(manifest)
    return layout


def test_a_corpus_in_a_bucket_reads_through_a_bounded_checked_cache(s3, corpora, tmp_path):
    """The moto S3 server holds a bucket data dir; `Sequences` reads its corpus/train by URI."""
    s3.create_bucket(Bucket="albor-loader")
    uri = "s3://albor-loader/team/run"
    layout = _publish(corpora["concat"], tmp_path, uri)
    shards = sorted((layout.root / "corpus" / "train").glob("part-*.parquet"))
    largest = max(p.stat().st_size for p in shards)
    assert len(shards) >= 3
    local, cache = Sequences(corpora["concat"], xy=True), tmp_path / "cache"
    remote = Sequences(f"{uri}/corpus/train", xy=True, cache_dir=cache, cache_bytes=2 * largest + 4096)
    assert len(remote) == len(local)
    for i in range(len(local)):  # every shard in turn: the cache evicts to stay within its bound
        got, want = remote[i], local[i]
        assert all(np.array_equal(got[k], want[k]) for k in want), i
        assert sum(p.stat().st_size for p in cache.iterdir()) <= 2 * largest + 4096
    assert {p.name for p in cache.iterdir()} <= {sha256_file(p) for p in layout.root.rglob("*") if p.is_file()}
    tokens = Sequences(f"{uri}/corpus/train", source="tokens", cache_dir=cache)
    assert np.array_equal(tokens[5]["input_ids"], Sequences(corpora["concat"], source="tokens")[5]["input_ids"])
    with pytest.raises(ValueError, match="does not fit a read cache"):
        Sequences(f"{uri}/corpus/train", source="tokens", cache_dir=tmp_path / "small", cache_bytes=1000)[0]
    with pytest.raises(FileNotFoundError, match=r"no manifest of a bucket data dir records index\.json"):
        Sequences(f"{uri}/corpus/val", cache_dir=cache)


def test_a_changed_object_in_the_bucket_is_refused_not_read(s3, corpora, tmp_path):
    s3.create_bucket(Bucket="albor-changed")
    uri = "s3://albor-changed/run"
    layout = _publish(corpora["concat"], tmp_path, uri)
    shard = record(layout.root / "corpus" / "train" / "part-00001.parquet", layout.root)
    first = record(layout.root / "corpus" / "train" / "part-00000.parquet", layout.root)
    s3.copy_object(  # another shard's bytes under this one's name
        Bucket="albor-changed",
        Key=f"run/objects/{shard.sha256[:2]}/{shard.sha256}",
        CopySource=f"albor-changed/run/objects/{first.sha256[:2]}/{first.sha256}",
    )
    cache = tmp_path / "cache"
    remote = Sequences(f"{uri}/corpus/train", cache_dir=cache)
    assert np.array_equal(remote[0]["input_ids"], Sequences(corpora["concat"])[0]["input_ids"])
    with pytest.raises(BucketError, match=r"part-00001\.parquet: object .* hashes to"):
        remote[remote.backend.per_shard]  # the first item of shard 1
    assert shard.sha256 not in {p.name for p in cache.iterdir()}  # nothing unchecked left to reuse


def test_a_bucket_corpus_through_a_dataloader_with_workers(s3, corpora, tmp_path):
    """Forked DataLoader workers fetch into the shared cache and serve the local batches."""
    pytest.importorskip("torch")
    s3.create_bucket(Bucket="albor-workers")
    uri = "s3://albor-workers/run"
    _publish(corpora["concat"], tmp_path, uri)
    remote = Batches(Sequences(f"{uri}/corpus/train", xy=True, cache_dir=tmp_path / "cache"), 4, seed=2)
    local = Batches(Sequences(corpora["concat"], xy=True), 4, seed=2)
    assert _contents(remote.loader(num_workers=2)) == _contents(local.loader(num_workers=0))

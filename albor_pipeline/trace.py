"""`albor trace`: follow a document from its source file to the token positions it lands in,
or a training sequence back to the source lines it holds.

It reads what the stages recorded, never re-running one: their outputs (which carry each
kept document's source, file and SHA-256), their ledgers (`text/ledger.py`: what each stage
removed or changed, and why) and the corpus's pieces table (`stages/corpus/lineage.py`).
Only the documents it names are re-encoded, to map token offsets to the source's bytes and
lines; the ids are checked against the corpus's own, so a trace that disagrees with the data
fails loudly instead of pointing at the wrong lines.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import BaseModel

from albor_pipeline.queries import SHA256, document_query, glob_regex
from albor_pipeline.runtime.artifacts import Artifact, StageManifest, read_manifest
from albor_pipeline.runtime.layout import (
    CONVERSATIONS,
    DOCUMENTS,
    Layout,
    corpus_names,
    corpus_stage,
    filtered_stage,
    fim_stage,
    ingested_stage,
    mixed_stage,
    sft_stage,
)
from albor_pipeline.runtime.shards import is_shard
from albor_pipeline.spec import DOCUMENT_KINDS, SPLITS, PipelineSpec, SourceKind, SourceSpec
from albor_pipeline.stages.corpus.encode_task import RowGroupEncoder, encode_rows
from albor_pipeline.stages.corpus.lineage import PIECES
from albor_pipeline.text.encode import make_encoder
from albor_pipeline.text.ledger import PAGES, is_ledger, is_side
from albor_pipeline.text.removal import REMOVED
from albor_pipeline.text.secrets import redact_path
from albor_pipeline.text.vocab import id_bytes, load_tokenizer


class Span(BaseModel):
    """Part of a piece: bytes [start, end) of the document's text, and the lines they cover."""

    part: str  # text, or the FIM segment: prefix, middle, suffix
    start: int
    end: int
    first_line: int
    last_line: int


class Piece(BaseModel):
    """Tokens [offset, offset + length) of sequence `sequence` of `corpus`, which are tokens
    [doc_offset, ...) of the document (sentinels and EOS included)."""

    corpus: str
    sequence: int
    offset: int
    length: int
    fim_row: int  # the copy's row in fim/<split> (the mix's row)
    doc_offset: int
    spans: list[Span]


class Fate(BaseModel):
    stage: str
    fate: str
    detail: str = ""


class WebPage(BaseModel):
    """Where a web source's document came from: the page and the record that held it."""

    url: str
    warc: str  # the file, relative to the source's root
    record_id: str | None = None  # WARC-Record-ID (None: an HTML file)
    date: str | None = None  # WARC-Date
    offset: int | None = None  # the record's byte offset in the file
    charset: str | None = None


class DocumentTrace(BaseModel):
    """One document from ingest to the corpus."""

    source: str
    file: str
    sha256: str  # as ingested
    page: WebPage | None = None  # a web source's document: its page and record
    sha256_out: str  # after hygiene (differs when it was redacted)
    fates: list[Fate]
    split: str | None = None
    mixed_rows: dict[str, list[int]] = {}  # split -> rows of the mix holding a copy
    fim: dict[str, list[str]] = {}  # split -> each copy's FIM format ("none": untouched)
    pieces: list[Piece] = []
    sft_rows: dict[str, list[int]] = {}  # a conversation: split -> the sft/<split> rows holding it


class SequencePiece(Piece):
    source: str
    file: str
    sha256: str
    fim_format: str


@dataclass
class _Sets:
    """The recorded files of the stages a trace reads (fetched first from a bucket data dir)."""

    layout: Layout
    fetch: Callable[[list[Artifact]], object] | None = None

    def outputs(self, stage: str) -> StageManifest | None:
        try:
            return read_manifest(self.layout, stage)
        except FileNotFoundError:
            return None

    def select(self, stage: str, keep: Callable[[str], bool]) -> list[Path]:
        """The stage's recorded files whose paths `keep` accepts, in set order (only those are
        fetched from a bucket)."""
        manifest = self.outputs(stage)
        chosen = [a for a in manifest.outputs if keep(a.path)] if manifest is not None else []
        if self.fetch is not None and chosen:
            self.fetch(chosen)
        return [self.layout.root / a.path for a in chosen]

    def files(self, stage: str, ledger: bool = False, under: str = "") -> list[Path]:
        """The stage's recorded shards (or its ledger shards), in set order."""
        return self.select(
            stage,
            lambda path: (
                path.endswith(".parquet")
                and (is_ledger(path) if ledger else not is_side(path))
                and path.startswith(under)
                and (ledger or is_shard(Path(path)))
            ),
        )


Where = tuple[str, Callable[[pa.ChunkedArray], pa.Array]]
"""A filter: a column, and which of its values to select."""


def _rows(files: list[Path], columns: list[str], where: Where) -> Iterator[dict[str, Any]]:
    """The rows of `files` (a set, in order) that `where` selects, with their set row `_row`."""
    key, select = where
    base = 0
    for path in files:
        pfile = pq.ParquetFile(path)
        for batch in pfile.iter_batches(batch_size=65536, columns=sorted({*columns, key})):
            table = pa.Table.from_batches([batch])
            mask = pc.fill_null(select(table.column(key)), False)
            for k in np.flatnonzero(mask.to_numpy(zero_copy_only=False)).tolist():
                yield {**{c: table.column(c)[k].as_py() for c in columns}, "_row": base + k}
            base += batch.num_rows


def _equals(column: str, value: Any) -> Where:
    return column, lambda values: pc.equal(values, value)


def _holds(column: str, value: str) -> Where:
    """Rows whose `column` is `value`, or (a packed SFT row's list) holds it."""

    def select(values: pa.ChunkedArray) -> pa.Array:
        if not pa.types.is_list(values.type):
            return pc.equal(values, value)
        lists = values.combine_chunks()
        hit = np.zeros(len(lists), dtype=bool)
        parents = pc.list_parent_indices(lists).to_numpy()
        hit[parents[pc.equal(pc.list_flatten(lists), value).to_numpy(zero_copy_only=False)]] = True
        return pa.array(hit)

    return column, select


def _is_in(column: str, values: list[Any]) -> Where:
    wanted = pa.array(values)
    return column, lambda found: pc.is_in(found, value_set=wanted)


class _Spans:
    """Maps a FIM split row's tokens to bytes of its document's text, by encoding the row as
    the corpus did (`RowGroupEncoder`'s ids, sentinels and EOS included) and each of its
    segments alone (a segment's tokens are its bytes in order)."""

    def __init__(self, tokenizer: Path, bos: bool) -> None:
        tok = load_tokenizer(str(tokenizer))
        self.encoder = RowGroupEncoder(tok, make_encoder(tok, "hf"), bos)
        self.sizes = np.array([len(b) for b in id_bytes(tok)], dtype=np.int64)

    def tokens(self, row: dict[str, Any]) -> tuple[np.ndarray, list[tuple[str, int, np.ndarray]]]:
        """(the row's ids as the corpus holds them, (part, first token, byte starts) per segment)."""
        cols = ["text", "fim_format", "fim_prefix", "fim_middle", "fim_suffix"]
        ids, _ = _encode_row(self.encoder, {c: [row[c]] for c in cols})
        fmt = row["fim_format"]
        if fmt is None:
            order = [("text", row["text"], 0)]
        else:
            p, m, s = row["fim_prefix"], row["fim_middle"], row["fim_suffix"]
            at = {"prefix": 0, "middle": len(p.encode()), "suffix": len(p.encode()) + len(m.encode())}
            parts = ("prefix", "suffix", "middle") if fmt == "psm" else ("suffix", "prefix", "middle")
            order = [(part, {"prefix": p, "middle": m, "suffix": s}[part], at[part]) for part in parts]
        segments, k = [], int(self.encoder.bos)
        for part, text, base in order:
            k += 0 if fmt is None else 1  # the segment's sentinel
            seg_ids, _ = self.encoder.encoder.encode_flat([text])
            starts = base + np.concatenate([[0], np.cumsum(self.sizes[seg_ids])])
            segments.append((part, k, starts))
            k += len(seg_ids)
        return ids, segments

    def spans(self, row: dict[str, Any], doc_offset: int, length: int) -> list[Span]:
        """The byte and line spans of the document's tokens [doc_offset, doc_offset + length)."""
        _, segments = self.tokens(row)
        text = _original(row).encode()
        out = []
        for part, first, starts in segments:
            lo, hi = max(doc_offset, first), min(doc_offset + length, first + len(starts) - 1)
            if lo >= hi:
                continue
            a, b = int(starts[lo - first]), int(starts[hi - first])
            out.append(Span(part=part, start=a, end=b, first_line=_line(text, a), last_line=_line(text, max(a, b - 1))))
        return out


def _encode_row(encoder: RowGroupEncoder, cols: dict[str, list[Any]]) -> tuple[np.ndarray, np.ndarray]:
    return encode_rows(cols, encoder.encoder, encoder.ids, encoder.bos)


def _original(row: dict[str, Any]) -> str:
    """The document's text before FIM."""
    if row["fim_format"] is None:
        return str(row["text"])
    return f"{row['fim_prefix']}{row['fim_middle']}{row['fim_suffix']}"


def _line(text: bytes, at: int) -> int:
    return text.count(b"\n", 0, at) + 1


FIM_COLUMNS = ["text", "source", "file", "sha256", "fim_format", "fim_prefix", "fim_middle", "fim_suffix"]


class Tracer:
    """Traces over one data dir's recorded stages (`fetch`: a bucket data dir's files)."""

    def __init__(self, spec: PipelineSpec, layout: Layout, fetch: Callable[[list[Artifact]], object] | None = None):
        self.spec, self.sets = spec, _Sets(layout, fetch)
        self._spans: _Spans | None = None

    def spans(self) -> _Spans:
        if self._spans is None:
            manifest = self.sets.outputs(corpus_stage(SPLITS[0]))
            bos = bool(manifest.config.get("bos")) if manifest is not None else False
            (tokenizer,) = self.sets.select("tokenizer", lambda path: path.endswith("/tokenizer.json"))
            self._spans = _Spans(tokenizer, bos)
        return self._spans

    def documents(self, query: str) -> list[DocumentTrace]:
        """Every ingested document `query` names, traced. An empty list: no source ingested
        such a document."""
        return [self.trace(*match) for match in self.matches(query)]

    def matches(self, query: str) -> Iterator[tuple[SourceSpec, str, str]]:
        """(source, file, SHA-256) of every ingested document `query` names, in spec and set
        order: a SHA-256, or a file path or glob, optionally `source:` first. Cheap (the
        ingested sets' two columns): tracing each is what costs."""
        source, pattern = document_query(query)
        if SHA256.fullmatch(pattern):
            where = _equals("sha256", pattern)
        else:
            regex = glob_regex(pattern)
            where = ("file", lambda files: pc.match_substring_regex(files, regex))
        for src in self.spec.sources_of(*DOCUMENT_KINDS, SourceKind.chat):
            if source and src.name != source:
                continue
            for row in _rows(self.sets.files(ingested_stage(src.name)), ["file", "sha256"], where):
                yield src, row["file"], row["sha256"]

    def trace(self, src: SourceSpec, file: str, sha256: str) -> DocumentTrace:
        """One ingested document (or conversation) followed through every stage."""
        if src.kind is SourceKind.chat:
            return self.follow_conversation(src.name, file, sha256)
        return self.follow(src.name, file, sha256)

    def follow_conversation(self, source: str, file: str, sha256: str) -> DocumentTrace:
        """A conversation through hygiene, dedup and holdout, into the SFT rows that hold it."""
        doc = DocumentTrace(
            source=source,
            file=file,
            sha256=sha256,
            sha256_out=sha256,
            fates=[Fate(stage=ingested_stage(source), fate="kept")],
        )
        if not self._hygiene(doc) or not self._documents(doc, CONVERSATIONS):
            return doc
        for split in SPLITS:
            rows = [r["_row"] for r in _rows(self.sets.files(sft_stage(split)), [], _holds("sha256", doc.sha256_out))]
            if rows:
                doc.sft_rows[split] = rows
        return doc

    def missing(self, query: str) -> str:
        """Why nothing matched `query`: no such file under any local source, or one exists but
        ingest did not keep it (the stage's skip counts say by which reason)."""
        pattern = document_query(query)[1]
        lines = []
        for src in self.spec.sources_of(*DOCUMENT_KINDS):
            if self._removed(src.name, pattern):
                lines.append(f"removed at ingested/{src.name} by a removal request (`remove:` in the spec)")
                continue
            if src.kind is SourceKind.web and not SHA256.fullmatch(pattern):
                lines += self._left_at_ingest(src.name, pattern)
                continue
            if SHA256.fullmatch(pattern) or not _exists(Path(src.path), pattern):
                continue
            manifest = self.sets.outputs(ingested_stage(src.name))
            skipped = manifest.summary.get("skipped", {}) if manifest is not None else {}
            counts = ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())) or "none"
            lines.append(
                f"a file under source {src.name}'s path, not ingested: outside its include/exclude globs, or "
                f"skipped at ingest (its skips: {counts})"
            )
        return "; ".join(lines) or "not in the pipeline: no source ingested a matching document"

    def _removed(self, source: str, pattern: str) -> bool:
        """Whether a removal request took a document `pattern` names from `source` at ingest
        (its tombstones: identity, never text)."""
        found = self.sets.select(ingested_stage(source), lambda path: path.endswith(f"/{REMOVED}"))
        if not found:
            return False
        column = "sha256" if SHA256.fullmatch(pattern) else "file"
        regex = pattern if column == "sha256" else glob_regex(pattern)
        return any(_rows(found, [column], (column, lambda v: pc.match_substring_regex(v, regex))))

    def follow(self, source: str, file: str, sha256: str) -> DocumentTrace:
        """One ingested document through hygiene, dedup and holdout, the mix, FIM and the corpora."""
        doc = DocumentTrace(
            source=source,
            file=file,
            sha256=sha256,
            sha256_out=sha256,
            fates=[Fate(stage=ingested_stage(source), fate="kept")],
        )
        doc.page = self._page(source, sha256)
        if not self._hygiene(doc) or not self._documents(doc):
            return doc
        for split in SPLITS:
            rows = [
                r["_row"]
                for r in _rows(self.sets.files(mixed_stage(split)), ["sha256"], _equals("sha256", doc.sha256_out))
            ]
            if rows:
                doc.mixed_rows[split] = rows
        for split, rows in doc.mixed_rows.items():
            fim = {
                r["_row"]: r
                for r in _rows(self.sets.files(fim_stage(split)), FIM_COLUMNS, _equals("sha256", doc.sha256_out))
            }
            doc.fim[split] = [fim[r]["fim_format"] or "none" for r in rows if r in fim]
            for name in corpus_names((split,)):
                doc.pieces += self._pieces(name, fim)
        return doc

    def _page(self, source: str, sha256: str) -> WebPage | None:
        """A web source's document's page and record (its ingestion's `_pages`), else None."""
        found = self.sets.select(ingested_stage(source), lambda path: f"/{PAGES}/" in path)
        for row in _rows(found, list(WebPage.model_fields), _equals("sha256", sha256)):
            return WebPage.model_validate(row)
        return None

    def _left_at_ingest(self, source: str, pattern: str) -> list[str]:
        """What a web source's ingestion did with the pages `pattern` names (its ledger: skipped
        or blocked, and why)."""
        found = self.sets.select(ingested_stage(source), is_ledger)
        regex = glob_regex(pattern)
        rows = _rows(found, ["file", "fate", "detail"], ("file", lambda v: pc.match_substring_regex(v, regex)))
        return [f"{r['file']}: {r['fate']} at ingested/{source} ({r['detail']})" for r in rows]

    def _hygiene(self, doc: DocumentTrace) -> bool:
        """Hygiene's fate of `doc`; False when it removed it."""
        stage = filtered_stage(doc.source)
        for row in _rows(
            self.sets.files(stage, ledger=True), ["fate", "detail", "sha256_out"], _equals("sha256", doc.sha256)
        ):
            doc.fates.append(Fate(stage=stage, fate=row["fate"], detail=row["detail"]))
            if row["fate"] != "redacted":
                return False
            doc.sha256_out = row["sha256_out"]
            return True
        doc.fates.append(Fate(stage=stage, fate="kept"))
        return True

    def _documents(self, doc: DocumentTrace, stage: str = DOCUMENTS) -> bool:
        """Dedup's, holdout's and decontamination's fate of `doc` (in `stage`: documents or
        conversations); False when it was dropped."""
        cols = ["source", "file", "fate", "detail"]
        rows = [
            r
            for r in _rows(self.sets.files(stage, ledger=True), cols, _equals("sha256", doc.sha256_out))
            if r["source"] == doc.source
        ]
        mine = [r for r in rows if r["file"] in (doc.file, redact_path(doc.file))]
        if mine:
            doc.fates.append(Fate(stage=stage, fate=mine[0]["fate"], detail=mine[0]["detail"]))
            return False
        for split in SPLITS:
            if any(
                _rows(
                    self.sets.files(stage, under=f"{stage}/{split}/"),
                    ["sha256"],
                    _equals("sha256", doc.sha256_out),
                )
            ):
                doc.split = split
                doc.fates.append(Fate(stage=stage, fate="kept", detail=f"split {split}"))
                return True
        doc.fates.append(Fate(stage=stage, fate="missing", detail="in no split and no ledger: rebuild the stage"))
        return False

    def _pieces(self, name: str, fim: dict[int, dict[str, Any]]) -> list[Piece]:
        """The pieces of corpus `name` holding the FIM rows `fim`."""
        path = self._pieces_file(name)
        if path is None or not fim:
            return []
        cols = ["sequence", "offset", "length", "row", "doc_offset"]
        return [
            Piece(
                corpus=name,
                **{c: r[c] for c in cols if c != "row"},
                fim_row=r["row"],
                spans=self.spans().spans(fim[r["row"]], r["doc_offset"], r["length"]),
            )
            for r in _rows([path], cols, _is_in("row", sorted(fim)))
        ]

    def _pieces_file(self, name: str) -> Path | None:
        found = self.sets.select(corpus_stage(name), lambda path: path.endswith(PIECES))
        return found[0] if found else None

    def sequence(self, name: str, number: int) -> list[SequencePiece]:
        """Every document piece of sequence `number` of corpus `name`, with its source lines;
        the re-encoded ids are checked against the sequence's."""
        path = self._pieces_file(name)
        if path is None:
            raise FileNotFoundError(f"corpus/{name} is not materialized (or has no ledger): run the pipeline first")
        cols = ["sequence", "offset", "length", "row", "doc_offset"]
        pieces = list(_rows([path], cols, _equals("sequence", number)))
        if not pieces:
            raise IndexError(f"corpus/{name} has no sequence {number}")
        split = name.removeprefix("long_")
        fim = _take(self.sets.files(fim_stage(split)), FIM_COLUMNS, sorted({p["row"] for p in pieces}))
        ids = self._sequence_ids(name, number)
        out = []
        for p in pieces:
            row = fim[p["row"]]
            doc_ids, _ = self.spans().tokens(row)
            if not np.array_equal(
                doc_ids[p["doc_offset"] : p["doc_offset"] + p["length"]], ids[p["offset"] : p["offset"] + p["length"]]
            ):
                raise ValueError(
                    f"corpus/{name}:{number}: the ledger's piece at {p['offset']} disagrees with the tokens"
                )
            out.append(
                SequencePiece(
                    corpus=name,
                    sequence=number,
                    offset=p["offset"],
                    length=p["length"],
                    doc_offset=p["doc_offset"],
                    spans=self.spans().spans(row, p["doc_offset"], p["length"]),
                    source=row["source"],
                    file=row["file"],
                    sha256=row["sha256"],
                    fim_row=p["row"],
                    fim_format=row["fim_format"] or "none",
                )
            )
        return out

    def _sequence_ids(self, name: str, number: int) -> np.ndarray:
        files = self.sets.files(corpus_stage(name))
        return np.asarray(_take(files, ["input_ids"], [number])[number]["input_ids"], dtype=np.int64)


def _exists(root: Path, pattern: str) -> bool:
    """Whether a file under the directory `root` matches `pattern` (False for a glob `Path.glob`
    refuses, such as `a**`)."""
    try:
        return root.is_dir() and any(root.glob(pattern))
    except (ValueError, OSError):
        return False


def _take(files: list[Path], columns: list[str], rows: list[int]) -> dict[int, dict[str, Any]]:
    """Rows `rows` (set order) of a shard set, by their shards' footers."""
    out: dict[int, dict[str, Any]] = {}
    base = 0
    for path in files:
        n = pq.ParquetFile(path).metadata.num_rows
        mine = [r for r in rows if base <= r < base + n]
        if mine:
            table = pq.read_table(path, columns=columns).take(pa.array([r - base for r in mine]))
            for r, values in zip(mine, table.to_pylist()):
                out[r] = values
        base += n
    return out


def _span_lines(spans: list[Span]) -> str:
    return "; ".join(f"{s.part} bytes {s.start}-{s.end} (lines {s.first_line}-{s.last_line})" for s in spans)


def trace_lines(found: list[DocumentTrace] | list[SequencePiece], query: str, missing: str = "") -> list[str]:
    """`albor trace`'s readable answer (`missing`: what to say when nothing matched)."""
    if not found:
        return [f"{query}: {missing or 'not in the pipeline'}"]
    lines: list[str] = []
    for item in found:
        if isinstance(item, SequencePiece):
            lines.append(
                f"corpus/{item.corpus}:{item.sequence} tokens {item.offset}-{item.offset + item.length}: "
                f"{item.source}:{item.file} (sha256 {item.sha256}, FIM {item.fim_format}, "
                f"fim/{item.corpus.removeprefix('long_')} row {item.fim_row}, "
                f"its tokens {item.doc_offset}-{item.doc_offset + item.length}): {_span_lines(item.spans)}"
            )
            continue
        lines.append(f"{item.source}:{item.file}  sha256 {item.sha256}")
        if (page := item.page) is not None:
            record = f"record {page.record_id} at byte {page.offset} of {page.warc}" if page.record_id else page.warc
            lines.append(f"  page: {record}" + (f", fetched {page.date}" if page.date else "") + f", {page.charset}")
        lines += [f"  {f.stage}: {f.fate}" + (f" ({f.detail})" if f.detail else "") for f in item.fates]
        for split, rows in item.sft_rows.items():
            lines.append(f"  sft/{split}: rows {', '.join(map(str, rows[:20]))}{' ...' if len(rows) > 20 else ''}")
        for split, rows in item.mixed_rows.items():
            formats = ", ".join(f"{k} {v}" for k, v in sorted(Counter(item.fim.get(split, [])).items()))
            lines.append(f"  mixed/{split}: {len(rows)} cop{'y' if len(rows) == 1 else 'ies'} (FIM: {formats})")
        for piece in item.pieces:
            lines.append(
                f"  corpus/{piece.corpus}:{piece.sequence} tokens {piece.offset}-{piece.offset + piece.length}: "
                f"{_span_lines(piece.spans)}"
            )
    return lines

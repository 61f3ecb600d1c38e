"""The provenance manifest over every artifact, and its verification.

`provenance.json` lists each artifact (path relative to the output root, SHA-256,
bytes, rows, producing stage) plus each stage's config and inputs; `PROVENANCE.md`
says the same for people, with full hashes. `verify` re-hashes every listed file.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from albor_pipeline.runtime.artifacts import TEMP_SUFFIX, StageManifest, iter_manifests, read_manifest, sha256_file
from albor_pipeline.runtime.bucket import IO_THREADS, Bucket
from albor_pipeline.runtime.commit import BACKUP_SUFFIX, journal_finals
from albor_pipeline.runtime.layout import (
    DOCUMENTS,
    TOKENIZER,
    Layout,
    corpus_names,
    corpus_stage,
    eval_stage,
    filtered_stage,
    fim_stage,
    ingested_stage,
    mixed_stage,
    sft_stage,
)
from albor_pipeline.runtime.markdown import markdown_table
from albor_pipeline.spec import CHAT_KINDS, SPLITS
from albor_pipeline.stages.tokenizer.tokenizer import comparison_table, report_rows


def build_provenance(
    layout: Layout, stages: list[str], spec: dict[str, Any], versions: dict[str, str]
) -> dict[str, Any]:
    manifests = [read_manifest(layout, s) for s in stages]
    return {
        "spec": spec,
        "versions": versions,
        "artifacts": [{**art.model_dump(), "stage": m.stage} for m in manifests for art in m.outputs],
        "stages": {
            m.stage: {
                "data_version": m.data_version,
                "config": m.config,
                "inputs": [{"path": a.path, "sha256": a.sha256} for a in m.inputs],
                "summary": m.summary,
            }
            for m in manifests
        },
    }


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    return [markdown_table([dict(zip(header, r)) for r in rows]), ""]


def render_markdown(prov: dict[str, Any]) -> str:
    stages: dict[str, Any] = prov["stages"]
    lines = [
        "# Provenance",
        "",
        "Every artifact of the last complete build with its full SHA-256. `albor verify` re-checks "
        "them and lists any stage rebuilt since (stale here).",
        "",
    ]
    src_rows = []
    for src in prov["spec"]["sources"]:
        summary = stages.get(ingested_stage(src["name"]), {}).get("summary", {})
        skipped = ", ".join(f"{k} {v}" for k, v in summary.get("skipped", {}).items()) or "none"
        src_rows.append(
            [
                src["name"],
                src["kind"],
                f"`{src['path']}`",
                summary.get("files", ""),
                summary.get("documents", ""),
                summary.get("text_bytes", ""),
                skipped,
            ]
        )
    lines += [
        "## Sources",
        "",
        *_table(["source", "kind", "path", "files", "documents", "text bytes", "skipped"], src_rows),
    ]
    lines += _hygiene_section(prov)
    docs = stages.get(DOCUMENTS, {}).get("summary", {})
    if docs:
        holdout = stages[DOCUMENTS]["config"]
        lines += [
            "## Splits",
            "",
            f"Holdout by content hash: val {holdout['val_fraction']}, test "
            f"{holdout['test_fraction']}, seed {holdout['seed']}. Duplicates dropped: "
            f"{sum(docs.get('duplicates', {}).values())}.",
            "",
        ]
        near = docs.get("near_duplicates") or {}
        if near:
            sizes = ", ".join(f"{k}: {v}" for k, v in near["cluster_sizes"].items()) or "none"
            threshold = stages[DOCUMENTS]["config"]["near_dedup"]["threshold"]
            lines += [
                f"Near duplicates (MinHash LSH, verified Jaccard >= {threshold}):"
                f" {near['clusters']} clusters (sizes {sizes}); removed "
                + (", ".join(f"{k} {v}" for k, v in near["removed"].items()) or "none")
                + f"; {near['candidate_pairs']} LSH candidates, {near['verified_pairs']} verified.",
                "",
            ]
        decon = docs.get("decontaminated") or {}
        if decon:
            lines += [
                f"Decontamination: train documents sharing a {decon['ngram']}-word n-gram with a benchmark item"
                " are dropped. Per source: "
                + (", ".join(f"{k} {v}" for k, v in decon["dropped"].items()) or "none")
                + ".",
                "",
                *_table(
                    ["benchmark", "items", "too short", "n-grams", "train documents dropped"],
                    [
                        [name, b["items"], b["too_short"], b["ngrams"], b["train_dropped"]]
                        for name, b in decon["benchmarks"].items()
                    ],
                ),
            ]
        lines += _table(
            ["split", *[s["name"] for s in prov["spec"]["sources"]]],
            [
                [split, *[docs["rows"][split].get(s["name"], 0) for s in prov["spec"]["sources"]]]
                for split in docs["rows"]
            ],
        )
    mix_rows = []
    for split in SPLITS:
        stage = stages.get(mixed_stage(split))
        if stage:
            for p in stage["summary"]["plan"]:
                mix_rows.append(
                    [
                        split,
                        stage["config"]["seed"],
                        p["source"],
                        p["rule"],
                        p["input rows"],
                        p["output rows"],
                        p["multiplier"],
                    ]
                )
    if mix_rows:
        lines += [
            "## Mix",
            "",
            *_table(["split", "seed", "source", "rule", "input rows", "output rows", "multiplier"], mix_rows),
        ]
    fim_rows = [
        [
            split,
            s["config"]["enabled"],
            s["config"]["rate"],
            s["config"]["format"],
            s["config"]["seed"],
            s["summary"]["transformed"],
            s["summary"]["rows"],
        ]
        for split in SPLITS
        if (s := stages.get(fim_stage(split)))
    ]
    if fim_rows:
        lines += [
            "## Fill-in-the-Middle",
            "",
            *_table(["split", "enabled", "rate", "format", "seed", "FIM rows", "rows"], fim_rows),
        ]
    tok = stages.get(TOKENIZER, {}).get("summary")
    if tok:
        lines += ["## Tokenizer", "", markdown_table(report_rows(tok)), ""]
        if tok.get("comparison"):
            lines += [
                "Bytes per token on the val text, ours against each baseline (diff: fewer tokens than the "
                "baseline is positive):",
                "",
                comparison_table(tok["comparison"]),
                "",
            ]
    corpora = corpus_names(SPLITS)
    corpus_rows = [
        [
            split,
            s["config"]["seq_len"],
            s["summary"]["documents"],
            s["summary"]["sequences"],
            s["summary"]["tokens"],
            s["summary"]["dropped_tokens"],
            s["summary"]["padded_tokens"],
            s["summary"].get("cut_fraction", ""),
            s["summary"].get("pad_fraction", ""),
        ]
        for split in corpora
        if (s := stages.get(corpus_stage(split)))
    ]
    if corpus_rows:
        lines += [
            "## Corpora",
            "",
            *_table(
                [
                    "split",
                    "seq_len",
                    "documents",
                    "sequences",
                    "tokens",
                    "dropped",
                    "padded",
                    "docs cut",
                    "pad fraction",
                ],
                corpus_rows,
            ),
        ]
    keys = ("documents", "unique_documents", "max_repeat", "mean_repeat", "tokens", "token_share", "epochs")
    source_rows = [
        [split, name, *(facts[k] for k in keys)]
        for split in corpora
        if (s := stages.get(corpus_stage(split)))
        for name, facts in s["summary"].get("sources", {}).items()
    ]
    if source_rows:
        header = ["documents", "unique", "max repeat", "mean repeat", "tokens", "token share", "epochs"]
        lines += [
            "## Corpora by source",
            "",
            "Epochs: a source's tokens over the tokens of its unique documents.",
            "",
            *_table(["split", "source", *header], source_rows),
        ]
    lines += _chat_section(prov)
    lines += [
        "## Artifacts",
        "",
        *_table(
            ["path", "sha256", "bytes", "rows", "stage"],
            [
                [
                    f"`{a['path']}`",
                    f"`{a['sha256']}`",
                    a["bytes"],
                    a["rows"] if a["rows"] is not None else "",
                    a["stage"],
                ]
                for a in prov["artifacts"]
            ],
        ),
    ]
    lines += ["## Library versions", "", *_table(["library", "version"], [[k, v] for k, v in prov["versions"].items()])]
    return "\n".join(lines)


def _hygiene_section(prov: dict[str, Any]) -> list[str]:
    """Per document source: input = kept + removed by reason; the secrets ingestion redacted and
    hygiene's findings, by type (counts only)."""
    rows = []
    for src in prov["spec"]["sources"]:
        stage = prov["stages"].get(filtered_stage(src["name"]))
        if stage:
            s = stage["summary"]
            ingested = prov["stages"].get(ingested_stage(src["name"]), {}).get("summary", {})
            rows.append(
                [
                    src["name"],
                    stage["config"]["redact"],
                    s["documents_in"],
                    s["kept"],
                    ", ".join(f"{k} {v}" for k, v in s["removed"].items()) or "none",
                    ", ".join(f"{k} {v}" for k, v in ingested.get("secrets", {}).items()) or "none",
                    ", ".join(f"{k} {v}" for k, v in s["findings"].items()) or "none",
                    s["redacted_documents"],
                ]
            )
    if not rows:
        return []
    header = [
        "source",
        "redact",
        "documents in",
        "kept",
        "removed",
        "secrets (at ingest)",
        "findings",
        "redacted documents",
    ]
    return ["## Hygiene", "", *_table(header, rows)]


def _chat_section(prov: dict[str, Any]) -> list[str]:
    """Chat sources with their cleanup, the SFT splits per source, the eval sets."""
    stages: dict[str, Any] = prov["stages"]
    chat_kinds = {k.value for k in CHAT_KINDS}
    sources = [s["name"] for s in prov["spec"]["sources"] if s["kind"] in chat_kinds]
    sft = [(split, stages[sft_stage(split)]["summary"]) for split in SPLITS if sft_stage(split) in stages]
    evals = [
        (s["name"], stages[eval_stage(s["name"])]["summary"])
        for s in prov["spec"]["sources"]
        if eval_stage(s["name"]) in stages
    ]
    if not (sources or evals):
        return []
    lines = ["## Chat", ""]
    cleanup_rows = []
    for name in sources:
        summary = stages.get(ingested_stage(name), {}).get("summary", {})
        counts = {**summary.get("cleanup", {}), **summary.get("skipped", {})}
        cleanup_rows.append(
            [name, summary.get("documents", ""), ", ".join(f"{k} {v}" for k, v in counts.items()) or "none"]
        )
    lines += _table(["source", "conversations kept", "cleanup and skips"], cleanup_rows)
    if sft:
        lines += _table(
            ["split", "conversations", "tokens", "trained fraction", "skipped (over max_tokens)", "truncated"],
            [
                [split, s["conversations"], s["tokens"], s["trained_fraction"], s["skipped_overlong"], s["truncated"]]
                for split, s in sft
            ],
        )
        keys = ("conversations", "turns", "tokens", "trained_fraction")
        lines += _table(
            ["split", "source", *keys],
            [[split, name, *(facts[k] for k in keys)] for split, s in sft for name, facts in s["sources"].items()],
        )
    if evals:
        lines += _table(
            ["eval set", "items", "tokens", "choices per item"],
            [
                [name, s["items"], s["tokens"], ", ".join(f"{k}: {v}" for k, v in s["choices"].items())]
                for name, s in evals
            ],
        )
    return lines


@dataclass
class VerifyRow:
    path: str
    expected: str
    actual: str | None  # None: missing
    committing: bool = False  # its stage was committing while a run held the data dir

    @property
    def status(self) -> str:
        if self.committing:
            return "committing"
        if self.actual is None:
            return "MISSING"
        return "ok" if self.actual == self.expected else "CHANGED"


@dataclass
class VerifyReport:
    """What the stages recorded, checked against the files (see `verify`)."""

    files: list[VerifyRow]
    unrecorded: list[str]  # files under the data dir that no stage recorded
    stale: dict[str, list[str]]  # stage -> upstream stages rebuilt after it ran
    temps: list[str]  # left by runs that died; the next run removes them
    unreferenced: int = 0  # a bucket's objects no manifest names (older versions): not failures
    producers: dict[str, str] = field(default_factory=dict)  # output path -> its stage's manifest file

    @property
    def failed(self) -> list[str]:
        return [f"{r.status}: {r.path}" for r in self.files if r.status not in ("ok", "committing")] + [
            f"UNRECORDED: {p}" for p in self.unrecorded
        ]


_NOT_ARTIFACTS = ("manifests", "cache")  # bookkeeping under the data dir, not stage outputs


def verify(root: Path, running: bool = False) -> VerifyReport:
    """Re-hash every output each stage recorded in its manifest, and find stale stages.

    Checks what the stages actually recorded (so it holds after a failed or killed run,
    when provenance.json describes an older build). A stage is stale when an input it
    recorded no longer matches what its producer recorded last: the producer was rebuilt
    after it, as Dagster would mark it.

    `running`: a run holds the data dir. A stage that was committing while its files were
    hashed (a pending journal, or its manifest replaced meanwhile) is checked again, and
    reported as `committing` rather than CHANGED if it still is: never a false alarm.
    """
    layout = Layout(root)
    for _ in range(VERIFY_PASSES if running else 1):
        before = _commit_state(layout)
        report = _verify_pass(layout)
        after = _commit_state(layout)
        moving = {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}
        moving |= {name for name, digest in after.items() if digest == PENDING}
        finals = [final for _, journal, _ in layout.pending_commits() for final in journal_finals(journal)]
        report = replace(
            report,
            files=[_committing(r, moving, report.producers) for r in report.files],
            unrecorded=[p for p in report.unrecorded if not any(p == f or p.startswith(f + "/") for f in finals)],
        )
        if not running or not report.failed or not moving:
            return report
    return report


VERIFY_PASSES = 3
PENDING = "pending"


def _commit_state(layout: Layout) -> dict[str, str]:
    """Each manifest's digest (by file name), or PENDING while its stage's commit is under way."""
    state = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in layout.manifests_dir.glob("*.json")}
    state.update({manifest.name: PENDING for _, _, manifest in layout.pending_commits()})
    return state


def _committing(row: VerifyRow, moving: set[str], producers: dict[str, str]) -> VerifyRow:
    return replace(row, committing=True) if row.status != "ok" and producers.get(row.path) in moving else row


def _hash_if_there(path: Path) -> str | None:
    """The file's SHA-256, or None when it is missing (or vanished while being read)."""
    try:
        return sha256_file(path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def _verify_pass(layout: Layout) -> VerifyReport:
    root = layout.root
    manifests = list(iter_manifests(layout))
    if not manifests:
        raise FileNotFoundError(f"nothing materialized under {root} (no stage manifests in {layout.manifests_dir})")
    rows = []
    producers = {}  # output path -> its stage's manifest file name
    for m in manifests:
        for art in m.outputs:
            rows.append(VerifyRow(art.path, art.sha256, _hash_if_there(root / art.path)))
            producers[art.path] = layout.manifest(m.stage).name
    unrecorded, temps = [], []
    found = (Path(d, name) for d, _, names in os.walk(root) for name in names)  # a vanishing dir is skipped
    for path in sorted(found):
        rel = path.relative_to(root)
        if rel.parts[0] in _NOT_ARTIFACTS or path == layout.lock_file:
            continue
        if any(part.startswith(".") and part.endswith((TEMP_SUFFIX, BACKUP_SUFFIX)) for part in rel.parts):
            temps.append(rel.as_posix())
        elif rel.as_posix() not in producers:
            unrecorded.append(rel.as_posix())
    return VerifyReport(rows, unrecorded, stale_stages(manifests), temps, producers=producers)


def verify_bucket(bucket: Bucket) -> VerifyReport:
    """`verify` for a data dir in a bucket: every object a manifest there names is re-hashed
    (streamed, nothing is downloaded to disk). Its working copy plays no part."""
    manifests = bucket.manifests()
    if not manifests:
        raise FileNotFoundError(f"nothing materialized under {bucket.uri} (no stage manifests)")
    arts = {(a.path, a.sha256): a for m in manifests for a in m.outputs}
    with ThreadPoolExecutor(IO_THREADS) as pool:
        actual = dict(zip(arts, pool.map(bucket.hash_object, (sha for _, sha in arts))))
    rows = [VerifyRow(path, sha, actual[(path, sha)]) for path, sha in sorted(arts)]
    named = {sha for _, sha in arts}
    unreferenced = sum(sha not in named for sha in bucket.objects())
    return VerifyReport(rows, [], stale_stages(manifests), [], unreferenced)


def stale_stages(manifests: list[StageManifest]) -> dict[str, list[str]]:
    """Stage -> the upstream stages whose current outputs differ from what it read."""
    producer = {art.path: (m.stage, art.sha256) for m in manifests for art in m.outputs}
    stale = {}
    for m in manifests:
        rebuilt = {producer[a.path][0] for a in m.inputs if a.path in producer and producer[a.path][1] != a.sha256}
        if rebuilt:
            stale[m.stage] = sorted(rebuilt)
    return stale

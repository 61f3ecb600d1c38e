"""`albor run | verify | trace | whatif | summary | gc | spec | instance`: the front door (or use Dagster's CLI)."""

from __future__ import annotations

import argparse
import errno
import json
import os
import socket
import sys
import time
import warnings
from collections.abc import Callable
from datetime import timedelta
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from albor_pipeline.runtime.artifacts import StageManifest, iter_manifests, write_bytes
from albor_pipeline.runtime.bucket import Bucket, BucketError, is_remote
from albor_pipeline.runtime.commit import recover_commits
from albor_pipeline.runtime.layout import PROVENANCE, TOKENIZER, Layout, corpus_names, corpus_stage, sft_stage
from albor_pipeline.runtime.lock import DataDirBusy, bucket_lock, exclusive
from albor_pipeline.runtime.taskstore import TaskStore
from albor_pipeline.spec import REPO_ROOT, SPLITS, SpecError, data_dir, load_spec, work_dir

if TYPE_CHECKING:
    from albor_pipeline.stages.provenance.provenance import VerifyReport

# A command imports its own modules when it runs (as `cmd_run` does Dagster's): `albor
# exposure` or `albor trace` does not pay for every other command's imports at its start.


def _use(args: argparse.Namespace) -> None:
    """Make --spec/--data-dir visible to everything, Dagster's code loading included."""
    if getattr(args, "spec", None):
        os.environ["ALBOR_SPEC"] = str(Path(args.spec).resolve())
    if getattr(args, "data_dir", None):
        os.environ["ALBOR_DATA_DIR"] = str(data_dir(args.data_dir))


POSTGRES_ENV = "ALBOR_POSTGRES_URL"


def instance_yaml() -> bytes:
    """The instance config: the repo's dagster.yaml, or with ALBOR_POSTGRES_URL set, its
    settings less the SQLite event log (`event_log_storage`) plus dagster-postgres.yaml
    (storage in PostgreSQL: Dagster takes one or the other). SQLite in DAGSTER_HOME stays the
    default."""
    base = (REPO_ROOT / "dagster.yaml").read_bytes()
    if not os.environ.get(POSTGRES_ENV):
        return base
    settings = yaml.safe_load(base)
    settings.pop("event_log_storage", None)
    postgres = (REPO_ROOT / "dagster-postgres.yaml").read_bytes()
    return yaml.safe_dump(settings, sort_keys=False).encode() + b"\n" + postgres


def ensure_dagster_home(rewrite: bool = False) -> Path:
    """DAGSTER_HOME (default: the repo's .dagster_home) with its dagster.yaml; written when
    missing, or always with `rewrite` (`albor instance`)."""
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(REPO_ROOT / ".dagster_home")))
    home.mkdir(parents=True, exist_ok=True)
    if rewrite or not (home / "dagster.yaml").exists():
        write_bytes(home / "dagster.yaml", instance_yaml())
    return home


def cmd_instance(args: argparse.Namespace) -> int:
    home = ensure_dagster_home(rewrite=True)
    storage = f"PostgreSQL ({POSTGRES_ENV})" if os.environ.get(POSTGRES_ENV) else f"SQLite in {home}"
    print(f"albor: Dagster instance config {home / 'dagster.yaml'}: storage {storage}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    _use(args)
    warnings.filterwarnings("ignore", message=".*is currently in beta")  # observable sources: not for run output
    import dagster as dg

    from albor_pipeline.definitions import build_definitions
    from albor_pipeline.defs.automation import BUILD_JOB
    from albor_pipeline.defs.pipeline import pipeline_stages
    from albor_pipeline.defs.plan import plan_run
    from albor_pipeline.defs.progress import progress_logger
    from albor_pipeline.runtime.executor import pool_workers, start_fork_server

    spec = load_spec()
    home = ensure_dagster_home()
    root = data_dir()
    start = time.perf_counter()
    try:
        plan = plan_run(spec, pipeline_stages(spec), lambda line: print(f"albor: {line}", file=sys.stderr))
    except DataDirBusy as exc:
        print(f"albor: {exc}; nothing run", file=sys.stderr)
        return 1
    kept = {name: manifest.summary for name, manifest in plan.kept.items()}
    if not plan.run:
        print(
            f"albor: nothing changed: all {len(plan.kept)} stages keep their outputs and their checks their "
            f"outcomes, so no run was started ({time.perf_counter() - start:.1f}s)",
            file=sys.stderr,
        )
        print("\n".join([*_where(root), *summary_lines(kept)]))
        return 0
    if pool_workers(spec.execution):
        start_fork_server()  # its imports overlap Dagster's start; the run's pool forks from it
    defs = build_definitions(spec)
    job = defs.resolve_job_def(BUILD_JOB)
    job = job.with_logger_defs({**job.loggers, "progress": progress_logger(plan.steps)})
    if plan.kept:
        print(f"albor: {len(plan.kept)} stages unchanged (outputs, check outcomes kept): not started", file=sys.stderr)
    print(f"albor: materializing {BUILD_JOB} -> {root} (DAGSTER_HOME={home})", file=sys.stderr)
    # Two runs starting together on a fresh DAGSTER_HOME would both create its SQLite schema.
    with exclusive(home / ".albor-instance.lock", f"pid {os.getpid()}", log=lambda _: None):
        instance = dg.DagsterInstance.get()
    with instance:
        result = job.execute_in_process(
            instance=instance,
            raise_on_error=False,
            asset_selection=[stage.key for stage in plan.run] if plan.kept else None,
            run_config={
                "loggers": {"progress": {}}
                if args.log_level == "PROGRESS"
                else {"console": {"config": {"log_level": args.log_level}}},
                # what it left out must still be as it decided once the run holds the data dir
                "resources": plan.resources(),
            },
        )
    seconds = time.perf_counter() - start
    if not result.success:
        for line in run_failures(result.all_events):
            print(f"albor: {line}", file=sys.stderr)
        print(f"albor: run {result.run_id} FAILED after {seconds:.1f}s", file=sys.stderr)
        return 1
    print(f"albor: run {result.run_id} succeeded in {seconds:.1f}s", file=sys.stderr)
    # From this run's own materializations: another run may hold the data dir by now.
    facts = {
        "/".join(event.asset_key.path): {k: v.value for k, v in event.materialization.metadata.items()}
        for event in result.get_asset_materialization_events()
        if event.asset_key is not None
    }
    print("\n".join([*_where(root), *summary_lines({**kept, **facts})]))
    return 0


def _where(root: Path | str) -> list[str]:
    """Where the artifacts are (and the provenance, or a bucket's working copy)."""
    if isinstance(root, Path):
        return [f"Artifacts: {root}", f"Provenance: {Layout(root).provenance_md}"]
    return [f"Artifacts: {root}", f"Working copy: {work_dir(root)}"]


def run_failures(events: Any) -> list[str]:
    """Each failed step (of a run's events) with the error raised in our code, not Dagster's wrapper."""
    lines = []
    for event in events:
        if (event.is_step_failure or event.is_run_failure) and event.event_specific_data:
            error = getattr(event.event_specific_data, "error", None)
            while error is not None and error.cause is not None and (error.cls_name or "").startswith("Dagster"):
                error = error.cause
            if error is not None:
                lines.append(f"step {event.step_key or 'run'} failed: {error.message.strip()}")
    return lines


def summary_lines(stages: dict[str, Any]) -> list[str]:
    """Corpus and tokenizer facts, from provenance.json's stage summaries or a run's metadata."""
    lines = []
    for name in map(corpus_stage, corpus_names(SPLITS)):
        s = stages.get(name)
        if s:
            counts = f"{s['sequences']:,} sequences, {s['tokens']:,} tokens from {s['documents']:,} documents"
            lines.append(f"  {name}: {counts}")
    for split in SPLITS:
        s = stages.get(sft_stage(split))
        if s:
            lines.append(
                f"  {sft_stage(split)}: {s['conversations']:,} conversations, {s['tokens']:,} tokens, "
                f"{s['trained_fraction']:.1%} trained"
            )
    tok = stages.get(TOKENIZER)
    if tok:
        lines.append(
            f"  tokenizer: vocab {tok['vocab_size']:,}, val round-trip {tok['roundtrip_ok']}/{tok['val_documents']}, "
            f"{tok['bytes_per_token']} bytes/token"
        )
    return lines


def _provenance(root: Path | str) -> tuple[bytes, list[StageManifest]] | None:
    """provenance.json and every stage manifest of the data dir (a directory or a bucket)."""
    if isinstance(root, Path):
        layout = Layout(root)
        if not layout.provenance_json.exists():
            return None
        return layout.provenance_json.read_bytes(), list(iter_manifests(layout))
    bucket = Bucket(root, Layout(work_dir(root)))
    manifests = bucket.manifests()
    name = Layout(Path()).provenance_json.name
    found = [a for m in manifests if m.stage == PROVENANCE for a in m.outputs if a.path == name]
    return (bucket.read(found[0]), manifests) if found else None


def cmd_summary(args: argparse.Namespace) -> int:
    from albor_pipeline.stages.provenance.provenance import stale_stages

    _use(args)
    root = data_dir()
    found = _provenance(root)
    if found is None:
        print(f"albor: nothing materialized yet under {root}", file=sys.stderr)
        return 1
    prov = json.loads(found[0])
    stages = {name: stage["summary"] for name, stage in prov["stages"].items()}
    print("\n".join([f"Artifacts: {root}", *summary_lines(stages)]))
    rebuilt = stale_stages(found[1]).get(PROVENANCE)
    if rebuilt:
        print(f"  (this is the last complete build; rebuilt since: {', '.join(rebuilt)})")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Exit 0 when every recorded file matches (stale stages are listed, not failures)."""
    from albor_pipeline.stages.provenance.provenance import verify_bucket

    _use(args)

    root = data_dir()
    try:
        report = (
            _verify_local(root, args.wait)
            if isinstance(root, Path)
            else verify_bucket(Bucket(root, Layout(work_dir(root))))
        )
    except FileNotFoundError as exc:
        print(f"albor verify: {exc}", file=sys.stderr)
        return 2
    width = max((len(r.path) for r in report.files), default=4)
    for r in report.files:
        print(f"{r.status:10} {r.path:{width}} {r.expected}")
    for path in report.unrecorded:
        print(f"{'UNRECORDED':10} {path}")
    for stage, rebuilt in report.stale.items():
        print(f"{'stale':10} {stage} (rebuilt after it: {', '.join(rebuilt)})")
    if PROVENANCE in report.stale:
        print(
            f"albor verify: {Layout(Path()).provenance_md.name} describes the last complete build; "
            f"stages rebuilt since: {', '.join(report.stale[PROVENANCE])}",
            file=sys.stderr,
        )
    if report.unreferenced:
        print(f"albor verify: {report.unreferenced} object(s) no manifest names (older versions of stages)")
    if report.temps:
        print(f"albor verify: {len(report.temps)} temp file(s) of runs that died (the next run removes them)")
    failed = report.failed + _kept_facts(root)
    for line in failed:
        print(f"albor verify: {line}", file=sys.stderr)
    ok = len(report.files) - sum(r.status != "ok" for r in report.files)
    print(f"{ok} ok, {len(failed)} failed, {len(report.stale)} stale stage(s)", file=sys.stderr)
    return 1 if failed else 0


def _kept_facts(root: Path | str) -> list[str]:
    """The kept corpus versions' facts that lost their bytes (a local data dir's; a bucket's
    are its objects, which `verify_bucket` re-hashes), with a line on what was checked."""
    from albor_pipeline.stages.corpus.versions import kept_versions, version_problems

    if not isinstance(root, Path) or not (kept := kept_versions(Layout(root))):
        return []
    problems = version_problems(Layout(root))
    print(f"albor verify: {len(kept)} kept corpus version(s), {len(problems)} fact(s) changed or missing")
    return [f"CHANGED: {p}" for p in problems]


def _verify_local(root: Path, wait: bool) -> VerifyReport:
    """Verify holding the data dir's lock when it is free (first finishing or undoing any
    commit a dead run left), else beside the run holding it (`wait`: after it)."""
    from albor_pipeline.stages.provenance.provenance import verify

    layout = Layout(root)
    if not layout.manifests_dir.is_dir():
        return verify(root)  # says nothing is materialized
    try:
        with exclusive(layout.lock_file, f"albor verify, pid {os.getpid()}", wait, log=print):
            for line in recover_commits(root, layout.pending_commits()):
                print(f"albor verify: a run died mid-commit: {line}")
            return verify(root)
    except DataDirBusy as busy:
        print(f"albor verify: {busy.holder} holds the data dir; stages it is committing are left out")
    except OSError as err:
        if err.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        print("albor verify: the data dir is read-only here; commits under way are left out")
    return verify(root, running=True)


def cmd_gc(args: argparse.Namespace) -> int:
    _use(args)
    root = data_dir()
    holder = f"albor gc on {socket.gethostname()}, pid {os.getpid()}"
    if isinstance(root, Path):
        layout = Layout(root)
        failed = _collect_tasks(layout, lambda: list(iter_manifests(layout)), holder)
        return failed or _versions(layout, holder, args.drop_versions)
    bucket = Bucket(root, Layout(work_dir(root)))
    if not bucket.manifests():
        print(f"albor gc: nothing materialized under {root} (no stage manifests); nothing deleted", file=sys.stderr)
        return 2
    try:
        with bucket_lock(root, holder, wait=False, busy="collect when it is done"):
            done = bucket.collect(timedelta(hours=args.older_than_hours))
    except DataDirBusy as exc:
        return _busy(exc)
    print(
        f"albor gc: deleted {done.deleted} object(s) no manifest names ({done.bytes / 1e6:,.1f} MB); "
        f"kept {done.recent} written in the last {args.older_than_hours:g} h (a run may still be publishing)"
    )
    failed = _collect_tasks(bucket.layout, bucket.manifests, holder)
    return failed or _versions(bucket.layout, holder, args.drop_versions, bucket)


def _versions(layout: Layout, holder: str, drop: bool, bucket: Bucket | None = None) -> int:
    """Report the corpora's kept versions (`albor exposure` reads them); with `drop`, remove
    all but the current ones, under the data dir's lock. A bucket's are mirrored in its
    working copy first, and what the copy no longer holds is deleted from the bucket."""
    from albor_pipeline.stages.corpus.versions import MANIFEST, drop_versions, kept_bytes, kept_versions

    if bucket is not None:
        bucket.pull()
        bucket.pull_files(layout.versions_dir.name, MANIFEST)
    if drop:
        try:
            busy = "drop versions when it is done"
            lock = exclusive(layout.lock_file, holder, wait=False)
            with lock if bucket is None else bucket_lock(bucket.uri, holder, wait=False, busy=busy):
                count, size = drop_versions(layout)
                if bucket is not None:
                    bucket.prune_files(layout.versions_dir.name, MANIFEST)
        except DataDirBusy as exc:
            return _busy(exc)
        print(f"albor gc: deleted the facts of {count} earlier corpus version(s) ({size / 1e6:,.2f} MB)")
    kept = kept_versions(layout)
    note = "" if drop or not kept else "; --drop-versions deletes those of earlier versions"
    print(f"albor gc: kept the facts of {len(kept)} corpus version(s), {kept_bytes(layout) / 1e6:,.2f} MB{note}")
    return 0


def _busy(exc: DataDirBusy) -> int:
    """Another holder of the lock: say so, delete nothing, exit 1."""
    print(f"albor gc: {exc}; nothing deleted", file=sys.stderr)
    return 1


def _collect_tasks(layout: Layout, manifests: Callable[[], list[StageManifest]], holder: str) -> int:
    """Drop the task store's entries no stage manifest names (a data dir's store, or a bucket
    working copy's), then trim it to its cap: under the copy's lock, which every run takes
    first, with the manifests read under it."""
    try:
        with exclusive(layout.lock_file, holder, wait=False):
            store = TaskStore(str(layout.task_store), int(load_spec().execution.task_store_gb * 1e9))
            keep = store.referenced(m.stage for m in manifests())
            entries, size = store.collect(keep)
            trimmed = store.trim()
    except DataDirBusy as exc:
        return _busy(exc)
    print(
        f"albor gc: deleted {entries} stored task(s) no manifest names ({size / 1e6:,.1f} MB) and "
        f"{trimmed / 1e6:,.1f} MB over the store's cap of {store.cap_bytes / 1e9:g} GB ({layout.task_store})"
    )
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    """Where a file or document went, or where a sequence came from (`albor_pipeline/trace.py`)."""
    from albor_pipeline.queries import TraceError, sequence_query
    from albor_pipeline.trace import Tracer, trace_lines

    _use(args)
    spec, root = load_spec(), data_dir()
    if isinstance(root, Path):
        tracer = Tracer(spec, Layout(root))
    else:
        bucket = Bucket(root, Layout(work_dir(root)))
        bucket.pull()
        tracer = Tracer(spec, bucket.layout, bucket.fetch)
    more = 0
    try:
        sequence = sequence_query(args.query)
        if sequence:
            found: list[Any] = tracer.sequence(*sequence)
        else:  # tracing a document costs about 0.4 s: "**" stops at --limit, counting the rest
            matches = tracer.matches(args.query)
            found = [tracer.trace(*match) for match in islice(matches, args.limit or None)]
            more = sum(1 for _ in matches)
    except (FileNotFoundError, IndexError, TraceError) as exc:
        print(f"albor trace: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([item.model_dump(mode="json") for item in found], indent=2))
    else:
        print("\n".join(trace_lines(found, args.query, "" if found or sequence else tracer.missing(args.query))))
    if more:
        print(f"albor trace: {more:,} more matching document(s) not shown (--limit 0 shows all)", file=sys.stderr)
    return 0 if found else 1


def cmd_exposure(args: argparse.Namespace) -> int:
    """Which checkpoints saw a document, or what one saw (`albor_pipeline/exposure.py`)."""
    from albor_pipeline.exposure import Exposure, diet_lines, exposure_lines
    from albor_pipeline.queries import TraceError
    from albor_pipeline.stages.corpus.exposure import ExposureError, read_states

    _use(args)
    spec = load_spec()
    try:
        exposure = Exposure(spec, _versions_layout(data_dir()))
        states = read_states(args.state)
        if not states:
            raise ExposureError(f"no loader state (Batches.state_dict() as JSON) in {', '.join(args.state)}")
        if args.query:
            found: list[Any] = exposure.exposure(args.query, states, args.corpus)
            lines = exposure_lines(found, args.query)
        else:
            found = [exposure.diet(state, args.corpus) for state in states]
            lines = [line for diet in found for line in diet_lines(diet)]
    except (ExposureError, TraceError, BucketError) as exc:
        print(f"albor exposure: {exc}", file=sys.stderr)
        return 2
    print(json.dumps([item.model_dump(mode="json") for item in found], indent=2) if args.json else "\n".join(lines))
    return 0


def _versions_layout(root: Path | str) -> Layout:
    """Where the corpus versions of the data dir `root` are read: a bucket's working copy,
    its versions' facts pulled first (`versions.pull_facts`)."""
    from albor_pipeline.stages.corpus.versions import pull_facts

    return Layout(root) if isinstance(root, Path) else pull_facts(Bucket(root, Layout(work_dir(root))))


def cmd_diff(args: argparse.Namespace) -> int:
    """What changed between two data dirs, or two corpus versions (`albor_pipeline/diff.py`)."""
    from albor_pipeline.diff import DiffError, diff_data_dirs, diff_lines, diff_versions
    from albor_pipeline.stages.corpus.exposure import ExposureError

    _use(args)
    a, b = Path(args.a), Path(args.b)
    try:
        if (a / "manifests").is_dir() and (b / "manifests").is_dir():
            found = diff_data_dirs(a, b)
        else:
            if is_remote(args.a) or is_remote(args.b):
                raise DiffError("albor diff compares local data dirs, or two versions of the data dir's corpora")
            found = diff_versions(_versions_layout(data_dir()), args.a, args.b)
    except (DiffError, ExposureError, LookupError, BucketError) as exc:
        print(f"albor diff: {exc}", file=sys.stderr)
        return 2
    print(found.model_dump_json(indent=2) if args.json else "\n".join(diff_lines(found)))
    return 0


def cmd_whatif(args: argparse.Namespace) -> int:
    """Per source and rule: what a proposed rule change would remove or restore (`whatif.py`)."""
    from albor_pipeline.stages.hygiene.whatif import WhatIfError, answer_all, proposal, whatif_lines

    _use(args)
    spec, root = load_spec(), data_dir()
    if not isinstance(root, Path):
        print("albor whatif: reads a local data dir's signals (a bucket's: pull it first)", file=sys.stderr)
        return 2
    rules = Path(args.rules).read_text(encoding="utf-8") if args.rules else ""
    try:
        changes = proposal(args.set, rules)
        answers = answer_all(spec, Layout(root), changes, args.source or (), args.examples)
    except (FileNotFoundError, WhatIfError) as exc:
        print(f"albor whatif: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([a.model_dump(mode="json") for a in answers], indent=2))
    else:
        print("\n".join(whatif_lines(answers)))
    return 0


def cmd_spec(args: argparse.Namespace) -> int:
    _use(args)
    print(json.dumps(load_spec().model_dump(mode="json"), indent=2))
    return 0


def _count(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r}: a count (0 or more)")
    return int(text)


def _arguments(name: str, p: argparse.ArgumentParser) -> None:
    """Command `name`'s own arguments (beyond --spec and --data-dir)."""
    if name == "trace":
        p.add_argument("query", help="a source file path or glob ([source:]path), a SHA-256, or corpus/<split>:N")
        p.add_argument("--json", action="store_true", help="print JSON for tools")
        p.add_argument(
            "--limit",
            type=_count,
            default=20,
            help="documents traced at most, the rest counted (default 20; 0: all)",
        )
    if name == "exposure":
        p.add_argument(
            "query",
            nargs="?",
            help="a file path or glob ([source:]path), a SHA-256, corpus/<split>:N, or `remove` "
            "(the spec's removal requests); none: each state's diet",
        )
        p.add_argument(
            "--state",
            action="append",
            required=True,
            help="a loader state (Batches.state_dict() as JSON) or a directory of them (repeatable)",
        )
        p.add_argument("--corpus", default="", help="for states that name none: corpus/<split> (default train)")
        p.add_argument("--json", action="store_true", help="print JSON for tools")
    if name == "diff":
        p.add_argument("a", help="a data dir, or a corpus version id (a prefix) of --data-dir")
        p.add_argument("b", help="the same for the other side")
        p.add_argument("--json", action="store_true", help="print JSON for tools")
    if name == "whatif":
        p.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a proposed change, e.g. hygiene.rules.gopher_repetition.dup_line_frac=0.2 (repeatable)",
        )
        p.add_argument("--rules", help="a YAML file of proposed changes: hygiene: {rules: {...}}")
        p.add_argument("--source", action="append", help="only this source (repeatable; default: every one)")
        p.add_argument("--examples", type=_count, default=3, help="documents shown each side of a threshold")
        p.add_argument("--json", action="store_true", help="print JSON for tools")
    if name == "verify":
        p.add_argument("--wait", action="store_true", help="wait for a run holding the data dir to finish")
    if name == "gc":
        p.add_argument(
            "--older-than-hours",
            type=float,
            default=24.0,
            help="only objects written longer ago than this (default 24: a run still publishing is spared)",
        )
        p.add_argument(
            "--drop-versions",
            action="store_true",
            help="also delete the kept facts of earlier corpus versions (their checkpoints' exposure is lost)",
        )
    if name == "run":
        p.add_argument(
            "--log-level",
            default="PROGRESS",
            choices=["PROGRESS", "DEBUG", "INFO", "WARNING", "ERROR"],
            help="PROGRESS (default): a progress bar and the stages' messages; else Dagster's console log",
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="albor", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, fn, text in (
        ("run", cmd_run, "materialize every stage on the spec"),
        ("verify", cmd_verify, "re-hash every artifact the stages recorded; list stale stages"),
        ("summary", cmd_summary, "print what the last run produced"),
        ("gc", cmd_gc, "delete stored tasks, and a bucket's objects, that no manifest names"),
        ("trace", cmd_trace, "where a file (path, glob or SHA-256) went, or where corpus/<split>:N came from"),
        ("exposure", cmd_exposure, "which checkpoints (loader states) saw a file, or what one checkpoint saw"),
        ("diff", cmd_diff, "what changed between two data dirs, or two versions of a corpus"),
        ("whatif", cmd_whatif, "what a hygiene rule change would remove or restore, before any rebuild"),
        ("spec", cmd_spec, "print the resolved, validated spec"),
        ("instance", cmd_instance, "write $DAGSTER_HOME/dagster.yaml (PostgreSQL when ALBOR_POSTGRES_URL is set)"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--spec", help="pipeline spec (default: $ALBOR_SPEC or data/pipeline.yaml)")
        p.add_argument("--data-dir", help="output root (default: $ALBOR_DATA_DIR or data/artifacts)")
        p.set_defaults(fn=fn)
        _arguments(name, p)
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except SpecError as exc:
        print(f"albor: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

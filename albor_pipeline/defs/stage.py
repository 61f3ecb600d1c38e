"""One declaration per stage, and the one factory that turns it into Dagster definitions.

A `Stage` says everything about a stage once: its name (= asset key), the stages it
reads, its static run config and the spec's values for it, the work (a call into
`stages/`), and its checks. `stage_definitions` makes the asset and its checks; every
stage runs through `runtime.stagerun.run_stage`, which verifies inputs and writes the manifest.
A `Namespace` places one pipeline among others in a code location: its prefix goes before
every asset key, group, job and resource name.
"""

import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Generic, TypeVar

import dagster as dg
import pyarrow as pa
from pydantic import BaseModel

from albor_pipeline.defs.resources import ArtifactStore, Execution
from albor_pipeline.runtime.artifacts import Artifact, StageManifest, read_manifest, recorded_intact
from albor_pipeline.runtime.checks import (
    CheckOutcome,
    check_identity,
    check_schema,
    checked_intact,
    keep_outcome,
    kept_outcome,
)
from albor_pipeline.runtime.executor import INLINE, TASKS, Executor
from albor_pipeline.runtime.layout import Layout, source_stage
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.shards import is_shard
from albor_pipeline.runtime.stagerun import (
    Fetch,
    Inputs,
    Settings,
    StageOutput,
    kept_manifest,
    run_stage,
    stage_identity,
)
from albor_pipeline.runtime.taskstore import InputFile, check_refs, reusing
from albor_pipeline.runtime.versions import CODE_VERSION, library_versions
from albor_pipeline.runtime.watchdog import time_limit
from albor_pipeline.spec import M, PipelineSpec, apply_overrides
from albor_pipeline.text.ledger import is_side

C = TypeVar("C", bound=dg.Config)


DATA_VERSION_TAG = "dagster/data_version"
INPUT_VERSION_TAG = "dagster/input_data_version/"


def _data_version(entry: dg.EventLogEntry) -> str | None:
    event = entry.asset_materialization or entry.asset_observation
    return event.tags.get(DATA_VERSION_TAG) if event and event.tags else None


class InputsChanged(dg.AutomationCondition):
    """A parent's current data version differs from the one this asset last consumed.

    Dagster records each input's data version on a materialization; this compares them
    with the parents' latest. It is a state, not an event: an upstream update that lands
    in the same sensor tick as this asset's own (older-input) update cannot be lost, as
    it is with `data_version_changed().since_last_handled()`.
    """

    @property
    def description(self) -> str:
        return "a parent's data version differs from the one this asset last consumed"

    def evaluate(self, context: dg.AutomationContext) -> dg.AutomationResult:
        instance = context.asset_graph_view.instance
        latest = instance.get_latest_materialization_event(context.key)
        consumed = latest.asset_materialization.tags if latest and latest.asset_materialization else None
        if consumed is None:  # never built: a build job, not automation, makes it first
            return dg.AutomationResult(context=context, true_subset=context.get_empty_subset())
        for parent in context.asset_graph.get(context.key).parent_keys:
            record = instance.get_latest_data_version_record(parent)
            current = _data_version(record.event_log_entry) if record else None
            if current is not None and consumed.get(INPUT_VERSION_TAG + parent.to_user_string()) != current:
                return dg.AutomationResult(context=context, true_subset=context.candidate_subset)
        return dg.AutomationResult(context=context, true_subset=context.get_empty_subset())


def on_upstream_change() -> dg.AutomationCondition:
    """Rebuild when a parent's *data version* is not the one this asset consumed; never while a
    parent is missing, running or about to run, and not again after a failure until a parent updates.

    A parent re-materialized with identical bytes keeps its DataVersion, so nothing below
    it runs again; a touched-but-unchanged source keeps its fingerprint, so nothing runs.
    """
    AC = dg.AutomationCondition
    # Wait while a parent is missing, running, or about to run in this tick: a stage
    # with many parents (provenance) then runs once after the wave, not once per parent.
    blocked = (
        AC.any_deps_missing()
        | AC.any_deps_in_progress()
        | AC.in_progress()
        | AC.newly_requested()
        | AC.any_deps_match(AC.will_be_requested())
    )
    # No retry loop on a persistent failure: after a failed run, wait for a parent to update. Since
    # the last request, not on this tick alone: a tick that is blocked when the update lands (a
    # wave still running) must not make the asset wait forever.
    gave_up = AC.execution_failed() & ~AC.any_deps_updated().since_last_handled()
    return (InputsChanged() & ~blocked & ~gave_up).with_label("upstream data version changed")


def asset_key(stage: str) -> dg.AssetKey:
    return dg.AssetKey(stage.split("/"))


PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Namespace:
    """Where one pipeline lives in a code location that may hold several.

    Everything Dagster keys by name carries the prefix: asset keys (`<prefix>/<stage>`, so
    deps and check keys too), groups, jobs, schedules, sensors and the resource keys of the
    pipeline's own data dir and executor (`<prefix>_store`, `<prefix>_execution`). The empty
    prefix is the single pipeline of a plain code location: every name as the stage gives it.
    """

    prefix: str = ""

    def __post_init__(self) -> None:
        if self.prefix and not PREFIX.fullmatch(self.prefix):
            raise ValueError(f"pipeline prefix {self.prefix!r}: a letter, then letters, digits or '_'")

    def key(self, stage: str) -> dg.AssetKey:
        """The asset key of stage (or source) `stage`."""
        return dg.AssetKey([self.prefix, *stage.split("/")] if self.prefix else stage.split("/"))

    def name(self, name: str) -> str:
        """A group, job, schedule, sensor or resource name."""
        return f"{self.prefix}_{name}" if self.prefix else name

    @property
    def store_key(self) -> str:
        return self.name("store")

    @property
    def execution_key(self) -> str:
        return self.name("execution")

    @property
    def resource_keys(self) -> set[str]:
        return {self.store_key, self.execution_key}

    def resources(
        self, context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext
    ) -> tuple[ArtifactStore, Execution]:
        """This pipeline's data dir and executor, set up for the run."""
        return getattr(context.resources, self.store_key), getattr(context.resources, self.execution_key)


ROOT = Namespace()


class NoConfig(dg.Config):
    """For stages with nothing to override."""


@dataclass(frozen=True)
class StageContext:
    """What a stage's work gets: where files live, its verified inputs, the run's log, where
    its per-shard work runs, and (a data dir in a bucket) how to fetch another recorded file."""

    layout: Layout
    inputs: Inputs
    log: dg.DagsterLogManager
    executor: Executor = INLINE
    fetch: Fetch | None = None

    @property
    def io(self) -> StageIO:
        """What the stage's entry gets: the data dir's root, the executor, the run's log."""
        return StageIO(self.layout.root, self.executor, self.log.info)


@dataclass(frozen=True)
class CheckContext:
    """What a check gets: where files live, the stage's manifest (its recorded outputs and
    settings), and where per-shard work runs (for checks that scan a whole corpus)."""

    layout: Layout
    manifest: StageManifest
    executor: Executor = INLINE

    @property
    def parquet_outputs(self) -> list[Path]:
        """The Parquet files of documents or sequences the stage recorded (not its ledger or signals)."""
        return [
            self.layout.root / a.path
            for a in self.manifest.outputs
            if a.path.endswith(".parquet") and not is_side(a.path)
        ]


@dataclass(frozen=True)
class Check:
    """An asset check beside its stage: a core check over the stage's recorded outputs."""

    name: str
    description: str
    run: Callable[[CheckContext], CheckOutcome]
    blocking: bool = False
    # Stages whose files the check reads beyond its stage's own and those its stage builds on
    # (the removal check's tombstones): with them, its identity says when its outcome is kept.
    reads: tuple[str, ...] = ()


@dataclass(frozen=True)
class Stage(Generic[C]):
    name: str
    group: str
    description: str
    config: type[C]
    defaults: C  # the spec's values: the build job's launchpad shows them
    work: Callable[[StageContext, C], StageOutput]
    deps: tuple[str, ...] = ()  # upstream stages: verified, and recorded as inputs
    # Upstream stages whose manifests (their summaries), not files, the work reads: asset
    # deps for order and lineage, never re-hashed or fetched from a bucket.
    reads: tuple[str, ...] = ()
    observes: tuple[str, ...] = ()  # upstream observable sources: lineage only
    lineage: bool = False  # its work reads its upstream manifests whole, their inputs too (provenance)
    checks: tuple[Check, ...] = ()
    kinds: tuple[str, ...] = ("parquet",)
    # False: made once, then only when asked for by name: the automation never starts it, and
    # `albor run` keeps its outputs while they are intact and made under the spec's values of
    # its own settings (`tokenizer.retrain: manual`: ids a model trains on stay put).
    automated: bool = True
    # For a stage that lists and reads a source's files (ingestion): whether the source still
    # has the content its manifest records (a fingerprint, stat-checked). Without it, such a
    # stage always runs: what it reads is known only by reading it.
    source_unchanged: Callable[[Layout, StageManifest], bool] | None = None

    @property
    def key(self) -> dg.AssetKey:
        return asset_key(self.name)

    @property
    def reads_sources(self) -> bool:
        """Whether its work lists and reads a source's files (ingestion): what it reads then is
        known only by reading them. An observed benchmark is a file the spec names."""
        return any(o.startswith(source_stage("")) for o in self.observes)


def spec_defaults(config: type[C], section: BaseModel, **values: Any) -> C:
    """`config` holding the spec section's values (JSON form) for the fields it has."""
    dumped = section.model_dump(mode="json")
    return config(**{name: dumped[name] for name in config.model_fields if name in dumped}, **values)


def resolve(section: M, config: dg.Config, where: str) -> M:
    """The spec section with the run's overrides (fields left unset keep the spec's value)."""
    overrides = {k: v for k, v in config.model_dump(exclude_none=True).items() if k in type(section).model_fields}
    return apply_overrides(section, overrides, where)


def outputs_table(artifacts: list[Artifact]) -> dg.MetadataValue:
    # sha256 last: at common widths its 64 characters would push bytes and rows out of view.
    columns = {"path": "string", "bytes": "int", "rows": "int", "sha256": "string"}
    return dg.MetadataValue.table(
        records=[
            dg.TableRecord({"path": a.path, "bytes": a.bytes, "rows": a.rows or 0, "sha256": a.sha256})
            for a in artifacts
        ],
        schema=dg.TableSchema(columns=[dg.TableColumn(name, kind) for name, kind in columns.items()]),
    )


def materialize_result(
    layout: Layout,
    manifest: StageManifest,
    out: StageOutput,
    uri: str | None = None,
    tasks: dict[str, dict[str, float]] | None = None,
    reusable: bool = False,
) -> dg.MaterializeResult:
    """The owner-facing metadata of a finished stage; its DataVersion is the hash over its outputs.

    The stage's own facts come first (a filter's funnel, a mix's table, the charts): the asset
    page lists metadata in this order, and those are what a reader opens it for. The record
    every stage shares follows: SHA-256 of every output, bytes, inputs, config, versions, tasks.
    `uri`: where the stage was committed when that is not the working copy (a bucket's manifest).
    `tasks`: its per-shard tasks' seconds by task function (`TaskLog.since`); `reusable`: some
    of them the task store may keep (then how many were reused is a field of its own).
    """
    outputs = manifest.outputs
    rows = out.row_count if out.row_count is not None else sum(a.rows or 0 for a in outputs if not is_side(a.path))
    # The one file, or the directory holding every output (a shard set, or a stage's splits).
    paths = [layout.root / a.path for a in outputs]
    where = os.path.commonpath(paths) if len(paths) > 1 else str(paths[0].parent if is_shard(paths[0]) else paths[0])
    meta: dict[str, Any] = {
        **out.metadata,
        "dagster/row_count": rows,
        "dagster/uri": dg.MetadataValue.path(uri or where),
        "sha256": outputs[0].sha256 if len(outputs) == 1 else manifest.data_version,
        "bytes": sum(a.bytes for a in outputs),
        "outputs": outputs_table(outputs),
        "inputs": dg.MetadataValue.json({a.path: a.sha256 for a in manifest.inputs}),
        "config": dg.MetadataValue.json(json.loads(json.dumps(manifest.config, default=str))),
        "versions": dg.MetadataValue.json(library_versions()),
        **({"tasks": dg.MetadataValue.json(tasks)} if tasks else {}),
        **({"tasks_reused": sum(int(t["reused"]) for t in (tasks or {}).values())} if reusable else {}),
    }
    return dg.MaterializeResult(metadata=meta, data_version=dg.DataVersion(manifest.data_version))


def _reuse_line(tasks: dict[str, dict[str, float]]) -> str:
    """How many of a stage's tasks ran and how many were reused, for the log."""
    ran = sum(int(t["tasks"] - t["reused"]) for t in tasks.values())
    line = f"{ran} task(s) ran, {sum(int(t['reused']) for t in tasks.values())} reused from the task store"
    parts = sum(int(t.get("parts", 0)) for t in tasks.values())
    if parts:  # tasks kept in parts (a row group each): what those that ran redid
        redone = parts - sum(int(t.get("parts_reused", 0)) for t in tasks.values())
        line += f" (of their {parts} parts, {redone} redone)"
    return line


KEPT_CHECK = "kept: its stage's outputs and inputs, the manifests it reads, the spec and the code are unchanged"


def _check_result(
    key: dg.AssetKey, check: Check, outcome: CheckOutcome, tasks: dict[str, dict[str, float]], kept: bool = False
) -> dg.AssetCheckResult:
    metadata = {
        **({"unchanged": KEPT_CHECK} if kept else {}),
        **outcome.metadata,
        **({"tasks": tasks} if tasks else {}),
    }
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=check.name,
        passed=outcome.passed,
        description=outcome.description,
        metadata={k: dg.MetadataValue.json(v) if isinstance(v, (dict, list)) else v for k, v in metadata.items()},
    )


def _check_key(
    stage: Stage[Any], check: Check, spec: PipelineSpec | None, execution: Execution, store: ArtifactStore
) -> str | None:
    """The check's identity (`runtime.checks.check_identity`): None when its outcome is never
    kept (as for a stage: no spec, reuse off, or a data dir in a bucket)."""
    if spec is None or not _keeps(execution, store):
        return None
    reads = (*stage.deps, *stage.reads, *check.reads)
    return check_identity(store.layout, stage.name, check.name, reads, {"spec": _spec_identity(spec)})


def _checks_definition(stage: Stage[Any], ns: Namespace, spec: PipelineSpec | None = None) -> dg.AssetChecksDefinition:
    """The stage's checks as one step: Dagster's bookkeeping of a step (its events, its
    context) is paid once per stage, not once per check. Each check is still its own result in
    the UI and can be run alone (a subset), a failing blocking one still stops the assets
    downstream, and one that raises leaves the others' results before the step fails."""
    key = ns.key(stage.name)
    specs = [dg.AssetCheckSpec(c.name, asset=key, description=c.description, blocking=c.blocking) for c in stage.checks]

    @dg.multi_asset_check(
        specs=specs,
        name=f"{key.to_python_identifier()}_checks",
        can_subset=True,
        required_resource_keys=ns.resource_keys,
    )
    def _checks(context: dg.AssetCheckExecutionContext) -> Iterator[dg.AssetCheckResult]:
        store, execution = ns.resources(context)
        selected = {k.name for k in context.selected_asset_check_keys}
        raised: Exception | None = None
        kept: list[str] = []
        for check in (c for c in stage.checks if c.name in selected):
            try:
                outcome, tasks, was_kept = _run_check(context, stage, check, spec, store, execution)
            except Exception as exc:  # the others still run and report; the step fails after them
                context.log.error(f"{stage.name}: {check.name}: {type(exc).__name__}: {exc}")
                raised = raised or exc
                continue
            kept += [check.name] if was_kept else []
            yield _check_result(key, check, outcome, tasks, was_kept)
        if kept:  # one line for the step, not one per check
            context.log.info(f"{stage.name}: {', '.join(kept)}: what they check is unchanged: their outcomes are kept")
        if raised is not None:
            raise raised

    return _checks


def _run_check(
    context: dg.AssetCheckExecutionContext,
    stage: Stage[Any],
    check: Check,
    spec: PipelineSpec | None,
    store: ArtifactStore,
    execution: Execution,
) -> tuple[CheckOutcome, dict[str, dict[str, float]], bool]:
    """One check's (outcome, tasks, kept): its kept outcome while what it checks is unchanged,
    else a run of it."""
    identity = _check_key(stage, check, spec, execution, store)
    if (kept := kept_outcome(store.layout, stage.name, check.name, check.reads, identity)) is not None:
        return kept, {}, True
    manifest = read_manifest(store.layout, stage.name)
    store.ensure(manifest.outputs)
    # An outcome taken on files edited behind the pipeline's back is never kept.
    intact = identity is not None and checked_intact(store.layout, stage.name, check.reads)
    mark = TASKS.mark()
    # A check reads the stage's outputs and, at times, its inputs (the corpus's tokenizer).
    executor = execution.executor(context.log.info, store.node({"in": manifest.inputs, "out": manifest.outputs}))
    # Its per-shard tasks are reused as the stage's are: a rebuild checks the changed shards.
    with reusing(execution.task_store(store.layout), check_refs(stage.name, check.name)) as reuse:
        outcome = check.run(CheckContext(store.layout, manifest, executor))
    if reuse is not None:
        reuse.close()  # as after a stage: the store stays under its cap whatever ran last
    unmoved = identity == _check_key(stage, check, spec, execution, store)  # nothing changed meanwhile
    if identity is not None and intact and unmoved and checked_intact(store.layout, stage.name, check.reads):
        keep_outcome(store.layout, stage.name, check.name, identity, outcome)
    return outcome, TASKS.since(mark), False


def _kept_result(context: dg.AssetExecutionContext, layout: Layout, manifest: StageManifest) -> dg.MaterializeResult:
    """A stage that kept its outputs: first what says so, then the metadata of the
    materialization that made them (its tasks aside: none ran now), or what the manifest says
    when the instance has none."""
    latest = context.instance.get_latest_materialization_event(context.asset_key)
    made = latest.asset_materialization if latest else None
    meta: dict[str, Any] = {"unchanged": "kept: nothing its outputs depend on changed"}
    if latest is not None and made is not None and (made.tags or {}).get(DATA_VERSION_TAG) == manifest.data_version:
        meta["made_by_run"] = latest.run_id  # the timings and counts below are that run's
        meta.update((k, v) for k, v in made.metadata.items() if k not in ("tasks", "tasks_reused"))
    else:
        result = materialize_result(layout, manifest, StageOutput(manifest.outputs, manifest.config))
        meta.update(result.metadata or {})
    return dg.MaterializeResult(metadata=meta, data_version=dg.DataVersion(manifest.data_version))


RUNNING_ONLY = {"execution", "automation", "locking"}
"""Spec sections that decide how and when stages run, never what they write (the outputs are
the same bytes on any worker count or backend): no part of a stage's identity."""


def _keep_settings(
    stage: Stage[Any], spec: PipelineSpec | None, config: dg.Config, execution: Execution, store: ArtifactStore
) -> Settings | None:
    """What decides whether the stage keeps its outputs (`runtime.stagerun.run_stage`); None when it
    always runs: it reads a source's files with no way to tell they are unchanged, reuse is off,
    or the data dir is a bucket. The spec but `RUNNING_ONLY`, the files it names by content, but
    the sources' paths as written: ingestion checks its source's content (`source_unchanged`),
    and an edit there reaches the other stages through its outputs."""
    if spec is None or (stage.reads_sources and stage.source_unchanged is None) or not _keeps(execution, store):
        return None
    current = partial(stage.source_unchanged, store.layout) if stage.source_unchanged is not None else None
    return Settings({"spec": _spec_identity(spec), "config": config}, stage.reads, stage.lineage, current)


def kept_before_run(
    stage: Stage[Any], spec: PipelineSpec, execution: Execution, store: ArtifactStore, upstream_kept: bool
) -> StageManifest | None:
    """The stage's manifest when a run of it on the spec's values would keep its outputs and
    every check its outcome (as `stage_definitions` decides inside the run), so the run need not
    start it: its upstream stages kept too (`upstream_kept`, the caller's to know). A stage made
    only when asked for by name (not `automated`) is kept while made as specified."""
    if not stage.automated:
        return _made_as_specified(stage, store.layout)
    if not upstream_kept:
        return None
    settings = _keep_settings(stage, spec, stage.defaults, execution, store)
    if settings is None:
        return None
    layout = store.layout
    manifest = kept_manifest(
        layout, stage.name, stage_identity(layout, stage.name, stage.deps, settings), settings.current
    )
    checks_kept = manifest is not None and all(
        kept_outcome(layout, stage.name, c.name, c.reads, _check_key(stage, c, spec, execution, store)) is not None
        for c in stage.checks
    )
    return manifest if checks_kept else None


def _made_as_specified(stage: Stage[Any], layout: Layout) -> StageManifest | None:
    """The stage's manifest when its outputs are intact and it recorded the spec's values of
    its own settings (its config's fields), whatever its inputs and the code are now."""
    try:
        manifest = read_manifest(layout, stage.name)
    except (OSError, ValueError):
        return None
    wanted = stage.defaults.model_dump(mode="json")
    as_specified = all(manifest.config.get(name) == value for name, value in wanted.items())
    return manifest if as_specified and recorded_intact(layout.root, manifest.outputs) else None


def _keeps(execution: Execution, store: ArtifactStore) -> bool:
    """Whether the run keeps what did not change (stages' outputs, checks' outcomes): reuse on,
    and a local data dir (a bucket's working copy may lack what a record names)."""
    return execution.spec.reuse and store.fetch() is None


def _spec_identity(spec: PipelineSpec) -> dict[str, Any]:
    """The spec as a stage's or a check's identity takes it: but `RUNNING_ONLY`, with the files
    its stages read besides the sources by content (`input_files`); the sources' paths as
    written (only ingestion reads their files)."""
    dumped = spec.model_dump(mode="json", exclude=RUNNING_ONLY)
    return {**dumped, "input_files": [InputFile(str(path)) for path in spec.input_files()]}


def stage_definitions(stage: Stage[Any], ns: Namespace = ROOT, spec: PipelineSpec | None = None) -> dg.Definitions:
    """The asset of `stage` (config typed by its static class) and its checks, in namespace `ns`.

    With the pipeline's `spec`, a stage that reads no source's files keeps its
    outputs when its settings, its upstream manifests and the code are those they were made
    under (`runtime.stagerun.run_stage`): materializing a selection reruns only what changed."""

    @dg.asset(
        key=ns.key(stage.name),
        deps=[ns.key(d) for d in (*stage.observes, *stage.deps, *stage.reads)],
        group_name=ns.name(stage.group),
        description=stage.description,
        code_version=CODE_VERSION,
        kinds=set(stage.kinds),
        automation_condition=on_upstream_change() if stage.automated else None,
        config_schema=stage.config.to_config_schema(),
        required_resource_keys=ns.resource_keys,
    )
    def _asset(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        store, execution = ns.resources(context)
        config = stage.config(**context.op_execution_context.op_config)
        layout = store.layout
        mark = TASKS.mark()

        def work(inputs: Inputs) -> StageOutput:
            executor = execution.executor(context.log.info, store.node(inputs))
            return stage.work(StageContext(layout, inputs, context.log, executor, store.fetch()), config)

        settings = _keep_settings(stage, spec, config, execution, store)
        limit = time_limit(execution.spec.stage_timeout_s, stage.name, context.log.error)
        with limit, reusing(execution.task_store(layout), stage.name) as reuse:
            manifest, out = run_stage(layout, stage.name, stage.deps, work, store.fetch(), settings)
        if out is None:
            context.log.info(f"{stage.name}: inputs, settings and code unchanged: its outputs are kept")
            return _kept_result(context, layout, manifest)
        tasks, reusable = TASKS.since(mark), reuse is not None and bool(reuse.keys)
        if reusable:
            context.log.info(f"{stage.name}: {_reuse_line(tasks)}")
        return materialize_result(layout, manifest, out, store.publish(manifest, context.log), tasks, reusable)

    checks = [_checks_definition(stage, ns, spec)] if stage.checks else []
    return dg.Definitions(assets=[_asset], asset_checks=checks)


def schema_check(schema: pa.Schema, others: Mapping[str, pa.Schema] | None = None) -> Check:
    """Blocking: every Parquet file the stage wrote has the stage contract's schema, or the
    schema `others` gives for its file name (a shard set's tombstones)."""

    def run(ctx: CheckContext) -> CheckOutcome:
        named = others or {}
        files = ctx.parquet_outputs
        main = check_schema([p for p in files if p.name not in named], schema)
        extra = [check_schema(mine, s) for name, s in named.items() if (mine := [p for p in files if p.name == name])]
        if not extra:
            return main
        return CheckOutcome(
            main.passed and all(o.passed for o in extra),
            "; ".join(o.description for o in (main, *extra)),
            {
                **main.metadata,
                "mismatched": {k: v for o in (main, *extra) for k, v in o.metadata["mismatched"].items()},
            },
        )

    return Check("schema", "Parquet schema matches the stage contract.", run, blocking=True)

"""The run's resources: the data dir (held by one run at a time) and where per-shard work runs."""

from __future__ import annotations

import os
import secrets
import socket
from contextlib import ExitStack, suppress
from pathlib import Path

import dagster as dg
from pydantic import PrivateAttr

from albor_pipeline.defs.launcher import WORKER_TAG, fail_dead_runs, this_worker
from albor_pipeline.runtime.artifacts import (
    Artifact,
    StageManifest,
    check_recorded,
    load_digests,
    save_digests,
    sha256_file,
    write_bytes,
)
from albor_pipeline.runtime.bucket import Bucket, is_remote
from albor_pipeline.runtime.executor import Executor, WorkerPool, cpu_count, make_executor, pool_workers
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.lock import BucketLease, bucket_lock, data_dir_lock
from albor_pipeline.runtime.nodes import NODE_FILE, Node
from albor_pipeline.runtime.shards import MB
from albor_pipeline.runtime.stagerun import Fetch, Inputs, Progress
from albor_pipeline.runtime.taskstore import TaskStore
from albor_pipeline.spec import ExecutionSpec, apply_overrides
from albor_pipeline.stages.corpus.versions import kept_files


class DataDirChanged(RuntimeError):
    """A stage the run was to keep was changed by another run before this one held the data dir."""


def manifest_sha256(layout: Layout, stage: str) -> str | None:
    """The SHA-256 of the stage's manifest file (None: it has none)."""
    try:
        return sha256_file(layout.manifest(stage))
    except FileNotFoundError:
        return None


class ArtifactStore(dg.ConfigurableResource):
    """The output root (`ALBOR_DATA_DIR`, default data/artifacts): a directory, or a bucket
    (`s3://bucket/prefix`) worked on through the local copy `work_dir` (`runtime/bucket.py`).

    A run holds the data dir's lock from its first step to its end, so two runs (the
    CLI, the UI, the automation sensor, another `dagster` command) never mix files; a
    bucket's lock lives in the bucket, so that holds for runs on other machines too.
    """

    data_dir: str
    work_dir: str | None = None  # a bucket's working copy (spec.work_dir)
    on_busy: str = "wait"  # spec `locking.on_busy`: wait for the other run, or fail at once
    # Stages `albor run` left out of the run as unchanged (`defs/plan.py`), by their manifests'
    # SHA-256: checked once the run holds the data dir, so a run that changed them in between
    # fails this one rather than have it build on another run's outputs.
    kept: dict[str, str] = {}

    _held: ExitStack = PrivateAttr(default_factory=ExitStack)
    _lease: BucketLease | None = PrivateAttr(default=None)
    _token: str = PrivateAttr(default="")

    @property
    def layout(self) -> Layout:
        """Where stages read and write: the data dir, or a bucket's working copy."""
        bucket = self.bucket
        return bucket.layout if bucket else Layout(Path(self.data_dir))

    @property
    def bucket(self) -> Bucket | None:
        if not is_remote(self.data_dir):
            return None
        assert self.work_dir, "a data dir in a bucket needs a working copy (work_dir)"
        return Bucket(self.data_dir, Layout(Path(self.work_dir)))

    def fetch(self) -> Fetch | None:
        """How a stage gets recorded files its working copy lacks (None: a local data dir has them all)."""
        bucket = self.bucket
        return bucket.fetch if bucket else None

    def node(self, inputs: Inputs) -> Node:
        """How a stage's tasks reach its `inputs` and send back their shards wherever they run."""
        bucket = self.bucket
        return Node.of(self.layout.root, bucket.uri if bucket else None, self._token, inputs)

    def ensure(self, artifacts: list[Artifact]) -> None:
        """Make `artifacts` present in the working copy (a check reads its stage's outputs)."""
        if (fetch := self.fetch()) is not None:
            check_recorded(self.layout.root, artifacts, fetch)

    def publish(self, manifest: StageManifest, log: dg.DagsterLogManager) -> str | None:
        """Commit a finished stage to the bucket (outputs, then its manifest); its manifest's URI."""
        bucket = self.bucket
        if bucket is None:
            return None
        # A corpus's earlier versions (their facts, kept before this build replaced them) go first.
        bucket.push_files(self.layout.versions_dir.name, kept_files(self.layout, manifest.stage, manifest.data_version))
        sent = bucket.publish(manifest, self._lease.check if self._lease else None)
        where = bucket.manifest_uri(manifest.stage)
        log.info(f"published {manifest.stage}: {sent / MB:.1f} MB of new objects, then {where}")
        return where

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        log = context.log
        info = log.info if log else print
        run_id = context.run.run_id if context.run else None
        holder = f"pid {os.getpid()}, run {run_id or 'outside a run'}"
        wait = self.on_busy != "fail"
        removed = self._held.enter_context(data_dir_lock(self.layout, holder, wait, log=info))
        if removed:
            info(f"removed {len(removed)} temp file(s) left by runs that died")
        if (bucket := self.bucket) is not None:
            where = f"host {socket.gethostname()}, {holder}"
            self._lease = self._held.enter_context(bucket_lock(self.data_dir, where, wait, log=info))
            changed = bucket.pull()
            self._token = secrets.token_hex(16)  # a node that reads it at the copy's path shares the copy
            write_bytes(self.layout.root / NODE_FILE, self._token.encode())
            info(f"data dir {self.data_dir}: working copy {self.work_dir}, {len(changed)} manifest(s) pulled")
        else:  # files hashed by earlier runs, verified by a stat while unchanged
            load_digests(self.layout.digests)
        if moved := [stage for stage, sha in self.kept.items() if manifest_sha256(self.layout, stage) != sha]:
            self._held.close()
            raise DataDirChanged(
                f"data dir {self.layout.root}: another run changed {', '.join(moved)} after this run decided to "
                "keep them; nothing was written: run again"
            )
        if context.instance is not None and run_id:
            context.instance.add_run_tags(run_id, {WORKER_TAG: this_worker()})
            fail_dead_runs(context.instance, log)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self.bucket is None:  # still holding the lock: no other run writes the record meanwhile
            with suppress(OSError):  # a cache: a full disk costs the next run its hashing, not this run
                save_digests(self.layout.digests, self.layout.root)
        self._held.close()


class Execution(dg.ConfigurableResource):
    """Where per-shard work runs: spec `execution`, each field overridable in the launchpad
    (`resources: {execution: {config: {backend: ray, workers: 4}}}`).

    With `ray`, the first stage that fans out connects through dagster-ray's resource (a
    local Ray with `workers` CPUs when `address` is empty, else the cluster at `address`);
    the connection lasts the run and is closed at its end.
    """

    backend: str = "local"
    address: str | None = None
    workers: int | None = None
    stage_timeout_s: float | None = None
    reuse: bool = True
    task_store_gb: float = 50

    _stack: ExitStack = PrivateAttr(default_factory=ExitStack)
    _context: dg.InitResourceContext | None = PrivateAttr(default=None)
    _connected: bool = PrivateAttr(default=False)
    _pool: WorkerPool | None = PrivateAttr(default=None)

    @property
    def spec(self) -> ExecutionSpec:
        return apply_overrides(ExecutionSpec(), self.model_dump(exclude_none=True), "resources.execution")

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        spec = self.spec  # a bad launchpad value fails the run before any stage starts
        self._context = context
        if workers := pool_workers(spec):  # one pool for the run's every map, started now
            self._pool = WorkerPool(workers)
            self._pool.warm()

    def executor(self, progress: Progress | None = None, node: Node | None = None) -> Executor:
        """The run's executor; `progress` (a step's log) hears how many tasks are done, and a
        cluster's tasks reach the data dir by `node`."""
        return make_executor(self.spec, self._connect_ray, progress, node, self._pool)

    def task_store(self, layout: Layout) -> TaskStore | None:
        """Where the run keeps its tasks for reuse (None: `reuse: false`)."""
        spec = self.spec
        return TaskStore(str(layout.task_store), int(spec.task_store_gb * 1e9)) if spec.reuse else None

    def _connect_ray(self) -> None:
        if self._connected:
            return
        assert self._context is not None, "Execution is used outside a run"
        from albor_pipeline.defs.ray import run_ray

        spec = self.spec
        self._stack.enter_context(run_ray(spec, self._context))
        self._connected = True
        where = spec.address or f"a local Ray with {spec.workers or cpu_count()} CPUs"
        if self._context.log:
            self._context.log.info(f"per-shard tasks run on {where}")

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._pool is not None:
            self._pool.close()
        self._stack.close()

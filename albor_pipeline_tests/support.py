"""Helpers shared by the tests: real sources from this machine, small specs, a served Dagster.

Fixtures live in `conftest.py`; plain helpers live here, so no test module imports another.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from albor_pipeline.runtime.artifacts import sha256_file
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.spec import REPO_ROOT, PipelineSpec, load_spec
from albor_pipeline.text.documents import DOC_SCHEMA, text_sha256

STDLIB = Path(sysconfig.get_paths()["stdlib"])
# Real code nobody here wrote: a few standard-library packages, ~1-2 MB of Python.
STDLIB_PACKAGES = ("json", "email", "asyncio", "importlib", "concurrent", "logging", "urllib")
# The shipped default spec's sources, in spec order (documents, chat, synthetic, eval).
SHIPPED_SOURCES = (
    "stdlib",
    "site_packages",
    "pydoc_topics",
    "python_chat",
    "chat_formats",
    "spelling_bee",
    "simple_spelling",
    "python_mc",
    "base_mc",
    "base_schema",
    "base_lm",
)
# Special-token strings written literally in a document: must come out as ordinary text.
LITERAL = "x = '</s>' + '<|fim_prefix|>' + '<s>' + '<pad>'\n"
# The `albor` command of this virtualenv, for runs in their own process.
ALBOR = str(Path(sys.executable).parent / "albor")


def write_spec(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def small_spec_dict(extra_sources: list[dict[str, Any]] | None = None, **overrides: Any) -> dict[str, Any]:
    """A spec over a slice of the stdlib, sized for tests (small vocab, short sequences)."""
    raw: dict[str, Any] = {
        "sources": [
            {
                "name": "stdlib_json_email",
                "kind": "code",
                "path": str(STDLIB),
                "include": [f"{p}/**/*.py" for p in STDLIB_PACKAGES[:2]],
                "exclude": ["**/test*/**"],
            },
            {
                "name": "stdlib_async",
                "kind": "code",
                "path": str(STDLIB),
                "include": [f"{p}/**/*.py" for p in STDLIB_PACKAGES[2:]],
                "exclude": ["**/test*/**"],
            },
            *(extra_sources or []),
        ],
        "holdout": {"val_fraction": 0.1, "test_fraction": 0.05, "seed": 0},
        "mix": {
            "train": {"seed": 42},
            "val": {"seed": 123, "rows": 40, "upsample": False},
            "test": {"seed": 456, "rows": 20, "upsample": False},
        },
        "tokenizer": {"vocab_size": 1024},
        "corpus": {
            "seq_len": 256,
            "formats": ["parquet", "megatron", "nanogpt"],
            "long": {"min_chars": 8000, "seq_len": 512},
        },
    }
    raw.update(overrides)
    return raw


def tiny_spec(**overrides: Any) -> dict[str, Any]:
    """Two small stdlib sources, a 600-token vocab: a whole build in a few seconds."""
    raw = small_spec_dict(tokenizer={"vocab_size": 600}, **overrides)
    raw["sources"][0]["include"] = ["json/**/*.py"]
    raw["sources"][1]["include"] = ["email/**/*.py", "concurrent/**/*.py"]
    return raw


def materialize_all(
    spec: PipelineSpec,
    out: Path,
    instance: dg.DagsterInstance | None = None,
    run_config: dict | None = None,
    raise_on_error: bool = True,
) -> dg.ExecuteInProcessResult:
    """Run the build job (every stage and its checks) of `spec` into `out`, in process."""
    from albor_pipeline.definitions import build_definitions
    from albor_pipeline.defs.automation import BUILD_JOB

    job = build_definitions(spec, out).resolve_job_def(BUILD_JOB)
    result = job.execute_in_process(instance=instance, run_config=run_config or {}, raise_on_error=raise_on_error)
    assert result.success or not raise_on_error
    return result


@dataclass(frozen=True)
class Build:
    """A whole graph built in process: its spec file and spec, its data dir and the run's result."""

    spec_path: Path
    spec: PipelineSpec
    out: Path
    result: dg.ExecuteInProcessResult


def build(tmp: Path, raw: dict[str, Any]) -> Build:
    """`raw` written to tmp/spec.yaml and built into tmp/out."""
    spec_path = write_spec(tmp / "spec.yaml", raw)
    spec = load_spec(spec_path)
    return Build(spec_path, spec, tmp / "out", materialize_all(spec, tmp / "out"))


def task_counts(
    result: dg.ExecuteInProcessResult, counts: tuple[str, str] = ("tasks", "reused")
) -> dict[str, tuple[int, int]]:
    """(tasks, reused) of each task function of every stage whose tasks the store can keep,
    keyed "asset function"; `counts` ("parts", "parts_reused"): of the parts of its tasks that
    ran, for a task kept in parts."""
    found = {}
    for event in result.get_asset_materialization_events():
        meta = event.materialization.metadata
        if "tasks_reused" in meta:
            tasks = meta["tasks"].value
            assert isinstance(tasks, dict)
            for fn, t in tasks.items():
                if counts[0] in t:
                    found[f"{event.asset_key.to_user_string()} {fn}"] = (int(t[counts[0]]), int(t[counts[1]]))
    return found


def recorded_outputs(out: Path) -> dict[str, str]:
    """Every recorded output of every stage but provenance (it names the run's data dir), by
    path: its SHA-256."""
    found = {}
    for manifest in sorted((out / "manifests").glob("*.json")):
        if manifest.stem != "provenance":
            found.update({a["path"]: a["sha256"] for a in json.loads(manifest.read_text())["outputs"]})
    return found


def tree_digest(root: Path) -> dict[str, str]:
    """SHA-256 of every file under `root` but the data dir's lock file (`albor verify` takes the lock)."""
    lock = Layout(root).lock_file
    return {
        p.relative_to(root).as_posix(): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file() and p != lock
    }


def write_docs(path: Path, texts: list[str], sources: list[str] | None = None, files: list[str] | None = None) -> Path:
    """A Parquet file with the ingestion schema holding `texts` (of source `s`, file `f`, unless given)."""
    table = pa.table(
        {
            "text": texts,
            "source": sources if sources is not None else ["s"] * len(texts),
            "file": files if files is not None else ["f"] * len(texts),
            "sha256": [text_sha256(t) for t in texts],
        },
        schema=DOC_SCHEMA,
    )
    pq.write_table(table, path)
    return path


def docs_file(tmp_path: Path, texts: list[str], sources: list[str]) -> Path:
    """`tmp_path/docs.parquet` holding `texts` of `sources`, file `f<i>` each."""
    return write_docs(tmp_path / "docs.parquet", texts, sources, [f"f{i}" for i in range(len(texts))])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(url: str, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dagster dev exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.25)
    raise TimeoutError(f"{url} did not come up in {timeout}s")


class Server:
    """A running `dagster dev`: its port, spec, instance home and data dir."""

    def __init__(self, port: int, spec: Path, home: Path, data: Path, proc: subprocess.Popen) -> None:
        self.port, self.spec, self.home, self.data, self.proc = port, spec, home, data, proc
        self.url = f"http://127.0.0.1:{port}"

    @property
    def layout(self) -> Layout:
        return Layout(self.data)

    def instance(self) -> dg.DagsterInstance:
        return dg.DagsterInstance.from_config(str(self.home))

    def wait_for_run(self, run_id: str, timeout: float = 300) -> dg.DagsterRunStatus:
        from dagster_graphql import DagsterGraphQLClient

        client = DagsterGraphQLClient("127.0.0.1", port_number=self.port)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = client.get_run_status(run_id)
            if status in (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED):
                return status
            time.sleep(0.25)
        raise TimeoutError(f"run {run_id} did not finish in {timeout}s")

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def instance_home(path: Path, **settings: Any) -> Path:
    """A DAGSTER_HOME with the repo's dagster.yaml, as `make run`/`make dev` set it up, and
    `settings` (top-level keys the file does not set) after it."""
    path.mkdir(parents=True, exist_ok=True)
    text = (REPO_ROOT / "dagster.yaml").read_text(encoding="utf-8")
    (path / "dagster.yaml").write_text(text + (yaml.safe_dump(settings) if settings else ""), encoding="utf-8")
    return path


def start_dagster_dev(spec: Path, home: Path, data: Path, log: Path) -> Server:
    """`dagster dev` on a free loopback port over `spec`, as `make dev` starts it."""
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "ALBOR_SPEC": str(spec), "ALBOR_DATA_DIR": str(data)}
    cmd = [str(Path(sys.executable).parent / "dagster"), "dev", "-h", "127.0.0.1", "-p", str(port)]
    cmd += ["-w", str(REPO_ROOT / "workspace.yaml")]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, env=env, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = Server(port, spec, home, data, proc)
    try:
        wait_for(f"{server.url}/server_info", 180, proc)
    except BaseException:
        server.stop()
        raise
    return server


def run_into_bucket(s3: Any, tmp_path: Path, spec: Path, monkeypatch: Any, bucket: str, prefix: str) -> str:
    """Create `bucket` on the test S3 server and run the whole graph of `spec` into
    s3://bucket/prefix, its working copy in tmp_path/work; the data dir's URI."""
    from albor_pipeline.cli import main as albor

    s3.create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/{prefix}"
    for name, value in (("ALBOR_WORK_DIR", tmp_path / "work"), ("DAGSTER_HOME", tmp_path / "home")):
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv("ALBOR_SPEC", "")  # restored after the test: `albor run --spec` sets it
    monkeypatch.setenv("ALBOR_DATA_DIR", "")
    assert albor(["run", "--spec", str(spec), "--data-dir", uri, "--log-level", "ERROR"]) == 0
    return uri


@contextmanager
def stage(name: str) -> Iterator[None]:
    """A scenario's assertions about one stage: a failure among them names the stage first."""
    try:
        yield
    except AssertionError as exc:
        raise AssertionError(f"[{name}] {exc}") from exc

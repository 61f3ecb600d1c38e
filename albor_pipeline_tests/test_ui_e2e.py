"""The web UI end to end: `dagster dev` on loopback, driven by Debian's Chromium via Playwright.

Also launches a run through `DagsterGraphQLClient`, the way scripts and CI talk to a
deployment. Needs /usr/bin/chromium (`.ci/run` installs it); no browser is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from albor_pipeline.core.artifacts import read_manifest
from albor_pipeline.spec import REPO_ROOT

from .conftest import small_spec_dict, write_spec

pytestmark = pytest.mark.e2e

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO_ROOT / "test-artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


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
            time.sleep(1)
    raise TimeoutError(f"{url} did not come up in {timeout}s")


class Server:
    def __init__(self, port: int, home: Path, data: Path) -> None:
        self.port, self.home, self.data = port, home, data
        self.url = f"http://127.0.0.1:{port}"

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
            time.sleep(1)
        raise TimeoutError(f"run {run_id} did not finish in {timeout}s")


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    if not CHROMIUM.exists():
        pytest.fail("Debian's chromium is not installed (apt-get install chromium); .ci/run installs it")
    tmp = tmp_path_factory.mktemp("ui")
    raw = small_spec_dict()
    raw["tokenizer"] = {"vocab_size": 600}
    spec = write_spec(tmp / "spec.yaml", raw)
    home = tmp / "dagster_home"
    home.mkdir()
    shutil.copyfile(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "ALBOR_SPEC": str(spec), "ALBOR_DATA_DIR": str(tmp / "out")}
    log = open(tmp / "dagster_dev.log", "wb")  # noqa: SIM115 - closed in teardown
    cmd = [str(Path(sys.executable).parent / "dagster"), "dev", "-h", "127.0.0.1", "-p", str(port)]
    cmd += ["-w", str(REPO_ROOT / "workspace.yaml")]
    proc = subprocess.Popen(cmd, env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(f"http://127.0.0.1:{port}/server_info", 180, proc)
        yield Server(port, home, tmp / "out")
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


GROUPS = ("ingestion", "mix", "fim", "tokenizer", "corpus", "provenance")


def expand_groups(page) -> None:
    """The global lineage starts with groups collapsed; a double click expands one."""
    graph = page.locator("foreignObject")
    for group in GROUPS[:-1]:  # provenance's group holds one asset of the same name
        graph.get_by_text(group, exact=True).first.dblclick()
        page.wait_for_timeout(500)


def test_materialize_all_from_the_asset_graph(server: Server) -> None:
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        try:
            page.goto(f"{server.url}/asset-groups", wait_until="domcontentloaded")
            graph = page.locator("foreignObject")
            for group in GROUPS:
                expect(graph.get_by_text(group, exact=True).first).to_be_visible(timeout=60_000)
            expand_groups(page)
            for name in ("stdlib_async", "documents", "tokenizer", "train", "val", "test"):
                expect(graph.get_by_text(name, exact=True).first).to_be_attached(timeout=30_000)
            page.get_by_role("button", name="Materialize all").first.click()
            expect(page.get_by_text("Launched run").first).to_be_visible(timeout=60_000)
            with server.instance() as instance:
                deadline = time.monotonic() + 60
                while not instance.get_runs(limit=1) and time.monotonic() < deadline:
                    time.sleep(0.5)
                run_id = instance.get_runs(limit=1)[0].run_id
            assert server.wait_for_run(run_id) == dg.DagsterRunStatus.SUCCESS
            page.reload(wait_until="domcontentloaded")  # groups stay expanded across reloads
            expect(graph.get_by_text("documents", exact=True).first).to_be_visible(timeout=60_000)
            for _ in range(2):  # the graph's zoom-out control (bottom right), for a whole-graph screenshot
                page.mouse.click(1572, 851)
                page.wait_for_timeout(400)
            page.wait_for_timeout(1500)
            page.screenshot(path=str(ARTIFACTS / "ui-asset-graph.png"))

            manifest = read_manifest(server.data, "ingested/stdlib_async")
            page.goto(f"{server.url}/assets/ingested/stdlib_async", wait_until="domcontentloaded")
            expect(page.get_by_text(manifest.outputs[0].sha256).first).to_be_visible(timeout=60_000)
            expect(page.get_by_text(f"{manifest.outputs[0].rows:,}", exact=True).first).to_be_visible(timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / "ui-asset-page.png"), full_page=True)
        finally:
            browser.close()


def test_graphql_client_launch_reaches_the_asset_config(server: Server) -> None:
    from dagster_graphql import DagsterGraphQLClient

    client = DagsterGraphQLClient("127.0.0.1", port_number=server.port)
    selection = [
        ["ingested", "stdlib_json_email"],
        ["ingested", "stdlib_async"],
        ["documents"],
        ["mixed", "train"],
        ["fim", "train"],
    ]
    run_id = client.submit_job_execution(
        "__ASSET_JOB",
        repository_location_name="albor_pipeline",
        repository_name="__repository__",
        run_config={"ops": {"fim__train": {"config": {"rate": 0.25, "seed": 7}}}},
        asset_selection=selection,
    )
    assert server.wait_for_run(run_id) == dg.DagsterRunStatus.SUCCESS
    with server.instance() as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey(["fim", "train"]))
        assert event is not None and event.run_id == run_id
        meta = event.asset_materialization.metadata
    assert meta["config"].value["rate"] == 0.25 and meta["config"].value["seed"] == 7
    assert 0 < meta["observed_rate"].value < 0.5
    manifest = json.loads((server.data / "manifests" / "fim__train.json").read_text())
    assert manifest["config"]["rate"] == 0.25

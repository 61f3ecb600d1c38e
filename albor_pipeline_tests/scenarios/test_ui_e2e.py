"""The web UI end to end: `dagster dev` on loopback, driven by Debian's Chromium via Playwright.

Also launches a run through `DagsterGraphQLClient`, the way scripts and CI talk to a
deployment. Needs /usr/bin/chromium (`make test` installs it); no browser is downloaded.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import dagster as dg
import pytest

from albor_pipeline.runtime.artifacts import read_manifest
from albor_pipeline.spec import REPO_ROOT
from albor_pipeline_tests.support import Server, instance_home, small_spec_dict, write_spec

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


@pytest.fixture(scope="module")
def server(tmp_path_factory, dagster_dev) -> Server:
    if not CHROMIUM.exists():
        pytest.fail("Debian's chromium is not installed: `make test` installs it (apt-get install chromium)")
    tmp = tmp_path_factory.mktemp("ui")
    samples = REPO_ROOT / "data" / "samples"
    chat = [  # the chat branch too, so the graph (and the README's screenshot) shows every group
        {"name": "python_chat", "kind": "chat", "path": str(samples / "python_chat.jsonl")},
        {"name": "python_mc", "kind": "mc", "path": str(samples / "python_mc.jsonl")},
    ]
    raw = small_spec_dict(chat)
    raw["tokenizer"] = {"vocab_size": 600}
    # The run queue looks every second (Dagster's default: every 5 s): a launched run starts at once.
    home = instance_home(tmp / "dagster_home", run_queue={"dequeue_interval_seconds": 1})
    return dagster_dev(write_spec(tmp / "spec.yaml", raw), home, tmp / "out")


GROUPS = ("ingestion", "hygiene", "dedup", "mix", "fim", "tokenizer", "corpus", "chat", "provenance")
# `make screenshots` (ALBOR_SCREENSHOTS=1) writes the README's images into docs/.
SCREENSHOTS = REPO_ROOT / "docs" if os.environ.get("ALBOR_SCREENSHOTS") else ARTIFACTS


def test_materialize_all_from_the_asset_graph(server: Server) -> None:
    from playwright.sync_api import expect, sync_playwright

    SCREENSHOTS.mkdir(exist_ok=True)
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        try:
            page.goto(f"{server.url}/asset-groups", wait_until="domcontentloaded")
            graph = page.locator("foreignObject")
            for group in GROUPS:
                expect(graph.get_by_text(group, exact=True).first).to_be_visible(timeout=60_000)
            page.get_by_role("button", name="Materialize all").first.click()
            expect(page.get_by_text("Launched run").first).to_be_visible(timeout=60_000)
            with server.instance() as instance:
                deadline = time.monotonic() + 60
                while not instance.get_runs(limit=1) and time.monotonic() < deadline:
                    time.sleep(0.5)
                run_id = instance.get_runs(limit=1)[0].run_id
            assert server.wait_for_run(run_id) == dg.DagsterRunStatus.SUCCESS
            page.reload(wait_until="domcontentloaded")
            for group in GROUPS:  # the lineage at group level: every group, materialized
                expect(graph.get_by_text(group, exact=True).first).to_be_visible(timeout=60_000)
            page.wait_for_timeout(1500)
            page.screenshot(path=str(SCREENSHOTS / "ui-asset-graph.png"))

            page.goto(f"{server.url}/assets", wait_until="domcontentloaded")  # the catalog lists every asset
            for name in ("conversations", "long_train", "documents", "python_mc", "stdlib_async"):  # the first rows
                expect(page.get_by_text(name).first).to_be_visible(timeout=30_000)

            manifest = read_manifest(server.layout, "ingested/stdlib_async")
            page.goto(f"{server.url}/assets/ingested/stdlib_async", wait_until="domcontentloaded")
            expect(page.get_by_text(manifest.outputs[0].sha256).first).to_be_visible(timeout=60_000)
            expect(page.get_by_text(f"{manifest.outputs[0].rows:,}", exact=True).first).to_be_visible(timeout=30_000)

            # A page leads with its stage's own facts: a filter's funnel above the hashes and outputs.
            page.goto(f"{server.url}/assets/filtered/stdlib_async", wait_until="domcontentloaded")
            funnel, record = page.get_by_text("documents_in", exact=True), page.get_by_text("sha256", exact=True)
            expect(funnel.first).to_be_visible(timeout=60_000)
            expect(record.first).to_be_visible(timeout=30_000)
            assert funnel.first.bounding_box()["y"] < record.first.bounding_box()["y"]
            page.screenshot(path=str(SCREENSHOTS / "ui-asset-page.png"), full_page=True)

            # The stats page shows each chart: its metadata row opens the PNG embedded in it.
            page.goto(f"{server.url}/assets/stats", wait_until="domcontentloaded")
            row = page.get_by_role("row").filter(has_text="funnel.png").first
            expect(row).to_be_visible(timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "ui-stats-page.png"))
            row.get_by_text("[Show Markdown]").click()
            chart = page.locator('img[src^="data:image/png;base64,"]')
            expect(chart).to_be_visible(timeout=30_000)
            assert chart.evaluate("img => img.complete && img.naturalWidth") >= 800
            page.wait_for_timeout(500)
            page.screenshot(path=str(SCREENSHOTS / "ui-stats-chart.png"))
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
    manifest = json.loads(server.layout.manifest("fim/train").read_text())
    assert manifest["config"]["rate"] == 0.25


def test_the_whatif_preview_runs_from_the_launchpad(server: Server) -> None:
    """The launchpad's preview job: proposed rules as run config, launched on the server (as
    its Launch button does, through GraphQL); each source's answer is an observation of its
    `filtered/<source>` asset, equal to `albor whatif`'s, and the data dir is unchanged."""
    from dagster_graphql import DagsterGraphQLClient
    from playwright.sync_api import expect, sync_playwright

    from albor_pipeline.spec import load_spec
    from albor_pipeline.stages.hygiene.whatif import answer_all, proposal

    manifests = server.layout.manifests_dir
    before = {p.name: p.read_bytes() for p in manifests.glob("*.json")}  # each records its stage's outputs' hashes
    proposed = ["hygiene.rules.starcoder.max_line_length=100"]
    client = DagsterGraphQLClient("127.0.0.1", port_number=server.port)
    run_id = client.submit_job_execution(
        "hygiene_whatif",
        repository_location_name="albor_pipeline",
        repository_name="__repository__",
        run_config={"ops": {"whatif_preview": {"config": {"changes": proposed, "examples": 2}}}},
    )
    assert server.wait_for_run(run_id) == dg.DagsterRunStatus.SUCCESS
    spec = load_spec(server.spec)
    expected = {a.source: a for a in answer_all(spec, server.layout, proposal(proposed), examples=2)}
    with server.instance() as instance:
        for name, answer in expected.items():
            records = instance.fetch_observations(dg.AssetKey(["filtered", name]), limit=1).records
            meta = records[0].asset_observation.metadata
            assert records[0].run_id == run_id
            assert (meta["kept_now"].value, meta["kept_after"].value) == (answer.kept_now, answer.kept_after)
            assert meta["removed_after"].value == answer.removed_after
    assert expected["stdlib_async"].kept_after < expected["stdlib_async"].kept_now  # the proposal bites
    assert {p.name: p.read_bytes() for p in manifests.glob("*.json")} == before  # nothing was written
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        try:
            page.goto(f"{server.url}/locations/albor_pipeline/jobs/hygiene_whatif/playground")
            expect(page.get_by_text("examples").first).to_be_visible(timeout=60_000)  # the config's fields
            page.wait_for_timeout(1000)
            page.screenshot(path=str(SCREENSHOTS / "ui-whatif-launchpad.png"))
            page.goto(f"{server.url}/assets/filtered/stdlib_async?view=events", wait_until="domcontentloaded")
            expect(page.get_by_text("kept_after").first).to_be_visible(timeout=60_000)
            page.get_by_text("kept_after").first.scroll_into_view_if_needed()
            page.wait_for_timeout(1000)
            page.screenshot(path=str(SCREENSHOTS / "ui-whatif-observation.png"), full_page=True)
        finally:
            browser.close()

"""A Dagster instance on a real PostgreSQL server (Debian's `postgresql`, started on loopback by
the test): `albor run` stores its run, event log and schedule state there, and the web UI
reads the run back through GraphQL."""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from albor_pipeline.cli import instance_yaml
from albor_pipeline_tests.support import free_port, tiny_spec, write_spec


def _pg_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        pytest.fail("PostgreSQL is not installed: `make test` installs Debian's postgresql (scripts/system-deps)")
    return Path(found[-1]).parent


def _as_server_user(cmd: list[str], user: str | None) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as the package's `postgres` user."""
    return ["runuser", "-u", user, "--", *cmd] if user else cmd


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """A fresh cluster in a temp dir, on a free loopback port; yields its URL."""
    bin_dir = _pg_bin()
    user = "postgres" if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="albor-pg-"))
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    if user:
        pw = pwd.getpwnam(user)
        for path in (root, sockets):
            os.chown(path, pw.pw_uid, pw.pw_gid)
    port = free_port()
    run = lambda cmd: subprocess.run(_as_server_user(cmd, user), check=True, capture_output=True, text=True)  # noqa: E731
    run([str(bin_dir / "initdb"), "-D", str(data), "-U", "albor", "--auth=trust", "-E", "UTF8"])
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off"
    run([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-o", options, "-w", "start"])
    try:
        yield f"albor@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_server_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"], user))
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.graph
def test_instance_on_postgres_stores_runs_and_serves_them(postgres, tmp_path, monkeypatch, dagster_dev):
    import psycopg2

    url = f"postgresql+psycopg2://{postgres}"  # SQLAlchemy 2.1 defaults to psycopg 3; dagster-postgres ships psycopg2
    monkeypatch.setenv("ALBOR_POSTGRES_URL", url)
    home = tmp_path / "home"
    env = {**os.environ, "DAGSTER_HOME": str(home), "ALBOR_POSTGRES_URL": url}
    postgres = f"postgresql://{postgres}"
    spec = write_spec(tmp_path / "spec.yaml", tiny_spec())  # what is built matters little here: where it is recorded
    data = tmp_path / "data"
    albor = [sys.executable, "-m", "albor_pipeline.cli"]
    done = subprocess.run([*albor, "instance"], env=env, capture_output=True, text=True, check=True)
    assert "storage PostgreSQL" in done.stdout
    assert (home / "dagster.yaml").read_bytes() == instance_yaml()
    run = subprocess.run(
        [*albor, "run", "--spec", str(spec), "--data-dir", str(data)], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert not list(home.rglob("*.db")), "no SQLite storage next to the PostgreSQL one"
    with psycopg2.connect(postgres) as conn, conn.cursor() as cur:
        cur.execute("select run_id, status from runs")
        runs = cur.fetchall()
        cur.execute("select count(*) from event_logs where dagster_event_type = 'ASSET_MATERIALIZATION'")
        materializations = cur.fetchone()[0]
        cur.execute("select count(*) from information_schema.tables where table_name in ('instigators', 'jobs')")
        schedule_tables = cur.fetchone()[0]
    assert len(runs) == 1 and runs[0][1] == "SUCCESS"
    assert materializations >= 15 and schedule_tables == 2
    # The web UI on the same instance reads the run back.
    server = dagster_dev(spec, home, data)
    from dagster_graphql import DagsterGraphQLClient

    client = DagsterGraphQLClient("127.0.0.1", port_number=server.port)
    assert client.get_run_status(runs[0][0]).value == "SUCCESS"
    query = (
        '{ assetOrError(assetKey: {path: ["corpus", "train"]}) '
        "{ ... on Asset { assetMaterializations(limit: 1) { runId } } } }"
    )
    body = json.dumps({"query": query}).encode()
    request = urllib.request.Request(f"{server.url}/graphql", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        asset = json.load(response)["data"]["assetOrError"]
    assert asset["assetMaterializations"][0]["runId"] == runs[0][0]

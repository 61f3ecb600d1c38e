"""Dagster's SQLite event log, each database's connection kept open for the process.

Dagster's `SqliteEventLogStorage` (the default: a database per run, and an index, under
`$DAGSTER_HOME/history/runs`) creates an engine and opens a connection for every event it
writes: 2 ms a log line and 5 ms a materialization here, so a run's 400-600 events cost
1-2 s of its process. `PooledSqliteEventLogStorage` is that storage, the same files and
the same reads, with one engine per database kept for the process (the `LIVE_DATABASES`
most recently used: a web server reads many runs' databases) whose connection is reused
under the storage's own lock, committed without an fsync each (`synchronous=NORMAL`, safe
with the write-ahead log Dagster turns on): 0.5 ms and 1.5 ms. The repo's dagster.yaml selects it; with
PostgreSQL (`albor instance`), Dagster's PostgreSQL storage replaces it.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dagster as dg
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._serdes import ConfigurableClassData
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool

LIVE_DATABASES = 8


def _runs_dir(home: str) -> str:
    """Where Dagster's default storage keeps a home's event logs: <home>/history/runs."""
    base = os.path.join(home, "history", "runs")
    os.makedirs(base, exist_ok=True)
    return base


def _commit_without_fsync(engine: Engine) -> None:
    """Commits without an fsync on a database in write-ahead-log mode (Dagster's are): an event
    is up to three commits, 0.2 ms each with the fsync. A killed process loses nothing it
    committed; a power cut may lose the last events, never the database (SQLite's WAL rule).
    A database in another journal mode keeps its fsyncs."""
    raw = engine.raw_connection()  # the engine's one connection (StaticPool): the setting stays
    try:
        cursor = raw.cursor()
        if str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
            cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()
    finally:
        raw.close()


class PooledSqliteEventLogStorage(SqliteEventLogStorage):
    """`SqliteEventLogStorage` with an open connection per database (see the module).

    Its databases live under the home of the instance that uses it, as Dagster's default
    storage's do: the config names no home, so the repo's dagster.yaml loads without
    DAGSTER_HOME too (Dagster's CLI then runs a temporary instance on it, `dg check defs`
    among them). A configured `home` still overrides it."""

    def __init__(self, base_dir: str | None = None, inst_data: ConfigurableClassData | None = None) -> None:
        self._engines: OrderedDict[str, Engine] = OrderedDict()  # set first: Dagster's init connects
        self._fresh: set[str] = set()  # engines not yet tuned (`_commit_without_fsync`)
        self._inst_data = inst_data
        self._opened = base_dir is not None
        if base_dir is not None:
            super().__init__(base_dir, inst_data)

    def register_instance(self, instance: dg.DagsterInstance) -> None:
        """Open the databases in `instance`'s home when no `home` was configured: Dagster
        registers its event log first, before anything reads or writes it."""
        if not self._opened:
            super().__init__(_runs_dir(instance.root_directory), self._inst_data)
            self._opened = True
        super().register_instance(instance)

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        home = "The instance's home (default: the home of the instance that uses the storage)"
        return {"home": dg.Field(dg.StringSource, is_required=False, description=home)}

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> PooledSqliteEventLogStorage:
        home = config_value.get("home")
        return cls(base_dir=_runs_dir(home) if home else None, inst_data=inst_data)

    def _engine(self, shard: str) -> Engine:
        """The database's engine: one connection (StaticPool), used under `_db_lock` only."""
        engines = self._engines
        if (engine := engines.get(shard)) is not None:
            engines.move_to_end(shard)
            return engine
        engine = create_engine(
            self.conn_string_for_shard(shard),
            poolclass=StaticPool,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
        )
        engines[shard] = engine
        self._fresh.add(shard)
        while len(engines) > LIVE_DATABASES:
            engines.popitem(last=False)[1].dispose()
        return engine

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            if shard in self._fresh:  # its first use, the database initialized (its journal mode set)
                _commit_without_fsync(engine)
                self._fresh.discard(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def _close_engines(self) -> None:
        with self._db_lock:
            for engine in self._engines.values():
                engine.dispose()
            self._engines.clear()

    def wipe(self) -> None:
        self._close_engines()  # the files go: no connection may outlive them
        super().wipe()

    def dispose(self) -> None:
        self._close_engines()
        super().dispose()

"""The stage `test_commit.py` kills: one materialization writing a version of a single file, a
shard set, or several directories and a file, through `run_stage` as the real stages do.

Run as a program (`python -m albor_pipeline_tests.commit_stage ROOT KIND VERSION`) so the
commit code's fault hook can kill it; it imports only the commit path (no Dagster, no
pytest), so the many processes those tests start each cost a fraction of a second.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyarrow as pa

from albor_pipeline.runtime import commit
from albor_pipeline.runtime.artifacts import ParquetSink, record, staged_dir, write_json
from albor_pipeline.runtime.layout import Layout
from albor_pipeline.runtime.stagerun import StageOutput, run_stage

SCHEMA = pa.schema([("text", pa.string())])
# What each kind of stage writes: final names (relative to the data dir) -> "file" or "dir".
KINDS = {
    "file": {"eval/set.parquet": "file"},
    "shards": {"fim/train": "dir"},
    "multi": {"documents/train": "dir", "documents/val": "dir", "documents/report.json": "file"},
}
NO_EXCHANGE = "ALBOR_TEST_NO_EXCHANGE"  # the process's filesystem "cannot exchange names"


def shard_count(version: str) -> int:
    """A version's shard count differs, so a mix of two versions' files is visible; the new
    one has more, so a commit under way puts names in place that no manifest records yet."""
    return 2 if version == "v1" else 3


def _write_parquet(path: Path, version: str, rows: int = 50) -> None:
    with ParquetSink(path, SCHEMA) as sink:
        sink.write(pa.table({"text": [f"{version}-{i}" for i in range(rows)]}))


def write_outputs(root: Path, kind: str, version: str) -> list[Path]:
    """The stage's outputs, each put in place the way the stages do it."""
    files: list[Path] = []
    for rel, shape in KINDS[kind].items():
        final = root / rel
        if shape == "dir":
            with staged_dir(final) as staging:
                for k in range(shard_count(version)):
                    _write_parquet(staging / f"part-{k:05d}-0000.parquet", version)
            files += sorted(final.iterdir())
        elif final.suffix == ".json":
            write_json(final, {"version": version})
            files.append(final)
        else:
            _write_parquet(final, version)
            files.append(final)
    return files


def run(root: Path, kind: str, version: str) -> None:
    """One materialization of the stage `kind` writing `version` (what the process runs)."""
    layout = Layout(root)

    def work(_inputs: object) -> StageOutput:
        files = write_outputs(root, kind, version)
        return StageOutput(artifacts=[record(f, root) for f in files], config={"version": version})

    run_stage(layout, kind, (), work)


if __name__ == "__main__":
    if os.environ.get(NO_EXCHANGE):
        commit.exchange = lambda a, b: False  # as on a filesystem without RENAME_EXCHANGE
    run(Path(sys.argv[1]), sys.argv[2], sys.argv[3])

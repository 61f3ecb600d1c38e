"""The README's "Adding a stage": a new per-shard stage is its package, its Dagster module and
one registry line, nothing else. The test writes such a stage (word counts per document of
a filtered source) as those files, registers it, and materializes it with its upstream."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from albor_pipeline.defs import pipeline
from albor_pipeline.defs.automation import BUILD_JOB
from albor_pipeline.spec import load_spec
from albor_pipeline_tests.support import small_spec_dict, write_spec

# albor_pipeline/stages/wordcount/wordcount.py: the step, the entry, the check.
STAGE = """
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from albor_pipeline.runtime.artifacts import Artifact, ParquetSink
from albor_pipeline.runtime.checks import CheckOutcome
from albor_pipeline.runtime.shardmap import StageIO, Step, TaskIO, job_and_file, map_shards, shards_of
from albor_pipeline.runtime.shards import Shard, iter_batches, parquet_files

SCHEMA = pa.schema([("sha256", pa.string()), ("words", pa.int64())])


@dataclass(frozen=True)
class Counted:
    shards: tuple[Shard, ...]


def count_shard(job: None, io: TaskIO, path: str) -> Counted:
    with ParquetSink(io.directory / Path(path).name, SCHEMA) as sink:
        for batch in iter_batches(io.local(path), ["sha256", "text"]):
            words = pa.array([len(text.split()) for text in batch.column("text").to_pylist()], pa.int64())
            sink.write(pa.RecordBatch.from_arrays([batch.column("sha256"), words], schema=SCHEMA))
    return Counted((Shard.of(sink.path, sink.rows),))


COUNT_SHARD = Step(count_shard, job_and_file)


def count_words(src: Path, out: Path, io: StageIO) -> list[Artifact]:
    items = [str(path) for path in parquet_files(src)]
    return [s.artifact(out, io.root) for s in shards_of(map_shards(COUNT_SHARD, None, items, out, io))]


def check_counts(paths: list[Path]) -> CheckOutcome:
    empty = sum(pc.sum(pc.equal(pq.read_table(p).column("words"), 0)).as_py() or 0 for p in paths)
    return CheckOutcome(True, f"{empty} document(s) without words")
""".replace("import pyarrow.compute as pc\n", "import pyarrow.compute as pc\nimport pyarrow.parquet as pq\n")

# albor_pipeline/defs/wordcount.py: the run config, the work function, the declaration.
DEFS = '''
from functools import partial

import dagster as dg

from albor_pipeline.defs.stage import Check, Stage, StageContext, schema_check
from albor_pipeline.runtime.layout import filtered_stage
from albor_pipeline.runtime.shardmap import StageIO
from albor_pipeline.runtime.stage import StageOutput
from albor_pipeline.spec import DOCUMENT_KINDS, PipelineSpec
from wordcount.wordcount import SCHEMA, check_counts, count_words


class WordcountConfig(dg.Config):
    """Nothing to override."""


def wordcount(source: str, ctx: StageContext, config: WordcountConfig) -> StageOutput:
    stage = f"wordcount/{source}"
    io = StageIO(ctx.layout.root, ctx.executor, ctx.log.info)
    artifacts = count_words(ctx.layout.filtered(source), ctx.layout.stage_dir(stage), io)
    return StageOutput(artifacts=artifacts, config={})


def stages(spec: PipelineSpec) -> list[Stage[WordcountConfig]]:
    return [
        Stage(
            name=f"wordcount/{s.name}",
            group="wordcount",
            description="Words per document of a filtered source.",
            config=WordcountConfig,
            defaults=WordcountConfig(),
            work=partial(wordcount, s.name),
            deps=(filtered_stage(s.name),),
            checks=(schema_check(SCHEMA), Check("counted", "Counts.", lambda ctx: check_counts(ctx.parquet_outputs))),
        )
        for s in spec.sources_of(*DOCUMENT_KINDS)
    ]
'''


def test_a_new_per_shard_stage_is_its_package_its_dagster_module_and_one_registry_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "code" / "wordcount"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")  # file 1
    (package / "wordcount.py").write_text(STAGE)  # file 2
    (tmp_path / "code" / "wordcount_defs.py").write_text(DEFS)  # file 3
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    module = importlib.import_module("wordcount_defs")
    monkeypatch.setattr(pipeline, "STAGE_MODULES", (*pipeline.STAGE_MODULES, module))  # file 4: the registry line

    spec = load_spec(write_spec(tmp_path / "spec.yaml", small_spec_dict()))
    out = tmp_path / "data"
    job = pipeline.build_definitions(spec, out).resolve_job_def(BUILD_JOB)
    source = "stdlib_json_email"
    keys = [["ingested", source], ["filtered", source], ["wordcount", source]]
    result = job.execute_in_process(asset_selection=[dg.AssetKey(k) for k in keys])
    assert result.success
    counts = pq.read_table(out / "wordcount" / source)
    filtered = pq.read_table(out / "filtered" / source, columns=["sha256", "text"])
    assert counts.column("sha256").to_pylist() == filtered.column("sha256").to_pylist()
    expected = [len(t.split()) for t in filtered.column("text").to_pylist()]
    assert counts.column("words").to_pylist() == expected and sum(expected) > 1000
    # The stage got what every stage gets: a manifest with each shard's SHA-256, and its checks ran.
    manifest = (out / "manifests" / f"wordcount__{source}.json").read_text()
    assert all(p.name in manifest for p in (out / "wordcount" / source).iterdir())
    checks = {e.asset_check_key.name for e in result.get_asset_check_evaluations()}
    assert {"schema", "counted"} <= checks
    sys.modules.pop("wordcount_defs", None)
    sys.modules.pop("wordcount.wordcount", None)
    sys.modules.pop("wordcount", None)

"""datatrove 0.10.1's equivalent of the web recipe, run by the peers' venv (bench/web.py):
WarcReader -> Trafilatura -> URLFilter -> Gopher repetition, Gopher quality, FineWeb quality
-> MinHash dedup (signatures, buckets, clusters, filter) -> DocumentTokenizer, each with
datatrove's defaults; the URL filter with the recipe's block list and without datatrove's
integrated lists (the recipe has none). Writes OUT/result.json: what each step kept.

    python bench/web_datatrove.py WARC_DIR OUT TOKENIZER_JSON WORKERS
"""

import json
import sys
from pathlib import Path

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup import (
    MinhashDedupBuckets,
    MinhashDedupCluster,
    MinhashDedupFilter,
    MinhashDedupSignature,
)
from datatrove.pipeline.dedup.minhash import MinhashConfig
from datatrove.pipeline.extractors import Trafilatura
from datatrove.pipeline.filters import FineWebQualityFilter, GopherQualityFilter, GopherRepetitionFilter, URLFilter
from datatrove.pipeline.readers import JsonlReader, WarcReader
from datatrove.pipeline.tokens import DocumentTokenizer
from datatrove.pipeline.writers import JsonlWriter

BLOCKED = Path(__file__).resolve().parents[1] / "data" / "web" / "blocked_domains.txt"


def main() -> None:
    warcs, out, tokenizer, workers = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    files = len(list(Path(warcs).glob("*.warc.gz")))
    domains = [line.strip() for line in BLOCKED.read_text().splitlines() if line.strip() and not line.startswith("#")]
    config = MinhashConfig()

    def excluded(name):
        return JsonlWriter(str(out / "excluded" / name))

    def run(pipeline, tasks, name):
        LocalPipelineExecutor(
            pipeline=pipeline, tasks=tasks, workers=workers, logging_dir=str(out / "logs" / name)
        ).run()

    run(
        [
            WarcReader(warcs, glob_pattern="*.warc.gz"),
            Trafilatura(),
            URLFilter(extra_domains=domains, use_integrated_lists=False, exclusion_writer=excluded("url")),
            GopherRepetitionFilter(exclusion_writer=excluded("gopher_repetition")),
            GopherQualityFilter(exclusion_writer=excluded("gopher_quality")),
            FineWebQualityFilter(exclusion_writer=excluded("fineweb")),
            JsonlWriter(str(out / "filtered")),
        ],
        files,
        "filter",
    )
    extracted = {
        name.name: [
            json.loads(line)["metadata"]["url"] for path in sorted(name.glob("*.jsonl*")) for line in _lines(path)
        ]
        for name in sorted((out / "excluded").glob("*"))
    }
    run([JsonlReader(str(out / "filtered")), MinhashDedupSignature(str(out / "sigs"), config=config)], files, "sigs")
    run([MinhashDedupBuckets(str(out / "sigs"), str(out / "buckets"), config=config)], config.num_buckets, "buckets")
    run([MinhashDedupCluster(str(out / "buckets"), str(out / "remove"), config=config)], 1, "cluster")
    run(
        [
            JsonlReader(str(out / "filtered")),
            MinhashDedupFilter(str(out / "remove")),
            JsonlWriter(str(out / "kept")),
            DocumentTokenizer(str(out / "tokens"), tokenizer_name_or_path=tokenizer, eos_token="</s>"),
        ],
        files,
        "dedup",
    )
    urls = [
        json.loads(line)["metadata"]["url"] for path in sorted((out / "kept").glob("*.jsonl*")) for line in _lines(path)
    ]
    filtered = sum(1 for path in sorted((out / "filtered").glob("*.jsonl*")) for _ in _lines(path))
    counts = {"after_filters": filtered, "after_dedup": len(urls)}
    result = {"kept_urls": urls, "excluded": extracted, "counts": counts}
    (out / "result.json").write_text(json.dumps(result))


def _lines(path):
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        yield from fh


if __name__ == "__main__":
    main()

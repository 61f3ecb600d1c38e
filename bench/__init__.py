"""Benchmarks (not tests): stage throughput against bare libraries, end to end, scaling.

`python bench/run.py --help` lists the sections; each lives in its own module:

- `stages`: each stage against the bare library on the same documents;
- `hygiene`: filters, redaction and near dedup (against datatrove's MinHash);
- `graph`: the whole default graph through `dagster asset materialize`;
- `scale`: the graph at 1x and 2x the corpus (and local against Ray);
- `loader`: the training loader against a bare `np.memmap` reader;
- `report`: `RESULTS.md`, the tables of `results.json`; `rss`: the peak-RSS wrapper a graph runs under.
"""

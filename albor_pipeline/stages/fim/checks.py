"""The observed FIM share."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow.parquet as pq

from albor_pipeline.runtime.checks import CheckOutcome


def check_fim_rate(paths: list[Path], rate: float, sigmas: float = 5.0) -> CheckOutcome:
    """Observed FIM share (over the shards `paths`) within `sigmas` binomial standard deviations of `rate`.

    Rows under min_chars are never transformed, so the bound counts only rows that could be.
    """
    n = k = 0
    for path in paths:
        for batch in pq.ParquetFile(path).iter_batches(columns=["fim_format"]):
            n += batch.num_rows
            k += batch.num_rows - batch.column(0).null_count
    sd = math.sqrt(max(n * rate * (1 - rate), 1e-12))
    ok = n == 0 or k <= n * rate + sigmas * sd + 1
    ok = ok and (n < 30 or k >= n * rate - sigmas * sd - n * 0.05)  # short rows are exempt, allow 5 %
    return CheckOutcome(ok, f"{k}/{n} rows FIM'd at rate {rate}", {"observed": k / n if n else 0.0, "rows": n})

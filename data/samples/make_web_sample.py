"""Regenerate the shipped web sample, `web/crawl-000{1,2}.warc.gz` (run from the repo root,
with the test extra installed for warcio, on a machine with Debian's python3-doc).

Real pages nobody here wrote: Python's own documentation as Debian's python3-doc ships it
(PSF licence, as the other samples), written as a crawler writes WARC files: a request and
a response record per page with HTTP headers, gzip per record. The crawl also holds what a
web source must skip or drop: an image, a JSON reply, a redirect, a 404, a page in Latin-1,
a gzip-encoded page, a mirror's copies of ten pages (near-duplicates), two spam pages on a
domain the web spec blocks, and a last record cut short.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parents[1]))

from albor_pipeline_tests.crawl import write_sample  # noqa: E402

if __name__ == "__main__":
    for path in write_sample(HERE / "web"):
        print(path, path.stat().st_size)

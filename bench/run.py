"""The bench's command line: `python bench/run.py --help` (or `python -m bench.run`).

The benchmarks live in the `bench` package beside this file; see `bench/cli.py`.
"""

import sys
from pathlib import Path

if not __package__:  # run as a file: the repo, not bench/ itself, heads the import path
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench.cli import main

if __name__ == "__main__":
    sys.exit(main())

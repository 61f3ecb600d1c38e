"""The run's main script, imported by the fork server before anything else
(`executor.PRELOADED`), as `multiprocessing` means its `"__main__"` preload to do: Python 3.11's
fork server never does (it asks the preparation data for `main_path`, which names it
`init_main_from_path`), so each worker would run the script again as it starts. Under Dagster's
command line that imports all of Dagster: a second of CPU per worker, as a run's first tasks
start. With the script already imported, a forked worker finds it in place and skips it."""

from __future__ import annotations

import contextlib
import os
from multiprocessing import spawn

from albor_pipeline.runtime.executor import MAIN_SCRIPT
from albor_pipeline.runtime.memory import collect_less

collect_less()  # the fork server's workers inherit it

# A script that fails here (e.g. it reads the run's arguments) is run by each worker, as before.
if script := os.environ.get(MAIN_SCRIPT):
    with contextlib.suppress(Exception):
        spawn.import_main_path(script)

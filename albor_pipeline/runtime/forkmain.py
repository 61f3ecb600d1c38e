"""The fork server's first import (`executor.PRELOADED`): it ends the fork server with the run,
then imports the run's main script.

The fork server exits when the run does, however it dies: `multiprocessing`'s own check (EOF
on a pipe the run holds) only starts once every preloaded module is imported, which takes
seconds on a busy machine, and until then the server, and the resource tracker whose pipe a
request queued to it holds, outlive a SIGKILLed run.

The run's main script is imported as `multiprocessing` means its `"__main__"` preload to do:
Python 3.11's fork server never does (it asks the preparation data for `main_path`, which
names it `init_main_from_path`), so each worker would run the script again as it starts.
Under Dagster's command line that imports all of Dagster: a second of CPU per worker, as a
run's first tasks start. With the script already imported, a forked worker finds it in place
and skips it."""

from __future__ import annotations

import contextlib
import os
from multiprocessing import spawn

from albor_pipeline.runtime.watchdog import exit_with, start_time

run = os.getppid()  # the fork server is the run's child; watched before any slow import
exit_with(run, start_time(run), every=0.2)

from albor_pipeline.runtime.executor import MAIN_SCRIPT  # noqa: E402
from albor_pipeline.runtime.memory import collect_less  # noqa: E402

collect_less()  # the fork server's workers inherit it

# A script that fails here (e.g. it reads the run's arguments) is run by each worker, as before.
if script := os.environ.get(MAIN_SCRIPT):
    with contextlib.suppress(Exception):
        spawn.import_main_path(script)

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
and skips it.

A console script (`dagster`, `albor`: a wrapper in the interpreter's scripts directory that
imports its package's `main` and calls it only as `__main__`) defines nothing a task needs,
so it is not run: a module in its place, naming it, is enough for the workers to skip it.
Running `dagster`'s would import all of Dagster in the fork server too, about 2 s of a core
that the run's first parallel map waits for."""

from __future__ import annotations

import contextlib
import os
import sys
import sysconfig
import types
from multiprocessing import spawn
from pathlib import Path

from albor_pipeline.runtime.watchdog import exit_with, start_time

run = os.getppid()  # the fork server is the run's child; watched before any slow import
exit_with(run, start_time(run), every=0.2)

from albor_pipeline.runtime.executor import MAIN_SCRIPT  # noqa: E402
from albor_pipeline.runtime.memory import collect_less  # noqa: E402

collect_less()  # the fork server's workers inherit it


def _console_script(script: str) -> bool:
    """Whether `script` is an installed entry point's wrapper (in the scripts directory)."""
    return Path(script).parent.resolve() == Path(sysconfig.get_path("scripts")).resolve()


if (script := os.environ.get(MAIN_SCRIPT)) and _console_script(script):
    stand_in = types.ModuleType("__mp_main__")
    stand_in.__file__ = script  # what a forked worker compares with its main path, to skip it
    sys.modules["__main__"] = sys.modules["__mp_main__"] = stand_in
elif script:
    # A script that fails here (e.g. it reads the run's arguments) is run by each worker, as before.
    with contextlib.suppress(Exception):
        spawn.import_main_path(script)

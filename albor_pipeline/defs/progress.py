"""A compact console logger for `albor run`: a progress bar line per finished step.

Dagster's console logger prints every engine event; a person running the pipeline
from a terminal wants to see how far along it is, the stages' own progress messages
(rows, MB, rate) and warnings.
"""

import logging
import sys
import time

import dagster as dg

_DONE = {"STEP_SUCCESS": "ok", "STEP_FAILURE": "FAILED", "STEP_SKIPPED": "skipped"}


class ProgressHandler(logging.Handler):
    def __init__(self, total: int, width: int = 24) -> None:
        super().__init__(logging.DEBUG)
        self.total, self.width, self.done = total, width, 0
        self.start = time.monotonic()

    def emit(self, record: logging.LogRecord) -> None:
        meta = getattr(record, "dagster_meta", None) or {}
        event = meta.get("dagster_event")
        step = meta.get("step_key") or "run"
        if event is None:
            if record.levelno >= logging.INFO:
                level = "" if record.levelno == logging.INFO else f"{record.levelname}: "
                print(f"    {step}: {level}{meta.get('orig_message', record.getMessage())}", file=sys.stderr)
            return
        outcome = _DONE.get(event.event_type_value)
        if outcome is None:
            return
        self.done += 1
        filled = self.width * self.done // max(self.total, 1)
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.monotonic() - self.start
        print(f"[{bar}] {self.done}/{self.total} {step} {outcome} ({elapsed:.1f}s)", file=sys.stderr)


def progress_logger(total_steps: int) -> dg.LoggerDefinition:
    @dg.logger(config_schema=None, description="Progress bar and stage messages on stderr.")
    def _progress(init_context: dg.InitLoggerContext) -> logging.Logger:
        log = logging.getLogger(f"albor.progress.{init_context.run_id}")
        log.setLevel(logging.DEBUG)
        log.propagate = False
        log.handlers = [ProgressHandler(total_steps)]
        return log

    return _progress

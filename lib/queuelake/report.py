"""Progress on stderr, one JSON summary object as the last line of stdout.

Schedulers (Airflow, Databricks) keep stdout; the summary is the machine-readable result of a run.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
from typing import Any

import orjson

log = logging.getLogger("queuelake")


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is now, not the one seen at set-up: a scheduler, a notebook
    or a test harness may swap (and close) streams between commands in one process. A write that
    fails anyway is dropped: logging's default would print a traceback of the exception being
    handled, whose source lines and messages may hold what the log line itself had redacted."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        pass


def setup_logging(level: int = logging.INFO) -> None:
    if log.handlers:
        if level < log.level:  # --debug after the first call
            log.setLevel(level)
        return
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False


def _default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def emit_summary(summary: dict[str, Any]) -> None:
    """Print the summary as one compact JSON line on stdout (the last line a command prints)."""
    sys.stdout.write(orjson.dumps(summary, default=_default, option=orjson.OPT_NON_STR_KEYS).decode() + "\n")
    sys.stdout.flush()

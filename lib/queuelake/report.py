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


def setup_logging(level: int = logging.INFO) -> None:
    if log.handlers:
        if level < log.level:  # --debug after the first call
            log.setLevel(level)
        return
    handler = logging.StreamHandler(sys.stderr)
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

"""A process-wide "please stop" flag, set by SIGTERM (what Airflow and Databricks send on cancel).

Why a flag and not an exception: a drain must stop at a batch boundary, after the batch in hand is
claimed and committed, so nothing is half-done. Long loops ask ``requested()`` between units of work.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

_event = threading.Event()
# the command's own SIGTERM/SIGINT handlers (cli._sigterm), to put back where a library replaced them
_handlers: dict[int, Callable[[int, Any], Any]] = {}


def request() -> None:
    """Ask every loop of this process to stop at its next boundary."""
    _event.set()


def requested() -> bool:
    return _event.is_set()


def reset() -> None:
    """For tests and long-lived processes that run several commands."""
    _event.clear()


def keep_handlers(handlers: dict[int, Callable[[int, Any], Any]]) -> None:
    """Remember the command's signal handlers (``{}``: the command has ended)."""
    _handlers.clear()
    _handlers.update(handlers)


def restore_handlers() -> None:
    """Put the command's signal handlers back. Why: pyspark's SparkContext installs its own SIGINT
    handler when it starts (cancel every job, raise KeyboardInterrupt), so Ctrl-C in a Spark stage skipped
    the batch boundary, the counts and the ``runs`` row that SIGTERM gave (issue 59). Called once a session
    is up (``spark.get_spark``); handlers can only be set from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, handler in _handlers.items():
        if signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)

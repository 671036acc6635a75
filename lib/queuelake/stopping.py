"""A process-wide "please stop" flag, set by SIGTERM (what Airflow and Databricks send on cancel).

Why a flag and not an exception: a drain must stop at a batch boundary, after the batch in hand is
claimed and committed, so nothing is half-done. Long loops ask ``requested()`` between units of work.
"""

from __future__ import annotations

import threading

_event = threading.Event()


def request() -> None:
    """Ask every loop of this process to stop at its next boundary."""
    _event.set()


def requested() -> bool:
    return _event.is_set()


def reset() -> None:
    """For tests and long-lived processes that run several commands."""
    _event.clear()

"""The ledger's count of a round's batches once the Spark tasks cancelled under it have ended.

Why: a cancelled task's Python worker goes on until Spark closes its connection or kills it (its
monitor looks every 2 s, then waits ``spark.python.task.killTimeout``), and a batch it was sending may
commit meanwhile. A summary counted at once said 18 batches where the ledger held 19 a moment later (a
review): the count is taken once it has stood still for longer than that.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from queuelake.report import log

MONITOR_SECONDS = 2.0  # how often Spark's monitor of a task's Python worker looks at the task


def settled(count: Callable[[], int], kill_timeout: float, what: str, most: float = 60.0, every: float = 0.5) -> int:
    """``count()`` once it has not changed for ``MONITOR_SECONDS + kill_timeout + 1`` seconds (at most
    ``most`` seconds in all: then its last value)."""
    quiet = MONITOR_SECONDS + kill_timeout + 1.0
    log.info("%s: waiting for the cancelled Spark tasks to end (the ledger still for %.0fs)", what, quiet)
    started = time.monotonic()
    last, since = count(), time.monotonic()
    while time.monotonic() - since < quiet and time.monotonic() - started < most:
        time.sleep(every)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
    return last

"""A heartbeat for long Spark work: a log line every few seconds saying how far the running jobs are.

Why: a stage's own lines come per slice or per table, and one Spark job over half a million rows can
run for a minute with nothing in the log (issue 59: ``bodies`` on 1.5M rows logged nothing for 70 s),
which at 3 a.m. looks like a hang. Spark's status tracker knows the tasks of the active stages: done
of all, cheap to ask from a thread.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from queuelake import report
from queuelake.report import log

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EVERY_SECONDS = 10.0


def tasks(spark: SparkSession) -> tuple[int, int]:
    """(tasks done, tasks in all) of the stages running now."""
    tracker = spark.sparkContext.statusTracker()
    done = total = 0
    for stage_id in tracker.getActiveStageIds():
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            done += info.numCompletedTasks
            total += info.numTasks
    return done, total


@contextlib.contextmanager
def heartbeat(
    spark: SparkSession, what: str, rows: int, every: float = EVERY_SECONDS, unit: str = "row(s)"
) -> Iterator[None]:
    """While the block runs, log ``what`` every ``every`` seconds: time so far, the ``rows`` it is taking
    (counted in ``unit``: rows, batches), and the running stages' tasks done of all."""

    def beat(took: float, ended: threading.Event) -> None:
        try:
            done, total = tasks(spark)
        except Exception:  # noqa: BLE001 - a heartbeat never fails the work it reports on
            done = total = 0
        if ended.is_set():  # the block ended while the tracker was asked (the join gives up after 1 s)
            return
        running = f"; Spark tasks {done}/{total} of the running stage(s)" if total else ""
        log.info("%s: working for %.0fs on %d %s%s", what, took, rows, unit, running)

    with report.every(every, beat, "queuelake-heartbeat"):
        yield

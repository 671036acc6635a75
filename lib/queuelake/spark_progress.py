"""A heartbeat for long Spark work: a log line every few seconds saying how far the running jobs are.

Why: a stage's own lines come per slice or per table, and one Spark job over half a million rows can
run for a minute with nothing in the log (issue 59: ``bodies`` on 1.5M rows logged nothing for 70 s),
which at 3 a.m. looks like a hang. Spark's status tracker knows the tasks of the active stages: done
of all, cheap to ask from a thread.
"""

from __future__ import annotations

import contextlib
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from queuelake import report, stopping
from queuelake.errors import QueuelakeError
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
        except BaseException:  # noqa: BLE001 - a heartbeat never fails the work it reports on
            # BaseException too: a lazy session started by this thread's first beat raised the stop asked
            # meanwhile (``Interrupted``) as an uncaught thread exception with its traceback (a review);
            # the command's own thread takes the stop
            done = total = 0
        if ended.is_set():  # the block ended while the tracker was asked (the join gives up after 1 s)
            return
        running = f"; Spark tasks {done}/{total} of the running stage(s)" if total else ""
        log.info("%s: working for %.0fs on %d %s%s", what, took, rows, unit, running)

    with report.every(every, beat, "queuelake-heartbeat"):
        yield


@contextlib.contextmanager
def cancelled_on_stop(spark: SparkSession, what: str, every: float = 0.25) -> Iterator[None]:
    """While the block runs Spark tasks that send batches (publish's and replay's executors), a stop
    asked (a first SIGTERM, Ctrl-C, SIGHUP) cancels them. Why: the tasks never see the command's stop; a
    round in one row group was sent to its end after it, two minutes past the signal and a scheduler's
    grace (a review). Each batch is its own transaction: a cancelled task's open batch rolls back, and
    the ledger holds the ones sent, which the next run skips; a caller counts them once the tasks have
    ended (``pipeline.batches.settle``).

    A stop asked before the block (while the session started: 10-25 s on a busy machine) raises
    ``StoppedBeforeTasks`` at once, nothing submitted. A stop asked inside it cancels the tagged jobs at
    every tick until the block ends, not once: a job submitted after the first cancel ran to its end (a
    review: every batch sent 10-30 s after the signal, the summary saying interrupted)."""
    context = spark.sparkContext  # starts a lazy session: the stop may come meanwhile
    if stopping.requested():
        raise StoppedBeforeTasks(f"{what}: stopped as asked before its Spark tasks were submitted; nothing sent")
    tag = f"queuelake-send-{uuid.uuid4().hex[:12]}"
    said = f"{what}: stopping as asked: its Spark tasks are cancelled (a batch in hand rolls back)"
    watch = cancelling(stopping.requested, lambda: context.cancelJobsWithTag(tag), said)
    context.addJobTag(tag)
    context.setInterruptOnCancel(True)
    try:
        with report.every(every, watch, "queuelake-stop-watch"):
            yield
    finally:
        with contextlib.suppress(Exception):
            context.setInterruptOnCancel(False)
            context.removeJobTag(tag)


def cancelling(
    asked: Callable[[], bool], cancel: Callable[[], None], said: str
) -> Callable[[float, threading.Event], None]:
    """A watch for ``report.every``: once ``asked()``, ``said`` is logged once and ``cancel()`` called at
    every tick until the block ends. At every tick, not once: a job a thread submits after one cancel is
    cancelled at the next (a review: a job submitted after the only cancel ran to its end)."""
    told = threading.Event()

    def watch(took: float, ended: threading.Event) -> None:
        if not asked() or ended.is_set():
            return
        if not told.is_set():
            told.set()
            log.warning("%s", said)
        with contextlib.suppress(Exception):  # a JVM already gone: nothing left to cancel
            cancel()

    return watch


class StoppedBeforeTasks(QueuelakeError):
    """A stop asked before a send's Spark tasks were submitted: none ran. An ``Exception`` (not the stop
    itself), so the caller's stop path counts the ledger and reports ``interrupted`` as after a cancel."""


KILL_TIMEOUT = "spark.python.task.killTimeout"


def kill_timeout(spark: SparkSession) -> float:
    """The session's ``spark.python.task.killTimeout`` in seconds."""
    try:
        return kill_timeout_seconds(spark.sparkContext.getConf().get(KILL_TIMEOUT))
    except Exception:  # noqa: BLE001 - a JVM gone: Spark's default
        return 2.0


def kill_timeout_seconds(value: str | None) -> float:
    """Spark's ``spark.python.task.killTimeout`` (a time in milliseconds unless it names its unit; 2s when
    unset) in seconds; 2 when it cannot be read."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min)?\s*", value or "2s")
    if match is None:
        return 2.0
    number, unit = float(match[1]), match[2] or "ms"
    return number / 1000 if unit == "ms" else number * 60 if unit in ("m", "min") else number

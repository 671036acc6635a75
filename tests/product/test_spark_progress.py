"""Long Spark work logs a heartbeat: the stage, time so far, rows, and the running stages' tasks done
of all (issue 59: bodies on 1.5M rows logged nothing for 70 s). Real local Spark."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from queuelake.report import log
from queuelake.spark_progress import heartbeat

pytestmark = pytest.mark.slow


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_running_job_is_reported_while_it_runs(spark) -> None:
    lines = _Lines()
    log.addHandler(lines)
    level = log.level
    log.setLevel(logging.INFO)
    try:
        with heartbeat(spark, "bodies slice 2/5", 500_000, every=0.3):
            spark.sparkContext.parallelize(range(4), 4).foreach(lambda _: time.sleep(1.0))
        beats = list(lines.lines)
        time.sleep(0.7)
        assert lines.lines == beats  # it stops with the block
    finally:
        log.removeHandler(lines)
        log.setLevel(level)
    assert beats, "no heartbeat during a 2 s job"
    assert all(b.startswith("bodies slice 2/5: working for ") and "500000 row(s)" in b for b in beats)
    assert any("Spark tasks" in b and "/4 of the running stage(s)" in b for b in beats), beats


def test_no_heartbeat_after_its_block_when_the_tracker_answers_late(monkeypatch: pytest.MonkeyPatch) -> None:
    """The block ends while a beat is asking Spark's status tracker, and the tracker answers only after
    the block's wait for the beat (1 s) gave up, as a loaded JVM may: that beat logs nothing."""
    from queuelake import spark_progress

    asked, answer = threading.Event(), threading.Event()

    def late_tasks(spark: object) -> tuple[int, int]:
        asked.set()
        answer.wait(60)
        return 1, 4

    monkeypatch.setattr(spark_progress, "tasks", late_tasks)
    lines = _Lines()
    log.addHandler(lines)
    level = log.level
    log.setLevel(logging.INFO)
    try:
        with heartbeat(None, "bodies slice 1/1", 10, every=0.01):  # type: ignore[arg-type]
            assert asked.wait(60)
        beats = [t for t in threading.enumerate() if t.name == "queuelake-heartbeat"]
        answer.set()
        for beat in beats:
            beat.join(60)
    finally:
        log.removeHandler(lines)
        log.setLevel(level)
    assert lines.lines == []


def test_a_stop_asked_before_a_sends_tasks_submits_nothing(spark) -> None:
    """A stop asked while the session started (10-25 s on a busy machine): the tasks were submitted and
    every batch sent after the signal (a review). Nothing is submitted now; the caller's stop path counts."""
    from queuelake import stopping
    from queuelake.spark_progress import StoppedBeforeTasks, cancelled_on_stop

    stopping.request()
    try:
        with pytest.raises(StoppedBeforeTasks, match="nothing sent"):
            with cancelled_on_stop(spark, "publish scores"):
                pytest.fail("the block ran after the stop")
    finally:
        stopping.reset()


def test_a_job_submitted_after_the_first_cancel_is_cancelled_too(spark) -> None:
    """The stop asked inside the block, before its job was submitted: the watcher's one cancel found no job,
    and the job then ran to its end (a review). It cancels at every tick until the block ends."""
    from queuelake import stopping
    from queuelake.spark_progress import cancelled_on_stop

    try:
        # a job let run would sleep its 60 s and return: raising is what says it was cancelled
        with pytest.raises(Exception, match="cancel"):  # noqa: PT011 - py4j's or pyspark's error, by version
            with cancelled_on_stop(spark, "replay r1", every=0.1):
                stopping.request()
                time.sleep(0.5)  # several ticks with no job to cancel
                spark.sparkContext.parallelize(range(2), 2).foreach(lambda _: time.sleep(60))
    finally:
        stopping.reset()

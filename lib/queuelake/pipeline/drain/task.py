"""One queue drained inside a Spark task (``drain.on: executors``): its drain lock, its workers
(receive, build, stage, claim) in the task's own Python process; the Delta commit is the driver's.

Why the task never commits to the journal: the journal keeps one writer per run. The claim table
already holds everything a commit needs (app id, version, staged files), so a worker's hand-over is
its claim's DB commit, and the driver's poller (``poller.py``) commits what it finds. The task only
waits for it: before receiving (what a killed attempt of this task left must land before a worker
reads its app id's last version, or a version would be claimed twice) and before it ends (so the
queue's lock is released only with all of this run's batches of the queue in the journal).

A task Spark retries after its Python worker was killed is a new drain of the queue: the old
worker's connections died with it, so its lock is free and its open DELETE rolled back; its claims
are committed by the driver's poller, which the retry waits for under the lock (``begin``).

Runs in Spark Python workers: everything it needs travels in ``QueueJob`` (pickled per task; the
config carries the resolved connection and storage options, as publish's tasks get them).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from queuelake.config import Config
from queuelake.context import resolved_transport
from queuelake.errors import DrainError
from queuelake.lake.engines import journal_engine, open_lake
from queuelake.pipeline.drain.budget import Budget
from queuelake.pipeline.drain.committer import Claimed
from queuelake.pipeline.drain.queue_drain import QueueDrain
from queuelake.pipeline.drain.receive import receive_driver
from queuelake.pipeline.drain.result import QueueResult
from queuelake.report import log
from queuelake.transport import claims, db, drivers, locks
from queuelake.transport.db import Connection
from queuelake.transport.tables import TableRef

POLL_SECONDS = 0.05  # a task's look at its claims while it waits for the driver's commit
# a worker claims at most this many batches ahead of the driver's commits (then waits for them)
MOST_AHEAD = 3
# how long a task waits for the driver to commit its claims before it gives up (the driver is gone,
# or its poller failed and could not cancel the job): the claims then wait for the next run
CLEARED_WITHIN_SECONDS = 300.0
# how often a waiting task asks whether the driver is still there (its claims poller's lock)
DRIVER_CHECK_SECONDS = 2.0


@dataclass(frozen=True)
class QueueJob:
    """What a queue's task needs: no Spark session, no lake handle (the task opens delta-rs on the
    journal's folder for staging)."""

    config: Config
    ref: TableRef
    workers: int
    max_messages: int | None
    deadline: float | None  # wall clock (time.time()): the driver's and the task's monotonic clocks differ
    log_level: int
    poller_lock: str  # the driver's claims poller holds it: a task that can take it knows the driver is gone


def drain_queue_task(job: QueueJob, partition: Iterator[Any]) -> Iterator[QueueResult]:
    """A Spark task: drain the job's queue under its lock, yield its result.

    The partition (one placeholder) is read to its end first: PySpark reuses a Python worker for the
    next task only when the task consumed its whole input; otherwise every queue's task paid a fresh
    worker's start and imports (0.5-0.8 s, against 0.02 s for a small queue's drain)."""
    for _ in partition:
        pass
    if not log.handlers:  # a fresh Python worker: progress to its stderr (the executor's log)
        from queuelake.report import setup_logging

        setup_logging(job.log_level)
    config = job.config
    log.info("drain %s: a Spark task, python %s, pid %d", job.ref.canonical, sys.executable, os.getpid())
    # delta-rs on the journal's folder, for staging and each app id's last version; no names registered
    lake_config = dataclasses.replace(config.lake, engine="delta-rs", catalog=None, schema=None)
    journal = journal_engine(open_lake(lake_config))
    transport = resolved_transport(config)
    through_adbc = receive_driver(config) == drivers.ADBC.name and transport.connection
    shared = db.SharedAdbc(transport).start() if through_adbc else None
    deadline = time.monotonic() + (job.deadline - time.time()) if job.deadline is not None else None
    try:
        drain = QueueDrain(
            config,
            journal,
            job.ref,
            Budget(config.drain.batch_size, job.max_messages, deadline),
            shared,
            job.workers,
            TaskCommitter(config, job.poller_lock),
        )
        yield drain.run()
    finally:
        if shared is not None:
            shared.close()


class TaskCommitter:
    """The ``Committer`` of a queue drained in a Spark task: the driver's poller commits the claims;
    this watches them go, on the queue's lock connection (the task opens no connection for it)."""

    def __init__(self, config: Config, poller_lock: str) -> None:
        self._claims_table = claims.claims_ref(config.transport)
        self._poller_lock = poller_lock
        self._conn: Connection | None = None
        self._queue = ""
        self._mutex = threading.Lock()  # the lock connection, shared by the queue's workers
        self._ahead: dict[str, list[int]] = defaultdict(list)  # per app id: versions claimed, not seen cleared

    def begin(self, conn: Connection, queue: str) -> int:
        """Wait (under the lock) until the driver has committed the claims a killed attempt left."""
        self._conn, self._queue = conn, queue
        left = len(self._claims())
        if left:
            log.info("drain %s: %d claim(s) of a killed attempt; waiting for the driver to commit them", queue, left)
            self._until(lambda found: not found, "the claims a killed attempt left")
        return left

    def submit(self, claimed: Claimed) -> None:
        ahead = self._ahead[claimed.app_id]
        ahead.append(claimed.version)
        if len(ahead) >= MOST_AHEAD:
            self._settle(claimed.app_id, MOST_AHEAD - 1)

    def wait(self, app_id: str) -> None:
        if self._ahead[app_id]:
            self._settle(app_id, 0)

    def _settle(self, app_id: str, at_most: int) -> None:
        """Until at most ``at_most`` of ``app_id``'s claims are still waiting for the driver."""

        def done(found: list[claims.Claim]) -> bool:
            still = {c.version for c in found if c.app_id == app_id}
            self._ahead[app_id] = [v for v in self._ahead[app_id] if v in still]
            return len(self._ahead[app_id]) <= at_most

        self._until(done, f"the batches of {app_id}")

    def _until(self, done: Any, what: str) -> None:
        give_up = time.monotonic() + CLEARED_WITHIN_SECONDS
        next_check = time.monotonic() + DRIVER_CHECK_SECONDS
        while not done(self._claims()):
            now = time.monotonic()
            if now >= give_up:
                raise DrainError(
                    f"drain {self._queue}: the driver did not commit {what} within {CLEARED_WITHIN_SECONDS:g}s; "
                    "their claims wait for the next run"
                )
            if now >= next_check:
                next_check = now + DRIVER_CHECK_SECONDS
                if self._driver_gone():
                    raise DrainError(
                        f"drain {self._queue}: the driver's claims poller is gone (its lock is free); "
                        f"{what} wait for the next run"
                    )
            time.sleep(POLL_SECONDS)

    def _driver_gone(self) -> bool:
        """Whether the driver's poller no longer holds its lock. Taking it keeps it on this task's lock
        connection, which the task closes as it ends (it raises right after)."""
        assert self._conn is not None, "begin() first"
        with self._mutex:
            return locks.try_lock(self._conn, self._poller_lock, what="the drain's claims poller")

    def _claims(self) -> list[claims.Claim]:
        assert self._conn is not None, "begin() first"
        with self._mutex:
            found = claims.of_queue(self._conn, self._claims_table, self._queue)
            self._conn.rollback()
        return found

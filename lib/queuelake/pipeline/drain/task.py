"""Queues drained inside a Spark task (``drain.on: executors``), one after another: each under its
drain lock, its workers (receive, build, stage, claim) in the task's own Python process; the Delta
commit is the driver's. A task drains one big queue, or several small ones (``executors.plan_jobs``),
opening the journal and ADBC once for all of them; small queues share batches (``small_queues.py``).

Why the task never commits to the journal: the journal keeps one writer per run. The claim table
already holds everything a commit needs (app id, version, staged files), so a worker's hand-over is
its claim's DB commit, and the driver's poller (``poller.py``) commits what it finds. The task only
waits for it: before receiving (what a killed attempt of this task left must land before a worker
reads its app id's last version, or a version would be claimed twice) and before it ends (so the
queue's lock is released only with all of this run's batches of the queue in the journal).

A task Spark retries after its Python worker was killed is a new drain of its queues: the old
worker's connections died with it, so its lock is free and its open DELETE rolled back; its claims
are committed by the driver's poller, which the retry waits for under the lock (``begin``). The
queues the killed attempt had finished are empty by then: the retry finds nothing to receive.

Runs in Spark Python workers: everything it needs travels in ``QueueJob`` (pickled per task; its
``TaskSetup`` carries the queue database with its resolved connection, the drain's settings and the
lake's storage options, as publish's tasks get them).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from queuelake.allocator import keep_freed_memory
from queuelake.config_sections import DrainConfig, LakeConfig
from queuelake.errors import DrainError
from queuelake.lake.engines import journal_engine, open_lake
from queuelake.lake.port import JournalLake
from queuelake.pipeline.drain import small_queues
from queuelake.pipeline.drain.budget import Budget
from queuelake.pipeline.drain.claims import Resolved
from queuelake.pipeline.drain.committer import Claimed
from queuelake.pipeline.drain.queue_drain import QueueDrain
from queuelake.pipeline.drain.receive import receive_connection, receive_driver
from queuelake.pipeline.drain.result import QueueResult
from queuelake.pipeline.drain.sessions import SessionPool, lock_session
from queuelake.report import log
from queuelake.transport import claims, db, drivers, locks
from queuelake.transport.database import QueueDatabase
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef

POLL_SECONDS = 0.05  # a task's look at its claims while it waits for the driver's commit
# a worker claims at most this many batches ahead of the driver's commits (then waits for them)
MOST_AHEAD = 3
# how long a task waits for the driver to commit its claims before it gives up (the driver is gone,
# or its poller failed and could not cancel the job): the claims then wait for the next run
CLEARED_WITHIN_SECONDS = 300.0
# how often a waiting task asks whether the driver is still there (its claims poller's lock)
DRIVER_CHECK_SECONDS = 2.0


@dataclass(frozen=True)
class TaskSetup:
    """What a drain task (a Spark task, a local process) drains with: the queue database the command
    opened, the drain's settings, and the lake's (the task opens delta-rs on the journal's folder)."""

    database: QueueDatabase
    settings: DrainConfig
    lake: LakeConfig


@dataclass(frozen=True)
class QueueJob:
    """What a task needs of one of its queues: no Spark session, no lake handle (the task opens
    delta-rs on the journal's folder for staging)."""

    setup: TaskSetup
    ref: TableRef
    workers: int
    max_messages: int | None
    deadline: float | None  # wall clock (time.time()): the driver's and the task's monotonic clocks differ
    log_level: int
    poller_lock: str  # the driver's claims poller holds it: a task that can take it knows the driver is gone
    depth: int | None = None  # the driver's estimate of the queue's rows (``QueueDrain``)


def drain_queues_task(
    jobs: tuple[QueueJob, ...], partition: Iterator[Any], opened: TaskResources | None = None
) -> Iterator[QueueResult]:
    """A Spark task: drain the job's queues one after another, each under its drain lock; yield each
    queue's result.

    What a process opens once serves every queue of the task: delta-rs on the journal's folder, the
    ADBC database, and one lock connection that takes each queue's drain lock in turn and keeps it
    until the task ends. A queue's workers' receive connections are given back (rolled back) before
    the next queue starts, which takes them (``sessions.SessionPool``), so the task never holds more
    than one queue's connections (plus its locks, all on one).

    A queue's lock is released only once the driver has committed every batch its workers claimed,
    as when a task drained one queue, but the task does not wait for that between queues: it starts
    the next queue while the driver commits the last one's batches, still holding the last one's
    lock, and at its end waits until no claim of any of its queues is left, then closes the lock
    connection (``TaskCommitter.finish``). A task killed meanwhile loses its locks with its
    connection; its retry waits under each lock for the claims left (``begin``), as before.

    The partition (one placeholder) is read to its end first: PySpark reuses a Python worker for the
    next task only when the task consumed its whole input; otherwise every task paid a fresh worker's
    start and imports (0.5-0.8 s, against 0.02 s for a small queue's drain).

    ``opened``: the journal and ADBC database of a process that runs several jobs (``processes.py``),
    kept open from one job to the next; without it the task opens its own and closes them as it ends
    (a Spark Python worker may then idle for long: it must not hold a connection meanwhile)."""
    for _ in partition:
        pass
    if not jobs:
        return
    first = jobs[0]
    if not log.handlers:  # a fresh Python worker: progress to its stderr (the executor's log)
        from queuelake.report import setup_logging

        setup_logging(first.log_level)
    setup = first.setup
    database, settings = setup.database, setup.settings
    keep_freed_memory()  # this process's batches reuse each other's pages (allocator.py)
    log.info("drain: a task of %d queue(s), python %s, pid %d", len(jobs), sys.executable, os.getpid())
    resources = opened or TaskResources.open(setup)
    journal, shared = resources.journal, resources.shared
    committer = TaskCommitter(database, first.poller_lock)
    # the workers' receive sessions, kept from one queue to the next (never more than one queue's)
    driver = receive_driver(database, settings)
    sessions = SessionPool(max(j.workers for j in jobs), lambda _: receive_connection(database, driver, shared, 0))
    try:
        # in autocommit, as the driver's lock sessions: its reads cost no BEGIN and ROLLBACK round trips
        with lock_session(database, settings.statement_timeout_seconds) as lock_conn:
            drains = [_queue_drain(job, journal, shared, driver, committer, sessions) for job in jobs]
            # small queues together: one batch, one claim for several (``small_queues.py``)
            for unit in small_queues.plan(drains, settings.batch_size):
                if len(unit) == 1:
                    log.info("drain %s: a task, python %s, pid %d", unit[0].ref.canonical, sys.executable, os.getpid())
                    yield unit[0].run(lock_conn)
                else:
                    together = small_queues.SmallQueues(database, settings, journal, unit, committer, sessions)
                    yield from together.run(lock_conn)
                if committer.driver_gone:
                    # nobody commits what the next queues would claim: end the task (its results are
                    # lost with the driver; the claims made so far wait for the next run)
                    gone = unit[-1].ref.canonical
                    raise DrainError(f"drain {gone}: the driver's claims poller is gone; the task stops")
            committer.finish()  # every queue's claims committed by the driver: now its lock may go
    finally:
        sessions.close()
        if opened is None:
            resources.close()


def _queue_drain(
    job: QueueJob,
    journal: JournalLake,
    shared: db.SharedAdbc | None,
    driver: str,
    committer: TaskCommitter,
    sessions: SessionPool,
) -> QueueDrain:
    """A job's queue as the task drains it: its budget's deadline on this process's clock."""
    deadline = time.monotonic() + (job.deadline - time.time()) if job.deadline is not None else None
    return QueueDrain(
        job.setup.database,
        job.setup.settings,
        journal,
        job.ref,
        Budget(job.setup.settings.batch_size, job.max_messages, deadline),
        shared,
        driver,
        job.workers,
        committer,
        sessions,
        depth=job.depth,
    )


@dataclass
class TaskResources:
    """What a task opens once for all its queues: delta-rs on the journal's folder (staging, each app
    id's last version; no names registered) and, receiving through ADBC, the ADBC database (opened in
    the background: ``SharedAdbc.start``)."""

    journal: JournalLake
    shared: db.SharedAdbc | None

    @classmethod
    def open(cls, setup: TaskSetup) -> TaskResources:
        lake_config = dataclasses.replace(setup.lake, engine="delta-rs", catalog=None, schema=None)
        journal = journal_engine(open_lake(lake_config))
        database = setup.database
        through_adbc = receive_driver(database, setup.settings) == drivers.ADBC.name and database.reachable
        return cls(journal, database.shared_adbc() if through_adbc else None)

    def close(self) -> None:
        if self.shared is not None:
            self.shared.close()


class TaskCommitter:
    """The ``Committer`` of the queues a Spark task drains: the driver's poller commits the claims;
    this watches them go, on the task's lock connection (the task opens no connection for it).

    A queue's workers do not wait for their last batches' commit as they end (``wait`` returns at
    once): the task holds the queue's lock on and drains its next queue meanwhile; ``finish`` waits
    for every queue's claims before the task releases its locks."""

    def __init__(self, database: QueueDatabase, poller_lock: str) -> None:
        self._claims_table = database.claims
        self._poller_lock = poller_lock
        self._conn: Connection | None = None
        self._queue = ""
        self._drained: list[str] = []  # the queues begun, whose locks the task holds
        self._ahead: dict[str, list[int]] = defaultdict(list)  # per app id: versions claimed, not seen cleared
        self.driver_gone = False  # set once the driver's poller lock was found free

    def begin(self, conn: Connection, queue: str) -> Resolved:
        """Wait (under the lock) until the driver has committed the claims a killed attempt left: the
        driver's poller counts their rows in the queue's figures (``count_what_the_driver_committed``)."""
        self._conn, self._queue = conn, queue
        self._drained.append(queue)
        left = len(self._claims(queue))
        if left:
            log.info("drain %s: %d claim(s) of a killed attempt; waiting for the driver to commit them", queue, left)
            self._until(lambda: not self._claims(queue), "the claims a killed attempt left")
        return Resolved(left)

    def finish(self) -> None:
        """Until the driver has committed every claim of the queues begun (their locks are held)."""
        if self._drained:
            self._queue = ", ".join(self._drained)
            self._until(self._all_cleared, "the batches claimed")

    def submit(self, claimed: Claimed) -> None:
        ahead = self._ahead[claimed.app_id]
        ahead.append(claimed.version)
        if len(ahead) >= MOST_AHEAD:
            self._settle(claimed.queue, claimed.app_id, MOST_AHEAD - 1)

    def wait(self, app_id: str) -> None:
        """Returns at once: the task's ``finish`` waits for every queue's batches before its locks go."""

    def check(self) -> None:
        """Nothing to ask: the driver's poller commits, and ``submit`` waits on what it cleared."""

    def _settle(self, queue: str, app_id: str, at_most: int) -> None:
        """Until at most ``at_most`` of ``app_id``'s claims (filed under ``queue``) are still waiting
        for the driver."""

        def done() -> bool:
            still = {c.version for c in self._claims(queue) if c.app_id == app_id}
            self._ahead[app_id] = [v for v in self._ahead[app_id] if v in still]
            return len(self._ahead[app_id]) <= at_most

        self._until(done, f"the batches of {app_id}")

    def _until(self, done: Callable[[], bool], what: str) -> None:
        give_up = time.monotonic() + CLEARED_WITHIN_SECONDS
        next_check = time.monotonic() + DRIVER_CHECK_SECONDS
        while not done():
            now = time.monotonic()
            if now >= give_up:
                raise DrainError(
                    f"drain {self._queue}: the driver did not commit {what} within {CLEARED_WITHIN_SECONDS:g}s; "
                    "their claims wait for the next run"
                )
            if now >= next_check:
                next_check = now + DRIVER_CHECK_SECONDS
                if self._driver_gone():
                    self.driver_gone = True
                    raise DrainError(
                        f"drain {self._queue}: the driver's claims poller is gone (its lock is free); "
                        f"{what} wait for the next run"
                    )
            time.sleep(POLL_SECONDS)

    def _driver_gone(self) -> bool:
        """Whether the driver's poller no longer holds its lock. Taking it keeps it on this task's lock
        connection, which the task closes as it ends (it raises right after)."""
        assert self._conn is not None, "begin() first"
        with self._conn.shared:  # the workers confirm their locks on it too
            return locks.try_lock(self._conn, self._poller_lock, what="the drain's claims poller")

    def _all_cleared(self) -> bool:
        """No claim of any queue begun left: one read of the claims table, however many queues (a task
        of 80 small queues read it once per queue, every poll, while it waited)."""
        assert self._conn is not None, "begin() first"
        drained = set(self._drained)
        with self._conn.shared:  # the workers confirm their locks on it too
            found = claims.every_claim(self._conn, self._claims_table)
            self._conn.rollback()
        return not any(c.queue in drained for c in found)

    def _claims(self, queue: str) -> list[claims.Claim]:
        assert self._conn is not None, "begin() first"
        with self._conn.shared:  # the workers confirm their locks on it too
            found = claims.of_queue(self._conn, self._claims_table, queue)
            self._conn.rollback()
        return found

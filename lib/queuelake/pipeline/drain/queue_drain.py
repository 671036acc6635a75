"""One queue's drain: under its drain lock, resolve the claims killed drains left, run the workers,
then say how it ended (backlog left, status, error)."""

from __future__ import annotations

import contextlib
import threading
import time

from queuelake import stopping
from queuelake.config_sections import DrainConfig
from queuelake.errors import DrainError, QueuelakeError, error_kind
from queuelake.lake.port import JournalLake
from queuelake.pipeline.drain.budget import Budget
from queuelake.pipeline.drain.committer import Committer
from queuelake.pipeline.drain.result import QueueResult
from queuelake.pipeline.drain.sessions import LOCK, SessionPool, lock_session
from queuelake.pipeline.drain.state import QueueState, drain_lock_name
from queuelake.pipeline.drain.worker import Worker
from queuelake.report import log
from queuelake.status import Status
from queuelake.transport import db, locks, queues, schema
from queuelake.transport.database import QueueDatabase
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef


class QueueDrain:
    """Drains one queue with N workers sharing a budget, under the queue's drain lock."""

    def __init__(
        self,
        database: QueueDatabase,
        settings: DrainConfig,
        lake: JournalLake,
        ref: TableRef,
        budget: Budget,
        receive: db.SharedAdbc | None,
        receive_driver: str,
        workers: int,
        committer: Committer,
        sessions: SessionPool | None = None,
        depth: int | None = None,
    ) -> None:
        self.database = database
        self.settings = settings
        self.workers = workers
        # the run's estimate of the queue's rows (None: unknown): a queue it found exists, and one of
        # a batch or less skips the first read of its newest row
        self.depth = depth
        self.ref = ref
        self.state = QueueState(database, settings, lake, ref, budget, receive, receive_driver, committer, sessions)
        self.result = self.state.result
        self.result.workers = self.workers
        self.locked = False  # whether ``begin`` took the queue's drain lock

    def run(self, lock_conn: Connection | None = None) -> QueueResult:
        """The drain, under the queue's lock taken on a connection of its own, closed at the end (which
        releases the lock) or given back to the run's sessions with the lock released, or on
        ``lock_conn``: a Spark task's, which keeps the locks of its queues until their claims are
        committed (``task.py``), or the one of small queues drained together (``small_queues.py``)."""
        self.state.start_clock()
        try:
            with contextlib.ExitStack() as stack:
                if lock_conn is None:
                    lock_conn = stack.enter_context(self._lock_session())
                if not self.begin(lock_conn):
                    return self.result
                self.finish(lock_conn, self.run_workers())
        except QueuelakeError as exc:  # the lock connection or the claim resolution failed
            self.fail(exc)
        self.stop_clock()
        return self.result

    def begin(self, lock_conn: Connection) -> bool:
        """Take the queue's lock on ``lock_conn`` and resolve the claims killed drains left, before
        anything is received (by the run's committer on the driver; in a Spark task, by the driver's
        poller, waited for). False, with the result skipped, when another drain holds the lock, or
        interrupted, when a stop came while it waited for a claim under way."""
        if not self._acquire(lock_conn):
            self.result.status = Status.SKIPPED
            self.result.error = f"another drain of {self.ref.canonical} is running (lock held)"
            log.warning("%s", self.result.error)
            return False
        self.locked = True
        self.state.lock_conn = lock_conn
        # a drain that held the lock before (its session died) may be committing a claim: wait for it
        try:
            locks.wait_for_claims(lock_conn, drain_lock_name(self.ref), self.ref.canonical, self._give_up_waiting)
        except DrainError as exc:
            if not stopping.requested():
                raise
            # stopped while waiting: the queue was interrupted, as one stopped between batches is
            self.result.status, self.result.error = Status.INTERRUPTED, str(exc)
            log.warning("%s", exc)
            return False
        if self.depth is None:  # the estimate did not find the table: say so clearly if it is gone
            schema.require_table(lock_conn, self.ref)
            lock_conn.rollback()
        resolved = self.state.committer.begin(lock_conn, self.ref.canonical)
        self.result.claims_resolved, self.result.rows_resolved = resolved.claims, resolved.rows
        self.state.progress.start(lock_conn, read=self.depth is None or self.depth > self.settings.batch_size)
        return True

    def _give_up_waiting(self) -> str | None:
        """Why the drain stops waiting before it receives anything: a stop, or its time box spent."""
        if stopping.requested():
            return "the drain was stopped"
        deadline = self.state.budget.deadline
        if deadline is not None and time.monotonic() >= deadline:
            return "the drain's time box (drain.max_seconds, --max-seconds) is spent"
        return None

    def run_workers(self) -> list[BaseException]:
        """The queue's workers, until its budget or rows run out; returns their errors."""
        errors: list[BaseException] = []
        if self.workers == 1 and threading.current_thread() is not threading.main_thread():
            # most of a system's queues, on the run's pool: no thread to start and join (on a
            # main thread, a signal's exception stays the run's, not the worker's error)
            self._worker_safe(0, errors)
        else:
            threads = [
                threading.Thread(target=self._worker_safe, args=(w, errors), daemon=True) for w in range(self.workers)
            ]
            for t in threads:
                t.start()
            for t in threads:
                stopping.join(t)
        return errors

    def fail(self, exc: BaseException) -> None:
        self.result.status = Status.FAILED
        self.result.error = str(exc)
        self.result.error_kind = error_kind(exc)
        log.error("drain of %s failed: %s", self.ref.canonical, exc)

    def stop_clock(self, seconds: float | None = None) -> None:
        """The queue's seconds and rate: since its start, or ``seconds`` (a small queue's share of the
        batch it was drained in: ``small_queues.SmallQueues``)."""
        seconds = time.monotonic() - self.state.started if seconds is None else seconds
        self.result.seconds = round(seconds, 3)
        self.result.rate = round(self.result.dequeued / self.result.seconds, 1) if self.result.seconds else 0.0

    def finish(self, lock_conn: Connection, errors: list[BaseException]) -> None:
        """The queue's backlog left, status and error. When every worker ended on a count of 0 rows
        (``Worker._emptied``, ``_settle``), that count is the backlog left: no peek, whose probe of the
        head steps over every index entry the drain just left dead. A worker that gave up waiting for
        the table's lock leaves it unknown: the peek would wait for the same lock once more."""
        if not errors and self.state.found_empty_by(self.workers):
            self.result.backlog_left = 0
        elif not any(getattr(e, "lock_timeout", False) for e in errors):
            try:
                self.result.backlog_left = queues.peek(lock_conn, self.ref)
                lock_conn.rollback()
            except QueuelakeError:
                pass
        if errors:
            self.result.status = Status.FAILED
            self.result.error = "; ".join(sorted({str(e) for e in errors}))
            self.result.error_kind = error_kind(errors[0])
        elif self.result.held_by_others or self.result.rows_without_seq:
            said = []
            if self.result.rows_without_seq:
                said.append(
                    f"{self.result.rows_without_seq} row(s) in {self.ref.canonical} have a NULL seq, which no"
                    " receive takes (a table not made by the transport): give them a seq or move them"
                )
            if self.result.held_by_others:
                said.append(
                    f"{self.result.held_by_others} row(s) remain in {self.ref.canonical} that this run could not "
                    f"claim: other sessions held them for over {self.settings.settle_seconds:g}s "
                    "(a competing receiver's long transaction, or a dead drain's statement still running)"
                )
            self.result.status = Status.INCOMPLETE
            self.result.error = "; ".join(said)
            log.warning("%s", self.result.error)
        elif stopping.requested():
            self.result.status = Status.INTERRUPTED

    def _lock_session(self) -> contextlib.AbstractContextManager[Connection]:
        """A session for the queue's lock: one of the run's kept sessions, given back with the lock
        released (after every worker's batches landed: ``run`` ends only then), else a new one."""
        if self.state.sessions is None:
            return lock_session(self.database, self.settings.statement_timeout_seconds)
        return self.state.sessions.session(LOCK, lambda conn: release_drain_lock(conn, self.ref))

    def _acquire(self, conn: Connection) -> bool:
        return take_drain_lock(conn, self.ref)

    def _worker_safe(self, worker: int, errors: list[BaseException]) -> None:
        try:
            Worker(self.state, worker).run()
        except BaseException as exc:  # reported in the summary; other workers stop claiming
            self.state.budget.stop()
            errors.append(exc)
            log.error("%s worker %d failed: %s", self.ref.canonical, worker, exc)


def take_drain_lock(conn: Connection, ref: TableRef) -> bool:
    """The queue's drain lock, held by ``conn``'s session until it closes; False when another holds it."""
    return locks.try_lock(conn, drain_lock_name(ref), what=ref.canonical)


def release_drain_lock(conn: Connection, ref: TableRef) -> None:
    """Release the queue's drain lock, keeping the session (``sessions.SessionPool``)."""
    locks.unlock(conn, drain_lock_name(ref), what=ref.canonical)

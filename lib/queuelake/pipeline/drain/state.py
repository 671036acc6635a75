"""What a queue's workers share: its settings and lake, the budget, the result they add to, the
progress line, and the count of committed claims that a settling worker waits on."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from queuelake.config_sections import DrainConfig
from queuelake.errors import QueuelakeError, TransportError
from queuelake.lake.port import JournalLake
from queuelake.pipeline.drain.budget import Budget
from queuelake.pipeline.drain.committer import Committer
from queuelake.pipeline.drain.progress import Progress
from queuelake.pipeline.drain.result import QueueResult
from queuelake.pipeline.drain.sessions import SessionPool
from queuelake.report import log
from queuelake.transport import db, locks, queues
from queuelake.transport.database import QueueDatabase
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef

# a start mark no seq passes: the drain takes the queue until it is empty (``start_mark``'s read failed)
NO_MARK = 2**63 - 1


def drain_lock_name(ref: TableRef) -> str:
    """The name of a queue's drain lock (``locks``): one drain per queue, across processes."""
    return "queuelake.drain:" + ref.canonical


class QueueState:
    """One queue's drain, as its workers see it."""

    def __init__(
        self,
        database: QueueDatabase,
        settings: DrainConfig,
        lake: JournalLake,
        ref: TableRef,
        budget: Budget,
        receive: db.SharedAdbc | None,
        receive_driver: str,
        committer: Committer,
        sessions: SessionPool | None = None,
    ) -> None:
        self.database = database
        self.settings = settings
        self.sessions = sessions  # the run's sessions kept between queues (driver mode), else None
        self.committer = committer  # the run's: claimed batches of every queue go to the journal together
        self.lake = lake
        self.ref = ref
        self.budget = budget
        self.claims_table = database.claims
        self.result = QueueResult(ref.canonical)
        self.started = time.monotonic()  # set again as the drain begins (``start_clock``)
        self.progress = Progress(ref, self.started)
        self.receive_driver = receive_driver  # the driver's name, resolved once by the run (or task)
        self.receive = receive  # the run's shared ADBC database, when the receive goes through ADBC
        self._lock = threading.Lock()
        self._claimed = threading.Condition(self._lock)  # notified whenever a worker's claim commits
        self._claims_committed = 0
        self._in_flight = 0  # batches received by a worker and not yet claimed or rolled back
        self._found_empty = 0  # workers that ended on a count of 0 rows left
        self.lock_conn: Connection | None = None  # the session holding the queue's drain lock, once taken
        self._mark: int | None = None  # the newest seq when the queue's drain began (``start_mark``)
        self._mark_read = False
        self._mark_said = False

    def start_mark(self, conn: Connection, received: int) -> int:
        """The newest seq as the queue's drain began (the progress line's first read, else read now, once
        per queue, by the first worker that goes on past its first batch; for a queue empty then, the
        worker's ``received`` seq, so that it ends at its next receive, on an empty queue or past rows
        sent since): a worker stops once a batch reaches past it, leaving rows sent since to the next
        run. Why: a queue
        whose senders add rows faster than a batch's round trip never counted 0, and a drain without
        ``max_seconds`` ran for good; ``run`` never reached its bodies, transform and publish, and the
        next scheduled run waited on the queue's lock (a review: 83,324 rows in 155 s of a queue taking
        410 a second, every progress line "about 0 left")."""
        with self._lock:
            if not self._mark_read:
                first = self.progress.newest_at_start()
                if first is not None:
                    (self._mark,) = first
                else:
                    self._mark = self._newest_or_none_to_mark(conn)
                self._mark_read = True
            return received if self._mark is None else self._mark

    def _newest_or_none_to_mark(self, conn: Connection) -> int | None:
        """The newest seq now; when that read fails, no mark (the drain goes on until the queue is empty,
        as before marks): a failed read of an estimate is not the queue's failure (a review: it failed the
        worker and the queue, where the progress line's own read is guarded)."""
        try:
            newest = queues.newest_seq(conn, self.ref)
            conn.rollback()
        except QueuelakeError as exc:
            log.info(
                "%s: the newest seq could not be read (%s); the drain goes on until the queue is empty",
                self.ref.canonical,
                exc,
            )
            with contextlib.suppress(Exception):
                conn.rollback()
            return NO_MARK
        return newest

    def passed_mark(self, mark: int) -> None:
        """A worker's batch reached past ``start_mark``: said once per queue."""
        with self._lock:
            said, self._mark_said = self._mark_said, True
        if not said:
            log.info(
                "%s: every row present as its drain began is taken (up to seq %d); rows sent since are left"
                " to the next run",
                self.ref.canonical,
                mark,
            )

    def confirm_lock(self, claim: Connection | None = None) -> None:
        """Before a batch's claim commits: the session holding the queue's drain lock still answers.
        Why: the lock is that session's, and a terminated or timed-out session (a DBA's
        ``idle_session_timeout``: the lock's session idles while the workers drain) freed it; a second
        drain could then take the queue beside this one, under the same application ids, and a batch of
        one whose version the other had committed was skipped as journalled already. Raises
        ``TransportError``: this worker claims nothing more, and what it claimed lands. ``claim``: the
        claim's transaction, marked under way first (``locks.mark_claim``): a drain that takes the lock
        after this confirmation waits for that transaction to end (``locks.wait_for_claims``)."""
        conn = self.lock_conn
        if conn is None:
            return
        if claim is not None:
            locks.mark_claim(claim, drain_lock_name(self.ref), what=self.ref.canonical)
        with conn.shared:  # one statement at a time on it: this queue's workers, a task's committer
            try:
                locks.confirm_held(conn, what=f"the drain lock of {self.ref.canonical}")
            except TransportError as exc:
                raise TransportError(
                    f"drain {self.ref.canonical}: its lock went with its database connection ({locks.reason(exc)}): "
                    "another drain may take the queue now, so this one claims nothing more; what it claimed lands"
                ) from None

    def found_empty(self) -> None:
        """A worker ends: it counted 0 rows left in the queue."""
        with self._lock:
            self._found_empty += 1

    def found_empty_by(self, workers: int) -> bool:
        """Whether every one of ``workers`` ended on a count of 0 rows left."""
        with self._lock:
            return self._found_empty >= workers

    def start_clock(self) -> None:
        """The queue's drain begins now: its seconds and rate count from here, not from when the run
        planned it (a queue that waited for its connections behind 400 others reported 8 s and
        125 msg/s for a drain of 30 ms)."""
        self.started = time.monotonic()
        self.progress = Progress(self.ref, self.started)

    def add_batch(self, got: int, counts: dict[str, int]) -> int:
        """Count a claimed batch into the result; returns the messages dequeued so far."""
        with self._lock:
            r = self.result
            r.dequeued += got
            r.batches += 1
            for k, v in counts.items():
                setattr(r, k, getattr(r, k) + v)
            return r.dequeued

    def held_by_others(self, held: int) -> None:
        with self._lock:
            self.result.held_by_others = max(self.result.held_by_others, held)

    def without_seq(self, rows: int) -> None:
        with self._lock:
            self.result.rows_without_seq = max(self.result.rows_without_seq, rows)

    @contextlib.contextmanager
    def batch_in_flight(self) -> Iterator[None]:
        """Around a batch received and not yet claimed (or rolled back): its rows are locked by this
        drain, which a sibling's settling must not take for another session's."""
        with self._lock:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._claimed:
                self._in_flight -= 1
                self._claimed.notify_all()

    def batches_in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def claims_committed(self) -> int:
        with self._lock:
            return self._claims_committed

    def claim_committed(self) -> None:
        with self._claimed:
            self._claims_committed += 1
            self._claimed.notify_all()

    def wait_for_claim(self, seen: int, timeout: float) -> None:
        """Until any worker commits a claim after ``seen`` of them had, or ``timeout`` seconds."""
        with self._claimed:
            self._claimed.wait_for(lambda: self._claims_committed != seen, timeout=timeout)

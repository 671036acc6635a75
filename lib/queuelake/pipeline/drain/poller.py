"""The driver's journal writer while Spark tasks drain queues (``drain.on: executors``): it polls
the claims table and group-commits what the tasks claimed, then clears those claims.

Why polling the claims table: the tasks run in other processes, on other machines; the claim row is
their hand-over, durable and complete (app id, version, staged files), so the driver needs no
channel but the database it already reads. One thread, one connection, one journal writer per run.

Order per app id is safe: a worker commits its claims one by one in version order, and a poll reads
every claim in one statement, so a claim seen at version N means N-1 was seen in the same read or
was already cleared. Only the claims of queues whose job is running (``watch``) are committed:
another run may drain a queue once this run's task released its lock. A job's queues are watched
for the whole job, also before its task takes a queue's lock (a task drains its queues in turn): a
claim found then is another run's, and is landed once as below. In the moment between a
killed attempt and its retry, the lock is free and another run could resolve the same claims: both
commits go through the lake's exactly-once group commit (versions already in the log are left out,
conflicting commits retried from a fresh load), so a batch lands once whoever commits it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection

from queuelake.errors import DrainError
from queuelake.lake.files import StagedFiles
from queuelake.lake.port import JournalLake
from queuelake.pipeline.drain.claims import outcomes, shares
from queuelake.pipeline.drain.committer import MOST_PER_GROUP, Claimed, land_group
from queuelake.pipeline.journal.schema import MESSAGES
from queuelake.report import log
from queuelake.transport import claims, locks
from queuelake.transport.database import QueueDatabase
from queuelake.transport.db import Connection

# idle between two reads of the claims table that found nothing: the longer, the more batches one
# group commit carries (each commit costs in proportion to the journal's files, whatever it carries)
POLL_SECONDS = 0.2


class ClaimsPoller:
    """Started for a run's Spark jobs, closed after them. ``watch`` a job's queues before its task
    starts, ``release`` them after the task ended (the claims its last attempt left are committed first)."""

    def __init__(
        self,
        database: QueueDatabase,
        journal: JournalLake,
        interval: float,
        on_failure: Callable[[BaseException], None],
    ) -> None:
        """``interval``: ``drain.commit_interval_seconds``, at least this long between two polls that found claims."""
        # held by the poller's connection while it runs: a task that can take it knows the driver is
        # gone (its process killed: the server released the lock with the connection) and stops
        # waiting for commits that will never come, instead of holding its connections for minutes
        self.lock_name = f"queuelake.drain.poller:{uuid.uuid4().hex}"
        self._locked = threading.Event()
        self._database = database
        self._journal = journal
        self._on_failure = on_failure
        self._claims_table = database.claims
        self._watched: Counter[str] = Counter()
        self._started = 0  # polls started
        self._cycles = 0  # polls completed (one at a time: poll n is done when this reaches n)
        self._releasing = 0  # releases waiting for a poll: the poller does not idle meanwhile
        self._closed = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="drain-claims-poller", daemon=True)
        self._interval = float(interval)
        self.error: BaseException | None = None
        self.commits = 0
        self.batches = 0
        self.largest_group = 0
        self.rows: Counter[str] = Counter()  # per queue: the rows of the claims this run committed
        self.queue_batches: Counter[str] = Counter()  # per queue: those claims
        # per queue: their rows by outcome (None once a claim without them was committed)
        self.outcomes: dict[str, Counter[str] | None] = {}

    def start(self) -> ClaimsPoller:
        """Start polling; returns once the poller holds its lock (or failed), before any task runs."""
        self._thread.start()
        self._locked.wait()
        return self

    def watch(self, queue: str) -> None:
        with self._changed:
            self._watched[queue] += 1
            self._changed.notify_all()

    def release(self, queues: Collection[str]) -> None:
        """Stop watching ``queues`` (a job's) once a whole poll that began after this call is done: a
        task that died left claims, and they are committed now rather than by the next run.

        A job's queues go together, and the poller does not idle while a release waits (it does wait
        out ``drain.commit_interval_seconds`` after a poll that found claims). Released one by one,
        each after up to two idle polls, a job of 25 small queues held its run 10 s after its task had
        ended, and 500 queues of 1,000 on executors took 58 s; 24 s since."""
        if isinstance(queues, str):  # one queue's name would be taken letter by letter
            raise TypeError(f"release takes a collection of queue names, not the string {queues!r}")
        with self._changed:
            until = self._started + 1  # the next poll to start begins after this call
            self._releasing += 1
            self._changed.notify_all()
            try:
                self._changed.wait_for(lambda: self._cycles >= until or self.error is not None or self._closed)
            finally:
                self._releasing -= 1
            for queue in queues:
                self._watched[queue] -= 1
                if self._watched[queue] <= 0:
                    del self._watched[queue]

    def watched(self) -> set[str]:
        """The queues whose claims the poller commits now."""
        with self._changed:
            return set(self._watched)

    def close(self) -> None:
        """Stop polling, then checkpoint the journal where one is due (``finish_staged``)."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._thread.join()
        if self.commits:
            self._journal.finish_staged(MESSAGES)

    def _run(self) -> None:
        try:
            with self._database.connect("queuelake-drain-commit") as conn:
                if not locks.try_lock(conn, self.lock_name, what="the drain's claims poller"):
                    raise DrainError(f"the claims poller's lock {self.lock_name} is held by another session")
                self._locked.set()
                while True:
                    with self._changed:
                        if self._closed:
                            return
                        watched = set(self._watched)
                        self._started += 1
                    started = time.monotonic()
                    found = [c for c in claims.every_claim(conn, self._claims_table) if c.queue in watched]
                    conn.rollback()
                    # each app id's claims in version order: a group never holds N+1 without N before it
                    for start in range(0, len(found), MOST_PER_GROUP):
                        self._land(conn, found[start : start + MOST_PER_GROUP])
                    with self._changed:
                        self._cycles += 1
                        self._changed.notify_all()
                        if not found:  # idle, unless a job's release is waiting for the next poll
                            self._changed.wait_for(lambda: self._closed or self._releasing > 0, timeout=POLL_SECONDS)
                        elif self._interval:  # drain.commit_interval_seconds: the next poll's claims wait
                            until = started + self._interval
                            self._changed.wait_for(lambda: self._closed, timeout=until - time.monotonic())
        except BaseException as exc:  # the claims stay for the next run; the tasks are cancelled
            log.error("drain: the driver's journal commit failed; claimed batches wait for the next run: %s", exc)
            with self._changed:
                self.error = exc
                self._changed.notify_all()
            self._locked.set()
            self._on_failure(exc)

    def _land(self, conn: Connection, found: list[claims.Claim]) -> None:
        t0 = time.monotonic()
        group = [Claimed(c.queue, StagedFiles.from_json(c.staged), c.app_id, c.version) for c in found]
        land_group(self._journal, conn, self._claims_table, group)
        for c in found:
            by_queue = shares(c)  # a batch of several small queues: each queue counts its own share
            if by_queue is None:
                self._count(c.queue, c.row_count, outcomes(c))
            else:
                for queue, counts in by_queue.items():
                    self._count(queue, sum(counts.values()), counts)
        self.commits += 1
        self.batches += len(group)
        self.largest_group = max(self.largest_group, len(group))
        log.debug(
            "journal: one commit for %d batch(es) claimed by Spark tasks in %.3fs", len(group), time.monotonic() - t0
        )

    def _count(self, queue: str, rows: int, counts: dict[str, int] | None) -> None:
        """A committed batch's rows in ``queue``'s figures (``count_what_the_driver_committed``)."""
        self.rows[queue] += rows
        self.queue_batches[queue] += 1
        kept = self.outcomes.setdefault(queue, Counter())
        if counts is None or kept is None:
            self.outcomes[queue] = None
        else:
            kept.update(counts)

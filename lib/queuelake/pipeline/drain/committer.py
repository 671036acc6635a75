"""The drain run's journal committer: claimed batches of every worker and queue committed to the
journal together (group commits), then their claims cleared, on one thread and one connection.

Why: a worker's own lander made one Delta commit per claimed batch, so a run of hundreds of queues
made hundreds of commits on the one journal, each paying for the log, and held a landing connection
per worker. Now whatever was claimed while the previous group committed goes in the next one: the
commits per run are bounded by time (one at a time, back to back, or at most one per
``drain.commit_interval_seconds``), not by queues x batches.

The claim protocol is unchanged: each batch's claim is durable before it is handed over, a group's
files and every app id's version are one atomic Delta commit, and claims are cleared only after it.
A kill at any instant leaves claims the next run resolves. After a failed group nothing more is
committed (a later version of an app id must never land before an earlier one): every worker's next
hand-over or wait raises, and the claims wait for the next run.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Protocol

from queuelake import kill_points
from queuelake.lake.files import StagedFiles
from queuelake.lake.port import JournalLake
from queuelake.lake.waiting import said_while_waiting
from queuelake.pipeline.drain.claims import Resolved, resolve_claims
from queuelake.pipeline.journal.schema import MESSAGES
from queuelake.report import log
from queuelake.transport import claims
from queuelake.transport.database import QueueDatabase
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef

MOST_PENDING_PER_WORKER = 2  # a worker runs at most this far ahead of the journal
MOST_PER_GROUP = 512  # batches in one commit (its log entry lists every file)


@dataclass(frozen=True)
class Claimed:
    """A batch whose claim is committed in the queue's database, waiting for its Delta commit."""

    queue: str
    staged: StagedFiles
    app_id: str
    version: int


class Committer(Protocol):
    """What a queue's drain needs of whoever commits its claimed batches to the journal: the run's
    ``JournalCommitter`` on the driver, or in a Spark task the driver's poller seen from the task
    (``task.TaskCommitter``)."""

    def begin(self, conn: Connection, queue: str) -> Resolved:
        """Under the queue's drain lock, before anything is received: the claims killed drains left
        are committed and cleared when this returns (how many there were, and their rows)."""
        ...

    def submit(self, claimed: Claimed) -> None:
        """A batch whose claim the worker has just committed; may block to keep the worker near the journal."""
        ...

    def wait(self, app_id: str) -> None:
        """Until every batch of ``app_id`` submitted is in the journal and its claim cleared."""
        ...

    def check(self) -> None:
        """Raises when no batch can land any more (the commit failed): asked before each receive, so
        nothing more leaves a queue to wait in a claim for the next run."""
        ...


def land_group(lake: JournalLake, conn: Connection, claims_table: TableRef, group: list[Claimed]) -> int:
    """One Delta commit for the group (each app id's highest version in it), then its claims cleared
    in one transaction. Returns how many batches the commit carried (the rest were in the log)."""
    t0 = time.monotonic()
    with said_while_waiting(f"committing {len(group)} batch(es) to the journal"):
        carried = lake.commit_staged_group(MESSAGES, [(c.staged, c.app_id, c.version) for c in group])
    kill_points.reached("after_delta_commit")
    t1 = time.monotonic()
    claims.delete_many(conn, claims_table, [(c.app_id, c.version) for c in group])
    conn.commit()
    kill_points.reached("after_claim_cleared")
    log.debug("timing delta %.3f clear %.3f", t1 - t0, time.monotonic() - t1)
    return carried


class JournalCommitter:
    """One per drain run. Workers ``submit`` claimed batches and ``wait`` for theirs before they end."""

    def __init__(self, database: QueueDatabase, lake: JournalLake, interval: float) -> None:
        """``interval``: ``drain.commit_interval_seconds``, at least this long between two group commits' starts."""
        self._database = database
        self._lake = lake
        self._claims_table = database.claims
        self._waiting: list[Claimed] = []
        self._pending: dict[str, int] = defaultdict(int)  # per app id: handed over, not yet landed
        self._changed = threading.Condition()
        self._error: BaseException | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self._interval = float(interval)
        self.commits = 0
        self.batches = 0
        self.largest_group = 0

    def begin(self, conn: Connection, queue: str) -> Resolved:
        """The claims killed drains of ``queue`` left, committed one by one (``claims.resolve_claims``);
        raises when the run's journal commit has failed (``check``)."""
        self.check()
        return resolve_claims(conn, self._lake, self._claims_table, queue)

    def check(self) -> None:
        """Raises the failure of the run's journal commit, if any. Why: after it the run went on starting
        every queue left, each receiving a batch it could not land; a review's 99 queues left 59,149 rows
        in claims, in neither the queue nor the journal until the next run."""
        with self._changed:
            self._raise_if_failed()

    def submit(self, claimed: Claimed) -> None:
        """Hand over a claimed batch; blocks while its worker has ``MOST_PENDING_PER_WORKER`` waiting."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._error is not None or self._pending[claimed.app_id] < MOST_PENDING_PER_WORKER
            )
            self._raise_if_failed()
            self._waiting.append(claimed)
            self._pending[claimed.app_id] += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="journal-commit", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def wait(self, app_id: str) -> None:
        """Until every batch of ``app_id`` handed over has landed; raises the committer's error."""
        with self._changed:
            self._changed.wait_for(lambda: self._error is not None or self._pending[app_id] == 0)
            self._raise_if_failed()

    def close(self) -> None:
        """Commit what is waiting, then checkpoint the journal where one is due (``finish_staged``)."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join()
        if self.commits:
            self._lake.finish_staged(MESSAGES)

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            with self._database.connect("queuelake-drain-commit") as conn:
                last_start = -float("inf")
                while True:
                    with self._changed:
                        self._changed.wait_for(lambda: bool(self._waiting) or self._closed)
                        if not self._waiting:
                            return
                        # drain.commit_interval_seconds: gather until the interval is up, unless the
                        # run is ending (nothing more will come) or the group is full
                        self._changed.wait_for(
                            lambda: self._closed or len(self._waiting) >= MOST_PER_GROUP,
                            timeout=last_start + self._interval - time.monotonic(),
                        )
                        group = self._waiting[:MOST_PER_GROUP]
                        del self._waiting[:MOST_PER_GROUP]
                    last_start = time.monotonic()
                    self._land(conn, group)
                    with self._changed:
                        for claimed in group:
                            self._pending[claimed.app_id] -= 1
                        self._changed.notify_all()
        except BaseException as exc:  # the claims stay: the next run lands them
            log.error("drain: the journal commit failed; claimed batches wait for the next run: %s", exc)
            with self._changed:
                self._error = exc
                self._changed.notify_all()

    def _land(self, conn: Connection, group: list[Claimed]) -> None:
        """One Delta commit for the group, then its claims cleared in one transaction."""
        carried = land_group(self._lake, conn, self._claims_table, group)
        if carried < len(group):
            # under the queues' drain locks nobody else writes these app ids: the rest landed in
            # our own earlier attempt (a commit that raised after writing)
            log.debug("journal: %d of %d batch(es) were already committed", len(group) - carried, len(group))
        self.commits += 1
        self.batches += len(group)
        self.largest_group = max(self.largest_group, len(group))
        log.debug("journal: one commit for %d claimed batch(es)", len(group))

"""Workers given to queues by backlog (issue 32): every queue's depth estimated up front, in a few
statements on one connection, so that a system of hundreds of endpoints drains its big queues with
several workers and its empty ones for the price of that one check.

Why: giving every queue ``workers_per_queue`` workers and a drain lock spent most of a 300-queue run
opening connections to empty tables, and left a deep queue with no more workers than an idle one.
A queue is skipped (no lock, no connection of its own) only when its estimate is 0 and no claim of
it waits to be resolved; a queue whose estimate failed (a missing table, say) is drained as before,
which reports its error.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from queuelake.errors import QueuelakeError
from queuelake.report import log
from queuelake.transport import claims, queues
from queuelake.transport.database import QueueDatabase
from queuelake.transport.table_refs import TableRef


@dataclass(frozen=True)
class Backlog:
    """What the run knows of a queue before draining it."""

    depth: int | None  # the transport's estimate (seq span of committed rows); None: it failed
    claims: int  # claims a killed drain left, to resolve before receiving

    @property
    def idle(self) -> bool:
        return self.depth == 0 and not self.claims


@dataclass(frozen=True)
class Estimate:
    """The run's queues' backlogs, and the queues outside the run with claims left (``anchor_claims.py``)."""

    backlogs: dict[str, Backlog]
    claimed_elsewhere: frozenset[str] = frozenset()


def estimate(database: QueueDatabase, refs: list[TableRef]) -> Estimate:
    """Every queue's estimated depth and pending claims, on one connection. A database that cannot be
    reached fails the run here, once (a wrong password was logged once per queue, each queue's drain
    failing with the same error); one that can, but whose depths cannot be read (a missing queue
    table), leaves every queue unknown: each queue's drain then fails, or not, with its own error."""
    conn = database.connect("queuelake-drain-estimate")  # TransportError: the run's error, not each queue's
    try:
        with conn:
            queues.configure_estimate_session(conn)
            depths = queues.depths(conn, refs)
            try:
                pending = {c.queue: c.claims for c in claims.summary(conn, database.claims)}
            except QueuelakeError as exc:  # no claims table yet: each queue's drain says so
                log.debug("drain: could not read the claims summary (%s)", exc)
                pending = {r.canonical: 1 for r in refs}
            conn.rollback()
    except QueuelakeError as exc:
        log.warning("drain: could not estimate the queues' depths (%s); draining each as if deep", exc)
        return Estimate({r.canonical: Backlog(None, 0) for r in refs})
    ours = {r.canonical for r in refs}
    return Estimate(
        {r.canonical: Backlog(depths.get(r.canonical), pending.get(r.canonical, 0)) for r in refs},
        frozenset(q for q, n in pending.items() if n and q not in ours),
    )


def workers_for(backlog: Backlog, batch_size: int, max_messages: int | None, most: int) -> int:
    """One worker per batch the backlog holds, at most ``most``: a queue of one batch gets one
    worker, a deep queue all it may have. A failed estimate counts as deep."""
    if backlog.depth is None:
        return most
    depth = backlog.depth if max_messages is None else min(backlog.depth, max_messages)
    return max(1, min(most, math.ceil(depth / batch_size)))


class ConnectionBudget:
    """The run's database connections as a counted resource, handed out first come, first served:
    a queue waits until all the connections it needs are free, and a queue that needs many is not
    overtaken forever by queues that need few."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.free = total
        self.peak = 0
        self._turns: deque[object] = deque()
        self._changed = threading.Condition()

    @contextmanager
    def hold(self, n: int) -> Iterator[None]:
        n = min(n, self.total)
        turn = object()
        with self._changed:
            self._turns.append(turn)
            self._changed.wait_for(lambda: self._turns[0] is turn and self.free >= n)
            self._turns.popleft()
            self.free -= n
            self.peak = max(self.peak, self.total - self.free)
            self._changed.notify_all()
        try:
            yield
        finally:
            with self._changed:
                self.free += n
                self._changed.notify_all()

"""The drain run's database sessions, kept open from one queue to the next.

Why: a queue drained on its own connections opened a lock connection and a receive connection per
worker, and closed them when it ended. Opening a session costs about 5 ms of the client's time and
as much of the server's (a backend process is forked, authenticated and given the type catalogue),
and a system of 500 small queues paid that 1,500 times, more than the rows themselves cost. Here a
queue that ends gives its sessions back, clean (its drain lock released, no transaction open), and
the next queue takes them.

The bound is unchanged: sessions are opened only under the run's ``ConnectionBudget``, and no more
are ever open than ``limit`` (the budget's total): a queue that needs a kind of session none is idle
of closes an idle one of the other kind before opening its own. A session that failed in any way is
closed, never given back.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from queuelake.transport import queues
from queuelake.transport.database import QueueDatabase
from queuelake.transport.db import Connection

LOCK = "lock"
RECEIVE = "receive"


def lock_session(database: QueueDatabase, statement_timeout_s: float) -> Connection:
    """A new lock session (a queue's drain lock, its claims resolved, its newest seq and depth read): in
    autocommit, as it only reads and holds session locks (``Connection.use_autocommit``), and with a
    bounded wait for a table lock (``queues.configure_lock_session``)."""
    conn = database.connect("queuelake-drain-lock").use_autocommit()
    try:
        queues.configure_lock_session(conn, statement_timeout_s)
    except BaseException:
        conn.close()
        raise
    return conn


class SessionPool:
    """Idle sessions by kind (``LOCK``, ``RECEIVE``), at most ``limit`` open in all."""

    def __init__(self, limit: int, open_session: Callable[[str], Connection]) -> None:
        self.limit = limit
        self._open_session = open_session
        self._idle: dict[str, list[Connection]] = {LOCK: [], RECEIVE: []}
        self._open = 0
        self._guard = threading.Lock()
        self.opened = 0  # sessions opened in the run: what reuse saves shows here
        self.peak = 0

    @contextlib.contextmanager
    def session(self, kind: str, clean: Callable[[Connection], None]) -> Iterator[Connection]:
        """An idle session of ``kind``, else a new one. Given back after ``clean(conn)`` succeeds (it
        leaves the session as new: no lock, no transaction); closed if the caller or ``clean`` raised
        (closing ends whatever the session held, its lock included: ``clean``'s error is not the
        caller's)."""
        conn = self._take(kind)
        try:
            yield conn
        except BaseException:
            self._discard(conn)
            raise
        try:
            clean(conn)
        except Exception:  # noqa: BLE001 - closed instead
            self._discard(conn)
            return
        with self._guard:
            self._idle[kind].append(conn)

    def close(self) -> None:
        with self._guard:
            idle = [c for conns in self._idle.values() for c in conns]
            for conns in self._idle.values():
                conns.clear()
            self._open -= len(idle)
        for conn in idle:
            with contextlib.suppress(Exception):
                conn.close()

    def _take(self, kind: str) -> Connection:
        surplus: Connection | None = None
        with self._guard:
            if self._idle[kind]:
                return self._idle[kind].pop()
            if self._open >= self.limit:  # make room: an idle session of another kind goes
                other = next((conns for conns in self._idle.values() if conns), None)
                if other is not None:
                    surplus = other.pop()
                    self._open -= 1
            self._open += 1
            self.opened += 1
            self.peak = max(self.peak, self._open)
        if surplus is not None:
            with contextlib.suppress(Exception):
                surplus.close()
        try:
            return self._open_session(kind)
        except BaseException:
            with self._guard:
                self._open -= 1
            raise

    def _discard(self, conn: Connection) -> None:
        with self._guard:
            self._open -= 1
        with contextlib.suppress(Exception):
            conn.close()

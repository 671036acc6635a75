"""The progress line a worker logs per batch, with the queue's backlog estimated cheaply."""

from __future__ import annotations

import contextlib
import threading
import time

from queuelake.errors import QueuelakeError
from queuelake.report import log
from queuelake.transport import queues
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef

NEWEST_EVERY_SECONDS = 5.0


class Progress:
    """Shared by a queue's workers: the highest seq received, the queue's newest seq (read every few
    seconds), and the per-batch progress line."""

    def __init__(self, ref: TableRef, started: float) -> None:
        self.ref = ref
        self._started = started
        self._lock = threading.Lock()
        self._received_up_to = 0  # the highest seq any worker has received
        self._newest_at: float = float("-inf")
        self._newest: int | None = None
        self._first: tuple[int | None] | None = None  # the read ``start`` made, if it made one

    def start(self, conn: Connection, read: bool = True) -> None:
        """Read the newest seq before the workers start; the next read is due a few seconds on.
        ``read=False``: a queue of one batch by the run's estimate (most of a system's queues) skips
        the read, one statement fewer; its progress line says nothing of what is left until a read is due."""
        self._newest_at = time.monotonic()
        if read and self._read_newest(conn, first=True):
            with self._lock:
                self._first = (self._newest,)

    def newest_at_start(self) -> tuple[int | None] | None:
        """The newest seq ``start`` read, in a tuple (its value None for an empty queue); None when it
        made no read. The drain's stop mark takes it rather than a read of its own (``QueueState``)."""
        with self._lock:
            return self._first

    def batch(
        self, worker: int, version: int, counts: dict[str, int], t0: float, total: int, last_seq: int, conn: Connection
    ) -> None:
        n = sum(counts.values())
        seconds = time.monotonic() - t0
        backlog = self._backlog(conn, last_seq)
        elapsed = time.monotonic() - self._started
        log.debug("drain %s: worker %d committed its batch %d", self.ref.canonical, worker, version)
        log.info(
            "drain %s: %d message(s) (%d landed, %d expired, %d quarantined) in %.2fs; %d so far at %.0f msg/s, %s",
            self.ref.canonical,
            n,
            counts["landed"],
            counts["expired"],
            counts["quarantined"],
            seconds,
            total,
            total / elapsed if elapsed else 0.0,
            f"about {backlog} left" if backlog is not None else "what is left not counted yet",
        )

    def _backlog(self, conn: Connection, last_seq: int) -> int | None:
        """Backlog for the progress line: the queue's newest seq (read every few seconds) minus the
        highest seq this drain has received. Not ``peek``: its min(seq) walks the dead index entries
        the drain leaves at the head, which stalled a worker for 0.13 s (and cost the server as much
        CPU) on a churned table. Rows that arrive between two reads show at the next one; with
        competing receivers the estimate is an upper bound. None: not known (the read failed, or
        not made yet for a queue estimated at one batch: it said "about 0 left" of a queue with more)."""
        now = time.monotonic()
        with self._lock:
            self._received_up_to = high = max(self._received_up_to, last_seq)
            read = now - self._newest_at >= NEWEST_EVERY_SECONDS
            if read:
                self._newest_at = now
            newest = self._newest
        if read:
            if not self._read_newest(conn):
                return None
            with self._lock:
                newest = self._newest
        return max(newest - high, 0) if newest is not None else None

    def _read_newest(self, conn: Connection, first: bool = False) -> bool:
        """Read the newest seq for the estimate. A failed read is not the run's failure: the progress
        line shows -1, and the connection is rolled back so that its next receive runs. But the first
        read, before any receive, that gave up waiting for a table lock is the queue's failure: its
        receive would wait as long again for the same lock (a table held locked failed its queue after
        three such waits, about 90 s: a review)."""
        try:
            newest = queues.newest_seq(conn, self.ref)
            conn.rollback()
        except QueuelakeError as exc:
            log.debug("%s: reading the newest seq failed: %s", self.ref.canonical, exc)
            with contextlib.suppress(Exception):
                conn.rollback()
            if first and getattr(exc, "lock_timeout", False):
                raise
            return False
        with self._lock:
            self._newest = newest
        return True

"""A queue's start mark when the newest seq cannot be read (no database: the read is made to fail)."""

from __future__ import annotations

import threading

import pytest
from queuelake.config_sections import TransportConfig
from queuelake.errors import TransportError
from queuelake.pipeline.drain import state
from queuelake.transport.table_refs import queue_ref


class _Progress:
    def newest_at_start(self) -> None:
        return None  # the progress line made no read: the mark is read by the worker


class _Connection:
    rolled_back = 0

    def rollback(self) -> None:
        self.rolled_back += 1


def test_a_failed_read_of_the_newest_seq_leaves_no_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    """The start mark's own read failed the worker and its queue, where the progress line's read of the
    same seq is guarded (a review). A failed read now leaves no mark: the drain goes on until the queue
    is empty, as before marks; a read that works gives the newest seq."""
    queue = object.__new__(state.QueueState)
    queue._lock, queue._mark_read, queue._mark = threading.Lock(), False, None
    queue.progress, queue.ref = _Progress(), queue_ref("Sales", TransportConfig(connection="x"))  # type: ignore[assignment]

    def refused(conn: object, ref: object) -> int:
        raise TransportError("canceling statement due to statement timeout")

    monkeypatch.setattr(state.queues, "newest_seq", refused)
    conn = _Connection()
    assert queue.start_mark(conn, received=10) == state.NO_MARK  # type: ignore[arg-type]
    assert conn.rolled_back == 1
    queue._mark_read = False
    monkeypatch.setattr(state.queues, "newest_seq", lambda conn, ref: 42)
    assert queue.start_mark(conn, received=10) == 42  # type: ignore[arg-type]

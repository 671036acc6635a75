"""A worker's lander: commits its claimed batches to the Delta log, then clears their claims."""

from __future__ import annotations

import threading
import time
from queue import Queue

from queuelake import hooks
from queuelake.context import connect
from queuelake.lake.files import StagedFiles
from queuelake.pipeline.drain.state import QueueState
from queuelake.pipeline.journal.schema import MESSAGES
from queuelake.report import log
from queuelake.transport import claims
from queuelake.transport.db import Connection


class Lander:
    """A worker's second thread: lands claimed batches (Delta commit, then clear the claim) in the
    order they were claimed, on a connection of its own, while the worker receives the next batch.
    One batch waits at most (the queue holds one): memory stays at two batches per worker, and the
    Delta versions of the worker's app id commit in order. Each claim is durable before it is handed
    over, so a kill at any instant leaves claims that the next run lands, as before the overlap."""

    def __init__(self, state: QueueState, worker: int) -> None:
        self._state = state
        self._worker = worker
        self._pending: Queue[tuple[StagedFiles, str, int] | None] = Queue(maxsize=1)
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def submit(self, staged: StagedFiles, app_id: str, version: int) -> None:
        self._raise_if_failed()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"land-{self._worker}", daemon=True)
            self._thread.start()
        self._pending.put((staged, app_id, version))

    def close(self, raise_error: bool = True) -> None:
        """Wait for every batch handed over; raise the lander's error, if any."""
        if self._thread is not None:
            self._pending.put(None)
            self._thread.join()
            self._thread = None
        if raise_error:
            self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            with connect(self._state.config, f"queuelake-drain-land-{self._worker}") as conn:
                while (item := self._pending.get()) is not None:
                    self._land(conn, *item)
        except BaseException as exc:  # the claims stay: the next run lands them
            self._error = exc
            self._state.budget.stop()
            while self._pending.get() is not None:  # unblock the worker until it closes
                pass

    def _land(self, conn: Connection, staged: StagedFiles, app_id: str, version: int) -> None:
        """Commit a claimed batch's staged files to the Delta log, then clear its claim."""
        state = self._state
        t0 = time.monotonic()
        if not state.lake.commit_staged(MESSAGES, staged, app_id, version):
            # Under the queue's drain lock nobody else writes this app id: the version is in the log
            # because our own commit landed (e.g. it raised after writing and its retry found it).
            log.debug("%s: batch %s:%d was already committed", state.ref.canonical, app_id, version)
        hooks.checkpoint("after_delta_commit")
        t_delta = time.monotonic()
        claims.delete(conn, state.claims_table, app_id, version)
        conn.commit()
        hooks.checkpoint("after_claim_cleared")
        log.debug("timing delta %.3f clear %.3f", t_delta - t0, time.monotonic() - t_delta)

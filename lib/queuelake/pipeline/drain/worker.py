"""One queue worker: receive a batch, build its journal rows, stage them, claim them with the
DELETE, and hand the claimed batch to the run's journal committer; until the budget or the queue
runs out."""

from __future__ import annotations

import datetime as dt
import time

import pyarrow as pa

from queuelake import kill_points, stopping
from queuelake.pipeline.drain.claims import claim_record
from queuelake.pipeline.drain.committer import Claimed
from queuelake.pipeline.drain.receive import receive_session
from queuelake.pipeline.drain.state import QueueState
from queuelake.pipeline.journal.build import build_batch
from queuelake.pipeline.journal.quarantine import isolate_unstorable
from queuelake.pipeline.journal.schema import MESSAGES
from queuelake.report import log
from queuelake.transport import claims, queues
from queuelake.transport.claims import Claim
from queuelake.transport.db import Connection

SETTLE_POLL_SECONDS = 0.25
MEGABYTE = 1024 * 1024
# what a worker's first batch assumes of a row (headers and body): 64 MB then bound it at 256 rows, so
# a first batch of 200 KB bodies stays near 50 MB (at 16 KB it took 4,096 of them, 781 MB, one row group
# a reader had to hold: a review); later batches use the rows' own size
FIRST_BATCH_ROW_BYTES = 256 * 1024


def worker_app_id(queue: str, worker: int | str) -> str:
    """The Delta application id of one drain worker: its batches are versions 1, 2, 3, ... (``worker``
    is its number, or ``small_queues.TOGETHER`` for the batches of small queues drained with this one)"""
    return f"queuelake.drain/{queue}/{worker}"


class Worker:
    """Worker number ``worker`` of a queue's drain, on its own receive connection."""

    def __init__(self, state: QueueState, worker: int) -> None:
        self.state = state
        self.worker = worker

    def run(self) -> None:
        app_id = worker_app_id(self.state.ref.canonical, self.worker)
        try:
            self._receive_loop(app_id)
        except BaseException:
            try:  # what was claimed so far lands; the worker's own error is the one to report
                self.state.committer.wait(app_id)
            except BaseException:  # noqa: BLE001 - the claims wait for the next run
                pass
            raise
        self.state.committer.wait(app_id)  # every batch claimed lands (or its claim waits for the next run)

    def _receive_loop(self, app_id: str) -> None:
        state, worker = self.state, self.worker
        version = state.lake.staged_version(MESSAGES, app_id) or 0
        settle_until: float | None = None
        drain_cfg = state.settings
        with receive_session(state.database, state.receive_driver, state.receive, worker, state.sessions) as conn:
            queues.configure_drain_session(
                conn, drain_cfg.statement_timeout_seconds, drain_cfg.idle_in_transaction_timeout_seconds
            )
            row_bytes = FIRST_BATCH_ROW_BYTES  # until a batch says how large this queue's rows are
            mark: int | None = None  # the rows present as the drain began: taken; rows sent since: next run
            while True:
                want = state.budget.claim()
                if want == 0:
                    return
                within = max(1, drain_cfg.batch_megabytes * MEGABYTE // row_bytes)
                if want > within:  # the batch's bytes bound it, not its rows
                    state.budget.give_back(want - within)
                    want = within
                t0, cpu0 = time.monotonic(), time.thread_time()
                state.committer.check()  # nothing more taken once no batch can land (it waited in a claim)
                kill_points.reached("before_receive")
                received = queues.receive_batch_arrow(conn, state.ref, want)
                got = received.num_rows
                if got < want:
                    state.budget.give_back(want - got)
                if got == 0:
                    conn.rollback()
                    settle_until = self._settle(conn, settle_until)
                    if settle_until is None:
                        return
                    continue
                settle_until = None
                row_bytes = max(1, received.nbytes // got)
                version += 1
                t_recv, cpu_recv = time.monotonic(), time.thread_time()
                last_seq = received["seq"][-1].as_py()  # sorted by seq
                drained_at = dt.datetime.now(dt.timezone.utc)
                with state.batch_in_flight():
                    table, counts = build_batch(received, state.ref.canonical, f"{app_id}:{version}", drained_at)
                    t_build, cpu_build = time.monotonic(), time.thread_time()
                    stage, claim, counts = self._claim(conn, app_id, version, table, counts, received, drained_at)
                # wall seconds per step, then this thread's CPU seconds: on a machine the database
                # shares, the bench tells waiting (for the server, for a core) from work by the two
                log.debug(
                    "timing receive %.3f build %.3f stage %.3f claim %.3f cpu receive %.3f build %.3f stage+claim %.3f",
                    t_recv - t0,
                    t_build - t_recv,
                    stage,
                    claim,
                    cpu_recv - cpu0,
                    cpu_build - cpu_recv,
                    time.thread_time() - cpu_build,
                )
                total = state.add_batch(got, counts)
                # the batch's buffers go back to the allocator, which reuses them for the next batch:
                # memory stays at about two batches. Handing them back to the OS each batch
                # (release_unused) cost a page fault per 4 KB on the next one: ~0.4 s of system CPU
                # per 100,000 rows, on the cores the receive needs.
                del table, received
                state.progress.batch(worker, version, counts, t0, total, last_seq, conn)
                if got < want and self._emptied(conn):
                    return
                if mark is None:  # not read for a queue its first batch emptied (most of a system's)
                    mark = state.start_mark(conn, last_seq)
                if last_seq > mark:  # every row present as the drain began is taken (or held elsewhere)
                    state.passed_mark(mark)
                    return

    def _emptied(self, conn: Connection) -> bool:
        """After a short batch: is the queue empty now? One count instead of the next receive (a
        DELETE that finds nothing, its rollback) and then this same count (``_settle``): a queue
        smaller than a batch, as most of a system's are, costs two statements fewer. Rows still
        counted (a sibling's batch in flight, a competitor's, new ones) take the usual way: the next
        receive, then ``_settle``."""
        remaining = queues.count_rows(conn, self.state.ref)
        conn.rollback()
        if remaining == 0:
            self.state.found_empty()
        return remaining == 0

    def _settle(self, conn: Connection, settle_until: float | None) -> float | None:
        """After an empty receive: done when the queue is empty. Rows that other sessions hold (a
        competitor's open transaction) get ``settle_seconds`` to be committed away or released to
        us; rows still held then are reported, so a run never claims a clean finish it did not have.
        Returns the settle deadline to keep polling, or None to stop.

        The rows held are most often a sibling worker's batch, received and not yet claimed: the
        wait ends as soon as any worker of this drain commits a claim, not after a whole poll
        interval (which was up to a quarter of a second lost at the end of every run)."""
        state = self.state
        seen = state.claims_committed()
        held = queues.count_rows(conn, state.ref)
        conn.rollback()
        if held == 0:
            state.found_empty()
            return None
        if settle_until is None:  # once per settling: rows with a NULL seq are no one's to wait for
            state.without_seq(queues.count_null_seq(conn, state.ref))
            conn.rollback()
        held -= state.result.rows_without_seq  # on every poll: they stay in the count
        if held <= 0:
            return None
        now = time.monotonic()
        if state.batches_in_flight():
            # a sibling worker holds rows it received and has not claimed yet: however long its batch
            # takes to build and stage (a batch of large bodies took 6.6 s, past settle_seconds, and the
            # run reported its rows as held by others), the clock starts once it has claimed them
            state.wait_for_claim(seen, SETTLE_POLL_SECONDS)
            return now + state.settings.settle_seconds
        settle_until = settle_until if settle_until is not None else now + state.settings.settle_seconds
        if now >= settle_until or stopping.requested():
            state.held_by_others(held)
            return None
        state.wait_for_claim(seen, SETTLE_POLL_SECONDS)
        return settle_until

    def _claim(
        self,
        conn: Connection,
        app_id: str,
        version: int,
        table: pa.Table,
        counts: dict[str, int],
        received: pa.Table,
        drained_at: dt.datetime,
    ) -> tuple[float, float, dict[str, int]]:
        """Stage, claim with the DELETE, then hand the batch to the run's journal committer (a group
        Delta commit, then the claims cleared). Returns the seconds of staging and claiming, for the
        bench's per-step shares, and the batch's counts per outcome (rows that could not be staged
        are quarantined)."""
        state = self.state
        lake = state.lake
        t0 = time.monotonic()
        try:
            staged = lake.stage(MESSAGES, table)
        except Exception as exc:  # a row that cannot be written, or the lake: isolate_unstorable tells
            table, counts = isolate_unstorable(
                received,
                table,
                lambda part: lake.check_stageable(MESSAGES, part),
                state.ref.canonical,
                f"{app_id}:{version}",
                drained_at,
                exc,
            )
            staged = lake.stage(MESSAGES, table)
        t_stage = time.monotonic()
        claimed = False
        try:
            kill_points.reached("after_stage")
            claims.insert(
                conn,
                state.claims_table,
                Claim(app_id, version, state.ref.canonical, MESSAGES, table.num_rows, claim_record(staged, counts)),
            )
            state.confirm_lock(conn)  # nothing claimed once another drain may have taken the queue
            kill_points.reached("before_db_commit")
            claimed = None  # type: ignore[assignment]  # a commit that raises may still have landed
            conn.commit()
            claimed = True
        except BaseException:
            if claimed is False:
                conn.rollback()
                lake.discard_staged(MESSAGES, staged)
            # claimed is None: unknown. The staged files stay; if the claim landed, the next run
            # commits them, else they are orphans for vacuum and the rows are back in the queue.
            raise
        state.claim_committed()
        kill_points.reached("after_db_commit")
        t_claim = time.monotonic()
        try:
            state.committer.submit(Claimed(state.ref.canonical, staged, app_id, version))
        except BaseException:  # the journal commit failed: the batch is claimed, and counted (docs/drain.md)
            state.add_batch(received.num_rows, counts)
            raise
        return t_stage - t0, t_claim - t_stage, counts

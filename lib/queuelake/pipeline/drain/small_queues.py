"""Small queues drained together: each under its own drain lock (all on one session), their rows
received in one transaction, one statement per queue, built per queue and staged as one batch: one
Parquet file, one claim, one journal entry for all of them.

Why: most of a system's queues hold less than a batch. Drained one by one, each paid a whole batch's
fixed cost for a few rows: its own Parquet file, its own claim (an INSERT and a commit), its own
entry in the journal's log, and on the driver its own turn at the interpreter lock for all of that.
500 queues of 1,000 rows drained at 0.69 of one queue of 500,000 on the driver (issue 32).

The claim protocol is unchanged: the rows leave their queues only in the transaction that records
the claim, the claim names the staged files, and the batch lands once under one application id and
version. That id is the first queue's (the anchor: ``worker_app_id(anchor, TOGETHER)``), and the
claim is filed under the anchor, so a run resolves it with the anchor's other claims, under the
anchor's lock, before it reads that id's last version: the same order a worker's claims keep. Every
queue of the batch stays locked until the batch is in the journal. The claim also records each
queue's rows by outcome (``claims.shares``): a command that commits the batch for a killed task
counts each queue's own (``poller.py``).

The same in every mode: on the driver a group is one unit of the run's pool; in a task (executors,
local processes) the small queues of its job are grouped the same way (``task.py``).

A queue this batch did not empty (more rows than the estimate said, rows another session holds, a
batch whose bytes filled up first) goes on with its own worker, under the lock it already holds, as
any queue does; so does a queue alone in its group (``plan``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from queuelake import kill_points
from queuelake.config_sections import DrainConfig
from queuelake.errors import QueuelakeError
from queuelake.lake.files import StagedFiles
from queuelake.lake.port import JournalLake
from queuelake.pipeline.drain.claims import claim_record
from queuelake.pipeline.drain.committer import Claimed, Committer
from queuelake.pipeline.drain.queue_drain import QueueDrain, release_drain_lock
from queuelake.pipeline.drain.receive import receive_session
from queuelake.pipeline.drain.result import QueueResult
from queuelake.pipeline.drain.sessions import LOCK, SessionPool, lock_session
from queuelake.pipeline.drain.state import drain_lock_name
from queuelake.pipeline.drain.worker import FIRST_BATCH_ROW_BYTES, MEGABYTE, worker_app_id
from queuelake.pipeline.journal.build import build_batch
from queuelake.pipeline.journal.quarantine import isolate_unstorable
from queuelake.pipeline.journal.schema import MESSAGES
from queuelake.report import log
from queuelake.status import Status
from queuelake.transport import claims, locks, queues
from queuelake.transport.claims import Claim
from queuelake.transport.database import QueueDatabase
from queuelake.transport.db import Connection

TOGETHER = "together"  # the anchor's application id for the batches it shares with other small queues
MOST_QUEUES = 64  # queues in one batch: their receive statements share its transaction


def plan(drains: list[QueueDrain], batch_size: int) -> list[list[QueueDrain]]:
    """The run's units of work, in ``drains``' order: a queue of more than a batch (or of unknown
    depth) alone; the rest together while their estimated rows fit in a batch. A group of one is a
    queue drained on its own, as before."""
    units: list[list[QueueDrain]] = []
    group: list[QueueDrain] = []
    rows = 0
    for drain in drains:
        depth = drain.depth
        if drain.workers != 1 or depth is None or depth > batch_size:
            units.append([drain])
            continue
        if group and (rows + depth > batch_size or len(group) >= MOST_QUEUES):
            units.append(group)
            group, rows = [], 0
        group.append(drain)
        rows += depth
    if group:
        units.append(group)
    return units


def _refuses(check: Callable[[pa.Table], None], table: pa.Table) -> bool:
    """Whether ``check`` (the write without the storage) refuses ``table``."""
    try:
        check(table)
    except Exception:  # noqa: BLE001 - any refusal: its rows are isolated one by one
        return True
    return False


class _QueueFailed(Exception):
    """One queue's receive failed inside the batch's transaction, the connection still up: its table
    dropped or altered by another program. The batch is rolled back (``_receive`` gave every queue's
    rows back to its budget) and received again without that queue."""

    def __init__(self, drain: QueueDrain, error: QueuelakeError) -> None:
        super().__init__(str(error))
        self.drain = drain
        self.error = error


@dataclass
class _Part:
    """One queue's share of the batch."""

    drain: QueueDrain
    want: int
    received: pa.Table
    table: pa.Table | None = None
    counts: dict[str, int] | None = None


class SmallQueues:
    """Queues that each hold at most a batch, drained together on one lock session and one receive
    session (the connections of one queue with one worker)."""

    def __init__(
        self,
        database: QueueDatabase,
        settings: DrainConfig,
        lake: JournalLake,
        drains: list[QueueDrain],
        committer: Committer,
        sessions: SessionPool | None,
    ) -> None:
        self.database = database
        self.settings = settings
        self.lake = lake
        self.drains = drains
        self.committer = committer
        self.sessions = sessions
        # per queue: seconds spent on it alone (its own workers, its finish), and its rows in the batch
        self._own: dict[str, float] = {d.ref.canonical: 0.0 for d in drains}
        self._rows: dict[str, int] = {d.ref.canonical: 0 for d in drains}

    def run(self, lock_conn: Connection | None = None) -> list[QueueResult]:
        """The queues' drain, their locks on a session of the run's, given back with them released, or
        on ``lock_conn``: a task's, which keeps its queues' locks until their claims are committed."""
        started = time.monotonic()
        for drain in self.drains:
            drain.state.start_clock()
        try:
            with contextlib.nullcontext(lock_conn) if lock_conn is not None else self._lock_session() as lock_conn:
                ready = [d for d in self.drains if self._begin(d, lock_conn)]
                if ready:
                    self._drain(lock_conn, ready)
        except QueuelakeError as exc:  # the lock session failed: every queue not skipped or failed says so
            for drain in self.drains:
                if drain.result.status == Status.OK and not drain.result.error:
                    drain.fail(exc)
        self._share_seconds(time.monotonic() - started)
        return [d.result for d in self.drains]

    def _share_seconds(self, wall: float) -> None:
        """Each queue's seconds: its share of the time the queues spent together (its rows in the
        batch, and one for its receive statement), plus its time alone. Why not the
        group's wall time for each: a queue of 10 rows beside 60 others reported the whole batch's
        seconds and a rate 60 times too low, and summed over a run, the queues' seconds said the run
        took 60 times as long as it did. A queue's time alone includes its lock taken and claims resolved
        (``_begin``) and a receive statement of its own that failed (``_receive``): a queue whose table
        another program held locked waited up to the lock timeout (30 s) there, and reported 0.03 s, its
        share by rows of a batch it had no rows in (a review)."""
        counted = [d for d in self.drains if d.result.status != Status.SKIPPED]
        together = max(0.0, wall - sum(self._own[d.ref.canonical] for d in counted))
        weights = {d.ref.canonical: self._rows[d.ref.canonical] + 1 for d in counted}
        total = sum(weights.values())
        for drain in counted:
            queue = drain.ref.canonical
            drain.stop_clock(together * weights[queue] / total + self._own[queue])

    def _begin(self, drain: QueueDrain, lock_conn: Connection) -> bool:
        with self._alone(drain):
            try:
                return drain.begin(lock_conn)
            except QueuelakeError as exc:  # its table or its claims: this queue's failure only
                drain.fail(exc)
                return False

    def _drain(self, lock_conn: Connection, ready: list[QueueDrain]) -> None:
        """The batch of every ready queue, then each queue it did not empty on its own worker, then
        (once the batch is in the journal) each queue's backlog left and status."""
        app_id = worker_app_id(ready[0].ref.canonical, TOGETHER)
        errors: dict[str, list[BaseException]] = {d.ref.canonical: [] for d in ready}
        going_on: list[QueueDrain] = []
        members = list(ready)
        while members:
            try:
                going_on = self._together(app_id, members)
                break
            except _QueueFailed as failed:  # that queue's failure alone: the others are received again
                failed.drain.state.budget.stop()
                errors[failed.drain.ref.canonical].append(failed.error)
                members = [d for d in members if d is not failed.drain]
                log.error(
                    "drain of %s failed inside a batch of small queues; the %d other(s) are received without it: %s",
                    failed.drain.ref.canonical,
                    len(members),
                    failed.error,
                )
                if members:
                    app_id = worker_app_id(members[0].ref.canonical, TOGETHER)
            except BaseException as exc:  # noqa: BLE001 - every queue of the batch reports it
                first = members[0].ref.canonical
                log.error("drain of %d small queue(s) (%s, ...) failed: %s", len(members), first, exc)
                for drain in members:
                    drain.state.budget.stop()
                    errors[drain.ref.canonical].append(exc)
                break
        for drain in going_on:
            with self._alone(drain):
                errors[drain.ref.canonical].extend(drain.run_workers())
        try:  # the batch in the journal (or its claim left for the next run) before any lock goes
            self.committer.wait(app_id)
        except BaseException as exc:  # noqa: BLE001 - the committer's failure is every queue's
            for drain in ready:
                if not errors[drain.ref.canonical]:
                    errors[drain.ref.canonical].append(exc)
        for drain in ready:
            with self._alone(drain):
                try:
                    drain.finish(lock_conn, errors[drain.ref.canonical])
                except QueuelakeError as exc:
                    drain.fail(exc)

    @contextlib.contextmanager
    def _alone(self, drain: QueueDrain) -> Iterator[None]:
        """Time spent on ``drain`` alone, counted in its seconds only (``_share_seconds``)."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            self._own[drain.ref.canonical] += time.monotonic() - t0

    def _together(self, app_id: str, ready: list[QueueDrain]) -> list[QueueDrain]:
        """Receive every ready queue's rows in one transaction, claim them as one batch, hand it to the
        committer; returns the queues to go on draining with a worker of their own."""
        drain_cfg = self.settings
        state = ready[0].state
        version = self.lake.staged_version(MESSAGES, app_id) or 0
        with receive_session(self.database, state.receive_driver, state.receive, 0, self.sessions) as conn:
            queues.configure_drain_session(
                conn, drain_cfg.statement_timeout_seconds, drain_cfg.idle_in_transaction_timeout_seconds
            )
            t0 = time.monotonic()
            kill_points.reached("before_receive")
            parts, going_on = self._receive(conn, ready)
            rows = sum(p.received.num_rows for p in parts)
            if rows:
                self._claim(conn, app_id, version + 1, parts, t0)
            else:
                conn.rollback()
            for part in parts:
                if part.received.num_rows < part.want and self._emptied(conn, part.drain):
                    continue
                going_on.append(part.drain)
        return going_on

    def _receive(self, conn: Connection, ready: list[QueueDrain]) -> tuple[list[_Part], list[QueueDrain]]:
        """Each queue's rows, up to its budget and what is left of the batch's rows and bytes (its
        first rows are assumed ``FIRST_BATCH_ROW_BYTES`` each, as a worker's first batch; then the
        size of the rows received so far). A queue the batch has no room for goes on alone."""
        drain_cfg = self.settings
        rows_left, bytes_left = drain_cfg.batch_size, drain_cfg.batch_megabytes * MEGABYTE
        row_bytes = FIRST_BATCH_ROW_BYTES
        got_rows = got_bytes = 0
        parts: list[_Part] = []
        going_on: list[QueueDrain] = []
        self.committer.check()  # nothing more taken once no batch can land (it waited in a claim)
        for drain in ready:
            budget = drain.state.budget
            want = budget.claim()
            if want == 0:  # stopped, out of time or of messages: ``finish`` says how it ended
                continue
            room = min(rows_left, bytes_left // row_bytes)
            if room <= 0:
                budget.give_back(want)
                going_on.append(drain)
                continue
            if want > room:
                budget.give_back(want - room)
                want = room
            asked = time.monotonic()
            try:
                with drain.state.batch_in_flight():
                    received = queues.receive_batch_arrow(conn, drain.ref, want)
            except QueuelakeError as exc:
                # its own time, not the batch's (a wait for its table's lock: ``_share_seconds``)
                self._own[drain.ref.canonical] += time.monotonic() - asked
                if conn.lost or len(ready) == 1:  # the session's failure, or the queue is alone: as before
                    raise
                budget.give_back(want)
                for part in parts:  # the batch's transaction is rolled back: their rows stay in their tables
                    part.drain.state.budget.give_back(part.received.num_rows)
                raise _QueueFailed(drain, exc) from exc
            got = received.num_rows
            if got < want:
                budget.give_back(want - got)
            parts.append(_Part(drain, want, received))
            rows_left -= got
            bytes_left -= received.nbytes
            got_rows += got
            got_bytes += received.nbytes
            if got_rows:
                row_bytes = max(1, got_bytes // got_rows)
        return parts, going_on

    def _claim(self, conn: Connection, app_id: str, version: int, parts: list[_Part], t0: float) -> None:
        """Build each queue's rows, stage them as one batch, claim it in the receive's transaction,
        hand it to the committer, and count each queue's share."""
        anchor = parts[0].drain.ref.canonical
        drained_at = dt.datetime.now(dt.timezone.utc)
        batch_id = f"{app_id}:{version}"
        filled = [p for p in parts if p.received.num_rows]
        for part in filled:
            self._rows[part.drain.ref.canonical] += part.received.num_rows
            part.table, part.counts = build_batch(part.received, part.drain.ref.canonical, batch_id, drained_at)
        staged = self._stage(filled, batch_id, drained_at)
        totals = {k: sum((p.counts or {}).get(k, 0) for p in filled) for k in ("landed", "expired", "quarantined")}
        rows = sum(p.table.num_rows for p in filled if p.table is not None)
        shares = {p.drain.ref.canonical: p.counts or {} for p in filled}  # counted per queue by a poller
        claimed: bool | None = False
        try:
            kill_points.reached("after_stage")
            claims.insert(
                conn,
                parts[0].drain.state.claims_table,
                Claim(app_id, version, anchor, MESSAGES, rows, claim_record(staged, totals, shares)),
            )
            for part in parts[1:]:  # each queue's claim marked under way (``QueueState.confirm_lock``)
                locks.mark_claim(conn, drain_lock_name(part.drain.ref), what=part.drain.ref.canonical)
            # every queue's lock is on the one session: its answer confirms them all (``confirm_lock``)
            parts[0].drain.state.confirm_lock(conn)
            kill_points.reached("before_db_commit")
            claimed = None  # a commit that raises may still have landed
            conn.commit()
            claimed = True
        except BaseException:
            if claimed is False:
                conn.rollback()
                self.lake.discard_staged(MESSAGES, staged)
            raise
        for part in filled:
            part.drain.state.claim_committed()
        kill_points.reached("after_db_commit")
        for part in filled:  # counted once claimed, also when its journal commit then fails (docs/drain.md)
            part.drain.state.add_batch(part.received.num_rows, part.counts or {})
        self.committer.submit(Claimed(anchor, staged, app_id, version))
        # one line for the batch, naming each queue with its rows: a line per queue said "1000 so far
        # at 3625 msg/s" for each of 10 queues drained at 36,000 msg/s together, 500 lines a run
        log.info(
            "drain: %d message(s) (%d landed, %d expired, %d quarantined) from %d small queue(s) in one batch "
            "in %.2fs: %s",
            rows,
            totals["landed"],
            totals["expired"],
            totals["quarantined"],
            len(filled),
            time.monotonic() - t0,
            ", ".join(f"{p.drain.ref.canonical} {p.received.num_rows}" for p in filled),
        )
        log.debug("drain: the shared batch %s committed in the database", batch_id)

    def _stage(self, filled: list[_Part], batch_id: str, drained_at: dt.datetime) -> StagedFiles:
        """The queues' rows staged as one batch; a row that cannot be written is quarantined
        (``isolate_unstorable``, queue by queue), as in a worker's batch."""
        lake = self.lake

        def check(piece: pa.Table) -> None:
            lake.check_stageable(MESSAGES, piece)

        try:
            return lake.stage(MESSAGES, pa.concat_tables([p.table for p in filled if p.table is not None]))
        except Exception as exc:  # noqa: BLE001 - the queues whose rows are to blame, isolated
            blamed = [p for p in filled if p.table is not None and _refuses(check, p.table)]
            if not blamed:  # no queue's rows are to blame: the lake's failure, the run's (as a worker's)
                raise
            for part in blamed:
                assert part.table is not None
                part.table, part.counts = isolate_unstorable(
                    part.received, part.table, check, part.drain.ref.canonical, batch_id, drained_at, exc
                )
            return lake.stage(MESSAGES, pa.concat_tables([p.table for p in filled if p.table is not None]))

    def _emptied(self, conn: Connection, drain: QueueDrain) -> bool:
        """After a short share: is the queue empty now (``Worker._emptied``)? Rows still counted (held
        by another session, or new) are drained by the queue's own worker, which settles them."""
        remaining = queues.count_rows(conn, drain.ref)
        conn.rollback()
        if remaining == 0:
            drain.state.found_empty()
        return remaining == 0

    @contextlib.contextmanager
    def _lock_session(self) -> Iterator[Connection]:
        """One session for every queue's lock: given back with the locks released (after the batch and
        every queue's own worker landed: ``_drain`` ends only then), else closed."""

        def release(conn: Connection) -> None:
            for drain in self.drains:
                if drain.locked:
                    release_drain_lock(conn, drain.ref)

        if self.sessions is None:
            with lock_session(self.database, self.settings.statement_timeout_seconds) as conn:
                yield conn
            return
        with self.sessions.session(LOCK, release) as conn:
            yield conn

"""Drain queue tables into the ``messages`` journal, exactly once, with durable claims.

Per batch, a worker:
1. receives the batch (``DELETE ... RETURNING``, transaction left open) and builds its journal rows;
2. stages them: Parquet files written into the journal's folder, not yet in the Delta log;
3. inserts a claim record naming those files in the DELETE's transaction, and commits: from this
   instant the rows are gone from the queue and their content is durable in the lake;
4. commits the staged files to the Delta log under the worker's application transaction
   (app id, version), then clears the claim. Step 4 runs on the worker's lander thread, in batch
   order, while the worker already receives and builds the next batch: the claim is durable before
   the hand-over, so overlapping them changes no guarantee (at most two claims are open per worker).

A kill before 3 rolls the DELETE back (the staged files become orphans for vacuum); a kill after it
leaves a claim that the next drain of the queue resolves before it receives anything: committed
already (the app transaction says so) means clear it, else commit its files, then clear it. No row
the journal holds is ever receivable again, and no row leaves a queue without its content stored.
Memory: a worker holds one batch, whatever the backlog.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from queue import Queue
from typing import Any

import pyarrow as pa

from queuelake import hooks, stopping
from queuelake.config import Config
from queuelake.context import connect, resolved_transport
from queuelake.errors import LakeError, QueuelakeError
from queuelake.lake.engines import journal_engine
from queuelake.lake.files import StagedFiles
from queuelake.lake.port import LakeEngine
from queuelake.pipeline.journal.build import build_batch
from queuelake.pipeline.journal.quarantine import isolate_unstorable
from queuelake.pipeline.journal.schema import MESSAGES, MESSAGES_SCHEMA
from queuelake.pipeline.runs import append_runs
from queuelake.report import log
from queuelake.transport import claims, db, locks, queues, schema
from queuelake.transport.claims import Claim
from queuelake.transport.db import Connection
from queuelake.transport.tables import TableRef, queue_ref

MAX_WORKERS_PER_QUEUE = 32
NEWEST_EVERY_SECONDS = 5.0
SETTLE_POLL_SECONDS = 0.25


@dataclass
class QueueResult:
    queue: str
    dequeued: int = 0
    landed: int = 0
    expired: int = 0
    quarantined: int = 0
    claims_resolved: int = 0
    batches: int = 0
    seconds: float = 0.0
    rate: float = 0.0
    backlog_left: int | None = None
    held_by_others: int = 0
    status: str = "ok"
    error: str | None = None
    started_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("started_at")
        return out


class _Budget:
    """Shared by a queue's workers: message and time budgets, and a stop flag (failure or SIGTERM)."""

    def __init__(self, batch_size: int, max_messages: int | None, deadline: float | None) -> None:
        self.batch_size = batch_size
        self.remaining = max_messages
        self.deadline = deadline
        self.stopped = False
        self._lock = threading.Lock()

    def claim(self) -> int:
        with self._lock:
            if self.stopped or stopping.requested():
                return 0
            if self.deadline is not None and time.monotonic() >= self.deadline:
                return 0
            if self.remaining is None:
                return self.batch_size
            n = min(self.batch_size, self.remaining)
            self.remaining -= n
            return n

    def give_back(self, n: int) -> None:
        with self._lock:
            if self.remaining is not None:
                self.remaining += n

    def stop(self) -> None:
        with self._lock:
            self.stopped = True


def receive_driver(config: Config) -> str:
    wanted = config.drain.receive_driver
    if wanted != "auto":
        return wanted
    if config.transport.driver == "psycopg" and db.adbc_available():  # a libpq connection string
        return "adbc"
    return config.transport.driver


def worker_app_id(queue: str, worker: int) -> str:
    """The Delta application id of one drain worker: its batches are versions 1, 2, 3, ..."""
    return f"queuelake.drain/{queue}/{worker}"


class QueueDrain:
    """Drains one queue with N workers sharing a budget, under the queue's drain lock."""

    def __init__(
        self,
        config: Config,
        lake: LakeEngine,
        ref: TableRef,
        budget: _Budget,
        receive: db.SharedAdbc | None = None,
        workers: int | None = None,
    ) -> None:
        self.config = config
        self.workers = workers or config.drain.workers_per_queue
        self.lake = lake
        self.ref = ref
        self.budget = budget
        self.claims_table = claims.claims_ref(config.transport)
        self.result = QueueResult(ref.canonical)
        self._lock = threading.Lock()
        self._claimed = threading.Condition(self._lock)  # notified whenever a worker's claim commits
        self._claims_committed = 0
        self._started = time.monotonic()
        self._received_up_to = 0  # the highest seq any worker has received
        self._newest_at: float = float("-inf")
        self._newest: int | None = None
        self.receive_driver = receive_driver(config)
        self._receive = receive  # the run's shared ADBC database, when the receive goes through ADBC

    def run(self) -> QueueResult:
        workers = self.workers
        try:
            with connect(self.config, "queuelake-drain-lock") as lock_conn:
                if not self._acquire(lock_conn):
                    self.result.status = "skipped"
                    self.result.error = f"another drain of {self.ref.canonical} is running (lock held)"
                    log.warning("%s", self.result.error)
                    return self.result
                schema.require_table(lock_conn, self.ref)
                lock_conn.rollback()
                self.result.claims_resolved = self._resolve_claims(lock_conn)
                self._newest_at = time.monotonic()
                self._read_newest(lock_conn)
                errors: list[BaseException] = []
                threads = [
                    threading.Thread(target=self._worker_safe, args=(w, errors), daemon=True) for w in range(workers)
                ]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                self._finish(lock_conn, errors)
        except QueuelakeError as exc:  # the lock connection or the claim resolution failed
            self.result.status = "failed"
            self.result.error = str(exc)
            log.error("drain of %s failed: %s", self.ref.canonical, exc)
        self.result.seconds = round(time.monotonic() - self._started, 3)
        self.result.rate = round(self.result.dequeued / self.result.seconds, 1) if self.result.seconds else 0.0
        return self.result

    def _finish(self, lock_conn: Connection, errors: list[BaseException]) -> None:
        try:
            self.result.backlog_left = queues.peek(lock_conn, self.ref)
            lock_conn.rollback()
        except QueuelakeError:
            pass
        if errors:
            self.result.status = "failed"
            self.result.error = "; ".join(sorted({str(e) for e in errors}))
        elif self.result.held_by_others:
            self.result.status = "incomplete"
            self.result.error = (
                f"{self.result.held_by_others} row(s) remain in {self.ref.canonical} that this run could not "
                f"claim: other sessions held them for over {self.config.drain.settle_seconds:g}s "
                "(a competing receiver's long transaction, or a dead drain's statement still running)"
            )
            log.warning("%s", self.result.error)
        elif stopping.requested():
            self.result.status = "interrupted"

    def _acquire(self, conn: Connection) -> bool:
        return locks.try_lock(conn, "queuelake.drain:" + self.ref.canonical, what=self.ref.canonical)

    # ------------------------------------------------------------ claims

    def _resolve_claims(self, conn: Connection) -> int:
        """Finish what killed drains of this queue left between their DB commit and claim clearing,
        whichever worker (or worker count) they ran with. Runs under the drain lock, before any
        worker reads its last version, so versions stay in order."""
        pending = claims.of_queue(conn, self.claims_table, self.ref.canonical)
        conn.rollback()
        for claim in pending:
            self._land(claim)
            claims.delete(conn, self.claims_table, claim.app_id, claim.version)
            conn.commit()
            log.info(
                "%s: finished the batch an interrupted drain left (%d message(s), now in the journal once)",
                self.ref.canonical,
                claim.row_count,
            )
        return len(pending)

    def _land(self, claim: Claim) -> None:
        committed = self.lake.last_version(claim.lake_table, claim.app_id) or 0
        if committed >= claim.version:
            return
        staged = StagedFiles.from_json(claim.staged)
        if not self.lake.commit_staged(claim.lake_table, staged, claim.app_id, claim.version, verify=True):
            if (self.lake.last_version(claim.lake_table, claim.app_id) or 0) < claim.version:
                raise LakeError(f"{self.ref.canonical}: could not commit claimed batch {claim.app_id}:{claim.version}")

    # ------------------------------------------------------------ workers

    def _worker_safe(self, worker: int, errors: list[BaseException]) -> None:
        try:
            self._worker(worker)
        except BaseException as exc:  # reported in the summary; other workers stop claiming
            self.budget.stop()
            errors.append(exc)
            log.error("%s worker %d failed: %s", self.ref.canonical, worker, exc)

    def _worker(self, worker: int) -> None:
        lander = _Lander(self, worker)
        try:
            self._receive_loop(worker, lander)
        except BaseException:
            lander.close(raise_error=False)  # the worker's own error is the one to report
            raise
        lander.close()  # every batch claimed so far lands (or its claim waits for the next run)

    def _receive_loop(self, worker: int, lander: _Lander) -> None:
        app_id = worker_app_id(self.ref.canonical, worker)
        version = self.lake.last_version(MESSAGES, app_id) or 0
        settle_until: float | None = None
        drain_cfg = self.config.drain
        if self._receive is not None:
            receive_conn = self._receive.connect()
        else:
            receive_conn = connect(self.config, f"queuelake-drain-{worker}", driver=self.receive_driver)
        with receive_conn as conn:
            queues.configure_drain_session(
                conn, drain_cfg.statement_timeout_seconds, drain_cfg.idle_in_transaction_timeout_seconds
            )
            while True:
                want = self.budget.claim()
                if want == 0:
                    return
                t0, cpu0 = time.monotonic(), time.thread_time()
                hooks.checkpoint("before_receive")
                received = queues.receive_batch_arrow(conn, self.ref, want)
                got = received.num_rows
                if got < want:
                    self.budget.give_back(want - got)
                if got == 0:
                    conn.rollback()
                    settle_until = self._settle(conn, settle_until)
                    if settle_until is None:
                        return
                    continue
                settle_until = None
                version += 1
                t_recv, cpu_recv = time.monotonic(), time.thread_time()
                last_seq = received["seq"][-1].as_py()  # sorted by seq
                drained_at = dt.datetime.now(dt.timezone.utc)
                table, counts = build_batch(received, self.ref.canonical, f"{app_id}:{version}", drained_at)
                t_build, cpu_build = time.monotonic(), time.thread_time()
                stage, claim, counts = self._claim(conn, app_id, version, table, counts, received, drained_at, lander)
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
                with self._lock:
                    r = self.result
                    r.dequeued += got
                    r.batches += 1
                    for k, v in counts.items():
                        setattr(r, k, getattr(r, k) + v)
                    total = r.dequeued
                # the batch's buffers go back to the allocator, which reuses them for the next batch:
                # memory stays at about two batches. Handing them back to the OS each batch
                # (release_unused) cost a page fault per 4 KB on the next one: ~0.4 s of system CPU
                # per 100,000 rows, on the cores the receive needs.
                del table, received
                self._progress(worker, version, counts, t0, total, last_seq, conn)

    def _settle(self, conn: Connection, settle_until: float | None) -> float | None:
        """After an empty receive: done when the queue is empty. Rows that other sessions hold (a
        competitor's open transaction) get ``settle_seconds`` to be committed away or released to
        us; rows still held then are reported, so a run never claims a clean finish it did not have.
        Returns the settle deadline to keep polling, or None to stop.

        The rows held are most often a sibling worker's batch, received and not yet claimed: the
        wait ends as soon as any worker of this drain commits a claim, not after a whole poll
        interval (which was up to a quarter of a second lost at the end of every run)."""
        with self._lock:
            seen = self._claims_committed
        held = queues.count_rows(conn, self.ref)
        conn.rollback()
        if held == 0:
            return None
        now = time.monotonic()
        settle_until = settle_until if settle_until is not None else now + self.config.drain.settle_seconds
        if now >= settle_until or stopping.requested():
            with self._lock:
                self.result.held_by_others = max(self.result.held_by_others, held)
            return None
        with self._claimed:
            self._claimed.wait_for(lambda: self._claims_committed != seen, timeout=SETTLE_POLL_SECONDS)
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
        lander: _Lander,
    ) -> tuple[float, float, dict[str, int]]:
        """Stage, claim with the DELETE, then hand the batch to the lander (Delta commit, then clear
        the claim). Returns the seconds of staging and claiming, for the bench's per-step shares, and
        the batch's counts per outcome (rows that could not be staged are quarantined)."""
        t0 = time.monotonic()
        try:
            staged = self.lake.stage(MESSAGES, table)
        except Exception as exc:  # a row that cannot be written, or the lake: isolate_unstorable tells
            table, counts = isolate_unstorable(
                received,
                table,
                lambda part: self.lake.check_stageable(MESSAGES, part),
                self.ref.canonical,
                f"{app_id}:{version}",
                drained_at,
                exc,
            )
            staged = self.lake.stage(MESSAGES, table)
        t_stage = time.monotonic()
        claimed = False
        try:
            hooks.checkpoint("after_stage")
            claims.insert(
                conn,
                self.claims_table,
                Claim(app_id, version, self.ref.canonical, MESSAGES, table.num_rows, staged.to_json()),
            )
            hooks.checkpoint("before_db_commit")
            claimed = None  # type: ignore[assignment]  # a commit that raises may still have landed
            conn.commit()
            claimed = True
        except BaseException:
            if claimed is False:
                conn.rollback()
                self.lake.discard_staged(MESSAGES, staged)
            # claimed is None: unknown. The staged files stay; if the claim landed, the next run
            # commits them, else they are orphans for vacuum and the rows are back in the queue.
            raise
        with self._claimed:
            self._claims_committed += 1
            self._claimed.notify_all()
        hooks.checkpoint("after_db_commit")
        t_claim = time.monotonic()
        lander.submit(staged, app_id, version)
        return t_stage - t0, t_claim - t_stage, counts

    def _land_claimed(self, conn: Connection, staged: StagedFiles, app_id: str, version: int) -> None:
        """Commit a claimed batch's staged files to the Delta log, then clear its claim."""
        t0 = time.monotonic()
        if not self.lake.commit_staged(MESSAGES, staged, app_id, version):
            # Under the queue's drain lock nobody else writes this app id: the version is in the log
            # because our own commit landed (e.g. it raised after writing and its retry found it).
            log.debug("%s: batch %s:%d was already committed", self.ref.canonical, app_id, version)
        hooks.checkpoint("after_delta_commit")
        t_delta = time.monotonic()
        claims.delete(conn, self.claims_table, app_id, version)
        conn.commit()
        hooks.checkpoint("after_claim_cleared")
        log.debug("timing delta %.3f clear %.3f", t_delta - t0, time.monotonic() - t_delta)

    def _backlog(self, conn: Connection, last_seq: int) -> int:
        """Backlog for the progress line: the queue's newest seq (read every few seconds) minus the
        highest seq this drain has received. Not ``peek``: its min(seq) walks the dead index entries
        the drain leaves at the head, which stalled a worker for 0.13 s (and cost the server as much
        CPU) on a churned table. Rows that arrive between two reads show at the next one; with
        competing receivers the estimate is an upper bound. -1: the read failed."""
        now = time.monotonic()
        with self._lock:
            self._received_up_to = high = max(self._received_up_to, last_seq)
            read = now - self._newest_at >= NEWEST_EVERY_SECONDS
            if read:
                self._newest_at = now
            newest = self._newest
        if read:
            if not self._read_newest(conn):
                return -1
            with self._lock:
                newest = self._newest
        return max(newest - high, 0) if newest is not None else 0

    def _read_newest(self, conn: Connection) -> bool:
        """Read the newest seq for the estimate. A failed read is not the run's failure: the progress
        line shows -1, and the connection is rolled back so that its next receive runs."""
        try:
            newest = queues.newest_seq(conn, self.ref)
            conn.rollback()
        except QueuelakeError as exc:
            log.debug("%s: reading the newest seq failed: %s", self.ref.canonical, exc)
            with contextlib.suppress(Exception):
                conn.rollback()
            return False
        with self._lock:
            self._newest = newest
        return True

    def _progress(
        self, worker: int, version: int, counts: dict[str, int], t0: float, total: int, last_seq: int, conn: Connection
    ) -> None:
        n = sum(counts.values())
        seconds = time.monotonic() - t0
        backlog = self._backlog(conn, last_seq)
        elapsed = time.monotonic() - self._started
        log.debug("drain %s: worker %d committed its batch %d", self.ref.canonical, worker, version)
        log.info(
            "drain %s: %d message(s) (%d landed, %d expired, %d quarantined) in %.2fs; "
            "%d so far at %.0f msg/s, about %d left",
            self.ref.canonical,
            n,
            counts["landed"],
            counts["expired"],
            counts["quarantined"],
            seconds,
            total,
            total / elapsed if elapsed else 0.0,
            backlog,
        )


class _Lander:
    """A worker's second thread: lands claimed batches (Delta commit, then clear the claim) in the
    order they were claimed, on a connection of its own, while the worker receives the next batch.
    One batch waits at most (the queue holds one): memory stays at two batches per worker, and the
    Delta versions of the worker's app id commit in order. Each claim is durable before it is handed
    over, so a kill at any instant leaves claims that the next run lands, as before the overlap."""

    def __init__(self, drain: QueueDrain, worker: int) -> None:
        self._drain = drain
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
        drain = self._drain
        try:
            with connect(drain.config, f"queuelake-drain-land-{self._worker}") as conn:
                while (item := self._pending.get()) is not None:
                    drain._land_claimed(conn, *item)
        except BaseException as exc:  # the claims stay: the next run lands them
            self._error = exc
            drain.budget.stop()
            while self._pending.get() is not None:  # unblock the worker until it closes
                pass


def drain(
    config: Config,
    lake: LakeEngine,
    queue_names: list[str] | None = None,
    max_messages: int | None = None,
    max_seconds: float | None = None,
) -> dict[str, Any]:
    """Drain the configured (or named) queues in parallel; returns the summary and writes ``runs``."""
    names = queue_names or config.drain.queues
    if not names:
        raise QueuelakeError("no queues to drain: set drain.queues or pass --queue")
    if config.drain.workers_per_queue > MAX_WORKERS_PER_QUEUE:
        raise QueuelakeError(f"drain.workers_per_queue is at most {MAX_WORKERS_PER_QUEUE}")
    refs = list({r.canonical: r for r in (queue_ref(n, config.transport) for n in names)}.values())
    max_messages = max_messages if max_messages is not None else config.drain.max_messages
    max_seconds = max_seconds if max_seconds is not None else config.drain.max_seconds
    deadline = time.monotonic() + max_seconds if max_seconds else None
    run_id = str(uuid.uuid4())
    started = dt.datetime.now(dt.timezone.utc)
    # opened now, in the background: the workers' connections come from it once the set-up is done
    transport = resolved_transport(config)
    shared = db.SharedAdbc(transport).start() if receive_driver(config) == "adbc" and transport.connection else None
    try:
        journal = journal_engine(lake)
        journal.create_table(MESSAGES, MESSAGES_SCHEMA)
        evolve_journal(journal)
        plan = connection_plan(config.drain.max_connections, config.drain.workers_per_queue, len(refs), shared)
        drains = [
            QueueDrain(
                config, journal, r, _Budget(config.drain.batch_size, max_messages, deadline), shared, plan.workers
            )
            for r in refs
        ]
        if plan.at_once < len(refs):
            log.info(
                "drain: %d queues, %d at a time with %d worker(s) each (drain.max_connections %d)",
                len(refs),
                plan.at_once,
                plan.workers,
                config.drain.max_connections,
            )
        # queues wait for a slot: a queue's drain lock and connections are taken when its turn comes
        with ThreadPoolExecutor(max_workers=plan.at_once, thread_name_prefix="drain") as pool:
            results = list(pool.map(lambda d: d.run(), drains))
    finally:
        if shared is not None:
            shared.close()
    record_runs(lake, run_id, "drain", started, results)
    totals = {k: sum(getattr(r, k) for r in results) for k in ("dequeued", "landed", "expired", "quarantined")}
    _log_outcome(results, totals, started)
    totals["claims_resolved"] = sum(r.claims_resolved for r in results)
    totals["held_by_others"] = sum(r.held_by_others for r in results)
    statuses = {r.status for r in results} - {"ok", "skipped"}
    status = "failed" if "failed" in statuses else next(iter(sorted(statuses)), "ok")
    return {"status": status, "run_id": run_id, **totals, "queues": [r.summary() for r in results]}


@dataclass(frozen=True)
class ConnectionPlan:
    workers: int  # per queue
    at_once: int  # queues drained at the same time


def connection_plan(max_connections: int, workers_per_queue: int, queues: int, shared: object) -> ConnectionPlan:
    """How many queues drain at once, and with how many workers, so that the run never holds more
    than ``max_connections`` database connections. A queue holds 1 + 2 per worker (its lock, each
    worker's receive and lander connections); a run with ADBC holds one more for the shared database.
    Workers per queue shrink only when one queue alone would not fit."""
    budget = max_connections - (1 if shared is not None else 0)
    workers = max(1, min(workers_per_queue, (budget - 1) // 2))
    at_once = max(1, min(queues, budget // (1 + 2 * workers)))
    return ConnectionPlan(workers, at_once)


def _log_outcome(results: list[QueueResult], totals: dict[str, int], started: dt.datetime) -> None:
    """The run's last lines: which queues had nothing (a busy queue's batches were logged as they
    went), then the totals. An idle scheduled drain says so instead of saying nothing."""
    for r in results:
        if r.status == "ok" and r.dequeued == 0 and not r.claims_resolved:
            log.info("drain %s: nothing to do, the queue is empty", r.queue)
    seconds = (dt.datetime.now(dt.timezone.utc) - started).total_seconds()
    log.info(
        "drain: %d message(s) from %d queue(s) (%d landed, %d expired, %d quarantined) in %.1fs",
        totals["dequeued"],
        len(results),
        totals["landed"],
        totals["expired"],
        totals["quarantined"],
        seconds,
    )


def evolve_journal(journal: LakeEngine) -> None:
    """Give a journal made by an older queuelake the columns added since (nullable, null in its old
    rows): a batch is staged with the table's own schema, and a column the table lacks would fail it."""
    have = set(journal.schema(MESSAGES).names)
    missing = [f for f in MESSAGES_SCHEMA if f.name not in have]
    if missing:
        log.info("journal: adding column(s) %s", ", ".join(f.name for f in missing))
        journal.add_columns(MESSAGES, [f.with_nullable(True) for f in missing])


def record_runs(lake: LakeEngine, run_id: str, command: str, started: dt.datetime, results: list[QueueResult]) -> None:
    ended = dt.datetime.now(dt.timezone.utc)
    rows = [
        {
            "run_id": run_id,
            "command": command,
            "queue": r.queue,
            "started_at": started,
            "ended_at": ended,
            "dequeued": r.dequeued,
            "landed": r.landed,
            "expired": r.expired,
            "quarantined": r.quarantined,
            "batches": r.batches,
            "seconds": r.seconds,
            "rate": r.rate,
            "backlog_left": r.backlog_left,
            "status": r.status,
            "error": r.error,
        }
        for r in results
    ]
    append_runs(lake, run_id, command, rows)

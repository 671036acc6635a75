"""Drain queue tables into the ``messages`` journal, exactly once.

Per batch, a worker: claims rows with the batched destructive receive inside an open transaction;
drops rows the journal already holds (see ``dedup``); decodes and splits the rest; appends them in
one idempotent Delta commit keyed by (worker application id, batch number); only then commits the
delete. A kill before the Delta commit rolls the delete back; a kill after it leaves rows that the
next claim recognises. Memory: a worker holds one batch, whatever the backlog.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from queuelake import hooks
from queuelake.config import Config
from queuelake.context import connect
from queuelake.errors import QueuelakeError, TransportError
from queuelake.lake.port import LakeEngine
from queuelake.pipeline.dedup import DuplicateGuard
from queuelake.pipeline.journal import MESSAGES, MESSAGES_SCHEMA, RUNS, RUNS_SCHEMA, build_batch
from queuelake.report import log
from queuelake.transport import db, queues, schema
from queuelake.transport.db import Connection
from queuelake.transport.tables import TableRef, queue_ref

MAX_WORKERS_PER_QUEUE = 32
PEEK_EVERY_SECONDS = 5.0


@dataclass
class QueueResult:
    queue: str
    dequeued: int = 0
    landed: int = 0
    expired: int = 0
    quarantined: int = 0
    duplicates_skipped: int = 0
    batches: int = 0
    seconds: float = 0.0
    rate: float = 0.0
    backlog_left: int | None = None
    status: str = "ok"
    error: str | None = None
    started_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("started_at")
        return out


class _Budget:
    """Shared by a queue's workers: message and time budgets, and a stop flag on failure."""

    def __init__(self, batch_size: int, max_messages: int | None, deadline: float | None) -> None:
        self.batch_size = batch_size
        self.remaining = max_messages
        self.deadline = deadline
        self.stopped = False
        self._lock = threading.Lock()

    def claim(self) -> int:
        with self._lock:
            if self.stopped or (self.deadline is not None and time.monotonic() >= self.deadline):
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
    """Drains one queue with N workers sharing a budget and a duplicate guard."""

    def __init__(self, config: Config, lake: LakeEngine, ref: TableRef, budget: _Budget) -> None:
        self.config = config
        self.lake = lake
        self.ref = ref
        self.budget = budget
        self.result = QueueResult(ref.canonical)
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._peeked_at, self._peeked, self._peeked_total = float("-inf"), 0, 0
        self.guard = DuplicateGuard(lake.path(MESSAGES), ref.canonical)
        self.receive_driver = receive_driver(config)

    def run(self) -> QueueResult:
        workers = self.config.drain.workers_per_queue
        with connect(self.config, "queuelake-drain-lock") as lock_conn:
            if not self._acquire(lock_conn):
                self.result.status = "skipped"
                self.result.error = f"another drain of {self.ref.canonical} is running (lock held)"
                log.warning("%s", self.result.error)
                return self.result
            errors: list[BaseException] = []
            threads = [
                threading.Thread(target=self._worker_safe, args=(w, errors), daemon=True) for w in range(workers)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.result.seconds = round(time.monotonic() - self._started, 3)
            self.result.rate = round(self.result.dequeued / self.result.seconds, 1) if self.result.seconds else 0.0
            try:
                self.result.backlog_left = queues.peek(lock_conn, self.ref)
                lock_conn.rollback()
            except QueuelakeError:
                pass
            if errors:
                self.result.status = "failed"
                self.result.error = "; ".join(sorted({str(e) for e in errors}))
        return self.result

    def _acquire(self, conn: Connection) -> bool:
        rows = conn.run(
            "drain_lock", {}, {"lock_name": "queuelake.drain:" + self.ref.canonical}, what=self.ref.canonical
        )
        conn.commit()  # the lock is the session's, not the transaction's
        return bool(rows and rows[0][0] in (True, 1, "1", "t"))

    def _worker_safe(self, worker: int, errors: list[BaseException]) -> None:
        try:
            self._worker(worker)
        except BaseException as exc:  # reported in the summary; other workers stop claiming
            self.budget.stop()
            errors.append(exc)
            log.error("%s worker %d failed: %s", self.ref.canonical, worker, exc)

    def _worker(self, worker: int) -> None:
        app_id = worker_app_id(self.ref.canonical, worker)
        name = f"w{worker}"
        version = self.lake.last_version(MESSAGES, app_id) or 0
        with connect(self.config, f"queuelake-drain-{worker}", driver=self.receive_driver) as conn:
            schema.require_table(conn, self.ref)
            conn.rollback()
            while True:
                want = self.budget.claim()
                if want == 0:
                    return
                t0 = time.monotonic()
                hooks.checkpoint("before_receive")
                received = queues.receive_batch_arrow(conn, self.ref, want)
                t_recv = time.monotonic()
                got = received.num_rows
                if got < want:
                    self.budget.give_back(want - got)
                if got == 0:
                    conn.rollback()
                    return
                fresh, dups = self.guard.split(received, name)
                version += 1
                drained_at = dt.datetime.now(dt.timezone.utc)
                table, counts = build_batch(fresh, self.ref.canonical, f"{app_id}:{version}", drained_at)
                t_build = time.monotonic()
                self._commit(conn, app_id, version, table, fresh, name)
                log.debug(
                    "timing receive %.3f build %.3f commit %.3f",
                    t_recv - t0,
                    t_build - t_recv,
                    time.monotonic() - t_build,
                )
                with self._lock:
                    r = self.result
                    r.dequeued += got
                    r.duplicates_skipped += dups
                    r.batches += 1
                    for k, v in counts.items():
                        setattr(r, k, getattr(r, k) + v)
                    total = r.dequeued
                del table, received, fresh
                pa.default_memory_pool().release_unused()  # a worker holds one batch, not a cache of them
                self._progress(worker, version, counts, t0, total, conn)

    def _commit(self, conn: Connection, app_id: str, version: int, table: pa.Table, fresh: pa.Table, name: str) -> None:
        """Delta first, then the DB delete; every way out resolves the guard."""
        delta_done: bool | None = False
        db_done = False
        self.guard.begin(name, fresh)
        try:
            hooks.checkpoint("before_delta_commit")
            if table.num_rows:
                if not self.lake.append(MESSAGES, table, app_id, version):
                    raise TransportError(
                        f"{self.ref.canonical}: batch {app_id}:{version} is already in the journal; "
                        "another process drains this queue with the same worker id"
                    )
            delta_done = True
            hooks.checkpoint("after_delta_commit")
            conn.commit()
            db_done = True
            hooks.checkpoint("after_db_commit")
        except BaseException:
            if not db_done:
                conn.rollback()
            if not delta_done and table.num_rows:
                # the commit may have landed even though append raised: ask the log. If the log
                # cannot answer, the outcome is unknown: this run neither lands nor drops those rows
                # (the guard stops a claim meeting them); the next run's journal snapshot decides.
                try:
                    delta_done = (self.lake.last_version(MESSAGES, app_id) or 0) >= version
                except Exception:
                    delta_done = None
            raise
        finally:
            self.guard.end(name, delta_done, db_done)

    def _backlog(self, conn: Connection, total: int) -> int:
        """Backlog for the progress line: a real peek every few seconds, else an estimate. A peek
        walks the dead index entries a drain leaves at the head of the seq index: not per batch."""
        now = time.monotonic()
        with self._lock:
            if now - self._peeked_at < PEEK_EVERY_SECONDS:
                return max(self._peeked - (total - self._peeked_total), 0)
            self._peeked_at = now
        try:
            depth = queues.peek(conn, self.ref)
            conn.rollback()
        except QueuelakeError:
            return -1
        with self._lock:
            self._peeked, self._peeked_total = depth, total
        return depth

    def _progress(
        self, worker: int, version: int, counts: dict[str, int], t0: float, total: int, conn: Connection
    ) -> None:
        n = sum(counts.values())
        seconds = time.monotonic() - t0
        backlog = self._backlog(conn, total)
        elapsed = time.monotonic() - self._started
        log.info(
            "drain %s w%d batch %d: %d rows (landed %d, expired %d, quarantined %d) in %.2fs, "
            "run %d rows at %.0f msg/s, backlog ~%d",
            self.ref.canonical,
            worker,
            version,
            n,
            counts["landed"],
            counts["expired"],
            counts["quarantined"],
            seconds,
            total,
            total / elapsed if elapsed else 0.0,
            backlog,
        )


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
    lake.create_table(MESSAGES, MESSAGES_SCHEMA)
    drains = [QueueDrain(config, lake, r, _Budget(config.drain.batch_size, max_messages, deadline)) for r in refs]
    with ThreadPoolExecutor(max_workers=len(drains), thread_name_prefix="drain") as pool:
        results = list(pool.map(lambda d: d.run(), drains))
    record_runs(lake, run_id, "drain", started, results)
    totals = {
        k: sum(getattr(r, k) for r in results)
        for k in ("dequeued", "landed", "expired", "quarantined", "duplicates_skipped")
    }
    status = "ok" if all(r.status in ("ok", "skipped") for r in results) else "failed"
    return {"status": status, "run_id": run_id, **totals, "queues": [r.summary() for r in results]}


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
            "duplicates_skipped": r.duplicates_skipped,
            "published": None,
            "fanned_out": None,
            "batches": r.batches,
            "seconds": r.seconds,
            "rate": r.rate,
            "backlog_left": r.backlog_left,
            "status": r.status,
            "error": r.error,
        }
        for r in results
    ]
    lake.append(RUNS, pa.Table.from_pylist(rows, schema=RUNS_SCHEMA), f"queuelake.runs/{run_id}/{command}", 1)

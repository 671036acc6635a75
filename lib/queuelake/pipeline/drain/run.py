"""The drain command: the configured (or named) queues drained in parallel, never holding more than
``drain.max_connections`` database connections; the summary, and one ``runs`` row per queue."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from queuelake import stopping
from queuelake.allocator import keep_freed_memory
from queuelake.config import Config, check_queues_named
from queuelake.config_sections import DrainConfig
from queuelake.errors import DrainError
from queuelake.lake.engines import journal_engine
from queuelake.lake.port import JournalLake, LakeEngine
from queuelake.pipeline.drain import small_queues
from queuelake.pipeline.drain.anchor_claims import Elsewhere, resolve_claims_filed_elsewhere
from queuelake.pipeline.drain.backlog import Backlog, ConnectionBudget, estimate, workers_for
from queuelake.pipeline.drain.budget import Budget
from queuelake.pipeline.drain.committer import JournalCommitter
from queuelake.pipeline.drain.queue_drain import QueueDrain
from queuelake.pipeline.drain.receive import receive_connection, receive_driver
from queuelake.pipeline.drain.result import QueueResult
from queuelake.pipeline.drain.sessions import LOCK, SessionPool, lock_session
from queuelake.pipeline.drain.task import TaskSetup
from queuelake.pipeline.journal.schema import MESSAGES, MESSAGES_SCHEMA
from queuelake.pipeline.runs import Run, unless_stopped
from queuelake.report import log
from queuelake.status import Status, worst
from queuelake.transport import db, drivers
from queuelake.transport.database import QueueDatabase
from queuelake.transport.table_refs import TableRef

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from queuelake.pipeline.drain.processes import Processes


def drain(
    config: Config,
    database: QueueDatabase,
    lake: LakeEngine,
    queue_names: list[str] | None = None,
    max_messages: int | None = None,
    max_seconds: float | None = None,
    start_spark: Callable[[], SparkSession] | None = None,
) -> dict[str, Any]:
    """Drain the configured (or named) queues in parallel; returns the summary and writes ``runs``.
    ``database`` is the queue database's handle the command opened (``context.open_database``): what
    the run's sessions, tasks and processes connect with.
    With ``drain.on: executors`` the queues are drained by Spark tasks (``executors.py``) of the
    session ``start_spark`` gives (the command's: ``spark.master``'s, started only then)."""
    # a second signal stops the workers no sooner than the first (``stopping.at_boundary_only``)
    with contextlib.ExitStack() as boundary_only:
        names = queue_names or config.drain.queues
        if not names:
            raise DrainError("no queues to drain: set drain.queues or pass --queue")
        if queue_names:  # checked as drain.queues is when the config loads
            check_queues_named(config, queue_names)
        settings = config.drain
        keep_freed_memory()  # each batch reuses the last one's pages (allocator.py)
        refs = list({r.canonical: r for r in (database.queue(n) for n in names)}.values())
        max_messages = max_messages if max_messages is not None else settings.max_messages
        max_seconds = max_seconds if max_seconds is not None else settings.max_seconds
        deadline = time.monotonic() + max_seconds if max_seconds else None
        run = Run("drain")
        # opened now, in the background: the workers' connections come from it once the set-up is done
        on_executors = settings.on in ("executors", "processes")
        receiving = receive_driver(database, settings)  # the driver's name, resolved once for every queue
        # on executors (or in local processes) each task opens its own ADBC database: the driver receives nothing
        through_adbc = receiving == drivers.ADBC.name and database.reachable and not on_executors
        shared = database.shared_adbc() if through_adbc else None
        setup = TaskSetup(database, settings, config.lake)  # what tasks and processes drain with
        processes = _start_processes(setup)
        try:
            estimated = estimate(
                database, refs
            )  # first: a database out of reach fails the run before the lake is touched
            journal = journal_engine(lake)
            journal.create_table(MESSAGES, MESSAGES_SCHEMA)
            evolve_journal(journal)
            plan = connection_plan(settings.max_connections, settings.workers_per_queue, len(refs), shared)
            backlogs = estimated.backlogs
            elsewhere = resolve_claims_filed_elsewhere(database, journal, refs, estimated.claimed_elsewhere)
            idle = [r for r in refs if backlogs[r.canonical].idle]
            busy = sorted(
                (r for r in refs if not backlogs[r.canonical].idle), key=lambda r: -(backlogs[r.canonical].depth or 0)
            )
            for r in idle:  # nothing to receive, no claim to resolve: the estimate was the whole drain
                log.info("drain %s: nothing to do, the queue is empty", r.canonical)
            budget = ConnectionBudget(queue_connections(settings.max_connections, shared))
            committer = JournalCommitter(database, journal, settings.commit_interval_seconds)
            sessions = SessionPool(
                budget.total,
                lambda kind: _open_session(database, receiving, kind, shared, settings.statement_timeout_seconds),
            )
            if processes is not None:  # they stop at their batch boundary (the stop event), whatever comes
                boundary_only.enter_context(
                    stopping.at_boundary_only("the drain's processes stop only at their batch boundary")
                )
            if on_executors:
                return _on_executors(
                    setup,
                    start_spark or _no_spark,
                    lake,
                    journal,
                    processes,
                    run,
                    refs,
                    busy,
                    backlogs,
                    plan.workers,
                    max_messages,
                    max_seconds,
                    elsewhere,
                )
            drains = [
                QueueDrain(
                    database,
                    settings,
                    journal,
                    r,
                    Budget(settings.batch_size, max_messages, deadline),
                    shared,
                    receiving,
                    workers_for(backlogs[r.canonical], settings.batch_size, max_messages, plan.workers),
                    committer,
                    sessions,
                    depth=backlogs[r.canonical].depth,
                )
                for r in busy
            ]
            if drains:
                log.info(
                    "drain: %d queue(s), %d empty, %d to drain with %s worker(s), at most %d connection(s)",
                    len(refs),
                    len(idle),
                    len(busy),
                    "/".join(str(n) for n in sorted({d.workers for d in drains}, reverse=True)),
                    settings.max_connections,
                )
            # biggest first; small queues together (``small_queues.py``); a unit waits for its connections,
            # and takes its drain locks only then
            units = small_queues.plan(drains, settings.batch_size)
            grouped = [u for u in units if len(u) > 1]
            if grouped:
                log.info(
                    "drain: %d small queue(s) drained together, in %d batch(es) of up to %d queue(s)",
                    sum(len(u) for u in grouped),
                    len(grouped),
                    max(len(u) for u in grouped),
                )
            at_once = units_at_once(len(units), budget.total)
            boundary_only.enter_context(
                stopping.at_boundary_only("the drain's workers are threads, stopped only there")
            )
            try:
                with ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="drain") as pool:
                    futures = [
                        pool.submit(_run_unit, database, settings, journal, budget, committer, sessions, u)
                        for u in units
                    ]
                    drained = [r for results in stopping.results(futures) for r in results]
            finally:
                committer.close()
                sessions.close()
            by_queue = {r.queue: r for r in drained}
            results = [by_queue.get(r.canonical) or _idle_result(r, backlogs[r.canonical]) for r in refs]
            elsewhere.mark(results)
        finally:
            if shared is not None:
                shared.close()
            if processes is not None:
                processes.close()
        unrecorded = run.record_after_work(lake, [row for r in results for row in r.runs_rows()])
        totals = {k: sum(getattr(r, k) for r in results) for k in ("dequeued", "landed", "expired", "quarantined")}
        _log_outcome(results, totals, run.started)
        # with the claims of shared batches filed under queues outside the run (``anchor_claims.py``)
        totals["claims_resolved"] = sum(r.claims_resolved for r in results) + elsewhere.resolved.claims
        totals["rows_resolved"] = sum(r.rows_resolved for r in results) + elsewhere.resolved.rows
        totals["held_by_others"] = sum(r.held_by_others for r in results)
        # the queues' sessions (kept ones included: never more than the budget), the committer's, ADBC's
        queue_sessions = max(budget.peak, sessions.peak)
        totals["peak_connections"] = queue_sessions + (1 if committer.commits else 0) + (1 if shared is not None else 0)
        totals["sessions_opened"] = sessions.opened
        totals["journal_commits"] = committer.commits
        totals["largest_group"] = committer.largest_group
        status = worst([r.status for r in results])
        summary = {"status": status, "run_id": run.run_id, **totals, **unless_stopped(unrecorded, status)}
        return {**summary, "queues": [r.summary() for r in results]}


def _on_executors(
    setup: TaskSetup,
    start_spark: Callable[[], SparkSession],
    lake: LakeEngine,
    journal: JournalLake,
    processes: Processes | None,
    run: Run,
    refs: list[TableRef],
    busy: list[TableRef],
    backlogs: dict[str, Backlog],
    most_workers: int,
    max_messages: int | None,
    max_seconds: float | None,
    elsewhere: Elsewhere,
) -> dict[str, Any]:
    """The run with its queues drained by Spark tasks (``executors.drain_on_executors``) or by the same
    tasks in local processes (``processes.drain_in_processes``): the same summary and ``runs`` rows as
    on the driver."""
    settings = setup.settings
    planned = [(r, workers_for(backlogs[r.canonical], settings.batch_size, max_messages, most_workers)) for r in busy]
    outcome = None
    drained: list[QueueResult] = []
    if planned and processes is not None:
        from queuelake.pipeline.drain.processes import drain_in_processes

        outcome = drain_in_processes(setup, journal, processes, planned, backlogs, max_messages, max_seconds)
        drained = outcome.results
    elif planned:
        from queuelake.pipeline.drain.executors import drain_on_executors

        outcome = drain_on_executors(setup, start_spark(), journal, planned, backlogs, max_messages, max_seconds)
        drained = outcome.results
    by_queue = {r.queue: r for r in drained}
    results = [by_queue.get(r.canonical) or _idle_result(r, backlogs[r.canonical]) for r in refs]
    elsewhere.mark(results)
    unrecorded = run.record_after_work(lake, [row for r in results for row in r.runs_rows()])
    totals = {k: sum(getattr(r, k) for r in results) for k in ("dequeued", "landed", "expired", "quarantined")}
    _log_outcome(results, totals, run.started)
    # with the claims of shared batches filed under queues outside the run (``anchor_claims.py``)
    totals["claims_resolved"] = sum(r.claims_resolved for r in results) + elsewhere.resolved.claims
    totals["rows_resolved"] = sum(r.rows_resolved for r in results) + elsewhere.resolved.rows
    totals["held_by_others"] = sum(r.held_by_others for r in results)
    # the command cannot count its tasks' connections: the bound the plan keeps to
    totals["peak_connections"] = outcome.connection_bound if outcome else 0
    totals["journal_commits"] = outcome.commits if outcome else 0
    totals["largest_group"] = outcome.largest_group if outcome else 0
    if settings.on == "processes":
        totals["processes"] = outcome.at_once if outcome else 0
        totals["jobs"] = outcome.jobs if outcome else 0  # small queues share a job
    else:
        totals["spark_jobs"] = outcome.jobs if outcome else 0
    status = worst([r.status for r in results])
    unrecorded = unless_stopped(unrecorded, status)
    summary = {"status": status, "run_id": run.run_id, "on": settings.on, **totals, **unrecorded}
    return {**summary, "queues": [r.summary() for r in results]}


@dataclass(frozen=True)
class ConnectionPlan:
    workers: int  # per queue
    at_once: int  # queues drained at the same time


def connection_plan(max_connections: int, workers_per_queue: int, queues: int, shared: object) -> ConnectionPlan:
    """How many queues drain at once, and with how many workers, so that the run never holds more
    than ``max_connections`` database connections. A queue holds 1 + 1 per worker (its lock, each
    worker's receive connection); the run holds one for its journal committer (clearing claims) and,
    with ADBC, one for the shared database. Workers per queue shrink only when one queue alone would
    not fit."""
    budget = queue_connections(max_connections, shared)
    workers = max(1, min(workers_per_queue, budget - 1))
    at_once = max(1, min(queues, budget // (1 + workers)))
    return ConnectionPlan(workers, at_once)


def units_at_once(units: int, connections: int) -> int:
    """How many queues (or groups of small ones) drain at once: as many as the connections allow (a
    queue's lock and at least one worker each), and no more than the machine's cores and one.

    Why the cores: the queues' workers are threads of one interpreter, and the journal build is most of
    their work. Eleven at once on two cores (what 24 connections allowed) spent their time handing the
    interpreter lock around: 500 small queues drained in 8.7 s with 11 at once, 6.9 s with 3, against
    7.1 s for one queue of the same rows (issue 32). One more than the cores keeps a core busy while
    another unit waits for the database."""
    cores = os.cpu_count() or 1
    return max(1, min(units, connections // 2, cores + 1))


def queue_connections(max_connections: int, shared: object) -> int:
    """The connections the queues share: the run's own (the committer's, ADBC's) set aside."""
    return max_connections - 1 - (1 if shared is not None else 0)


def _run_unit(
    database: QueueDatabase,
    settings: DrainConfig,
    journal: JournalLake,
    budget: ConnectionBudget,
    committer: JournalCommitter,
    sessions: SessionPool,
    unit: list[QueueDrain],
) -> list[QueueResult]:
    """A queue drained on its own, or small queues together on the connections of one queue with one
    worker (its lock session, one receive session)."""
    if len(unit) == 1:
        return [_run_within(budget, unit[0])]
    with budget.hold(2):
        return small_queues.SmallQueues(database, settings, journal, unit, committer, sessions).run()


def _run_within(budget: ConnectionBudget, queue: QueueDrain) -> QueueResult:
    """A queue's drain once its connections are free: its lock and each worker's receive connection."""
    with budget.hold(1 + queue.workers):
        return queue.run()


def _start_processes(setup: TaskSetup) -> Processes | None:
    """With ``drain.on: processes``, the run's processes, started before its set-up so that theirs
    (imports, the journal's folder, ADBC) overlaps it; an idle run pays their start for nothing."""
    if setup.settings.on != "processes":
        return None
    from queuelake.pipeline.drain.processes import Processes, process_count

    return Processes(setup, process_count(setup.database, setup.settings))


def _no_spark() -> SparkSession:
    """What a run on executors calls when its caller gave it no way to start Spark."""
    raise DrainError("drain.on: executors needs a Spark session, and the caller gave no way to start one")


def _idle_result(ref: TableRef, backlog: Backlog) -> QueueResult:
    result = QueueResult(ref.canonical, backlog_left=backlog.depth)
    result.workers = 0
    return result


def _log_outcome(results: list[QueueResult], totals: dict[str, int], started: dt.datetime) -> None:
    """The run's last lines: which queues had nothing (a busy queue's batches were logged as they
    went), then the totals. An idle scheduled drain says so instead of saying nothing."""
    for r in results:
        if r.workers and r.status == Status.OK and r.dequeued == 0 and not r.claims_resolved:
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


def evolve_journal(journal: JournalLake) -> None:
    """Give a journal made by an older queuelake the columns added since (nullable, null in its old
    rows): a batch is staged with the table's own schema, and a column the table lacks would fail it."""
    have = set(journal.staged_schema(MESSAGES).names)  # the followed log's load, the run's staging uses it too
    missing = [f for f in MESSAGES_SCHEMA if f.name not in have]
    if missing:
        log.info("journal: adding column(s) %s", ", ".join(f.name for f in missing))
        journal.add_columns(MESSAGES, [f.with_nullable(True) for f in missing])


def _open_session(
    database: QueueDatabase, driver: str, kind: str, shared: db.SharedAdbc | None, statement_timeout_s: float
) -> db.Connection:
    """A new session for the run's pool: a queue's lock connection, or a worker's receive connection
    (with ``driver``, the run's receive driver)."""
    if kind == LOCK:
        return lock_session(database, statement_timeout_s)
    return receive_connection(database, driver, shared, 0)

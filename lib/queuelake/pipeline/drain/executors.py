"""The drain on Spark executors (``drain.on: executors``): the driver plans, resolves and commits;
Spark tasks receive, build, stage and claim, one task per queue, each in its own Python process.

Why: on the driver every queue's workers share one interpreter lock, and the journal build is most
of the drain's client CPU; a system that outgrows one machine had nowhere to go. The Delta commit
stays on the driver (``poller.py``), so the journal keeps one writer per run.

The driver, in order:
1. resolves, under their drain locks, the claims killed runs left of the queues it will drain (the
   locks are held on one connection and released together before the tasks start);
2. starts the claims poller (its one connection), then runs one Spark job per queue from a pool of
   threads: as many at once as ``drain.max_connections`` allows (each task holds its queue's lock and
   one connection per worker, plus one for ADBC), and no more than that, whatever the cluster's cores;
3. collects each queue's ``QueueResult`` from its task; a job that failed after Spark's retries is
   that queue's failure only, reported with what the driver committed of it.

A job per queue (not one job of all queues): the driver knows when each queue's task has ended, so
its poller never commits claims of a queue it no longer drains, one queue's failure does not cancel
the others, and the number of queues drained at once is the pool's, not the cluster's.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from queuelake import stopping
from queuelake.config import Config
from queuelake.context import connect
from queuelake.lake.port import LakeEngine
from queuelake.pipeline.drain.backlog import Backlog
from queuelake.pipeline.drain.claims import resolve_claims
from queuelake.pipeline.drain.poller import ClaimsPoller
from queuelake.pipeline.drain.queue_drain import take_drain_lock
from queuelake.pipeline.drain.receive import receive_driver
from queuelake.pipeline.drain.result import QueueResult
from queuelake.pipeline.drain.task import QueueJob, drain_queue_task
from queuelake.report import log
from queuelake.status import Status
from queuelake.transport import claims, drivers
from queuelake.transport.tables import TableRef

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class ExecutorRun:
    """What the driver reports of a drain on executors, beside the queues' results."""

    results: list[QueueResult] = field(default_factory=list)
    at_once: int = 0
    connection_bound: int = 0  # the most database connections the run can hold (tasks and driver)
    commits: int = 0
    largest_group: int = 0


def task_connections(config: Config, workers: int) -> int:
    """What one queue's task holds: its lock, a receive connection per worker, ADBC's database."""
    adbc = receive_driver(config) == drivers.ADBC.name
    return 1 + workers + (1 if adbc else 0)


def queues_at_once(config: Config, workers: list[int]) -> int:
    """How many queue tasks may run at once within ``drain.max_connections``: the poller's connection
    set aside, each task counted at the most any queue of the run needs."""
    if not workers:
        return 0
    each = task_connections(config, max(workers))
    return max(1, min(len(workers), (config.drain.max_connections - 1) // each))


def drain_on_executors(
    config: Config,
    spark: SparkSession,
    journal: LakeEngine,
    busy: list[tuple[TableRef, int]],
    backlogs: dict[str, Backlog],
    max_messages: int | None,
    max_seconds: float | None,
) -> ExecutorRun:
    """Drain ``busy`` (queue, workers) on Spark executors; the module's docstring says how."""
    out = ExecutorRun()
    ready, skipped, resolved = resolve_first(config, journal, [r for r, _ in busy], backlogs)
    out.results.extend(skipped)
    todo = [(r, w) for r, w in busy if r.canonical in ready]
    if not todo:
        return out
    out.at_once = queues_at_once(config, [w for _, w in todo])
    out.connection_bound = out.at_once * task_connections(config, max(w for _, w in todo)) + 1
    deadline = time.time() + max_seconds if max_seconds else None
    group = f"queuelake-drain-{uuid.uuid4().hex[:12]}"
    sc = spark.sparkContext
    poller = ClaimsPoller(config, journal, on_failure=lambda _exc: sc.cancelJobGroup(group)).start()
    log.info(
        "drain: %d queue(s) on Spark executors, %d at once (at most %d connection(s): each task its queue's "
        "lock and workers, the driver one to commit)",
        len(todo),
        out.at_once,
        out.connection_bound,
    )
    jobs = [QueueJob(config, r, w, max_messages, deadline, log.level or 20, poller.lock_name) for r, w in todo]
    try:
        with ThreadPoolExecutor(max_workers=out.at_once, thread_name_prefix="drain-job") as pool:
            drained = list(pool.map(partial(_run_job, spark, group, poller), jobs))
    finally:
        poller.close()
    for result in drained:
        result.claims_resolved += resolved.get(result.queue, 0)
    out.results.extend(drained)
    out.commits, out.largest_group = poller.commits, poller.largest_group
    return out


def resolve_first(
    config: Config, journal: LakeEngine, refs: list[TableRef], backlogs: dict[str, Backlog]
) -> tuple[set[str], list[QueueResult], dict[str, int]]:
    """The claims killed runs left of ``refs``, committed under the queues' drain locks, taken on one
    connection and released together when it closes. Returns the queues to drain, the results of those
    another drain holds (skipped), and the claims resolved per queue."""
    pending = [r for r in refs if backlogs[r.canonical].claims]
    if not pending:
        return {r.canonical for r in refs}, [], {}
    held: list[QueueResult] = []
    resolved: dict[str, int] = {}
    table = claims.claims_ref(config.transport)
    with connect(config, "queuelake-drain-resolve") as conn:
        for ref in pending:
            if not take_drain_lock(conn, ref):
                result = QueueResult(ref.canonical, status=Status.SKIPPED)
                result.error = f"another drain of {ref.canonical} is running (lock held)"
                log.warning("%s", result.error)
                held.append(result)
                continue
            resolved[ref.canonical] = resolve_claims(conn, journal, table, ref.canonical)
    busy = {r.queue for r in held}
    return {r.canonical for r in refs if r.canonical not in busy}, held, resolved


def _run_job(spark: SparkSession, group: str, poller: ClaimsPoller, job: QueueJob) -> QueueResult:
    """One queue's Spark job (a task), while the poller commits what it claims."""
    queue = job.ref.canonical
    result: QueueResult
    if stopping.requested() or poller.error is not None:
        result = QueueResult(queue, status=Status.INTERRUPTED if poller.error is None else Status.FAILED)
        result.error = "not started: the run was stopped" if poller.error is None else str(poller.error)
        return result
    sc = spark.sparkContext
    poller.watch(queue)
    try:
        sc.setJobGroup(group, f"queuelake drain {queue}", interruptOnCancel=True)
        rdd = sc.parallelize([0], 1).mapPartitions(partial(drain_queue_task, job))
        result = rdd.collect()[0]
    except Exception as exc:  # every attempt of the task failed, or the poller cancelled it
        result = QueueResult(queue, status=Status.FAILED, workers=job.workers)
        result.error = str(poller.error) if poller.error is not None else task_error(queue, exc)
        log.error("drain %s: %s", queue, result.error)
    finally:
        poller.release(queue)  # what the last attempt claimed is committed now, not by the next run
    # a retried task reports its last attempt; what killed attempts claimed the driver committed
    result.dequeued = max(result.dequeued, poller.rows[queue])
    return result


def task_error(queue: str, exc: BaseException) -> str:
    """A failed Spark job as one line, without the JVM's stack."""
    for line in str(exc).splitlines():
        if "QueuelakeError" in line or "DrainError" in line or "TransportError" in line or "LakeError" in line:
            return f"the drain task of {queue} failed: {line.strip()[:300]}"
    first = next((ln.strip() for ln in str(exc).splitlines() if "Exception" in ln or "Error" in ln), "")
    reason = f": {first[:200]}" if first else f" ({type(exc).__name__})"
    return f"the drain task of {queue} failed after Spark's retries{reason}; what it claimed is in the journal"

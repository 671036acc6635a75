"""The drain on Spark executors (``drain.on: executors``): the driver plans, resolves and commits;
Spark tasks receive, build, stage and claim, each in its own Python process: a task per big queue,
small queues packed several to a task (``plan_jobs``).

Why: on the driver every queue's workers share one interpreter lock, and the journal build is most
of the drain's client CPU; a system that outgrows one machine had nowhere to go. The Delta commit
stays on the driver (``poller.py``), so the journal keeps one writer per run.

The driver, in order:
1. resolves, under their drain locks, the claims killed runs left of the queues it will drain (the
   locks are held on one connection and released together before the tasks start);
2. starts the claims poller (its one connection), then runs one Spark job (one task) per planned
   job from a pool of threads: as many at once as ``drain.max_connections`` allows (a task drains
   its queues one after another and holds one queue's lock and one connection per worker at a time,
   plus one for ADBC), and no more than that, whatever the cluster's cores;
3. collects each queue's ``QueueResult`` from its task; a job that failed after Spark's retries is
   its queues' failure only, each reported with what the driver committed of it.

Small queues share a job: a job costs ~0.3 s of an executor's core whatever it drains (Spark's
scheduling, the task's set-up: delta-rs on the journal, ADBC; the driver's commit of its last
batches waited for), and a queue of one batch drains in a few hundredths of a second. A queue is
small when it holds at most a batch (``drain.batch_size``); small queues go together up to
``PACK_BATCHES`` batches of rows a job, and over about ``JOBS_PER_SLOT`` jobs per slot (a job run
at once: the pool's, at most the cluster's cores), so the cores stay evenly busy. A bigger queue
has a job of its own, as before.

A job per queue or per few queues (not one job of all queues): the driver knows when each job has
ended, so its poller stops committing claims of queues it no longer drains, one job's failure does
not cancel the others, and the number of jobs at once is the pool's, not the cluster's. The poller
watches a job's queues for the whole job, also before its task has taken a queue's lock: a claim of
that queue committed then is another run's, and the lake's exactly-once group commit lands each
batch once whoever commits it (``poller.py``). A task keeps each queue's lock until the end of the
job (``task.py``), so from its start to the job's end a queue's claims are this run's.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from queuelake import report, stopping
from queuelake.config_sections import DrainConfig
from queuelake.errors import DrainError, error_kind
from queuelake.lake.port import JournalLake
from queuelake.pipeline.drain.backlog import Backlog
from queuelake.pipeline.drain.claims import Resolved, resolve_claims
from queuelake.pipeline.drain.poller import ClaimsPoller
from queuelake.pipeline.drain.queue_drain import take_drain_lock
from queuelake.pipeline.drain.receive import receive_driver
from queuelake.pipeline.drain.result import QueueResult
from queuelake.pipeline.drain.task import QueueJob, TaskSetup, drain_queues_task
from queuelake.report import log
from queuelake.spark_progress import cancelling
from queuelake.status import Status
from queuelake.transport import drivers
from queuelake.transport.database import QueueDatabase
from queuelake.transport.table_refs import TableRef

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# a job of small queues holds at most this many batches' rows (their estimated depths)
PACK_BATCHES = 8
# small queues are spread over about this many jobs per slot (a job run at once)
JOBS_PER_SLOT = 2


@dataclass
class ExecutorRun:
    """What the driver reports of a drain on executors, beside the queues' results."""

    results: list[QueueResult] = field(default_factory=list)
    at_once: int = 0
    connection_bound: int = 0  # the most database connections the run can hold (tasks and driver)
    commits: int = 0
    largest_group: int = 0
    jobs: int = 0  # Spark jobs run (one task each): fewer than the queues when small ones share one


def task_connections(database: QueueDatabase, settings: DrainConfig, workers: int) -> int:
    """What a task holds at most at a time (it drains its queues one after another, closing a queue's
    connections before the next one's): a queue's lock, a receive connection per worker, ADBC's."""
    adbc = receive_driver(database, settings) == drivers.ADBC.name
    return 1 + workers + (1 if adbc else 0)


def queues_at_once(database: QueueDatabase, settings: DrainConfig, workers: list[int]) -> int:
    """How many tasks (Spark jobs) may run at once within ``drain.max_connections``: the poller's
    connection set aside, each task counted at the most any queue of the run needs."""
    if not workers:
        return 0
    each = task_connections(database, settings, max(workers))
    return max(1, min(len(workers), (settings.max_connections - 1) // each))


def plan_jobs(
    todo: list[tuple[TableRef, int]],
    backlogs: dict[str, Backlog],
    batch_size: int,
    max_messages: int | None,
    slots: int,
    pack_batches: int | None = PACK_BATCHES,
) -> list[list[tuple[TableRef, int]]]:
    """The run's Spark jobs, each a list of (queue, workers) its task drains in order: a queue of more
    than a batch alone (biggest first, as ``todo`` comes), the rest packed in ``todo``'s order up to
    ``pack_batches`` batches of rows a job (None: no cap) and ``ceil(small / (slots * JOBS_PER_SLOT))``
    queues a job, so they spread over about ``JOBS_PER_SLOT`` jobs per slot (a job that runs at once).
    A queue whose depth is unknown counts as big."""

    def rows(ref: TableRef) -> int | None:
        depth = backlogs[ref.canonical].depth
        if depth is None:
            return None
        return depth if max_messages is None else min(depth, max_messages)

    def is_small(ref: TableRef) -> bool:
        n = rows(ref)
        return n is not None and n <= batch_size

    big = [[(r, w)] for r, w in todo if not is_small(r)]
    small = [(r, w) for r, w in todo if is_small(r)]
    if not small:
        return big
    per_job = max(1, math.ceil(len(small) / (slots * JOBS_PER_SLOT)))
    most_rows = pack_batches * batch_size if pack_batches is not None else None
    packed: list[list[tuple[TableRef, int]]] = []
    job: list[tuple[TableRef, int]] = []
    job_rows = 0
    for ref, workers in small:
        n = rows(ref) or 0
        if job and (len(job) >= per_job or (most_rows is not None and job_rows + n > most_rows)):
            packed.append(job)
            job, job_rows = [], 0
        job.append((ref, workers))
        job_rows += n
    packed.append(job)
    return big + packed


def drain_on_executors(
    setup: TaskSetup,
    spark: SparkSession,
    journal: JournalLake,
    busy: list[tuple[TableRef, int]],
    backlogs: dict[str, Backlog],
    max_messages: int | None,
    max_seconds: float | None,
) -> ExecutorRun:
    """Drain ``busy`` (queue, workers) on Spark executors; the module's docstring says how."""
    database, settings = setup.database, setup.settings
    out, todo, resolved = begin_run(database, journal, busy, backlogs)
    if not todo:
        return out
    out.at_once = queues_at_once(database, settings, [w for _, w in todo])
    out.connection_bound = out.at_once * task_connections(database, settings, max(w for _, w in todo)) + 1
    deadline = time.time() + max_seconds if max_seconds else None
    group = f"queuelake-drain-{uuid.uuid4().hex[:12]}"
    sc = spark.sparkContext
    poller = ClaimsPoller(
        database, journal, settings.commit_interval_seconds, on_failure=lambda _exc: sc.cancelJobGroup(group)
    ).start()
    log.info(
        "drain: %d queue(s) on Spark executors, %d at once (at most %d connection(s): each task its queue's "
        "lock and workers, the driver one to commit)",
        len(todo),
        out.at_once,
        out.connection_bound,
    )
    # the jobs that run at the same time: the pool's, and no more than the cluster's cores (as Spark
    # reports them now: executors that register later only find the jobs coarser)
    slots = max(1, min(out.at_once, sc.defaultParallelism))
    planned = plan_jobs(todo, backlogs, settings.batch_size, max_messages, slots)
    out.jobs = len(planned)
    log.info("drain: %d Spark job(s) for %d queue(s) (small queues share a job)", len(planned), len(todo))
    jobs = queue_jobs(setup, planned, backlogs, max_messages, deadline, poller)
    try:
        said = "drain: stopping now as asked: its Spark tasks are cancelled (a batch in hand rolls back)"
        watch = cancelling(stopping.now_requested, lambda: sc.cancelJobGroup(group), said)
        with stopping.at_boundary_only(STOPPED_NOW), report.every(0.25, watch, "drain-stop"):
            with ThreadPoolExecutor(max_workers=out.at_once, thread_name_prefix="drain-job") as pool:
                drained = [r for results in pool.map(partial(_run_job, spark, group, poller), jobs) for r in results]
    finally:
        poller.close()
    return end_run(out, drained, resolved, poller)


# why a second signal raises nothing while the tasks run: they are cancelled, and the summary counts what
# the driver committed of them (a second signal raised in the waiting thread lost the counts and the runs
# rows of 34,000 landed rows: a review)
STOPPED_NOW = "its Spark tasks are cancelled now; what they claimed is committed and counted"


def begin_run(
    database: QueueDatabase, journal: JournalLake, busy: list[tuple[TableRef, int]], backlogs: dict[str, Backlog]
) -> tuple[ExecutorRun, list[tuple[TableRef, int]], dict[str, Resolved]]:
    """What a run in tasks (on executors, in local processes) does before it plans: the claims killed
    runs left resolved (``resolve_first``), the queues another drain holds reported as skipped.
    Returns the run's report so far, the queues to drain and the claims resolved per queue."""
    out = ExecutorRun()
    ready, skipped, resolved = resolve_first(database, journal, [r for r, _ in busy], backlogs)
    out.results.extend(skipped)
    return out, [(r, w) for r, w in busy if r.canonical in ready], resolved


def queue_jobs(
    setup: TaskSetup,
    planned: list[list[tuple[TableRef, int]]],
    backlogs: dict[str, Backlog],
    max_messages: int | None,
    deadline: float | None,
    poller: ClaimsPoller,
) -> list[tuple[QueueJob, ...]]:
    """The planned jobs as their tasks get them: one ``QueueJob`` per queue."""
    level = log.level or 20
    return [
        tuple(
            QueueJob(setup, r, w, max_messages, deadline, level, poller.lock_name, backlogs[r.canonical].depth)
            for r, w in job
        )
        for job in planned
    ]


def end_run(
    out: ExecutorRun, drained: list[QueueResult], resolved: dict[str, Resolved], poller: ClaimsPoller
) -> ExecutorRun:
    """The queues' results, with the claims resolved before the tasks ran, and the poller's commits.

    Counted again now the poller is closed: a poll that began before a job's release took its queues
    off the watch may land a claim after the job counted them (a cancelled task's Python worker lives
    on for a moment and claims one more batch). A CI run saw it: 3,750 rows reported, 3,900 landed."""
    for result in drained:
        count_what_the_driver_committed(result, poller)
        before = resolved.get(result.queue, Resolved())
        result.claims_resolved += before.claims
        result.rows_resolved += before.rows
    out.results.extend(drained)
    out.commits, out.largest_group = poller.commits, poller.largest_group
    return out


def resolve_first(
    database: QueueDatabase, journal: JournalLake, refs: list[TableRef], backlogs: dict[str, Backlog]
) -> tuple[set[str], list[QueueResult], dict[str, Resolved]]:
    """The claims killed runs left of ``refs``, committed under the queues' drain locks, taken on one
    connection and released together when it closes. Returns the queues to drain, the results of those
    another drain holds (skipped), and the claims resolved per queue."""
    pending = [r for r in refs if backlogs[r.canonical].claims]
    if not pending:
        return {r.canonical for r in refs}, [], {}
    held: list[QueueResult] = []
    resolved: dict[str, Resolved] = {}
    table = database.claims
    with database.connect("queuelake-drain-resolve") as conn:
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


def _run_job(spark: SparkSession, group: str, poller: ClaimsPoller, job: tuple[QueueJob, ...]) -> list[QueueResult]:
    """One Spark job (a task) draining ``job``'s queues in order, while the poller commits what they
    claim; one result per queue."""
    names = [q.ref.canonical for q in job]

    def on_spark(queued: tuple[QueueJob, ...]) -> list[QueueResult]:
        sc = spark.sparkContext
        what = names[0] if len(names) == 1 else f"{len(names)} queues ({names[0]}, ...)"
        sc.setJobGroup(group, f"queuelake drain {what}", interruptOnCancel=True)
        return sc.parallelize([0], 1).mapPartitions(partial(drain_queues_task, queued)).collect()

    return run_job(poller, on_spark, task_error, job)


def run_job(
    poller: ClaimsPoller,
    run: Callable[[tuple[QueueJob, ...]], list[QueueResult]],
    describe: Callable[[str, BaseException], str],
    job: tuple[QueueJob, ...],
) -> list[QueueResult]:
    """``job``'s queues drained by ``run`` (a Spark task, or a local process: ``processes.py``) while
    the poller commits what they claim; one result per queue. A run that failed (after its retries)
    fails its queues only, each reported with what the driver committed of it (``describe`` gives
    the error's line)."""
    names = [q.ref.canonical for q in job]
    if stopping.requested() or poller.error is not None:
        out = []
        for queue in names:
            result = QueueResult(queue, status=Status.INTERRUPTED if poller.error is None else Status.FAILED)
            result.error = "not started: the run was stopped" if poller.error is None else str(poller.error)
            result.error_kind = None if poller.error is None else error_kind(poller.error)
            out.append(result)
        return out
    for queue in names:
        poller.watch(queue)
    results: list[QueueResult]
    try:
        results = run(job)
        missing = set(names) - {r.queue for r in results}
        if missing:
            raise DrainError(f"the drain task returned no result for {', '.join(sorted(missing))}")
    except Exception as exc:  # every attempt of the task failed, or the poller cancelled it, or a stop did
        results = []
        for q in job:
            if poller.error is None and stopping.now_requested():  # cancelled as asked (the stop watch above)
                result = QueueResult(q.ref.canonical, status=Status.INTERRUPTED, workers=q.workers)
                result.error = "stopped as asked: its Spark task was cancelled"
                log.warning("drain %s: %s", q.ref.canonical, result.error)
                results.append(result)
                continue
            result = QueueResult(q.ref.canonical, status=Status.FAILED, workers=q.workers)
            result.error = str(poller.error) if poller.error is not None else describe(q.ref.canonical, exc)
            result.error_kind = error_kind(poller.error if poller.error is not None else exc)
            log.error("drain %s: %s", q.ref.canonical, result.error)
            results.append(result)
    finally:
        poller.release(names)  # what the last attempt claimed is committed now, not by the next run
    for result in results:
        count_what_the_driver_committed(result, poller)
        if poller.error is not None and result.status == Status.INTERRUPTED:
            # stopped because the poller failed (local processes share one stop with it), not by a stop
            # asked: the queue failed, and says why (it read "interrupted" and the command exited 143)
            result.status = Status.FAILED
            result.error, result.error_kind = str(poller.error), error_kind(poller.error)
    return results


def count_what_the_driver_committed(result: QueueResult, poller: ClaimsPoller) -> None:
    """A retried task reports its last attempt only; the batches killed attempts claimed the driver
    committed, and they count too: the queue's rows, batches and outcomes are then those of every
    claim the poller committed for it (each claim records its batch's outcomes), so that dequeued is
    landed + expired + quarantined. A claim without outcomes (an earlier version's) leaves them as
    the task reported."""
    committed = poller.rows[result.queue]
    if committed <= result.dequeued:
        return
    result.dequeued = committed
    result.batches = max(result.batches, poller.queue_batches[result.queue])
    counts = poller.outcomes.get(result.queue)
    if counts is not None and sum(counts.values()) == committed:
        result.landed, result.expired, result.quarantined = counts["landed"], counts["expired"], counts["quarantined"]


def task_error(queue: str, exc: BaseException) -> str:
    """A failed Spark job as one line, without the JVM's stack."""
    for line in str(exc).splitlines():
        if "QueuelakeError" in line or "DrainError" in line or "TransportError" in line or "LakeError" in line:
            return f"the drain task of {queue} failed: {line.strip()[:300]}"
    first = next((ln.strip() for ln in str(exc).splitlines() if "Exception" in ln or "Error" in ln), "")
    reason = f": {first[:200]}" if first else f" ({type(exc).__name__})"
    return f"the drain task of {queue} failed after Spark's retries{reason}; what it claimed is in the journal"

"""The drain in local processes (``drain.on: processes``): the queues' workers run in Python processes
of this machine, the journal commit in the command's own (the claims poller), as on Spark executors
but without Spark.

Why: on the driver every queue's workers are threads of one process, sharing its interpreter lock.
With hundreds of small queues the lock's hand-overs between a dozen threads cost more than the work:
a drain of 500 queues of 1,000 made 1.97 million futex calls (one queue of 500,000: 7,270) and ran at
0.60-0.70 of the one queue's rate; two commands of 250 queues each, started together, took 1.0-2.1 s
less than one of 500. A Spark task's code (``task.py``) already drains queues in a process of its
own and hands each claimed batch to the driver through the claims table; this runs the same tasks,
planned the same way (``executors.plan_jobs``), in a few local processes.

The processes (``drain.processes``, default the machine's cores, and no more than
``drain.max_connections`` allows: each holds its queue's lock and workers' connections) are started
with ``spawn`` (the command holds threads, and with the JVM engine a JVM, which ``fork`` would copy
half-way) and kept for the run: each takes the next job when it has finished one.

A process that dies (SIGKILL, the OOM killer) fails that job's attempt only: the job runs again in a
new process, up to ``ATTEMPTS`` in all, as Spark retries a task; the retry waits under each queue's
lock until the poller has committed what the dead one claimed (``TaskCommitter.begin``). The command
killed instead: its processes find the poller's lock free and stop (``TaskCommitter``); the next
run commits what they claimed.

Stopping: a SIGTERM to the command is passed on to its processes, which stop at their next batch
boundary as the driver's threads do. A terminal's Ctrl-C reaches the whole process group: the
processes ignore SIGINT and let the command decide.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import queue
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial

from queuelake import stopping
from queuelake.config_sections import DrainConfig
from queuelake.errors import DrainError
from queuelake.lake.port import JournalLake
from queuelake.pipeline.drain.backlog import Backlog
from queuelake.pipeline.drain.executors import (
    ExecutorRun,
    begin_run,
    end_run,
    plan_jobs,
    queue_jobs,
    run_job,
    task_connections,
)
from queuelake.pipeline.drain.poller import ClaimsPoller
from queuelake.pipeline.drain.result import QueueResult
from queuelake.pipeline.drain.task import QueueJob, TaskResources, TaskSetup, drain_queues_task
from queuelake.report import log
from queuelake.transport.database import QueueDatabase
from queuelake.transport.table_refs import TableRef

ATTEMPTS = 4  # a job's runs in all when its process dies: Spark's default spark.task.maxFailures
STOP_CHECK_SECONDS = 0.2  # how often the command looks for a stop request to pass on
PARENT_CHECK_SECONDS = 0.5  # how often a process looks whether its command is still there


class StopFlag:
    """The command's stop as its processes see it: a byte of shared memory the command sets and each
    process looks at every ``STOP_CHECK_SECONDS``. Why not a multiprocessing ``Event``: its ``set``
    waits until every process asleep in its ``wait`` has woken, and a process killed while asleep never
    does: the command hung for good when its commit session went after one of its processes had been
    SIGKILLed (a review). Setting and reading a byte takes no lock that a dead process could hold."""

    def __init__(self, context: multiprocessing.context.SpawnContext) -> None:
        self._flag = context.RawValue(ctypes.c_bool, False)

    def set(self) -> None:
        self._flag.value = True

    def is_set(self) -> bool:
        return bool(self._flag.value)


def process_count(database: QueueDatabase, settings: DrainConfig) -> int:
    """The processes a run starts: ``drain.processes`` (default the machine's cores), no more than
    ``drain.max_connections`` allows (the poller's connection aside, each process holds at most its
    queue's lock, a connection per worker, and ADBC's)."""
    wanted = settings.processes or os.cpu_count() or 1
    each = task_connections(database, settings, settings.workers_per_queue)
    return max(1, min(wanted, (settings.max_connections - 1) // each))


def drain_in_processes(
    setup: TaskSetup,
    journal: JournalLake,
    processes: Processes,
    busy: list[tuple[TableRef, int]],
    backlogs: dict[str, Backlog],
    max_messages: int | None,
    max_seconds: float | None,
) -> ExecutorRun:
    """Drain ``busy`` (queue, workers) in local processes; the module's docstring says how."""
    database, settings = setup.database, setup.settings
    out, todo, resolved = begin_run(database, journal, busy, backlogs)
    if not todo:
        return out
    slots = min(processes.size, len(todo))
    out.at_once = slots
    # the processes that run jobs hold a task's connections; every process started holds its ADBC
    # database from its start (an idle one too), and the poller one
    adbc = task_connections(database, settings, 0) - 1
    out.connection_bound = (
        slots * task_connections(database, settings, max(w for _, w in todo)) + (processes.size - slots) * adbc + 1
    )
    deadline = time.time() + max_seconds if max_seconds else None
    poller = ClaimsPoller(
        database, journal, settings.commit_interval_seconds, on_failure=lambda _exc: processes.stop.set()
    ).start()
    # small queues spread evenly over the processes, however many rows (a Spark task's cap on a
    # job's rows bounds what a retry repeats there; here a job of 80 queues of 500 left one process
    # draining the last 20 alone while the other idled)
    planned = plan_jobs(todo, backlogs, settings.batch_size, max_messages, slots, pack_batches=None)
    out.jobs = len(planned)
    log.info(
        "drain: %d queue(s) in %d local process(es), %d job(s) (small queues share one); at most %d connection(s): "
        "each process its queue's lock and workers, the command one to commit",
        len(todo),
        slots,
        len(planned),
        out.connection_bound,
    )
    jobs = queue_jobs(setup, planned, backlogs, max_messages, deadline, poller)
    try:
        with ThreadPoolExecutor(max_workers=slots, thread_name_prefix="drain-process") as pool:
            run = partial(run_job, poller, processes.run, process_error)
            # waited on as the threads' drain is: a signal is handled within POLL_SECONDS, not at the end
            futures = [pool.submit(run, job) for job in jobs]
            drained = [r for results in stopping.results(futures) for r in results]
    finally:
        poller.close()
    return end_run(out, drained, resolved, poller)


class Processes:
    """The run's local processes. Started with the command (``__init__``): each imports the drain's
    code and opens delta-rs on the journal's folder and its ADBC database while the command sets up
    (0.6-0.9 s a process, that a run otherwise waited for). A process runs one job at a time, keeps
    what it opened from one job to the next, and is replaced when it dies; ``close`` stops them all."""

    def __init__(self, setup: TaskSetup, size: int) -> None:
        self._setup = setup
        self._context = multiprocessing.get_context("spawn")
        self._idle: queue.SimpleQueue[ProcessPoolExecutor] = queue.SimpleQueue()
        self._all: list[ProcessPoolExecutor] = []
        self._mutex = threading.Lock()
        self._closed = threading.Event()
        self.size = size
        # started ignoring the stop signals (multiprocessing's resource tracker, which shared memory may start,
        # too): a terminal's or a scheduler's signal to the whole group is the command's to decide
        with stopping.ignored_while_starting_children():
            self.stop = StopFlag(self._context)
            for _ in range(size):
                self._idle.put(self._start())
        threading.Thread(target=self._pass_on_stop, name="drain-stop-watch", daemon=True).start()

    def run(self, job: tuple[QueueJob, ...]) -> list[QueueResult]:
        """``job`` drained in an idle process; run again in a new one when the process dies."""
        names = ", ".join(q.ref.canonical for q in job[:3]) + (", ..." if len(job) > 3 else "")
        pool = self._idle.get()
        try:
            for attempt in range(1, ATTEMPTS + 1):
                try:
                    return pool.submit(drain_job_in_process, job).result()
                except BrokenProcessPool:
                    pool.shutdown(wait=False)
                    pool = self._start()
                    if attempt == ATTEMPTS or stopping.requested():
                        raise DrainError(
                            f"the drain process of {names} died {attempt} time(s); what it claimed is in the journal"
                        ) from None
                    log.warning(
                        "drain %s: its process died; the job runs again in a new process (attempt %d of %d)",
                        names,
                        attempt + 1,
                        ATTEMPTS,
                    )
            raise AssertionError("unreachable")
        finally:
            self._idle.put(pool)

    def close(self) -> None:
        """Stop every process: at once when it is idle (or still starting), else after its job."""
        self._closed.set()
        with self._mutex:
            pools, self._all = self._all, []
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)

    def _start(self) -> ProcessPoolExecutor:
        pool = ProcessPoolExecutor(
            max_workers=1,
            mp_context=self._context,
            initializer=_set_up_process,
            initargs=(self._setup, self.stop, log.level or 20, _log_format(), os.getpid()),
        )
        pool.submit(int)  # the process starts now, not at its first job
        with self._mutex:
            self._all.append(pool)
        return pool

    def _pass_on_stop(self) -> None:
        """Until closed: a stop request to this command (SIGTERM) becomes one to every process."""
        while not self._closed.wait(STOP_CHECK_SECONDS):
            if stopping.requested():
                self.stop.set()
                return


_opened: TaskResources | None = None  # in a local process: what it opened for its jobs
_failed_to_open: Exception | None = None  # or why it could not


def drain_job_in_process(job: tuple[QueueJob, ...]) -> list[QueueResult]:
    """In a local process: the job's queues drained one after another (``task.drain_queues_task``),
    with the journal and ADBC database the process opened as it started."""
    if _failed_to_open is not None:
        raise _failed_to_open
    return list(drain_queues_task(job, iter([0]), _opened))


def process_error(queue: str, exc: BaseException) -> str:
    """A failed job as one line."""
    if isinstance(exc, DrainError):
        return str(exc)
    first = str(exc).splitlines()[0][:300] if str(exc) else ""
    return f"the drain process of {queue} failed: {type(exc).__name__}: {first}"


def _set_up_process(setup: TaskSetup, stop: StopFlag, level: int, fmt: str | None, command: int) -> None:
    """A new process: logs to stderr as the command does, ignores SIGINT (the command decides), stops
    at the next batch boundary when the command asks (``stop``) or gets a SIGTERM itself, ends when
    the command (pid ``command``) is gone, and opens what its jobs share (``TaskResources``).

    The command's pid comes from the command, not from ``os.getppid()`` here: a process still starting
    (its imports take seconds on a loaded machine) when the command was SIGKILLed already has init for
    its parent, and watching that pid kept it, and its ADBC connection, alive for good."""
    global _opened, _failed_to_open
    from queuelake.report import setup_logging

    setup_logging(level, fmt)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGHUP"):  # a closed terminal's hang-up reaches the whole group: the command decides
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stopping.request())  # to the group: stop at a boundary

    def wait_for_stop() -> None:
        while not stop.is_set():
            time.sleep(STOP_CHECK_SECONDS)
        stopping.request()

    threading.Thread(target=wait_for_stop, name="drain-stop", daemon=True).start()
    threading.Thread(target=_exit_with_the_command, args=(command,), name="drain-parent", daemon=True).start()
    log.debug("drain: a local process, pid %d", os.getpid())
    try:
        _opened = TaskResources.open(setup)
    except Exception as exc:  # raised by the process's first job, not taken for a dead process
        _failed_to_open = exc


def _exit_with_the_command(command: int) -> None:
    """End this process once the command that started it is gone (SIGKILLed: nobody will send it a
    job or read its result, and an idle process would wait for one forever). Ending at any instant is
    safe: the server rolls back what the process had open, and its claims wait for the next run."""
    while os.getppid() == command:
        time.sleep(PARENT_CHECK_SECONDS)
    log.warning("drain: the command (pid %d) is gone; its process %d ends", command, os.getpid())
    os._exit(70)


def _log_format() -> str | None:
    """The command's log format, for its processes to log alike."""
    from queuelake.report import JsonFormatter

    return "json" if any(isinstance(h.formatter, JsonFormatter) for h in log.handlers) else None

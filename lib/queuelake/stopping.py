"""A process-wide "please stop" flag, set by SIGTERM (what Airflow and Databricks send on cancel).

Why a flag and not an exception: a drain must stop at a batch boundary, after the batch in hand is
claimed and committed, so nothing is half-done. Long loops ask ``requested()`` between units of work.
"""

from __future__ import annotations

import contextlib
import contextvars
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, wait
from typing import Any, TypeVar

from queuelake.report import log

T = TypeVar("T")

# a plain flag, not a threading.Event: ``request`` runs in signal handlers, which may run inside one
# another, and an Event's lock taken by a handler inside a handler holding it never came back (a review:
# an orphaned job hung for good after a burst of SIGTERMs)
_requested = False
# the command's own SIGTERM/SIGINT/SIGHUP handlers (cli._sigterm), to put back where a library replaced them
_handlers: dict[int, Callable[[int, Any], Any]] = {}


class Interrupted(BaseException):
    """SIGTERM ends the command now. A BaseException, so no ``except Exception`` on the way swallows it."""


def stop_within(exc: BaseException) -> BaseException | None:
    """The stop (``Interrupted``, ``KeyboardInterrupt``) an error replaced on its way out, if any. Why: a
    second signal raises the stop inside whatever the command was doing; inside pyspark's ``toArrow``,
    its ``finally`` then waits for the job the handler cancelled and raises that job's SparkException,
    with the stop only as its context: the command ended "failed", error_kind "unexpected". A step that
    fails alone (a transform, ``run``'s bodies step) asks this too: such an error is the stop's, and
    any other error is a failure even while a stop is pending (the first, graceful signal cancels no
    job)."""
    seen: set[int] = set()
    current = exc.__context__
    while current is not None and id(current) not in seen:
        if isinstance(current, (Interrupted, KeyboardInterrupt)):
            return current
        seen.add(id(current))
        current = current.__context__
    return None


def partial(stop: BaseException, done: dict[str, Any]) -> None:
    """Attach what the command had done to the stop ending it (a second signal's ``Interrupted``, a
    ``KeyboardInterrupt``), for the command's summary (``done_before``)."""
    try:
        stop.__dict__.setdefault("queuelake_done", {}).update(done)
    except AttributeError:  # an exception type without a __dict__: the summary goes without the parts
        pass


def done_before(stop: BaseException, command: str | None = None) -> dict[str, Any]:
    """What ``partial`` attached to the stop: the summary's parts done before it, else nothing. A step
    attaches its parts under its name (``{"publish": {...}}``), as ``run`` nests its steps; for the
    ``command`` that is that step alone they come to the top, where every other ending of the command has
    them: a ``publish`` stopped while its Spark session started nested its counts under "publish" (a
    script reading ``summary["published"]`` failed in that one case: a review)."""
    done = dict(stop.__dict__.get("queuelake_done", {}))
    inner = done.get(command) if command is not None else None
    if isinstance(inner, dict):
        del done[command]  # type: ignore[arg-type]
        done.update({k: v for k, v in inner.items() if k not in ("status", "error")})
    return done


def stop_signals() -> list[int]:
    """The signals a command takes as a stop request: SIGTERM, SIGINT, and SIGHUP unless it is ignored
    (``nohup`` ignores it so a command outlives its terminal: that is kept). Why SIGHUP: an operator's
    ssh session that dropped, or a closed terminal, ended a drain at once, by the default action, with no
    summary and no ``runs`` row."""
    signals: list[int] = [signal.SIGTERM, signal.SIGINT]
    hangup = getattr(signal, "SIGHUP", None)  # not on Windows
    if hangup is not None and signal.getsignal(hangup) is not signal.SIG_IGN:
        signals.append(hangup)
    return signals


@contextlib.contextmanager
def ignored_while_starting_children() -> Iterator[None]:
    """The stop signals (SIGTERM, SIGINT, SIGHUP) ignored while child processes are started, which keep
    ignoring them (an ignored signal stays ignored across exec; a handler does not). A terminal's Ctrl-C
    and hang-up reach the command's whole process group, and so does a scheduler's cancel: Airflow's task
    runner and systemd (``KillMode=control-group``) send SIGTERM to every process of the group. Spark's
    JVM, which pyspark starts ignoring SIGINT only, shut down under the stage the command was finishing
    (it still ends when the command does: it exits when its stdin, a pipe from the command, closes);
    the drain's processes died starting. The command decides, and stops its children. Held only around
    the starts (milliseconds): a signal that arrives in them is lost."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.signal(sig, signal.SIG_IGN) for sig in _STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


# what the kernel sends a job whose parent (spark-submit) died (``jobs.stop_with_parent``): a stop at
# the next batch boundary however many times it comes (SIGUSR1 is no one else's in a job's process)
PARENT_GONE = getattr(signal, "SIGUSR1", signal.SIGTERM)
# whether this process asked the kernel for PARENT_GONE: only then does the command take the signal
# (another command leaves SIGUSR1 to whoever uses it: faulthandler's stack dumps, say)
_parent_watched = False


def watch_parent() -> None:
    global _parent_watched
    _parent_watched = True


def parent_watched() -> bool:
    return _parent_watched


_STOP_SIGNALS = [signal.SIGTERM, signal.SIGINT] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])


def request() -> None:
    """Ask every loop of this process to stop at its next boundary. Takes no lock (signal handlers call it)."""
    global _requested
    _requested = True


def requested() -> bool:
    return _requested


def reset() -> None:
    """For tests and long-lived processes that run several commands."""
    global _requested, _now
    _requested = _now = False


# a second stop signal came while the command stops only at a batch boundary (``at_boundary_only``)
_now = False


def request_now() -> None:
    """A second stop signal, taken while the command stops only at a batch boundary: a loop that can stop
    sooner and still count what it did does (an executors drain cancels its Spark tasks; the driver has
    committed what they claimed). Takes no lock (signal handlers call it)."""
    global _now
    _now = True


def now_requested() -> bool:
    return _now


# why a second signal cannot stop the command sooner just now, while it waits on threads that stop at
# their batch boundary (``at_boundary_only``); None: it can
_boundary_only: str | None = None


@contextlib.contextmanager
def at_boundary_only(why: str) -> Iterator[None]:
    """While held, a second signal stops nothing sooner than the first: the command's handler says so
    and raises nothing. Why: a drain's workers are threads, which stop only at their batch boundary; a
    second SIGTERM raised in the main thread while it waited on them (or closed the journal's committer)
    gained nothing, the pool still waiting for them, and lost the counts and the ``runs`` row of what they
    had journalled (a review, after Airflow's kill). Held from the workers' start to the summary only:
    before it (a database out of reach) a second signal still ends the command now."""
    global _boundary_only
    before, _boundary_only = _boundary_only, why
    try:
        yield
    finally:
        _boundary_only = before


def only_at_boundary() -> str | None:
    """Why a stop cannot come sooner than the next batch boundary now (``at_boundary_only``), else None."""
    return _boundary_only


# the longest the main thread waits on its workers without running Python. Why: the kernel may give a
# signal to any thread; Python runs its handler in the main thread, and only once that thread runs
# Python again. A main thread blocked with no timeout (a drain waiting on its queues) never did: the
# drain went on to the end of its queues after Airflow's cancel (a review)
POLL_SECONDS = 0.5


def join(thread: threading.Thread) -> None:
    """``thread.join()``, waking every ``POLL_SECONDS`` so that a signal is handled meanwhile."""
    while thread.is_alive():
        thread.join(POLL_SECONDS)


def results(futures: list[Future[T]]) -> list[T]:
    """The futures' results in order, waiting as ``join`` does."""
    pending = set(futures)
    while pending:
        _, pending = wait(pending, timeout=POLL_SECONDS)
    return [f.result() for f in futures]


def keep_handlers(handlers: dict[int, Callable[[int, Any], Any]]) -> None:
    """Remember the command's signal handlers (``{}``: the command has ended)."""
    _handlers.clear()
    _handlers.update(handlers)


@contextlib.contextmanager
def handlers_kept() -> Iterator[None]:
    """While a library starts, it cannot replace the command's handlers of its signals with its own
    (pyspark's SparkContext sets a SIGINT handler that cancels every job and raises KeyboardInterrupt).
    Why: ``restore_handlers`` after the start left seconds in which Ctrl-C reached pyspark's handler,
    whose Py4J call inside the session's construction broke it ("reentrant call"): the step failed,
    and the stop was lost (a review). Ignoring a signal, or the default action, stays allowed."""
    if not _handlers or threading.current_thread() is not threading.main_thread():
        yield
        return
    real = signal.signal

    def keeping(signum: int, handler: Any) -> Any:
        if signum in _handlers and callable(handler) and handler is not _handlers[signum]:
            return signal.getsignal(signum)  # theirs not installed; ours stays
        return real(signum, handler)

    signal.signal = keeping  # type: ignore[assignment]
    try:
        yield
    finally:
        signal.signal = real


def restore_handlers() -> None:
    """Put the command's signal handlers back. Why: pyspark's SparkContext installs its own SIGINT
    handler when it starts (cancel every job, raise KeyboardInterrupt), so Ctrl-C in a Spark stage skipped
    the batch boundary, the counts and the ``runs`` row that SIGTERM gave (issue 59). Called once a session
    is up (``spark.get_spark``); handlers can only be set from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, handler in _handlers.items():
        if signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)


# how often a long ``interruptible`` call with a ``still`` text says it is still running
STILL_SECONDS = 10.0
# interruptible calls a stop left running in their threads, each its "ended" event (``is_alive`` of a thread
# whose join a signal interrupted says False while it runs on: Python marks it stopped)
_LEFT_BEHIND: list[threading.Event] = []


def calls_left_behind() -> bool:
    """Whether a stop left an ``interruptible`` call running in its thread (inside deltalake's or
    pyarrow's native code): the process should end without the interpreter's teardown, which such a
    thread can crash (``jobs.run_job``)."""
    return any(not ended.is_set() for ended in _LEFT_BEHIND)


def end_now_if_calls_left_behind(code: int, exit_handlers: bool = False) -> None:
    """A stopped command whose stop left a native call running in a thread (a compaction, a read waiting
    on the store: ``stopping.calls_left_behind``) ends here, its summary and logs flushed, without the
    interpreter's teardown: that thread crashed it, and spark-submit exited 139 (a segmentation fault)
    after a SIGTERM-stopped ``maintain`` had printed its summary, about one run in two (a review); so
    did the ``queuelake`` program, a publish stopped twice while it read the lake's log (a review).
    ``exit_handlers``: the atexit handlers run first (the program's: the embedded server's stop)."""
    if not calls_left_behind():
        return
    import atexit
    import logging
    import os
    import sys

    if exit_handlers:
        atexit._run_exitfuncs()
    logging.shutdown()  # every handler flushed
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def interruptible(call: Callable[[], T], still: str | None = None) -> T:
    """``call()`` run in a daemon thread that the main thread waits on, so that a stop signal's handler
    runs at once; off the main thread, ``call()`` itself. ``still``: what the call does, logged as still
    going on every ``STILL_SECONDS`` while it runs (a journal's compaction was silent for 199 s: a review).

    Why: Python runs a signal's handler in the main thread, between two of its bytecodes. A read that
    sat in pyarrow's or deltalake's native code, inside their S3 retries, held it there: ``failures``
    took a Ctrl-C 146 s after it was pressed (a review). A thread's join is a lock's wait, which a signal
    interrupts: the handler runs, and a command that stops at once (``Interrupted``, ``KeyboardInterrupt``)
    raises it from the wait. The read then goes on in its thread, which the exiting process does not wait
    for; a graceful command's first signal only asks for a stop, and the wait goes on."""
    if threading.current_thread() is not threading.main_thread():
        return call()
    outcome: dict[str, Any] = {}
    context = contextvars.copy_context()

    ended = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = context.run(call)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread as it is
            outcome["error"] = exc
        finally:
            ended.set()

    worker = threading.Thread(target=run, name="queuelake-interruptible-read", daemon=True)
    started = time.monotonic()
    worker.start()
    try:
        worker.join(None if still is None else STILL_SECONDS)
        while not ended.is_set():
            log.info("%s: still running (%.0fs)", still, time.monotonic() - started)
            worker.join(STILL_SECONDS)
    except BaseException:  # a stop now: the call goes on in its thread, left behind (``calls_left_behind``)
        _LEFT_BEHIND.append(ended)
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]

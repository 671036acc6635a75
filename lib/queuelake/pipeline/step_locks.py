"""One ``bodies`` step and one ``transform`` step per lake at a time, across processes and hosts: a
session lock in the queue database (``transport.locks``, as a drain holds its queue's), named after
the lake, held for the whole step. ``erase`` and ``maintain``'s retention take both locks too,
waiting for running steps (``steps_stopped``).

Why: each step reads its increment (the journal versions since its last commit) once, at its start,
and commits much later. Two overlapping ones (a scheduler starting the next run while the last still
works, an operator's command beside the scheduled one) both wrote the rows of the versions they
shared: typed rows and transform outputs twice. And an erase while bodies ran removed the typed rows
there were, then bodies committed rows built from the journal before the erase: the erased bodies
stayed, and a second erase found nothing left to select (found by a review); an erase's purge
removed journal files a running transform read, which then failed. The database is the one
service every process of a deployment reaches; the lake, on an object store, has no lock of its own.

A lock goes with its session: a database restarted (or a terminated backend, an idle-session timeout)
under a running step freed it, and an ``erase`` then ran beside the step, which went on to commit typed
rows of the messages erased meanwhile (a review). So a step asks ``confirm`` right before each of its
commits: the lock's connection must still answer. What is left is the window of one commit.

A step that finds the lock held skips its work (status ok, ``skipped`` says why): the running one is
doing it, and the next run takes the rest. ``queuelake run`` then ends "incomplete" (exit 1), naming the
step in ``held_steps`` (``held_back``): it did not do a step it was configured to do; so do the standalone
``bodies`` and ``transform`` commands (``standalone``). With the embedded
database (a laptop's throwaway server, which a bodies or transform step would otherwise not start) or a
database out of reach, the step runs without the lock, the latter with a warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from queuelake import stopping
from queuelake.config import Config
from queuelake.errors import PipelineError, QueuelakeError, TransportError
from queuelake.report import log
from queuelake.status import Status
from queuelake.transport import locks
from queuelake.transport.database import QueueDatabase
from queuelake.transport.db import Connection

BODIES, TRANSFORM = "bodies", "transform"
WAIT_LOG_SECONDS = 60.0  # how often a waiting command says it still waits

# the steps whose lock this process holds, each with the connection holding it (``confirm``)
_holding: dict[str, Connection] = {}
_holding_guard = threading.Lock()


def lock_name(cfg: Config, step: str) -> str:
    """The lock's name: the step and the lake, hashed (a name has a length limit). One lake, however
    its root is written (relative or absolute, ``file://``, a trailing slash, ``s3a://`` for
    ``s3://``, ``abfss://`` for ``abfs://``), has one name: configs that spell it apart took two
    locks (found by a review)."""
    return f"queuelake.{step}:{hashlib.sha256(lake_id(cfg.lake.root).encode('utf-8')).hexdigest()[:32]}"


def lake_id(root: str) -> str:
    """The lake's root as one spelling: a local folder's absolute path, a URI's scheme family."""
    scheme, sep, rest = root.partition("://")
    if not sep:
        return os.path.abspath(root)
    if scheme.lower() == "file":
        return os.path.abspath(rest)
    scheme = {"s3a": "s3", "s3n": "s3", "abfss": "abfs", "wasbs": "wasb"}.get(scheme.lower(), scheme.lower())
    return f"{scheme}://{rest.rstrip('/')}"


@contextlib.contextmanager
def held(cfg: Config, step: str, wait_seconds: float = 0.0) -> Iterator[bool]:
    """Hold ``step``'s lock on this lake for the block; yields False when another process holds it
    (after waiting up to ``wait_seconds``, or until a stop is asked), True otherwise (also when no
    lock can be taken: the embedded database, a database out of reach)."""
    if cfg.transport.embedded and not cfg.transport.connection:  # a connection given wins over embedded
        yield True
        return
    try:
        conn = QueueDatabase(cfg.transport).connect(f"queuelake-{step}-lock")
    except QueuelakeError as exc:
        log.warning("%s: the queue database is out of reach for its lock (%s); going on without it", step, exc)
        yield True
        return
    with conn:
        name = lock_name(cfg, step)
        try:
            got = locks.try_lock(conn, name, what=f"the {step} step")
        except QueuelakeError as exc:  # a login the lock statement refuses: the step ran before, and still runs
            log.warning("%s: its lock cannot be taken (%s); going on without it", step, exc)
            yield True
            return
        started = next_note = time.monotonic()
        while not got and time.monotonic() - started < wait_seconds and not stopping.requested():
            if time.monotonic() >= next_note:
                log.info("waiting for the %s step running on this lake to finish", step)
                next_note = time.monotonic() + WAIT_LOG_SECONDS
            time.sleep(1.0)
            got = locks.try_lock(conn, name, what=f"the {step} step")
        if got:
            with _holding_guard:
                _holding[step] = conn
        try:
            yield got
        finally:
            if got:
                with _holding_guard:
                    _holding.pop(step, None)
                _release(conn, name, step)


def confirm(step: str, command: str | None = None) -> None:
    """Before a commit of ``step``'s work: raises ``TransportError`` when this process took the step's
    lock and its connection no longer answers (the lock went with it, and an erase may have run since:
    nothing more may be committed; the next run redoes what is not). ``command``: an erase or a
    maintain holding the step's lock to keep the step from running beside its deletes (a bodies step
    then typed the erased messages back, for good: a review). A step running without a lock (the
    embedded database, a database out of reach) has nothing to confirm. ``transport``: the database's
    connection is what failed, and a scheduler's retry of it is what is needed."""
    with _holding_guard:
        conn = _holding.get(step)
        if conn is None:
            return
        try:
            locks.confirm_held(conn, what=f"the {step} step's lock")
        except TransportError as exc:
            if command is not None:
                raise TransportError(
                    f"{command}: its hold on the {step} step went with its database connection "
                    f"({locks.reason(exc)}): a {step} step may have run since, so nothing more is deleted; "
                    f"run the {command} again"
                ) from None
            raise TransportError(
                f"{step}: its lock on this lake went with its database connection ({locks.reason(exc)}): "
                "an erase or maintain's retention may have run since, so nothing more is committed; "
                "the next run does the rest"
            ) from None


@contextlib.contextmanager
def steps_stopped(cfg: Config, command: str, wait_seconds: float) -> Iterator[None]:
    """Hold the transform and bodies locks for the block, waiting (up to ``wait_seconds`` each) for
    steps running on this lake: for what deletes journal rows and their derived rows and purges
    files (``erase``, ``maintain``'s retention). A bodies step beside it wrote rows derived from the
    journal before the delete back (typed rows of erased or expired messages, for good), and a
    transform failed on the files the purge removed. Taken in the order a transform takes them (its
    typed tables' catch-up takes the bodies lock inside its own), so neither waits for the other
    forever. Raises when a step outlasts the wait (``PipelineError``) or a stop is asked meanwhile
    (``stopping.Interrupted``); nothing was changed then."""
    with contextlib.ExitStack() as locked:
        for step in (TRANSFORM, BODIES):
            if not locked.enter_context(held(cfg, step, wait_seconds=wait_seconds)):
                if stopping.requested():  # a stop asked while it waited: said as a stop, not a failure
                    raise stopping.Interrupted(f"{command}: stopped while waiting for the {step} step")
                raise PipelineError(
                    f"{command}: a {step} step has been running on this lake for over {wait_seconds // 60:.0f} "
                    f"minutes: run {command} again once it has finished (nothing was changed)"
                )
        yield


def _release(conn: Connection, name: str, step: str) -> None:
    """Give the lock back; a connection lost meanwhile (a failover, an idle-session timeout) holds no
    lock any more, and its error must not replace the step's own outcome (found by a review)."""
    try:
        locks.unlock(conn, name, what=f"the {step} step")
    except QueuelakeError as exc:
        log.warning("%s: its lock's connection was lost (%s); the lock went with it", step, exc)


def one_at_a_time(cfg: Config, step: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``run()`` under ``step``'s lock; skipped (status ok) while another process runs that step."""
    with held(cfg, step) as got:
        if got:
            return run()
    holder = _holder(step)
    log.warning("%s: %s; skipped (the next run takes the rest)", step, holder)
    return {"status": Status.OK, "skipped": holder}


def held_back(step: str, summary: dict[str, Any]) -> bool:
    """Whether ``summary`` is ``one_at_a_time``'s for ``step`` skipped because its lock was held."""
    return summary.get("skipped") == _holder(step)


def standalone(step: str, summary: dict[str, Any]) -> dict[str, Any]:
    """The ``bodies`` or ``transform`` command's outcome: as ``run`` ends for that step, "incomplete" (exit 1)
    with ``held_steps`` when its lock was held, ``summary`` otherwise ("nothing to do" stays ok). Why: the
    command ended "ok", exit 0, with only a warning and ``skipped``, and a scheduler read the step as done."""
    if not held_back(step, summary):
        return summary
    error = (
        f"the {step} step did not run: its lock was held ({_holder(step)}); run {step} again once it has "
        "finished, or let the next run do it"
    )
    log.warning("%s: incomplete: %s", step, error)
    return {**summary, "status": Status.INCOMPLETE, "held_steps": [step], "error": error}


def _holder(step: str) -> str:
    """Who holds ``step``'s lock: that step of another process, or an erase or retention (they hold both)."""
    return f"another {step} step, an erase or maintain's retention is running on this lake"

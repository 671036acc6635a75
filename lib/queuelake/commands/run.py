"""``queuelake run``: drain, bodies (when ``bodies.enabled``), transform, publish, the scheduled job."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from queuelake.commands.command import Command
from queuelake.commands.drain import queue_arguments, spark_starter

# steps whose failure leaves only their own tables behind: the later steps still run (one message type
# whose bodies failed stopped every later transform and publish, for as long as the type kept failing).
# A transform that reads a typed table catches the bodies up itself, and fails alone if they cannot be.
_GO_ON_AFTER_FAILURE = ("bodies", "transform")


def _failed_in_some_queues(drained: dict[str, Any], going_on: tuple[str, ...]) -> bool:
    """Whether a failed drain failed only in some of its queues, the others drained: the steps after it
    still run over what landed, and the run reports the failure at its end. Why: one queue table
    dropped or altered by another program (a decommissioned endpoint) skipped bodies, transform and
    publish for every queue, on every scheduled run until the config was edited (a review)."""
    from queuelake.report import log

    queues = [q for q in drained.get("queues") or [] if isinstance(q, dict)]
    failed = [str(q.get("queue")) for q in queues if q.get("status") not in going_on]
    if not failed or len(failed) == len(queues):
        return False
    log.error(
        "run: the drain failed in %d of %d queue(s) (%s); the steps after it run over what landed",
        len(failed),
        len(queues),
        ", ".join(failed[:5]) + (", ..." if len(failed) > 5 else ""),
    )
    return True


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    """drain, bodies, transform, publish (bodies before transform: a transform may read the typed
    tables of the same journal versions; skipped when ``bodies.enabled`` is false). A failed drain stops the run,
    unless it failed in some queues only (``_failed_in_some_queues``); a failed bodies or transform step does not
    stop the steps after it, and the run reports "failed" at its end. Stops before the next step once SIGTERM asked
    to stop (status "interrupted", the steps not run are listed, and any that failed before the stop as
    ``failed_steps``). A drain that ended "incomplete" (rows held by other sessions) does not stop the later steps,
    but the run reports "incomplete"; so does a bodies or transform step skipped because another process held
    its lock (``held_steps``)."""
    from queuelake import config as config_mod
    from queuelake import stopping
    from queuelake.commands.publish import publish_steps
    from queuelake.commands.sessions import Sessions
    from queuelake.context import open_database
    from queuelake.pipeline import transform as transform_mod
    from queuelake.pipeline.bodies import run as bodies_mod
    from queuelake.pipeline.drain.run import drain as run_drain
    from queuelake.pipeline.publish import run as publish_mod
    from queuelake.pipeline.step_locks import BODIES, TRANSFORM, held_back, one_at_a_time
    from queuelake.report import log
    from queuelake.status import Status

    cfg = config_mod.load(args.config)
    for problem in transform_mod.unloadable(cfg):  # said now, not after the drain; the other steps run
        log.error("%s: the transform step will fail", problem)
    database = open_database(cfg)  # the queue database's handle, for the drain and the publish
    sessions = Sessions(cfg, None)
    from queuelake.lake.storage import job_secrets

    publish, publish_pending = publish_steps(database)
    order = {
        "drain": lambda: run_drain(
            cfg, database, sessions.quiet(), args.queues, args.max_messages, args.max_seconds, spark_starter(cfg)
        ),
        "bodies": lambda: one_at_a_time(cfg, BODIES, lambda: sessions.step(bodies_mod.bodies, bodies_mod.pending)),
        "transform": lambda: one_at_a_time(
            cfg, TRANSFORM, lambda: sessions.step(transform_mod.transform, transform_mod.pending)
        ),
        # as ``queuelake publish``: a clean round is checked and sent without a session (a run after a
        # ``maintain`` started one for its round of no rows)
        "publish": lambda: sessions.step(publish, publish_pending, writes=publish_mod.written_tables),
    }
    if not cfg.bodies.enabled:
        del order["bodies"]
    steps: dict[str, Any] = {}
    going_on = (Status.OK, Status.INCOMPLETE)
    for name, step in order.items():
        if stopping.requested():
            break
        started = time.monotonic()
        try:
            steps[name] = _step(name, step, lambda: job_secrets(cfg.transport.connection, cfg.lake.storage_options))
        except BaseException as exc:
            # a stop that ends the command now (a second signal): the steps done go with it to the
            # summary (``stopping.partial``), which said only "interrupted" while the journal had grown
            stopped = exc if isinstance(exc, (stopping.Interrupted, KeyboardInterrupt)) else stopping.stop_within(exc)
            skipped = [n for n in order if n not in steps and n != name and _has_work(cfg, n)]
            if stopped is not None:
                stopping.partial(stopped, {**steps, "interrupted_step": name, "skipped": skipped})
            else:  # a failure that ends the run: the steps done before it stay in its summary, named
                # as a returned failure names them (``failed_steps``: one spelling for a scheduler to read)
                earlier = [n for n, s in steps.items() if s.get("status") not in (*going_on, Status.INTERRUPTED)]
                stopping.partial(exc, {**steps, "failed_steps": [*earlier, name], "skipped": skipped})
            raise
        # the whole step, a Spark session's start included: what a scheduler's run is made of
        steps[name]["step_seconds"] = round(time.monotonic() - started, 3)
        if steps[name].get("status") == Status.INTERRUPTED:
            break  # a stop request: the steps after it are skipped, and the run says "interrupted"
        # an incomplete drain (rows other sessions held) journalled everything it took: go on
        if steps[name].get("status") not in going_on and name not in _GO_ON_AFTER_FAILURE:
            if not _failed_in_some_queues(steps[name], going_on):
                break
    statuses = {s.get("status") for s in steps.values()}
    failed = [n for n, s in steps.items() if s.get("status") not in (*going_on, Status.INTERRUPTED)]
    skipped = [n for n in order if n not in steps and _has_work(cfg, n)]
    # a bodies or transform step another process held the lock of (an erase, maintain's retention, an
    # overlapping run): not done, and the run says so as a drain that left rows others held does
    # ("incomplete", exit 1). It said "ok", exit 0, with only a warning and the step's nested
    # ``skipped`` to tell a scheduler that its transform had not run (a review).
    held_steps = [n for n, s in steps.items() if held_back(n, s)]
    held = {"held_steps": held_steps} if held_steps else {}
    if (Status.INCOMPLETE in statuses or held) and not (failed or skipped or Status.INTERRUPTED in statuses):
        if held_steps:
            error = (
                f"the {' and '.join(held_steps)} step did not run: its lock was held (an erase, maintain's "
                "retention or another run's step on this lake)"
            )
            log.warning("run: incomplete: %s (the next run does it)", error)
            return {"status": Status.INCOMPLETE, **steps, **held, "error": error}
        return {"status": Status.INCOMPLETE, **steps}
    if Status.INTERRUPTED in statuses or (skipped and stopping.requested()):
        # a stop is what the scheduler asked for, and its exit code (143, 130, 129) says so even when an
        # earlier step failed: the run said "failed", exit 1, a retry's signal (found by a review)
        return {
            "status": Status.INTERRUPTED,
            **steps,
            "skipped": skipped,
            **({"failed_steps": failed} if failed else {}),
            **held,
        }
    if failed:  # named, and what it kept from running (a drain failed by its status ran nothing after it)
        return {
            "status": Status.FAILED,
            **steps,
            "failed_steps": failed,
            **({"skipped": skipped} if skipped else {}),
            **held,
        }
    if skipped:
        return {"status": Status.INTERRUPTED, **steps, "skipped": skipped, **held}
    return {"status": Status.OK, **steps}


def _has_work(cfg: Any, name: str) -> bool:
    """Whether a step not run would have had anything to do: a run without transforms or outputs
    configured listed "transform" and "publish" as skipped after its drain failed (found by a review),
    which read as work left undone."""
    if name == "transform":
        return bool(cfg.transforms)
    if name == "publish":
        return bool(cfg.publish.outputs)
    return True


def _step(name: str, step: Callable[[], dict[str, Any]], secrets: Callable[[], list[str]]) -> dict[str, Any]:
    """The step's summary; a bodies or transform step that raised (an error outside the parts it fails
    alone: a Spark job over every type, a library's bug) is a failed step, and the run goes on. Why: one
    message whose body broke the bodies step failed every scheduled run before its transforms and
    publish ran (found by a review). A stop is not a failure: it goes to the command; an error while a
    stop is pending is the step's failure, and the run then ends "interrupted" (found by a review: the
    first, graceful signal cancels no Spark job, and the run said "failed", exit 1). ``secrets``: what
    the error must not show (``lake.storage.job_secrets``), asked only on a failure."""
    from queuelake import stopping
    from queuelake.errors import SPARK_EXTRA, describe, error_kind, is_panic, missing_spark
    from queuelake.redaction import redact
    from queuelake.report import log
    from queuelake.status import Status

    if name not in _GO_ON_AFTER_FAILURE:
        return step()
    try:
        return step()
    except BaseException as exc:
        if not (isinstance(exc, Exception) or is_panic(exc)) or stopping.stop_within(exc) is not None:
            raise  # the stop itself, or the error of the Spark job a second signal cancelled
        error = redact(describe(exc), secrets())  # as the command's own failure is (``cli._failure``)
        kind = error_kind(exc)
        package = missing_spark(exc)
        if package:  # a delta-rs install without the extra: the step with work says what to install
            error = f"the {name} step needs {package}, which is not installed: {SPARK_EXTRA} ({error})"
            kind = "missing-dependency"
        log.error("run: the %s step failed: %s; the steps after it still run", name, error)
        return {"status": Status.FAILED, "error": error, "error_kind": kind}


COMMAND = Command(
    name="run",
    help="drain, bodies, transform, publish",
    run=run_all,
    arguments=queue_arguments,
    graceful=True,
    job=True,
)

"""A replay's canary (``--canary N``): its first N messages are sent first (batch 0 of a plan cut with a
canary, ``plan.Cut``), then the journal is watched until each of them is processed (an audit copy)
and none failed again (an error copy), within ``--canary-wait`` seconds.

The journal shows an outcome only once the audit or error copy is drained. While waiting, each poll
(every ``canary_poll`` seconds) first drains the queues of ``drain.queues`` that are not one of the
replay's destinations (draining a destination would take the canaries away from their endpoint),
bounded by the time left, then reads the canaries' outcomes (``lineage.outcomes``). With no such
queue configured, it only reads the journal: another drain (a schedule) must bring the copies.

Nothing here sends or writes to the ledger: the wait is read-only besides the drains, which are
exactly once themselves, so a kill during the wait loses nothing; the rest is sent by the same
replay id (this run, or any later one), skipping the batches the ledger holds. The kill tests stop the
process at each phase (``canary_waiting``, ``canary_polled``, ``canary_passed`` below; the rest's send
at the sender's ``before_replay_commit`` / ``after_replay_commit``; the wait's drain at its own points):
tests/pipeline/replay/test_canary.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from queuelake import kill_points, stopping
from queuelake.errors import QueuelakeError
from queuelake.lake.port import LakeEngine
from queuelake.pipeline.replay.lineage import FAILED_AGAIN, PENDING, PROCESSED, outcomes
from queuelake.report import log
from queuelake.transport.database import QueueDatabase

PASSED, FAILED, TIMEOUT, STOPPED = "processed", "failed-again", "timeout", "stopped"


@dataclass
class Verdict:
    """How the canaries ended: ``passed`` (all processed), ``failed-again``, ``timeout`` or ``stopped``
    (SIGTERM, Ctrl-C); each canary's outcome; what the wait did."""

    status: str
    canaries: list[dict[str, Any]] = field(default_factory=list)
    waited_seconds: float = 0.0
    polls: int = 0
    drains: int = 0
    drained_queues: list[str] = field(default_factory=list)
    drain_errors: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def reason(self) -> str:
        by = {PROCESSED: [], FAILED_AGAIN: [], PENDING: []}  # type: dict[str, list[str]]
        for c in self.canaries:
            by[c["outcome"]].append(f"{c['queue']}@{c['seq']} ({c['sent_message_id']})")
        if self.status == FAILED:
            return f"canary failed again: {', '.join(by[FAILED_AGAIN])}"
        if self.status == TIMEOUT:
            return f"canary not processed within {self.waited_seconds:.0f}s: {', '.join(by[PENDING])} still pending" + (
                "" if self.drained_queues else " (no queue of drain.queues to drain: is a drain running?)"
            )
        return f"stopped while waiting for the canary: {', '.join(by[PENDING]) or 'none'} pending"


def drain_queues(database: QueueDatabase, configured: list[str], destinations: set[str]) -> list[str]:
    """The queues the wait drains: ``configured`` (``drain.queues``) less the replay's destinations
    (canonical names)."""
    out = []
    for name in configured:
        if database.queue(name).canonical not in destinations:
            out.append(name)
    return out


def wait(
    queues: list[str],
    lake: LakeEngine,
    canaries: pa.Table,
    wait_seconds: float,
    poll_seconds: float,
    drain: Callable[[list[str], float], Any] | None = None,
) -> Verdict:
    """Poll until every canary (lineage rows) is processed, one failed again, or ``wait_seconds`` passed;
    ``drain`` drains ``queues`` (``drain_queues``) before each poll."""
    verdict = Verdict(PENDING, drained_queues=queues)
    started = time.monotonic()
    deadline = started + wait_seconds
    log.info(
        "replay canary: waiting up to %.0fs for %d message(s) to be processed%s",
        wait_seconds,
        canaries.num_rows,
        f", draining {', '.join(queues)} every {poll_seconds:g}s"
        if queues
        else " (nothing to drain: polling the journal)",
    )
    kill_points.reached("canary_waiting")  # batch 0 sent and its lineage written; no poll yet
    while True:
        poll_started = time.monotonic()
        if queues and drain is not None:
            try:
                drain(queues, max(1.0, deadline - poll_started))
                verdict.drains += 1
            except QueuelakeError as exc:  # a drain that failed: the wait goes on, the verdict says it
                log.warning("replay canary: the drain failed: %s", exc)
                verdict.drain_errors.append(str(exc))
        found = outcomes(lake, canaries)
        verdict.polls += 1
        kill_points.reached("canary_polled")  # the outcomes read, the verdict not yet drawn
        verdict.canaries = found.select(
            ["queue", "seq", "message_id", "sent_message_id", "destination", "outcome", "outcome_at"]
        ).to_pylist()
        states = [c["outcome"] for c in verdict.canaries]
        verdict.waited_seconds = round(time.monotonic() - started, 3)
        if FAILED_AGAIN in states:
            verdict.status = FAILED
            return verdict
        if all(s == PROCESSED for s in states):
            kill_points.reached("canary_passed")  # every canary processed, the rest not yet sent
            verdict.status = PASSED
            return verdict
        log.info(
            "replay canary: %d of %d processed, %.0fs left",
            states.count(PROCESSED),
            len(states),
            deadline - time.monotonic(),
        )
        if time.monotonic() >= deadline:
            verdict.status = TIMEOUT
            return verdict
        pause = min(poll_seconds - (time.monotonic() - poll_started), deadline - time.monotonic())
        end = time.monotonic() + max(0.0, pause)
        while time.monotonic() < end:
            if stopping.requested():
                verdict.status = STOPPED
                return verdict
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))
        if stopping.requested():
            verdict.status = STOPPED
            return verdict

"""Shared batches whose claim is filed under a queue this run does not drain: resolved at the run's
start, under that queue's drain lock.

Why: a batch of several small queues (``small_queues.py``) is claimed under its first queue, the anchor,
though its rows came from every member. A drain killed after that claim's DB commit leaves it for the
anchor's next drain. A run that drains the members but not the anchor (``--queue``, or a config that
dropped an endpoint) would leave the members' rows in a staged file, out of the queues and out of the
journal, until the anchor is drained again: maybe never. Resolving under the anchor's lock keeps the
claim protocol's order (one resolver per app id, versions in order); nothing is received from the
anchor. An anchor whose lock another drain holds is left to that drain, which resolves it first.

The same for a queue's own claim when the queue left the config (a decommissioned endpoint): a drain
killed after its claim's commit had taken its rows out of the queue, and no later run resolved it, while
``status`` said the next drain would (a review). Such a claim is resolved so too when its staged files
are in this run's journal (never another deployment's, sharing the database but not the lake).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from queuelake.errors import QueuelakeError
from queuelake.lake.files import StagedFiles, missing_files
from queuelake.lake.port import JournalLake
from queuelake.pipeline.drain.claims import Resolved, resolve_claims, shares
from queuelake.pipeline.drain.queue_drain import release_drain_lock, take_drain_lock
from queuelake.pipeline.drain.result import QueueResult
from queuelake.report import log
from queuelake.status import Status
from queuelake.transport import claims
from queuelake.transport.database import QueueDatabase
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef


@dataclass
class Elsewhere:
    """What the run's start did with those claims: how many it resolved, and for each of this run's
    queues whose rows sit in a claim it could not resolve, why (the queue's status says so: its rows
    are out of the queue and not in the journal until that claim is resolved)."""

    resolved: Resolved = field(default_factory=Resolved)
    failed: dict[str, str] = field(default_factory=dict)

    def mark(self, results: list[QueueResult]) -> None:
        """Fail the results of the queues whose rows could not be landed (``failed``)."""
        for r in results:
            reason = self.failed.get(r.queue)
            if reason is not None:
                r.status = Status.FAILED
                r.error = reason if not r.error else f"{r.error}; {reason}"


def resolve_claims_filed_elsewhere(
    database: QueueDatabase, journal: JournalLake, refs: Collection[TableRef], elsewhere: Collection[str]
) -> Elsewhere:
    """Resolve the claims of the queues in ``elsewhere`` (queues with claims this run does not drain,
    from the run's estimate), those holding rows of this run's queues and the others alike. Reads the
    claims only when ``elsewhere`` is not empty: a run with nothing left behind pays nothing. An anchor
    whose claims cannot be resolved fails the run's queues that have rows in them, not the others."""
    outcome = Elsewhere()
    if not elsewhere:
        return outcome
    ours = {r.canonical for r in refs}
    table = database.claims
    try:
        with database.connect("queuelake-drain-lock").use_autocommit() as conn:
            members: dict[str, set[str]] = {}
            for c in claims.every_claim(conn, table):
                held = ours & set(shares(c) or ())
                # with this run's queues' rows (failed with it), or its queue's own in this lake's journal
                if c.queue in elsewhere and (held or _staged_here(journal, c)):
                    members.setdefault(c.queue, set()).update(held)
            for anchor in sorted(members):
                try:
                    outcome.resolved += _resolve_under_lock(database, conn, journal, table, anchor)
                except QueuelakeError as exc:
                    reason = (
                        f"rows of this queue are in a batch claimed under {anchor}, which could not be landed "
                        f"({exc}); the next drain of {anchor} or of this queue tries again"
                    )
                    log.error("drain: %s", reason)
                    outcome.failed.update(dict.fromkeys(members[anchor], reason))
    except QueuelakeError as exc:  # the claims stay (``status`` shows them); the queues' own drains meet the cause
        log.error("drain: could not read the claims filed under queues this run does not drain (%s)", exc)
    return outcome


def _staged_here(journal: JournalLake, claim: claims.Claim) -> bool:
    """Whether a claim's staged files are in this journal's folder: a claim of another deployment's lake
    (its own queues, the same database and claims table) is never landed here."""
    files = StagedFiles.from_json(claim.staged).files
    return bool(files) and not missing_files(journal.path(claim.lake_table), files, journal.storage_options)


def _resolve_under_lock(
    database: QueueDatabase, conn: Connection, journal: JournalLake, table: TableRef, anchor: str
) -> Resolved:
    """The claims filed under ``anchor``, resolved under its drain lock; none when another drain holds it."""
    ref = database.queue(anchor)
    if not take_drain_lock(conn, ref):
        log.info(
            "drain: a batch of this run's queues is claimed under %s, whose drain is running: that drain lands it",
            anchor,
        )
        return Resolved()
    try:
        found = resolve_claims(conn, journal, table, anchor)
    finally:
        release_drain_lock(conn, ref)
    log.info(
        "drain: resolved %d claim(s) filed under %s, which this run does not drain",
        found.claims,
        anchor,
    )
    return found

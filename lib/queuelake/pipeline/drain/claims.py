"""A claim's record of its batch, and resolving the claims killed drains left before a queue receives
anything (the SQL of claims is ``transport.claims``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from queuelake import kill_points
from queuelake.errors import LakeError
from queuelake.lake.files import StagedFiles
from queuelake.lake.port import JournalLake
from queuelake.report import log
from queuelake.transport import claims
from queuelake.transport.claims import Claim
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef

OUTCOMES = ("landed", "expired", "quarantined")


def claim_record(
    staged: StagedFiles, counts: Mapping[str, int], shares: Mapping[str, Mapping[str, int]] | None = None
) -> str:
    """A claim's record of its batch: the staged files, and the batch's rows by outcome. Why the
    outcomes: on executors, a task killed after its claim's DB commit never reports that batch; the
    driver commits it, and counts it in the queue's result from the claim (``outcomes``).

    ``shares``: a batch of several small queues (``small_queues.py``) also records each queue's rows by
    outcome, so the driver counts each in its own queue (``shares``), not all in the claim's."""
    extra: dict[str, object] = {"outcomes": _by_outcome(counts)}
    if shares is not None:
        extra["queues"] = {queue: _by_outcome(share) for queue, share in shares.items()}
    return staged.to_json(**extra)


def _by_outcome(counts: Mapping[str, int]) -> dict[str, int]:
    return {k: int(counts.get(k, 0)) for k in OUTCOMES}


def outcomes(claim: Claim) -> dict[str, int] | None:
    """The batch's rows by outcome, as ``claim_record`` wrote them; None from a claim written without
    them (by an earlier version)."""
    found = json.loads(claim.staged).get("outcomes")
    if not isinstance(found, dict):
        return None
    return {k: int(found.get(k, 0)) for k in OUTCOMES}


def shares(claim: Claim) -> dict[str, dict[str, int]] | None:
    """Each queue's rows by outcome in a batch of several small queues (``claim_record``'s
    ``shares``); None for a batch of the claim's queue alone."""
    found = json.loads(claim.staged).get("queues")
    if not isinstance(found, dict):
        return None
    return {str(q): {k: int(share.get(k, 0)) for k in OUTCOMES} for q, share in found.items()}


@dataclass(frozen=True)
class Resolved:
    """The claims earlier drains left that a run resolved, and their rows: rows those drains took out
    of the queue and this run put in the journal (a summary's ``rows_resolved``; a killed drain's rows
    are in no run's ``dequeued``, a drain whose journal commit failed counted them in its own)."""

    claims: int = 0
    rows: int = 0

    def __add__(self, other: Resolved) -> Resolved:
        return Resolved(self.claims + other.claims, self.rows + other.rows)


def resolve_claims(conn: Connection, lake: JournalLake, claims_table: TableRef, queue: str) -> Resolved:
    """Finish what killed drains of this queue left between their DB commit and claim clearing,
    whichever worker (or worker count) they ran with. Runs under the drain lock, before any
    worker reads its last version, so versions stay in order."""
    pending = claims.of_queue(conn, claims_table, queue)
    conn.rollback()
    landed = landed_before(lake, pending)
    for claim in pending:
        if (claim.lake_table, claim.app_id, claim.version) not in landed:
            land_claim(lake, claim, queue)
        kill_points.reached("after_claim_resolved")  # in the journal, its claim not yet cleared
        claims.delete(conn, claims_table, claim.app_id, claim.version)
        conn.commit()
        log.info(
            "%s: finished the batch an interrupted drain left (%d message(s), now in the journal once)",
            queue,
            claim.row_count,
        )
    return Resolved(len(pending), sum(c.row_count for c in pending))


def landed_before(lake: JournalLake, pending: list[Claim]) -> set[tuple[str, str, int]]:
    """The claims whose version their app id already holds in the journal (a drain killed after its
    Delta commit), as (table, app id, version), checked to be their own files' commits in one read of
    each table's log (``check_landed``). One read per claim took ~1 s on S3 with a month of log, and
    a killed group commit leaves up to 512 claims (a review)."""
    committed: dict[tuple[str, str], int] = {}
    for claim in pending:
        key = (claim.lake_table, claim.app_id)
        if key not in committed:
            committed[key] = lake.last_version(*key) or 0
    landed = [c for c in pending if committed[(c.lake_table, c.app_id)] >= c.version]
    for table in sorted({c.lake_table for c in landed}):
        batches = [(StagedFiles.from_json(c.staged), c.app_id, c.version) for c in landed if c.lake_table == table]
        lake.check_landed(table, batches)
    return {(c.lake_table, c.app_id, c.version) for c in landed}


def land_claim(lake: JournalLake, claim: Claim, queue: str) -> None:
    """Commit a claim's staged files under its app id and version, unless the log has them already."""
    committed = lake.last_version(claim.lake_table, claim.app_id) or 0
    staged = StagedFiles.from_json(claim.staged)
    if committed >= claim.version:
        lake.check_landed(claim.lake_table, [(staged, claim.app_id, claim.version)])
        return
    if not lake.commit_staged(claim.lake_table, staged, claim.app_id, claim.version, verify=True):
        if (lake.last_version(claim.lake_table, claim.app_id) or 0) < claim.version:
            raise LakeError(f"{queue}: could not commit claimed batch {claim.app_id}:{claim.version}")

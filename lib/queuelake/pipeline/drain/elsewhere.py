"""Shared batches whose claim is filed under a queue this run does not drain: resolved at the run's
start, under that queue's drain lock.

Why: a batch of several small queues (``together.py``) is claimed under its first queue, the anchor,
though its rows came from every member. A drain killed after that claim's DB commit leaves it for the
anchor's next drain. A run that drains the members but not the anchor (``--queue``, or a config that
dropped an endpoint) would leave the members' rows in a staged file, out of the queues and out of the
journal, until the anchor is drained again: maybe never. Resolving under the anchor's lock keeps the
claim protocol's order (one resolver per app id, versions in order); nothing is received from the
anchor. An anchor whose lock another drain holds is left to that drain, which resolves it first.
"""

from __future__ import annotations

from collections.abc import Collection

from queuelake.config import Config
from queuelake.context import connect
from queuelake.errors import QueuelakeError
from queuelake.lake.port import LakeEngine
from queuelake.pipeline.drain.claims import resolve_claims, shares
from queuelake.pipeline.drain.queue_drain import release_drain_lock, take_drain_lock
from queuelake.report import log
from queuelake.transport import claims
from queuelake.transport.tables import TableRef, queue_ref


def resolve_claims_filed_elsewhere(
    config: Config, journal: LakeEngine, refs: Collection[TableRef], elsewhere: Collection[str]
) -> int:
    """Resolve the claims of the queues in ``elsewhere`` (queues with claims this run does not drain,
    from the run's estimate) that hold rows of this run's queues; returns how many were resolved.
    Reads the claims only when ``elsewhere`` is not empty: a run with nothing left behind pays nothing."""
    if not elsewhere:
        return 0
    ours = {r.canonical for r in refs}
    table = claims.claims_ref(config.transport)
    resolved = 0
    try:
        with connect(config, "queuelake-drain-lock").use_autocommit() as conn:
            anchors = sorted(
                {
                    c.queue
                    for c in claims.every_claim(conn, table)
                    if c.queue in elsewhere and ours & set(shares(c) or ())
                }
            )
            for anchor in anchors:
                ref = queue_ref(anchor, config.transport)
                if not take_drain_lock(conn, ref):
                    log.info(
                        "drain: a batch of this run's queues is claimed under %s, whose drain is running: "
                        "that drain lands it",
                        anchor,
                    )
                    continue
                try:
                    found = resolve_claims(conn, journal, table, anchor)
                finally:
                    release_drain_lock(conn, ref)
                log.info(
                    "drain: resolved %d claim(s) filed under %s, which this run does not drain, holding rows of "
                    "its queues",
                    found,
                    anchor,
                )
                resolved += found
    except QueuelakeError as exc:  # the claims stay (``status`` shows them); the anchor's next drain resolves them
        log.error("drain: could not resolve the claims filed under queues this run does not drain (%s)", exc)
    return resolved

"""``queuelake purge-expired``: remove expired rows from the drained queues, in batches."""

from __future__ import annotations

import argparse
import time
from typing import Any

from queuelake.commands.command import Command


def purge_expired(args: argparse.Namespace) -> dict[str, Any]:
    """The transport's batched purge of expired rows; each queue's count goes to the ``runs`` table
    (the rows themselves are not journalled: a drain would record them as ``expired``)."""
    from queuelake import config as config_mod
    from queuelake import kill_points, stopping
    from queuelake.commands.sessions import runs_only_lake
    from queuelake.context import open_database
    from queuelake.pipeline import runs
    from queuelake.report import log
    from queuelake.status import Status
    from queuelake.transport import queues, schema

    cfg = config_mod.load(args.config)
    run = runs.Run("purge-expired")
    purged: dict[str, int] = {}
    rows = []
    database = open_database(cfg)
    with database.connect("queuelake-purge") as conn:
        for name in cfg.drain.queues:
            if stopping.requested():  # a stop asked: the queues purged so far are counted, the rest wait
                break
            ref = database.queue(name)
            schema.require_table(conn, ref)
            t0 = time.monotonic()
            total = 0
            while not stopping.requested():  # Ctrl-C, SIGTERM: after the batch in hand, its count kept
                with conn.transaction():
                    n = queues.purge_expired_batch(conn, ref)
                total += n
                kill_points.reached("purge_batch_done")
                if n == 0:
                    break
                log.info("%s: removed %d expired message(s) (%d so far)", ref.canonical, n, total)
            if total == 0:
                log.info("purge-expired %s: nothing to do, no expired message", ref.canonical)
            else:
                log.info("purge-expired %s: %d expired message(s) removed", ref.canonical, total)
            purged[ref.canonical] = total
            rows.append(
                {
                    "queue": ref.canonical,
                    "ended_at": runs.utc_now(),
                    "purged": total,
                    "seconds": round(time.monotonic() - t0, 3),
                    "status": Status.INTERRUPTED if stopping.requested() else Status.OK,
                }
            )
    run.record(runs_only_lake(cfg), rows)
    return {"run_id": run.run_id, "purged": purged, "total": sum(purged.values())}


COMMAND = Command(
    name="purge-expired",
    help="purge expired rows in batches",
    run=purge_expired,
    graceful=True,  # Ctrl-C or SIGTERM: stops after the batch in hand, its counts in the summary and runs
)

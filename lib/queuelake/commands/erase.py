"""``queuelake erase``: remove journal rows a predicate selects, and the rows derived from them, and
purge their files from storage (time travel included). ``--dry-run`` counts first.

Why a command: a request to forget must reach every copy the lake keeps (``pipeline/store/erase.py``).
"""

from __future__ import annotations

import argparse
from typing import Any

from queuelake.commands.command import Command

# how long an erase waits for a running bodies step (which would write the erased bodies back) or
# transform step (whose journal files the purge would remove under it)
ERASE_WAITS_SECONDS = 900.0


def erase(args: argparse.Namespace) -> dict[str, Any]:
    from queuelake import config as config_mod
    from queuelake.commands.sessions import require_lake_root, runs_only_lake, writing_lake
    from queuelake.errors import ArgumentError
    from queuelake.lake.engines import without_spark
    from queuelake.pipeline import runs
    from queuelake.pipeline.replay.predicate import check_predicate, check_queue_names
    from queuelake.pipeline.step_locks import steps_stopped
    from queuelake.pipeline.store.erase import erase as run_erase
    from queuelake.pipeline.store.erase_predicate import matches_every_row
    from queuelake.status import Status

    predicate = check_predicate(args.where)  # a bad --where fails before anything is opened
    if matches_every_row(predicate) and not args.all:
        raise ArgumentError(
            f"erase --where {predicate!r} selects every journal row; to erase the whole journal say so: --all"
        )
    cfg = config_mod.load(args.config)
    check_queue_names(predicate, cfg.transport)  # queue = 'Sales' erased nothing and said ok
    require_lake_root(cfg)
    if args.dry_run:  # reads only: the Delta logs and the filter's columns, no Spark
        lake = without_spark(cfg.lake)
    else:  # the typed body tables are the lake engine's (delta-spark: a session); the journal stays delta-rs's
        lake = writing_lake(cfg, None)
    run = runs.Run("erase")
    if args.dry_run:
        summary = run_erase(cfg, lake, predicate, dry_run=True)
    else:
        # a bodies step beside it would write the erased bodies back, a transform would fail on the
        # files its purge removes: it waits for both (``step_locks.steps_stopped``)
        with steps_stopped(cfg, "erase", ERASE_WAITS_SECONDS):
            summary = run_erase(cfg, lake, predicate, dry_run=False)
    if not args.dry_run and summary["tables"]:
        rows = [
            {
                "table": name,
                "ended_at": runs.utc_now(),
                "rows_removed": figures["rows"],
                "files_removed": figures["files_removed"],
                "files_rewritten": figures["files_rewritten"],
                "files_vacuumed": figures["files_vacuumed"],
                "predicate": predicate,
                "seconds": summary.get("seconds"),
                "status": Status.OK,
            }
            for name, figures in summary["tables"].items()
        ]
        run.record(runs_only_lake(cfg), rows)
        summary["run_id"] = run.run_id
    return {"predicate": predicate, **summary}


def _arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--where", required=True, help="predicate over the journal's columns (comparisons with literals)")
    add("--dry-run", action="store_true", help="count the rows and files per table; change nothing")
    add("--all", action="store_true", help="allow a --where that selects every row (TRUE, 1 = 1): erase everything")


COMMAND = Command(
    name="erase",
    help="remove journal rows (and rows derived from them) and purge their files",
    run=erase,
    arguments=_arguments,
)

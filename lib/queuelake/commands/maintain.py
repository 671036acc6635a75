"""``queuelake maintain``: compact and vacuum every lake table."""

from __future__ import annotations

import argparse
import time
from typing import Any

from queuelake.commands.command import Command


def maintain(args: argparse.Namespace) -> dict[str, Any]:
    """Compact and vacuum every lake table under lake.root. The lake port lists the tables, so an
    object-storage root (``s3://...``) is maintained like a local folder, never silently skipped."""
    from queuelake import config as config_mod
    from queuelake.commands.sessions import writing_lake
    from queuelake.lake.engines import journal_engine
    from queuelake.pipeline import runs
    from queuelake.report import log
    from queuelake.status import Status

    cfg = config_mod.load(args.config)
    lake = writing_lake(cfg, None)
    journal = journal_engine(lake)  # the tables delta-rs wrote under a delta-spark job: messages, ...
    run = runs.Run("maintain")
    figures: dict[str, Any] = {}
    rows = []
    names = lake.tables()
    if not names:
        log.info("maintain: no lake tables under %s yet, nothing to do", cfg.lake.root)
    for name in names:
        t0 = time.monotonic()
        figures[name] = (journal if lake.written_by(name) == journal.name else lake).maintain(name)
        log.info(
            "maintain %s: %s file(s) compacted, %s vacuumed in %.1fs",
            name,
            figures[name].get("files_compacted", "?"),
            figures[name].get("files_vacuumed", "?"),
            time.monotonic() - t0,
        )
        rows.append(
            {
                "table": name,
                "ended_at": runs.utc_now(),
                "files_compacted": figures[name].get("files_compacted"),
                "files_vacuumed": figures[name].get("files_vacuumed"),
                "seconds": round(time.monotonic() - t0, 3),
                "status": Status.OK,
            }
        )
    run.record(lake, rows)
    return {"run_id": run.run_id, "tables": figures}


COMMAND = Command(name="maintain", help="compact and vacuum the lake tables", run=maintain, job=True)

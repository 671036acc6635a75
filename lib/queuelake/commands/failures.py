"""``queuelake failures``: the journal's failed messages grouped as ServicePulse groups them.

Why: ServicePulse groups failed messages by exception type and stack trace, message type and endpoint,
but only those ServiceControl still holds, and a retry of a group takes whatever the group holds when
it runs (ServiceControl #660). The journal keeps every error copy for as long as the lake keeps it.
This command reads the failed copies without Spark (``pipeline/failures/read.py``: small columns, and
the headers only of row groups holding failures), groups them by exception type, message type,
processing endpoint and a fingerprint of the stack trace with line numbers, paths, addresses and GUIDs
stripped (``pipeline/failures/fingerprint.py``), and counts first and last seen and the messages a
later copy shows retried.

stdout: one line per group (or with ``--json`` one JSON object per group), then the JSON summary as the
last line. ``--group ID``: that group's messages instead (the latest failed copy of each), and the
summary's ``replay_where``: the ``queuelake replay --where`` that selects exactly those journal rows, at
this and any later journal version; ``--where-out FILE`` also writes it to a file for ``replay
--where-file`` (a large group's predicate exceeds Linux's 128 KiB limit on one argument). It records
no ``runs`` row: it only reads.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from queuelake.commands.command import Command


def _group_id(text: str) -> str:
    value = text.strip().lower()
    if not value or any(c not in "0123456789abcdef" for c in value):
        raise argparse.ArgumentTypeError(f"--group takes a group id as `queuelake failures` lists it (got {text!r})")
    return value


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--group",
        type=_group_id,
        metavar="ID",
        help="one group's messages, and the replay --where that selects exactly them (a prefix of the id will do)",
    )
    parser.add_argument(
        "--where-out",
        metavar="PATH",
        help="with --group: also write its replay --where to this file, for replay --where-file",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per group (or message) on stdout")
    parser.add_argument(
        "--no-retries",
        action="store_true",
        help="skip the second pass that finds the later copies retrying the failed messages",
    )


def failures(args: argparse.Namespace) -> dict[str, Any]:
    import time

    from queuelake import config as config_mod
    from queuelake.commands import output_files
    from queuelake.commands.sessions import require_lake_root
    from queuelake.errors import ArgumentError
    from queuelake.lake.engines import without_spark
    from queuelake.pipeline.failures import show
    from queuelake.pipeline.failures.run import failure_groups
    from queuelake.report import log

    if args.where_out and args.group is None:
        raise ArgumentError("--where-out writes one group's replay --where: give --group ID too")
    where_file = output_files.checked("--where-out", args.where_out) if args.where_out else None
    cfg = config_mod.load(args.config)
    require_lake_root(cfg)
    lake = without_spark(cfg.lake)  # Arrow on the driver, no Spark
    started = time.monotonic()
    found = failure_groups(lake, retries=not args.no_retries)
    seconds = round(time.monotonic() - started, 3)
    out: dict[str, Any] = found.summary()
    out["failures_seconds"] = seconds
    log.info(
        "failures: %d group(s) of %d failed copies at journal version %s; %d of %d row group(s) held failures (%.2fs)",
        out["groups"],
        out["failed_copies"],
        found.version,
        out["row_groups_with_failures"],
        out["row_groups"],
        seconds,
    )
    if args.group is None:
        lines = show.group_json(found.groups) if args.json else iter(show.group_lines(found.groups))
        for line in lines:
            sys.stdout.write(line + "\n")
        out["group_ids"] = [g.id for g in found.groups]
        return out
    matches = [g for g in found.groups if g.id.startswith(args.group)]
    if len(matches) != 1:
        known = ", ".join(g.id for g in found.groups) or "none"
        why = "no group" if not matches else f"{len(matches)} groups"
        raise ArgumentError(f"--group {args.group}: {why} with that id at journal version {found.version} ({known})")
    (g,) = matches
    lines = show.message_json(g) if args.json else iter(show.message_lines(g))
    for line in lines:
        sys.stdout.write(line + "\n")
    out.update(g.summary())
    out["message_ids"] = g.message_ids()
    out["replay_where"] = g.where
    if where_file is not None:
        output_files.write_whole(where_file, g.where + "\n")
        out["where_file"] = str(args.where_out)
        log.info(
            "failures: group %s's replay --where written to %s (%d characters)", g.id, args.where_out, len(g.where)
        )
    return out


COMMAND = Command(
    name="failures",
    help="failed messages grouped by exception, message type, endpoint and stack trace; a group's replay --where",
    run=failures,
    arguments=arguments,
    reads_only=True,
)

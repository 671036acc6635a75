"""``queuelake find``: one message or one conversation from the journal, in seconds, without Spark.

Why: "what happened to message X?" is the audit store's first question (issue 34); answering it
took a Spark session and a full scan of the journal. This command reads the journal through the
lake port's ``lookup`` (files pruned by the Delta log's statistics, then one id column scanned, then
only the files holding a match read whole) and prints the rows in time order
(``pipeline/find/search.py`` says which order).

stdout: a readable table of the rows, or with ``--json`` one JSON object per row (every column, whole
bodies), then the JSON summary as the last line, as every command ends. It records no ``runs`` row: it
only reads, as ``queuelake tables`` does.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from queuelake.commands.command import Command


def _id(text: str) -> str:
    """argparse's check of an id: a bad one is a usage error, said on stderr before anything runs."""
    from queuelake.errors import ArgumentError
    from queuelake.pipeline.find.ids import check_id

    try:
        return check_id(text)
    except ArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--message-id", type=_id, metavar="ID", help="every journal row of this message")
    which.add_argument("--conversation-id", type=_id, metavar="ID", help="every journal row of this conversation")
    parser.add_argument("--json", action="store_true", help="one JSON object per row on stdout instead of a table")


def find(args: argparse.Namespace) -> dict[str, Any]:
    import time
    from collections import Counter

    from queuelake import config as config_mod
    from queuelake.lake.engines import without_spark
    from queuelake.pipeline.find import search, show
    from queuelake.report import log

    cfg = config_mod.load(args.config)
    lake = without_spark(cfg.lake)  # reads the Delta log and files only
    by = "message" if args.message_id is not None else "conversation"
    text = args.message_id if by == "message" else args.conversation_id
    started = time.monotonic()
    found = search.find(lake, by, text)
    seconds = round(time.monotonic() - started, 3)
    rows = found.rows
    log.info(
        "find %s %s: %d row(s) in %.2fs; journal version %d, %d file(s): %d pruned by the log's statistics, "
        "%d scanned (%d rows), %d read whole",
        by,
        text,
        rows.num_rows,
        seconds,
        found.journal_version,
        found.files,
        found.files_pruned,
        found.files_scanned,
        found.rows_scanned,
        found.files_read,
    )
    if not rows.num_rows:
        log.info("find %s %s: nothing found in the journal", by, text)
    lines = show.json_lines(rows) if args.json else iter(show.table_lines(rows))
    for line in lines:
        sys.stdout.write(line + "\n")
    queues = Counter(rows.column("queue").to_pylist())
    kinds = Counter(show.kinds(rows))
    return {
        "by": by,
        "id": text,
        "searched": list(found.searched),
        "found": rows.num_rows,
        "queues": dict(queues),
        "kinds": dict(kinds),
        "journal_version": found.journal_version,
        "files": found.files,
        "files_pruned": found.files_pruned,
        "files_scanned": found.files_scanned,
        "files_read": found.files_read,
        "rows_scanned": found.rows_scanned,
        "index": found.index,
        "find_seconds": seconds,
    }


COMMAND = Command(
    name="find",
    help="one message's or conversation's journal rows, in time order, without Spark",
    run=find,
    arguments=arguments,
    reads_only=True,
)

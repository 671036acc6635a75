"""``queuelake where``: where a message is, or was: still waiting in a queue table, delayed, drained
into the journal, processed (by which endpoint, when, how long), failed (the exception, the endpoint),
retried or replayed (by which replay), expired, erased. By message id, conversation id, or a business
key (a typed body field and its value: ``--field OrderId --value 4711``).

Why: "why has order 4711 not been processed yet?" is answered by hand across the queue tables, the
audit and error copies, and the replays; this command asks them all (``pipeline/where/run.py``): the
lake without Spark (the typed body tables, then the journal through the port's ``lookup``, as
``queuelake find``), then the queue tables read without taking or locking a row, within
``--time-limit`` per table, so that an endpoint is never held up by the question.

stdout: a table of one line per place (``--json``: one JSON object per place), then the JSON summary
as the last line, as every command ends; the summary says what could not be searched. It records no
``runs`` row: it only reads, as ``queuelake find`` does.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from queuelake.commands.argtypes import at_least_one
from queuelake.commands.command import Command


def _id(text: str) -> str:
    """argparse's check of an id (``find``'s rules): a bad one is a usage error before anything runs."""
    from queuelake.errors import ArgumentError
    from queuelake.pipeline.find.ids import check_id

    try:
        return check_id(text)
    except ArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text}: a time limit is more than 0 and at most 3600 seconds")
    return value


def arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--message-id", type=_id, metavar="ID", help="where this message is and was")
    which.add_argument("--conversation-id", type=_id, metavar="ID", help="where this conversation's messages are")
    which.add_argument(
        "--field", metavar="NAME", help="a typed body field (or a dotted path) whose --value names the messages"
    )
    parser.add_argument(
        "--value", type=_id, metavar="V", help="the --field's value (e.g. --field OrderId --value 4711)"
    )
    parser.add_argument(
        "--queue",
        action="append",
        default=[],
        metavar="Q",
        help="also read this queue table (repeatable; the config's queues and those the journal names are read)",
    )
    parser.add_argument("--no-peek", action="store_true", help="the lake only: read no queue table")
    parser.add_argument(
        "--time-limit",
        type=_seconds,
        default=5.0,
        metavar="S",
        help="seconds one queue table's read may take (default 5); past it the table is reported unsearched",
    )
    parser.add_argument(
        "--limit",
        type=at_least_one,
        default=1000,
        metavar="N",
        help="candidate rows read per queue table (default 1000)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per place on stdout instead of a table")


def where(args: argparse.Namespace) -> dict[str, Any]:
    from queuelake import config as config_mod
    from queuelake.commands.sessions import require_lake_root
    from queuelake.context import open_database
    from queuelake.errors import ArgumentError
    from queuelake.lake.engines import without_spark
    from queuelake.pipeline.where import show
    from queuelake.pipeline.where.run import Query
    from queuelake.pipeline.where.run import where as run_where
    from queuelake.report import log

    if args.field is not None and args.value is None:
        raise ArgumentError("--field needs --value (e.g. --field OrderId --value 4711)")
    if args.field is None and args.value is not None:
        raise ArgumentError("--value goes with --field")
    cfg = config_mod.load(args.config)
    require_lake_root(cfg)  # a mistyped lake.root fails as in find, tables and the rest (exit 1, kind lake)
    lake = without_spark(cfg.lake)  # reads the Delta logs and files only
    if args.message_id is not None:
        by, text = "message", args.message_id
    elif args.conversation_id is not None:
        by, text = "conversation", args.conversation_id
    else:
        by, text = "key", args.value
    query = Query(
        by=by,
        text=text,
        field=args.field,
        queues=tuple(args.queue),
        peek=not args.no_peek,
        time_limit_s=args.time_limit,
        limit=args.limit,
    )
    # the database opened only to peek (not with --no-peek): an embedded one is started then
    answer = run_where(cfg, lake, lambda: open_database(cfg).connect("queuelake-where"), query)
    lines = show.json_lines(answer.places) if args.json else iter(show.table_lines(answer.places))
    for line in lines:
        sys.stdout.write(line + "\n")
    out = show.summary(answer)
    for reason in answer.not_searched:
        log.warning("where: not searched: %s", reason)
    log.info(
        "where %s %s: %d place(s) of %d message(s) %s",
        by if by != "key" else f"{args.field} =",
        text,
        out["found"],
        len(out["messages"]),
        out["places"],
    )
    head: dict[str, Any] = {"by": by, "id": text} if by != "key" else {"by": "key", "field": args.field, "value": text}
    return {**head, **out}


COMMAND = Command(
    name="where",
    help="where a message is or was: waiting, delayed, drained, processed, failed, retried, expired, erased",
    run=where,
    arguments=arguments,
    reads_only=True,
)

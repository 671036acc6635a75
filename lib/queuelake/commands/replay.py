"""replay: send journal rows back to queues (a retry of failed messages, or a replay of any selection)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from queuelake.commands.command import Command

DEFAULT_CANARY_WAIT = 300.0  # pipeline/replay/plan.py's, spelt here: building the parser imports no pipeline


def _ack_queue(database: Any, address: str, dry_run: bool) -> str:
    """``--ack-queue`` as the canonical address the endpoints send each retry's acknowledgement to, its
    table checked (unless a dry run). Why: it was written as given, unchecked: an endpoint that handles a
    retry sends ServiceControl.Retry.Successful there, and a missing table failed every retried message
    again (a review)."""
    if dry_run:
        return str(database.queue(address).canonical)
    return _existing_queue(database, address)


def _existing_queue(database: Any, address: str) -> str:
    """``address``'s canonical name, its queue table required to exist (``TransportError`` naming it)."""
    from queuelake.transport.schema import require_table

    ref = database.queue(address)
    with database.connect("queuelake-replay") as conn:
        require_table(conn, ref)
        conn.rollback()
    return str(ref.canonical)


def replay(args: argparse.Namespace) -> dict[str, Any]:
    from queuelake import config as config_mod
    from queuelake.commands.sessions import active_spark, lake_for
    from queuelake.context import open_database
    from queuelake.lake.engines import without_spark
    from queuelake.lake.record_tables import MESSAGES
    from queuelake.pipeline.replay.plan import ReplayOptions
    from queuelake.pipeline.replay.predicate import check_columns
    from queuelake.pipeline.replay.replayer import needs_spark
    from queuelake.pipeline.replay.replayer import replay as run_replay
    from queuelake.report import log
    from queuelake.spark import get_spark

    options = ReplayOptions(
        predicate=where_predicate(args),
        to=args.to,
        dry_run=args.dry_run,
        limit=args.limit,
        max_rate=args.max_rate,
        replay_id=args.replay_id,
        batch_size=args.batch_size,
        ack_queue=args.ack_queue,
        canary=args.canary,
        canary_wait=args.canary_wait,
        skip_replayed=args.skip_replayed,
    )
    options.check()  # a bad --where or --replay-id fails before Spark starts
    cfg = config_mod.load(args.config)
    if args.to and not args.dry_run:
        # a replay into a queue the next drain takes back into the lake is almost always a mistake
        config_mod.check_send_target(cfg, args.to, "replay --to")
    reader = without_spark(cfg.lake)  # the Delta log only, no Spark
    if reader.exists(MESSAGES.name):
        check_columns(options.predicate, reader.schema(MESSAGES.name).names, cfg.transport)
    database = open_database(cfg)  # the queue database's handle: what the replay's connections come from
    if options.ack_queue is not None:
        options.ack_queue = _ack_queue(database, options.ack_queue, options.dry_run)
    session = active_spark()
    if session is None:
        # a simple --where is evaluated without Spark, and replay's records are delta-rs's: starting
        # a session was most of a small replay's time
        lake = without_spark(cfg.lake)
        if not needs_spark(cfg, lake, options):
            log.info("replay: no Spark needed for --where %r", options.predicate)
            return run_replay(cfg, database, None, lake, options, start_spark=lambda: get_spark(cfg.spark))
    session = session or get_spark(cfg.spark)
    return run_replay(cfg, database, session, lake_for(cfg, session), options)


def where_predicate(args: argparse.Namespace) -> str:
    """``--where``, or the text of ``--where-file`` (``-``: stdin).

    Why a file: Linux limits one argument to 128 KiB, and a failure group's ``replay_where`` names its
    rows (about 8 characters a message), so a group of more than ~15,000 messages cannot be passed as
    ``--where`` (``"$(cat f)"`` is one argument too). ``failures --group ID --where-out FILE`` writes it."""
    from queuelake.errors import ArgumentError

    if args.where is not None:
        return str(args.where)
    path = args.where_file
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ArgumentError(f"--where-file {path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ArgumentError(f"--where-file {path}: not UTF-8 text") from None
    predicate = text.strip()
    if not predicate:
        raise ArgumentError(f"--where-file {path}: the file is empty; it should hold one boolean expression")
    return predicate


def _arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    selection = parser.add_mutually_exclusive_group(required=True)
    selection.add_argument(
        "--where", help="Spark SQL predicate over messages (one boolean expression); this or --where-file is required"
    )
    selection.add_argument(
        "--where-file",
        metavar="PATH",
        help="read the --where predicate from this file (- for stdin): for predicates over 128 KiB",
    )
    add("--to", default=None, help="send every selected message to this queue (default: its own)")
    add("--dry-run", action="store_true", help="count per destination and type; write nothing")
    add("--limit", type=int, default=None, help="at most N messages (the first by queue, seq)")
    add("--max-rate", type=float, default=None, help="at most N messages per second")
    add("--replay-id", default=None, help="resume this replay (default: a new id, printed)")
    add("--batch-size", type=int, default=5000, help="messages per DB transaction (default 5000)")
    add(
        "--ack-queue",
        default=None,
        help="set ServiceControl.Retry.AcknowledgementQueue on retries to this queue (its table must exist)",
    )
    add(
        "--skip-replayed",
        action="store_true",
        help="leave out the rows an earlier replay sent that have not failed again since (counted as skipped); "
        "without it they are sent again, with a warning",
    )
    add(
        "--canary",
        type=int,
        default=None,
        help="send the first N messages first; the rest only once a drain shows them processed, not failed again",
    )
    add(
        "--canary-wait",
        type=float,
        default=DEFAULT_CANARY_WAIT,
        help=f"seconds to wait for the canaries (default {DEFAULT_CANARY_WAIT:g}); then stop, canary-timeout",
    )


COMMAND = Command(
    name="replay",
    help="send journal rows back to queues: retry or replay, exactly once",
    run=replay,
    arguments=_arguments,
    graceful=True,  # Ctrl-C or SIGTERM: stops after the batch in hand, recorded (pipeline/replay/sending.py)
    job=True,
)

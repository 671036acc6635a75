"""``queuelake conversation -c FILE ID --out flow.svg``: one conversation drawn as ServiceInsight's sequence
view draws it from ServiceControl: endpoints as lanes, its messages as arrows in the order they were
sent, failures in red with their exception type, retries marked, each message once however many copies
of it (as sent, audit, error) the journal holds. Without Spark: the journal rows are read through the
lake port with the conversation id as a filter.

Why: the journal holds the audit and error queues, so it can answer ServiceInsight's first question
("what happened in this conversation, and where did it fail?") for teams that run no ServiceControl,
or whose ServiceControl has long expired the messages.

A conversation id no journal row has is a failure (exit 1, ``error_kind`` ``arguments``) and no file
is written: a script that goes on to open the picture should not find an old one or none silently.
"""

from __future__ import annotations

import argparse
from typing import Any

from queuelake.commands.command import Command


def conversation(args: argparse.Namespace) -> dict[str, Any]:
    from pathlib import Path

    from queuelake import config as config_mod
    from queuelake.commands import output_files
    from queuelake.errors import ArgumentError
    from queuelake.lake.engines import without_spark
    from queuelake.lake.record_tables import MESSAGES
    from queuelake.pipeline.conversation.model import COLUMNS, build
    from queuelake.pipeline.conversation.svg import render
    from queuelake.pipeline.find.ids import check_id, spellings
    from queuelake.report import log

    try:  # as find and where check an id: spaces around it were stripped here, refused there (a review)
        conversation_id = check_id(args.conversation_id)
    except ArgumentError as exc:
        raise ArgumentError(f"conversation: {exc}") from None
    out = (
        output_files.checked("--out", args.out) if args.out else Path(f"conversation-{_file_safe(conversation_id)}.svg")
    )
    cfg = config_mod.load(args.config)
    lake = without_spark(cfg.lake)  # the journal is delta-rs's
    # a GUID in another spelling (upper case, braces: as SQL Server shows it) finds what find finds
    found = lake.lookup(MESSAGES.name, "conversation_id", list(spellings(conversation_id)))
    rows = found.rows.select(COLUMNS).to_pylist()
    log.info("conversation %s: %d journal row(s)", conversation_id, len(rows))
    drawn = build(conversation_id, rows)
    if not drawn.messages:
        raise ArgumentError(
            f"conversation {conversation_id}: no journal row has this conversation_id "
            f"(under {cfg.lake.root}); nothing drawn, no file written"
        )
    output_files.write_whole(out, render(drawn))  # a reader never sees half a picture
    log.info(
        "conversation %s: %d message(s) between %d endpoint(s), %d failed at least once, %d retried: wrote %s",
        conversation_id,
        len(drawn.messages),
        len(drawn.endpoints),
        drawn.failures,
        drawn.retries,
        out,
    )
    return {
        "conversation_id": conversation_id,
        "file": str(out.resolve()),
        "rows": drawn.rows,
        "messages": len(drawn.messages),
        "endpoints": drawn.endpoints,
        "failures": drawn.failures,
        "failed": drawn.failed,
        "retries": drawn.retries,
    }


def _file_safe(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)[:80]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("conversation_id", metavar="ID", help="the NServiceBus.ConversationId to draw")
    parser.add_argument(
        "--out", default=None, help="the SVG file to write (default: conversation-<ID>.svg in the current folder)"
    )


COMMAND = Command(
    name="conversation",
    help="draw one conversation from the journal as a sequence diagram (SVG)",
    run=conversation,
    arguments=_arguments,
    reads_only=True,
)

"""One message's or one conversation's rows of the journal, across every queue, in time order.

Why without Spark: an operator asking "what happened to message X?" wants the answer in seconds,
and a Spark session takes longer to start than the lake port's ``lookup`` takes to find the rows in
ten million (README, "Find"); the journal's id index (``message_keys``, ``pipeline/key_index``) leaves
it only the files holding the rows to read. The journal holds a message's every trace queuelake
drained: the send (from a drained queue), its audit copies, its failed copies in ``error`` and the
retries sent back.

The order (``ORDER``), so that a message's story reads top to bottom:

1. ``time_sent``: every copy of a message carries its sender's TimeSent, so a conversation lists
   message by message, in the order they were sent (rows without one, quarantined headers, last);
2. the row's own moment: an error copy's ``time_of_failure``, an audit copy's ``processing_ended``
   (else ``processing_started``), and for a row nobody handled (a send or a retry drained from its
   queue) ``drained_at``, when it left its queue. A retry carries no failure time (ServiceControl
   strips it), so it follows the failure it retries;
3. ``drained_at``, then ``queue`` and ``seq``: the drain's own order, which makes the order total.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from queuelake.errors import ArgumentError, LakeError
from queuelake.lake.port import LakeEngine
from queuelake.lake.record_tables import MESSAGES
from queuelake.pipeline.find.ids import check_id, spellings
from queuelake.pipeline.key_index.search import journal_rows

BY = {"message": "message_id", "conversation": "conversation_id"}
ORDER = ("time_sent", "moment", "drained_at", "queue", "seq")
MOMENT = "moment"  # the column the order adds: the row's own moment (step 2 above)


@dataclass(frozen=True)
class Found:
    """The rows found (journal columns plus ``moment``, in ``ORDER``) and what was read for them."""

    by: str  # "message" or "conversation"
    id: str  # as asked
    searched: tuple[str, ...]  # the spellings searched (the id, and a GUID's canonical form)
    rows: pa.Table
    journal_version: int
    files: int
    files_pruned: int
    files_scanned: int
    files_read: int
    rows_scanned: int
    index: dict[str, Any] = field(default_factory=dict)  # the id index's part (``key_index.search``)


def find(lake: LakeEngine, by: str, text: str) -> Found:
    """The journal rows of one message (``by="message"``) or conversation (``"conversation"``)."""
    if by not in BY:
        raise ArgumentError(f"find by {by!r}: by message or conversation")
    wanted = spellings(check_id(text))
    if not lake.exists(MESSAGES.name):
        raise LakeError(
            f"no journal yet: lake table {MESSAGES.name!r} does not exist under {lake.root} "
            "(nothing has been drained into this lake; check lake.root, or run queuelake drain)"
        )
    result, index = journal_rows(lake, BY[by], wanted)
    rows = in_time_order(result.rows)
    if by == "message":
        rows = _with_rows_by_row_id(lake, wanted, rows)
    return Found(
        by=by,
        id=text,
        searched=wanted,
        rows=rows,
        journal_version=result.version,
        files=result.files,
        files_pruned=result.files_pruned,
        files_scanned=result.files_scanned,
        files_read=result.files_matched,
        rows_scanned=result.rows_scanned,
        index=index,
    )


def _with_rows_by_row_id(lake: LakeEngine, ids: tuple[str, ...], rows: pa.Table) -> pa.Table:
    """``rows`` and the journal rows whose row ``id`` is one of ``ids`` and which have no ``message_id``:
    an expired row (the journal keeps only its identity; its headers, hence ``message_id``, are dropped)
    and a quarantined one whose headers did not parse. A sender sets the row id to the message id. Why
    here: ``where`` found them and ``find`` said "nothing found" of the same message (a review)."""
    by_id = journal_rows(lake, "id", list(ids))[0].rows
    extra = by_id.filter(pc.is_null(by_id.column("message_id")))
    if not extra.num_rows:
        return rows
    # the message is the one asked for: its row id is its message id
    index = extra.schema.get_field_index("message_id")
    extra = extra.set_column(index, extra.schema.field(index), pc.cast(extra.column("id"), pa.string()))
    return in_time_order(pa.concat_tables([rows.drop_columns([MOMENT]), extra]))


def in_time_order(rows: pa.Table) -> pa.Table:
    """``rows`` with ``moment`` added, sorted by ``ORDER`` (nulls last)."""
    moment = pc.coalesce(
        rows.column("time_of_failure"),
        rows.column("processing_ended"),
        rows.column("processing_started"),
        rows.column("drained_at"),
    )
    rows = rows.append_column(MOMENT, moment)
    return rows.sort_by([(name, "ascending", "at_end") for name in ORDER])

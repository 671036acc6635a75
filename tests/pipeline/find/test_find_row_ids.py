"""``find --message-id`` finds a message's rows the journal keeps without a message id: an expired row (its
headers dropped, only its identity kept) and a quarantined one whose headers did not parse. ``where``
found them by the row id, which a sender sets to the message id, and ``find`` said "nothing found" of
the same message (a review)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
from queuelake.config import from_dict
from queuelake.lake.engines import open_lake
from queuelake.pipeline.find import search

from tests.helpers.journal_rows import UTC, append, batch

DRAINED = dt.datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
EXPIRED = "54774993-d81c-4dd2-86c5-c908fd2707e7"
QUARANTINED = "7d2a1b9c-0e3f-4a5b-8c6d-9e0f1a2b3c4d"


def _without_message_id(rows: pa.Table) -> pa.Table:
    at = rows.schema.get_field_index("message_id")
    return rows.set_column(at, rows.schema.field(at), pa.nulls(rows.num_rows, pa.string()))


def test_find_by_message_id_finds_its_expired_and_unparsed_rows_by_their_row_id(tmp_path: Path) -> None:
    lake = open_lake(from_dict({"transport": {"connection": "x"}, "lake": {"root": str(tmp_path)}}, env={}).lake)
    append(lake, batch('"public"."Sales"', range(1, 4), DRAINED))  # other traffic
    append(lake, _without_message_id(batch('"public"."Expiring"', range(1, 2), DRAINED, "expired", [EXPIRED])))
    append(lake, _without_message_id(batch('"public"."Sales"', range(9, 10), DRAINED, "quarantined", [QUARANTINED])))
    append(lake, batch('"public"."Sales"', range(10, 11), DRAINED, message_ids=["other-message"]))

    expired = search.find(lake, "message", EXPIRED).rows
    assert expired.column("outcome").to_pylist() == ["expired"], expired.to_pylist()
    assert expired.column("message_id").to_pylist() == [EXPIRED]  # the message asked for: its row id
    assert search.find(lake, "message", QUARANTINED).rows.column("outcome").to_pylist() == ["quarantined"]
    assert search.find(lake, "message", "other-message").rows.num_rows == 1  # found by its message id, once
    assert search.find(lake, "conversation", EXPIRED).rows.num_rows == 0  # a conversation is not a row id

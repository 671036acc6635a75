"""Publish builds a batch's copies as columns: what that must keep (no database).

``test_outgoing.py`` holds the row-by-row reference of the wire format; these pin what the columnar
build adds: ids written by numpy are the uuid module's text, a batch read from files in any of the
types writers use is built as the same batch given as dicts, batches are cut across files exactly,
and a fan-out writes no Python text per copy.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid

import numpy as np
import orjson
import pyarrow as pa
from queuelake.config import from_dict
from queuelake.nsb import headers as hdr
from queuelake.nsb.times import format_time
from queuelake.pipeline.message_ids import message_id
from queuelake.pipeline.publish import headers as publish_headers
from queuelake.pipeline.publish.headers import quoted_ids
from queuelake.pipeline.publish.routing import Router
from queuelake.pipeline.publish.rows import in_batches, sent_columns
from queuelake.transport import binary_copy
from queuelake.transport.table_refs import queue_ref

NOW = dt.datetime(2026, 11, 24, 8, 0, 0, 123456, tzinfo=dt.timezone.utc)
SENT = format_time(NOW)
CFG = from_dict(
    {
        "transport": {"connection": "postgresql://unused/db"},
        "lake": {"root": "/unused"},
        "publish": {"endpoint": "Lakehouse", "outputs": ["out"]},
    },
    env={},
)
EVENT = "Sales.OrderPlaced, Sales"
SUBSCRIBERS = ["Billing", "Shipping", "Audit"]


def router() -> Router:
    r = Router(CFG, machine="host")
    for name in [*SUBSCRIBERS, "Orders"]:
        r.verdicts[(name, False)] = (queue_ref(name, CFG.transport), None)
    r.subscribers_of[EVENT] = SUBSCRIBERS
    r.frozen = True
    return r


def test_quoted_ids_are_the_uuid_modules_text() -> None:
    raw = np.frombuffer(os.urandom(16 * 500), np.uint8).reshape(500, 16)
    want = [f'"{uuid.UUID(bytes=bytes(row))}"' for row in raw]
    assert quoted_ids(raw).to_pylist() == want
    assert quoted_ids(np.zeros((0, 16), np.uint8)).to_pylist() == []


def test_fresh_ids_are_random_version_4_uuids() -> None:
    ids = [uuid.UUID(bytes=bytes(row)) for row in binary_copy.fresh_ids(1000)]
    assert all(i.version == 4 and i.variant == uuid.RFC_4122 for i in ids)
    assert len(set(ids)) == 1000


def _rows(n: int) -> list[dict]:
    return [
        {
            "key": f"k{i}",
            "intent": "Send" if i % 3 == 0 else "Publish",
            "message_type": EVENT,
            "destination": "Orders" if i % 3 == 0 else None,
            "body": f'{{"n":{i}}}',  # JSON text: sent as its UTF-8 bytes
            "headers": [("Custom", "é")] if i % 7 == 0 else None,
            "ttbr_ms": 60_000 if i % 5 == 0 else None,
            "conversation_id": "conv" if i % 4 == 0 else None,
        }
        for i in range(n)
    ]


def _copies(out) -> list[tuple]:
    return [(table, m.headers, m.body, m.ttbr_ms) for table, (_, ms) in out.direct.items() for m in ms]


def test_a_batch_read_as_files_store_it_is_built_as_the_same_batch_given_as_dicts() -> None:
    """delta-rs rewrites strings as string_view; Spark writes a body as text, times naive: the
    batch is built the same whatever the column types."""
    rows = _rows(40)
    as_written = pa.table(
        {
            "key": pa.array([r["key"] for r in rows]).cast(pa.string_view()),
            "intent": pa.array([r["intent"] for r in rows]).cast(pa.large_string()),
            "message_type": pa.array([r["message_type"] for r in rows]).cast(pa.string_view()),
            "destination": pa.array([r["destination"] for r in rows]),
            "body": pa.array([r["body"] for r in rows]).cast(pa.string_view()),
            "headers": pa.array([r["headers"] for r in rows], pa.map_(pa.string_view(), pa.string_view())),
            "ttbr_ms": pa.array([r["ttbr_ms"] for r in rows], pa.int32()),
            "conversation_id": pa.array([r["conversation_id"] for r in rows]),
            "extra": pa.array([dt.datetime(9999, 1, 1)] * len(rows)),  # a user's column: never read
        }
    )
    from_files, lost = router().build(None, "Lakehouse/out", sent_columns(as_written), NOW, SENT)
    from_dicts, lost_too = router().build(None, "Lakehouse/out", rows, NOW, SENT)
    assert lost == lost_too == []
    assert _copies(from_files) == _copies(from_dicts)
    assert from_files.copies == len(rows) // 3 + 1 + (len(rows) - len(rows) // 3 - 1) * len(SUBSCRIBERS)


def test_a_fan_out_writes_no_json_per_copy(monkeypatch) -> None:
    """Each copy of an event differs from its row's headers in its ids only: the headers are joined
    by Arrow, so the JSON written in Python does not grow with the rows or their copies."""
    calls = []
    real = orjson.dumps

    def counting(value, *args):
        calls.append(value)
        return real(value, *args)

    monkeypatch.setattr(publish_headers.orjson, "dumps", counting)
    rows = [{"key": f"k{i}", "intent": "Publish", "message_type": EVENT, "body": b"{}"} for i in range(3000)]
    out, _ = router().build(None, "Lakehouse/out", rows, NOW, SENT)
    assert out.copies == 9000 and len(calls) < 30
    for table, (_, copies) in out.direct.items():
        assert len(copies) == 3000  # built when sent: one table's copies in memory at a time
        messages = copies.messages()
        assert isinstance(messages, binary_copy.Messages) and len(messages) == 3000
        assert messages.ids is None  # drawn by the sender
        first = orjson.loads(messages.headers[0].as_py())
        assert first[hdr.MESSAGE_ID] == first[hdr.CONVERSATION_ID] == message_id("Lakehouse/out", "k0", table)


def test_batches_are_cut_exactly_across_files_of_different_columns() -> None:
    """A round's batches span files; a later file may carry an optional column an earlier one lacks."""
    first = sent_columns(pa.table({"key": [f"a{i}" for i in range(7)], "body": [b"x"] * 7}))
    second = sent_columns(pa.table({"key": [f"b{i}" for i in range(6)], "ttbr_ms": [5] * 6}))
    batches = list(in_batches([first, second], 5))
    assert [b.num_rows for b in batches] == [5, 5, 3]
    assert all(b.column(0).num_chunks == 1 for b in batches)
    keys = [k for b in batches for k in b["key"].to_pylist()]
    assert keys == [f"a{i}" for i in range(7)] + [f"b{i}" for i in range(6)]
    assert batches[1]["ttbr_ms"].to_pylist() == [None, None, 5, 5, 5]


def test_message_types_go_out_as_routing_reads_them() -> None:
    """Routing trimmed each entry and dropped empty ones, and the header went out as written (a review):
    `` A.B , Asm ;;`` reached every subscriber with a padded and an empty entry."""
    given = pa.table(
        {
            "key": ["a", "b", "c"],
            "message_type": [" Ns.Totals , Ns ;; Ns.ITotals, Ns;", "Ns.Plain, Ns", None],
            "intent": ["Publish", "Publish", "Send"],
            "body": [b"{}", b"{}", b"{}"],
        }
    )
    sent = sent_columns(given)
    assert sent["message_type"].to_pylist() == ["Ns.Totals , Ns;Ns.ITotals, Ns", "Ns.Plain, Ns", None]
    tidy = sent_columns(given.slice(1, 1))["message_type"]
    assert tidy.to_pylist() == ["Ns.Plain, Ns"]


def test_a_rows_own_ttbr_header_without_ttbr_ms_is_not_sent() -> None:
    """The copy never expires (no ttbr_ms), and said TimeToBeReceived 00:00:10 (a review): a replay of it
    would have expired it."""
    row = {"intent": "Send", "message_type": "Ns.A, Ns", "ttbr_ms": None}
    theirs = {hdr.TIME_TO_BE_RECEIVED: "00:00:10", "custom": "kept"}
    headers = publish_headers.row_headers(row, theirs, "sent", "Lakehouse", "m")
    assert hdr.TIME_TO_BE_RECEIVED not in headers and headers["custom"] == "kept"
    headers = publish_headers.row_headers({**row, "ttbr_ms": 5000}, theirs, "sent", "Lakehouse", "m")
    assert headers[hdr.TIME_TO_BE_RECEIVED] == "00:00:05"

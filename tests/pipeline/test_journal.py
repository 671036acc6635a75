"""The vectorised journal builder agrees with the reference header decoder, row by row."""

from __future__ import annotations

import datetime as dt

import orjson
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from queuelake.errors import HeaderError
from queuelake.pipeline.journal import MESSAGES_SCHEMA, build_batch
from queuelake.transport import headers as hdr
from queuelake.transport.queues import RECEIVED_SCHEMA

T = "2024-05-01 13:45:10:123456 Z"
GENERIC = "Ns.Wrapper`1[[Ns.Inner, Asm]], Asm, Version=1.0.0.0"
CASES = [
    None,
    "",
    "   ",
    "{}",
    orjson.dumps({hdr.MESSAGE_ID: "m1", hdr.MESSAGE_INTENT: " reply ", hdr.TIME_SENT: T}).decode(),
    orjson.dumps({hdr.MESSAGE_INTENT: "PUBLISH", hdr.ENCLOSED_MESSAGE_TYPES: ";A.B, Asm; ;C.D, Asm;"}).decode(),
    orjson.dumps({hdr.ENCLOSED_MESSAGE_TYPES: GENERIC + ";Base, Asm"}).decode(),
    orjson.dumps({hdr.MESSAGE_ID: "", hdr.TIME_SENT: "", hdr.CONTENT_TYPE: None}).decode(),
    orjson.dumps({hdr.TIME_SENT: "2024-13-01 13:45:10:123456 Z"}).decode(),
    orjson.dumps({hdr.TIME_OF_FAILURE: "2024-05-01T13:45:10Z"}).decode(),
    orjson.dumps({hdr.MESSAGE_INTENT: "Broadcast"}).decode(),
    orjson.dumps({hdr.ENCLOSED_MESSAGE_TYPES: "\x1fA.B, Asm;C\u3000"}).decode(),
    orjson.dumps({hdr.ENCLOSED_MESSAGE_TYPES: "A.B\x1f, Asm"}).decode(),
    '{"NServiceBus.MessageId": 5}',
    '{"a": "\\ud83d\\ude00", "b": "x\\/y"}',
    "[1, 2]",
    "<corrupted headers",
    '{"unterminated": "',
]
FIELDS = [
    "message_id",
    "message_intent",
    "enclosed_message_types",
    "message_type",
    "content_type",
    "conversation_id",
    "correlation_id",
    "reply_to_address",
    "originating_endpoint",
    "originating_machine",
    "time_sent",
    "processing_started",
    "processing_ended",
    "processing_endpoint",
    "failed_queue",
    "exception_type",
    "exception_message",
    "time_of_failure",
]


def received(raws: list[str | None], expired: list[bool] | None = None) -> pa.Table:
    n = len(raws)
    return pa.Table.from_pydict(
        {
            "id": [f"00000000-0000-4000-8000-{i:012d}" for i in range(n)],
            "seq": list(range(1, n + 1)),
            "expired": expired or [False] * n,
            "expires": [None] * n,
            "headers": raws,
            "body": [b"body"] * n,
        },
        schema=RECEIVED_SCHEMA,
    )


def check_against_reference(raws: list[str | None]) -> None:
    table, counts = build_batch(received(raws), "q", "b:1", dt.datetime.now(dt.timezone.utc))
    assert table.schema == MESSAGES_SCHEMA
    rows = table.to_pylist()
    for raw, row in zip(raws, rows):
        try:
            ref = hdr.decode(raw, row["id"])
        except HeaderError as exc:
            assert row["outcome"] == "quarantined", raw
            assert row["error"] == str(exc)
            assert row["raw_headers"] == raw and row["headers"] is None and row["body"] == b"body"
            assert all(row[f] is None for f in FIELDS)
            continue
        assert row["outcome"] == "landed", (raw, row["error"])
        assert dict(row["headers"]) == ref.headers
        for f in FIELDS:
            assert row[f] == getattr(ref, f), (f, raw)
    assert counts["landed"] + counts["quarantined"] == len(raws)


def test_edge_cases_match_reference() -> None:
    check_against_reference(CASES)


def test_expired_rows_keep_identity_only() -> None:
    table, counts = build_batch(
        received([CASES[4], CASES[4]], [True, False]), "q", "b:1", dt.datetime.now(dt.timezone.utc)
    )
    first, second = table.to_pylist()
    assert counts == {"expired": 1, "quarantined": 0, "landed": 1}
    assert first["outcome"] == "expired" and first["body"] is None and first["headers"] is None
    assert first["message_id"] is None and second["message_id"] == "m1"


values = st.one_of(st.none(), st.text(max_size=20), st.sampled_from([T, "send", "Publish", "x", GENERIC]))
keys = st.sampled_from(
    [
        hdr.MESSAGE_ID,
        hdr.MESSAGE_INTENT,
        hdr.ENCLOSED_MESSAGE_TYPES,
        hdr.TIME_SENT,
        hdr.PROCESSING_ENDED,
        hdr.CONTENT_TYPE,
        "custom",
    ]
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(keys, values, max_size=6), min_size=1, max_size=8))
def test_random_headers_match_reference(maps: list[dict[str, str | None]]) -> None:
    check_against_reference([orjson.dumps(m).decode() for m in maps])

"""The vectorised journal builder agrees with the reference header decoder, row by row."""

from __future__ import annotations

import datetime as dt

import orjson
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from queuelake.errors import HeaderError
from queuelake.nsb import headers as hdr
from queuelake.pipeline.journal.build import build_batch
from queuelake.pipeline.journal.quarantine import named_ids
from queuelake.pipeline.journal.schema import MESSAGES_SCHEMA
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
            "raw_expires": [None] * n,
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
            named = named_ids(raw)  # the ids its headers name, for find and where; nothing else typed
            assert all(row[f] == named.get(f) for f in FIELDS), (raw, named)
            assert named.get("conversation_id") == row["conversation_id"]
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


def test_a_batch_that_quarantines_rows_says_so_naming_the_first(caplog) -> None:  # type: ignore[no-untyped-def]
    """The command said only a count; the rows' reasons were in the journal alone (a review)."""
    raws = [CASES[4], "<corrupted headers", CASES[4], '{"unterminated": "']
    with caplog.at_level("WARNING", logger="queuelake"):
        _, counts = build_batch(received(raws), '"public"."Sales"', "b:1", dt.datetime.now(dt.timezone.utc))
        build_batch(received([CASES[4]]), '"public"."Sales"', "b:2", dt.datetime.now(dt.timezone.utc))
    said = [r.getMessage() for r in caplog.records if "quarantined" in r.getMessage()]
    assert counts["quarantined"] == 2 and len(said) == 1, said
    assert said[0].startswith('"public"."Sales": 2 row(s) quarantined'), said
    assert "seq 2 id 00000000-0000-4000-8000-000000000001: " in said[0], said


def test_a_quarantined_row_keeps_the_ids_its_headers_name() -> None:
    """Nothing of a quarantined row was typed, its ids neither: find and where found it nowhere (a review)."""
    raws = ['{"NServiceBus.MessageId":"m-1","NServiceBus.ConversationId":"c-1","NServiceBus.TimeSent":"yesterday"}']
    table, counts = build_batch(received(raws), '"public"."error"', "b:1", dt.datetime.now(dt.timezone.utc))
    [row] = table.to_pylist()
    assert counts["quarantined"] == 1 and (row["message_id"], row["conversation_id"]) == ("m-1", "c-1"), row
    assert row["time_sent"] is None and row["headers"] is None


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


# ---------------------------------------------------------------- native decode vs row by row


def _comparable(table: pa.Table) -> list[dict]:
    rows = table.to_pylist()
    for row in rows:  # a map's order carries no meaning; its entries do
        row["headers"] = None if row["headers"] is None else sorted(row["headers"], key=repr)
    return rows


def check_native_matches_row_by_row(raws: list[str | None], expired: list[bool] | None = None) -> None:
    batch = received(raws, expired)
    now = dt.datetime.now(dt.timezone.utc)
    native, native_counts = build_batch(batch, "q", "b:1", now, native=True)
    rowwise, rowwise_counts = build_batch(batch, "q", "b:1", now, native=False)
    assert native.schema == rowwise.schema == MESSAGES_SCHEMA
    assert native_counts == rowwise_counts
    for raw, a, b in zip(raws, _comparable(native), _comparable(rowwise)):
        assert a == b, raw


texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
json_values = st.one_of(
    st.none(),
    texts,
    st.sampled_from([T, "Publish", GENERIC, "2024-05-01", "1", "PublicKeyToken=null", ": null", "\u00e9\U0001f600"]),
    st.integers(-5, 2**63 - 1),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.just({"nested": "object"}),
    st.just(["a", "list"]),
)
json_keys = st.one_of(keys, st.text(st.characters(exclude_categories=("Cs",)), max_size=6))


@st.composite
def header_texts(draw: st.DrawFn) -> str | None:
    """Header text as other programs write it: compact or pretty, any key order, odd escapes and
    spacing, duplicate keys, nulls, non-string values, other JSON types, garbage."""
    shape = draw(st.sampled_from(["compact", "compact", "compact", "pretty", "spaced", "dupe", "raw", "none"]))
    if shape == "none":
        return draw(st.sampled_from([None, "", "  ", "\t"]))
    if shape == "raw":
        return draw(
            st.one_of(
                st.text(max_size=30),
                st.sampled_from(
                    ['{"a": 123456789012345678901234567890}', '{"a": "x", "a": "y"}', '{"b": "1", "a": "2"}']
                ),
                st.sampled_from(
                    [
                        "[1, 2]",
                        '"text"',
                        "{}",
                        ' {"a": "x"} ',
                        '{"a": "x"} {"b": "y"}',
                        '{"a": "x",}',
                        '{"a": NaN}',
                        '{"a": "\\ud800"}',
                        '{"a": "\\ud83d\\ude00", "b": "x\\/y"}',
                        '{"a": "\\u00e9\\u002B"}',
                        '{"a":\tnull, "b": "y"}',
                        '{"a": "x\ty"}',
                        '{"a": "line\nbreak"}',
                        '{"a": 1e999}',
                    ]
                ),
            )
        )
    data = draw(st.dictionaries(json_keys, json_values, max_size=7))
    if shape == "pretty":
        return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()
    if shape == "spaced":
        members = (f"{orjson.dumps(k).decode()} :  {orjson.dumps(v).decode()}" for k, v in data.items())
        return "{ " + " ,  ".join(members) + " }"
    if shape == "dupe" and data:
        key = next(iter(data))
        return "{" + f'{orjson.dumps(key).decode()}:"first",' + orjson.dumps(data).decode()[1:]
    return orjson.dumps(data).decode()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(header_texts(), st.booleans()), min_size=1, max_size=12))
def test_native_decode_matches_row_by_row(rows: list[tuple[str | None, bool]]) -> None:
    raws = [r for r, _ in rows]
    expired = [e and i % 3 == 0 for i, (_, e) in enumerate(rows)]
    check_native_matches_row_by_row(raws, expired)
    check_against_reference(raws)


@settings(max_examples=60, deadline=None)
@given(st.lists(header_texts(), min_size=1, max_size=12))
def test_native_decode_matches_the_reference(raws: list[str | None]) -> None:
    check_against_reference(raws)


def test_native_decode_takes_clean_rows_and_refers_the_rest(monkeypatch) -> None:
    """The native path really runs: clean NServiceBus headers never reach the row-by-row decoder;
    a null value, a number and an escaped lone surrogate each do, and only those rows."""
    from queuelake.commands.demo import traffic
    from queuelake.nsb import row_path

    clean = [m.headers for m in traffic.order_events(50, seed=3)]
    seen: list[str | None] = []
    real = row_path.parse_fast

    def spy(raw):
        seen.append(raw)
        return real(raw)

    monkeypatch.setattr(row_path, "parse_fast", spy)
    check_native_matches_row_by_row(clean)
    assert len([r for r in seen if r in clean]) == 50  # only the row-by-row build saw them
    seen.clear()
    build_batch(received(clean), "q", "b:1", dt.datetime.now(dt.timezone.utc))
    assert seen == []
    odd = ['{"a": null, "b": "x"}', '{"a": 5}', '{"a": "\\ud800"}']
    build_batch(received(clean[:10] + odd + clean[10:20]), "q", "b:1", dt.datetime.now(dt.timezone.utc))
    assert seen == odd  # the null and the surrogate before the read, the number after it
    # a program that pretty-prints its headers: line breaks between tokens would cut the row in two
    # for the reader (a whole batch row by row, 3x slower, for one such row); only those rows go
    seen.clear()
    pretty = [orjson.dumps({"a": "x", "b": "y"}, option=orjson.OPT_INDENT_2).decode(), '{"a": "x",\r "b": "y"}']
    build_batch(received(clean[:10] + pretty + clean[10:20]), "q", "b:1", dt.datetime.now(dt.timezone.utc))
    assert seen == pretty


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.text(st.sampled_from(["a", "{", "\n", "\r", "\t", "\x01", "\x1f", " ", "\u00e9", "\U0001f600"])), max_size=20
    ),
    st.integers(0, 5),
)
def test_control_byte_rows_finds_exactly_the_rows_with_one(rows: list[str], skip: int) -> None:
    """Rows at either end of the buffer, empty rows, and an array that is a slice of another."""
    from queuelake.nsb import batch_headers as native

    texts = pa.array(["\n"] * skip + rows + ["x\r"], pa.string()).slice(skip, len(rows))
    found = native._control_byte_rows(texts).tolist()
    assert found == [any(ord(c) < 0x20 for c in row) for row in rows]

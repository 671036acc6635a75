"""The NServiceBus Headers column (design section 4, "Headers column")."""

from __future__ import annotations

import datetime as dt
import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from queuelake.errors import HeaderError
from queuelake.nsb import headers as h
from queuelake.nsb.headers import DecodedHeaders, decode, decode_map, encode, normalize_intent
from queuelake.nsb.message_types import full_type_name, split_types
from queuelake.nsb.times import format_time, parse_time

UTC = dt.timezone.utc
ROW_ID = "6a1e8f0e-3c1b-4b7a-9a55-0f1e2d3c4b5a"

ORDER_SHIPPED = "Shipping.Events.OrderShipped, Shipping.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null"
ORDER_EVENT = "Shipping.Events.IOrderEvent, Shipping.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null"

# As an NServiceBus error queue row holds them (a message that was processed, audited, then failed).
REALISTIC = {
    "NServiceBus.MessageId": "0b7e2a5c-1f7d-4e7e-9d3b-b15f00c1d2e3",
    "NServiceBus.MessageIntent": "Publish",
    "NServiceBus.EnclosedMessageTypes": f"{ORDER_SHIPPED};{ORDER_EVENT}",
    "NServiceBus.ContentType": "application/json",
    "NServiceBus.ConversationId": "c0a80101-0000-0000-0000-000000000001",
    "NServiceBus.CorrelationId": "0b7e2a5c-1f7d-4e7e-9d3b-b15f00c1d2e3",
    "NServiceBus.ReplyToAddress": "Shipping@[dbo]@[nservicebus]",
    "NServiceBus.OriginatingEndpoint": "Shipping",
    "NServiceBus.OriginatingMachine": "SHIP-01",
    "NServiceBus.Version": "9.2.3",
    "NServiceBus.TimeSent": "2024-05-01 13:45:10:123456 Z",
    "NServiceBus.TimeToBeReceived": "1.00:00:00",
    "NServiceBus.ProcessingStarted": "2024-05-01 13:45:11:000001 Z",
    "NServiceBus.ProcessingEnded": "2024-05-01 13:45:11:250000 Z",
    "NServiceBus.ProcessingEndpoint": "Billing",
    "NServiceBus.FailedQ": "Billing@[dbo]@[nservicebus]",
    "NServiceBus.ExceptionInfo.ExceptionType": "System.InvalidOperationException",
    "NServiceBus.ExceptionInfo.Message": 'Order "42" not found / retry later',
    "NServiceBus.ExceptionInfo.StackTrace": "at Billing.Handler.Handle(OrderShipped message)\r\n   at ...",
    "NServiceBus.TimeOfFailure": "2024-05-01 13:45:12:999999 Z",
    "$.diagnostics.originating.hostid": "f3c9a4b1d2e34f5a9b8c7d6e5f4a3b2c",
    "traceparent": None,
}


def _dotnet_json(headers: dict) -> str:
    """JSON as older .NET writers emit it: ASCII only (surrogate-pair escapes) and ``/`` as ``\\/``."""
    return json.dumps(headers, ensure_ascii=True).replace("/", "\\/")


@pytest.mark.parametrize("raw", [json.dumps(REALISTIC), _dotnet_json(REALISTIC), json.dumps(REALISTIC).encode()])
def test_decode_realistic_header_set(raw: str | bytes) -> None:
    d = decode(raw, row_id=ROW_ID)
    assert d.headers == REALISTIC
    assert d.message_id == "0b7e2a5c-1f7d-4e7e-9d3b-b15f00c1d2e3"
    assert d.message_intent == "Publish"
    assert d.enclosed_message_types == [ORDER_SHIPPED, ORDER_EVENT]
    assert d.message_type == "Shipping.Events.OrderShipped"
    assert d.content_type == "application/json"
    assert d.conversation_id == "c0a80101-0000-0000-0000-000000000001"
    assert d.correlation_id == "0b7e2a5c-1f7d-4e7e-9d3b-b15f00c1d2e3"
    assert d.reply_to_address == "Shipping@[dbo]@[nservicebus]"
    assert d.originating_endpoint == "Shipping"
    assert d.originating_machine == "SHIP-01"
    assert d.time_sent == dt.datetime(2024, 5, 1, 13, 45, 10, 123456, tzinfo=UTC)
    assert d.processing_started == dt.datetime(2024, 5, 1, 13, 45, 11, 1, tzinfo=UTC)
    assert d.processing_ended == dt.datetime(2024, 5, 1, 13, 45, 11, 250000, tzinfo=UTC)
    assert d.processing_endpoint == "Billing"
    assert d.failed_queue == "Billing@[dbo]@[nservicebus]"
    assert d.exception_type == "System.InvalidOperationException"
    assert d.exception_message == 'Order "42" not found / retry later'
    assert d.time_of_failure == dt.datetime(2024, 5, 1, 13, 45, 12, 999999, tzinfo=UTC)
    for value in (d.time_sent, d.processing_started, d.processing_ended, d.time_of_failure):
        assert value.tzinfo is not None and value.utcoffset() == dt.timedelta(0)
    # informational headers stay in the map only
    assert d.headers[h.TIME_TO_BE_RECEIVED] == "1.00:00:00"
    assert d.headers["traceparent"] is None


def test_decode_minimal_send() -> None:
    d = decode('{"NServiceBus.MessageId":"m-1","NServiceBus.MessageIntent":"Send"}', row_id=ROW_ID)
    assert d == DecodedHeaders(
        headers={h.MESSAGE_ID: "m-1", h.MESSAGE_INTENT: "Send"}, message_id="m-1", message_intent="Send"
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("publish", "Publish"),
        ("PUBLISH", "Publish"),
        ("send", "Send"),
        ("Subscribe", "Subscribe"),
        ("unSubscribe", "Unsubscribe"),
        ("reply", "Reply"),
        (" Reply ", "Reply"),
        (None, None),
        ("", None),
    ],
)
def test_intent_is_case_insensitive(raw: str | None, expected: str | None) -> None:
    assert normalize_intent(raw) == expected
    assert decode(json.dumps({h.MESSAGE_INTENT: raw})).message_intent == expected


@pytest.mark.parametrize("raw", ["Publsh", "Defer", "0", "Send;Publish"])
def test_unknown_intent(raw: str) -> None:
    with pytest.raises(HeaderError, match=rf"NServiceBus.MessageIntent: unknown intent '{raw}'"):
        decode(json.dumps({h.MESSAGE_INTENT: raw}))


def test_enclosed_message_types() -> None:
    d = decode(json.dumps({h.ENCLOSED_MESSAGE_TYPES: f" {ORDER_SHIPPED} ; {ORDER_EVENT} ;"}))
    assert d.enclosed_message_types == [ORDER_SHIPPED, ORDER_EVENT]
    assert d.message_type == "Shipping.Events.OrderShipped"
    assert decode(json.dumps({h.ENCLOSED_MESSAGE_TYPES: "Shipping.Events.OrderShipped"})).message_type == (
        "Shipping.Events.OrderShipped"
    )
    none = decode(json.dumps({h.ENCLOSED_MESSAGE_TYPES: None}))
    assert (none.enclosed_message_types, none.message_type) == (None, None)
    empty = decode(json.dumps({h.ENCLOSED_MESSAGE_TYPES: ""}))
    assert (empty.enclosed_message_types, empty.message_type) == ([], None)
    assert split_types(None) is None


@pytest.mark.parametrize(
    ("assembly_qualified", "full_name"),
    [
        (ORDER_SHIPPED, "Shipping.Events.OrderShipped"),
        ("Shipping.Events.OrderShipped", "Shipping.Events.OrderShipped"),
        ("Outer+Nested, Asm", "Outer+Nested"),
        # generic arguments are assembly-qualified inside brackets; Type.FullName keeps them
        (
            "Shipping.Envelope`1[[Shipping.Events.OrderShipped, Shipping.Messages, Version=1.0.0.0]], Shipping, "
            "Version=1.0.0.0, Culture=neutral, PublicKeyToken=null",
            "Shipping.Envelope`1[[Shipping.Events.OrderShipped, Shipping.Messages, Version=1.0.0.0]]",
        ),
        (
            "Ns.Pair`2[[Ns.A, Asm],[Ns.B, Asm]], Asm",
            "Ns.Pair`2[[Ns.A, Asm],[Ns.B, Asm]]",
        ),
        ("Ns.Odd\\,Name, Asm", "Ns.Odd\\,Name"),
    ],
)
def test_full_type_name(assembly_qualified: str, full_name: str) -> None:
    assert full_type_name(assembly_qualified) == full_name
    assert decode(json.dumps({h.ENCLOSED_MESSAGE_TYPES: assembly_qualified})).message_type == full_name


# --- lenient reading --------------------------------------------------------------------------------


def test_escaped_slash_and_surrogate_pairs_decode() -> None:
    raw = '{"NServiceBus.ContentType":"application\\/json","smile":"\\ud83d\\ude00","both":"a\\/\\ud83d\\ude00\\/b"}'
    assert decode_map(raw) == {"NServiceBus.ContentType": "application/json", "smile": "😀", "both": "a/😀/b"}
    assert decode_map(raw.encode()) == decode_map(raw)
    assert decode_map('{"\\ud83d\\ude00":"\\u00e9\\u4e2d"}') == {"😀": "é中"}
    assert decode_map('{"raw":"😀 é 中"}'.encode()) == {"raw": "😀 é 中"}


def test_null_values_are_kept() -> None:
    assert decode_map('{"a":null,"b":"x"}') == {"a": None, "b": "x"}
    d = decode('{"NServiceBus.MessageId":null,"NServiceBus.TimeSent":null,"NServiceBus.MessageIntent":null}', ROW_ID)
    assert d.headers == {h.MESSAGE_ID: None, h.TIME_SENT: None, h.MESSAGE_INTENT: None}
    assert (d.message_id, d.time_sent, d.message_intent) == (ROW_ID, None, None)


def test_empty_time_header_is_no_time() -> None:
    assert decode(json.dumps({h.TIME_SENT: ""})).time_sent is None


@pytest.mark.parametrize("raw", [None, "", "   ", "\r\n\t ", b"", b"  \n", bytearray(b" ")])
def test_no_headers(raw) -> None:
    assert decode_map(raw) == {}
    d = decode(raw, row_id=ROW_ID)
    assert d.headers == {}
    assert d.message_id == ROW_ID
    assert d.message_intent is None and d.time_sent is None and d.message_type is None


def test_message_id_falls_back_to_row_id() -> None:
    assert decode("{}", row_id=ROW_ID).message_id == ROW_ID
    assert decode('{"NServiceBus.MessageId":""}', row_id=ROW_ID).message_id == ROW_ID
    assert decode('{"other":"x"}', row_id=ROW_ID).message_id == ROW_ID
    assert decode('{"NServiceBus.MessageId":"m"}', row_id=ROW_ID).message_id == "m"
    assert decode("{}").message_id is None


def test_whitespace_around_json_and_bytes_inputs() -> None:
    assert decode_map('  \n{"a":"b"}\n ') == {"a": "b"}
    assert decode_map(memoryview(b'{"a":"b"}')) == {"a": "b"}
    assert decode_map(bytearray(b'{"a":"b"}')) == {"a": "b"}


# --- malformed headers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("<corrupted headers", "headers are not valid JSON"),
        ('{"a":"b"', "headers are not valid JSON"),
        ('{"a" "b"}', "headers are not valid JSON"),
        ("{'a':'b'}", "headers are not valid JSON"),
        ('{"a":"b",}', "headers are not valid JSON"),
        ('{"a":"b"} x', "headers are not valid JSON"),
        ("[]", "headers are a JSON array, not an object"),
        ('["a","b"]', "headers are a JSON array, not an object"),
        ("42", "headers are a JSON number, not an object"),
        ("4.2", "headers are a JSON number, not an object"),
        ('"headers"', "headers are a JSON string, not an object"),
        ("true", "headers are a JSON boolean, not an object"),
        ("null", "headers are a JSON null, not an object"),
        ('{"a":1}', "header 'a' has a JSON number value; header values must be strings"),
        ('{"a":1.5}', "header 'a' has a JSON number value"),
        ('{"a":true}', "header 'a' has a JSON boolean value"),
        ('{"a":{"b":"c"}}', "header 'a' has a JSON object value"),
        ('{"a":["b"]}', "header 'a' has a JSON array value"),
        (b'{"a":"\xff"}', "headers are not valid UTF-8: invalid start byte at byte 6"),
        (b'{"a":"\xc3"}', "headers are not valid UTF-8"),
        (b'{"a":"\xed\xa0\x80"}', "headers are not valid UTF-8"),  # an encoded surrogate
        ('{"a":"\ud83d"}', "not valid Unicode: lone surrogate at character 6"),
        # invalid UTF-8 from a SQL_ASCII database, as the driver's text escaped it: said so (it read "lone surrogate")
        (b'{"a":"\xff"}'.decode("utf-8", "surrogateescape"), "not valid UTF-8: byte 0xff at character 6"),
        ('{"a":"\\ud83d"}', "escaped lone surrogate"),
        ('{"a":"\\ude00x"}', "escaped lone surrogate"),
        ('{"a":"\\ud83dx"}', "escaped lone surrogate"),
    ],
)
def test_malformed_headers(raw: str | bytes, message: str) -> None:
    with pytest.raises(HeaderError, match=message.replace("[", r"\[")):
        decode_map(raw)
    with pytest.raises(HeaderError):
        decode(raw, row_id=ROW_ID)


def test_non_text_headers_are_refused() -> None:
    with pytest.raises(HeaderError, match="headers are a int, not text or bytes"):
        decode_map(5)  # type: ignore[arg-type]


@pytest.mark.parametrize("header", [h.TIME_SENT, h.PROCESSING_STARTED, h.PROCESSING_ENDED, h.TIME_OF_FAILURE])
@pytest.mark.parametrize(
    "value",
    [
        "yesterday",
        "2024-05-01T13:45:10.123456Z",
        "2024-05-01 13:45:10.123456 Z",  # dot, not colon, before the microseconds
        "2024-05-01 13:45:10:123456",  # no zone
        "2024-05-01 13:45:10:123 Z",  # three digits
        "2024-5-1 1:2:3:4 Z",
        "2024-05-01  13:45:10:123456 Z",
        "2024-13-01 13:45:10:123456 Z",
        "2024-02-30 13:45:10:123456 Z",
        "2024-05-01 24:00:00:000000 Z",
        "２０２４-05-01 13:45:10:123456 Z",  # non-ASCII digits
        " 2024-05-01 13:45:10:123456 Z",
    ],
)
def test_unparsable_time(header: str, value: str) -> None:
    with pytest.raises(
        HeaderError, match=f"header {header}: .* is not a time in the form 'yyyy-MM-dd HH:mm:ss:ffffff Z'"
    ):
        decode(json.dumps({header: value}))


# --- encode -----------------------------------------------------------------------------------------


def test_encode_is_compact_json() -> None:
    text = encode({"a": "b", "c": None, "d": "é/😀"})
    assert text == '{"a":"b","c":null,"d":"é/😀"}'
    assert encode({}) == "{}"
    assert decode_map(encode(REALISTIC)) == REALISTIC
    assert " " not in encode({"x": "y", "z": "w"})


@pytest.mark.parametrize("bad", [{"a": 1}, {"a": True}, {"a": {"b": "c"}}, {"a": ["b"]}, {"a": 1.5}, {1: "a"}])
def test_encode_refuses_non_string_values(bad: dict) -> None:
    with pytest.raises(HeaderError, match="names and values must be strings"):
        encode(bad)


def test_encode_refuses_lone_surrogates() -> None:
    with pytest.raises(HeaderError, match="cannot be encoded as JSON"):
        encode({"a": "\ud800"})


# Arbitrary Unicode (surrogates cannot be encoded as UTF-8, so they are excluded).
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=30)
HEADER_MAPS = st.dictionaries(TEXT, st.none() | TEXT, max_size=8)


@settings(max_examples=300, deadline=None)
@given(HEADER_MAPS)
def test_encode_decode_round_trip_property(headers: dict[str, str | None]) -> None:
    text = encode(headers)
    assert decode_map(text) == headers
    assert decode_map(text.encode("utf-8")) == headers
    assert orjson.loads(text) == headers


@settings(max_examples=200, deadline=None)
@given(HEADER_MAPS)
def test_decode_reads_any_valid_json_writer_property(headers: dict[str, str | None]) -> None:
    assert decode_map(_dotnet_json(headers)) == headers
    assert decode_map(json.dumps(headers, ensure_ascii=False, indent=2)) == headers


# --- times ------------------------------------------------------------------------------------------


def test_parse_time() -> None:
    assert parse_time("2024-05-01 13:45:10:123456 Z") == dt.datetime(2024, 5, 1, 13, 45, 10, 123456, tzinfo=UTC)
    assert parse_time("0001-01-01 00:00:00:000000 Z") == dt.datetime(1, 1, 1, tzinfo=UTC)
    assert parse_time("9999-12-31 23:59:59:999999 Z") == dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    with pytest.raises(HeaderError, match="header NServiceBus.DeliverAt: None"):
        parse_time(None, h.DELIVER_AT)  # type: ignore[arg-type]


def test_format_time() -> None:
    value = dt.datetime(2024, 5, 1, 13, 45, 10, 123456, tzinfo=UTC)
    assert format_time(value) == "2024-05-01 13:45:10:123456 Z"
    assert len(format_time(value)) == 28
    plus_two = dt.timezone(dt.timedelta(hours=2))
    assert format_time(dt.datetime(2024, 5, 1, 15, 45, 10, 123456, tzinfo=plus_two)) == "2024-05-01 13:45:10:123456 Z"
    assert format_time(dt.datetime(2024, 5, 1, tzinfo=UTC)) == "2024-05-01 00:00:00:000000 Z"
    # years before 1000 are zero-padded (strftime's %Y is not, on glibc)
    assert format_time(dt.datetime(999, 1, 2, 3, 4, 5, 6, tzinfo=UTC)) == "0999-01-02 03:04:05:000006 Z"
    assert format_time(dt.datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01 00:00:00:000000 Z"


def test_format_time_refuses_naive_and_out_of_range() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        format_time(dt.datetime(2024, 5, 1))
    with pytest.raises(ValueError, match="outside the range"):
        format_time(dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))))


OFFSETS = st.builds(
    dt.timezone,
    st.timedeltas(min_value=-dt.timedelta(hours=23, minutes=59), max_value=dt.timedelta(hours=23, minutes=59)),
)


@settings(max_examples=300, deadline=None)
@given(st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30), timezones=OFFSETS))
def test_format_parse_time_round_trip_property(value: dt.datetime) -> None:
    text = format_time(value)
    assert len(text) == 28
    parsed = parse_time(text)
    assert parsed == value
    assert parsed.utcoffset() == dt.timedelta(0)
    assert format_time(parsed) == text

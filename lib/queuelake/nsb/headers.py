"""The NServiceBus Headers column: the header names queuelake reads and writes, and the codec of the
column's text, a flat JSON object of string to string (or null). This is the reference: the bulk
decoders (``native``, ``plain``, ``row_path``) take only rows they read exactly as it does.

Decoding is strict where NServiceBus is strict (an object of strings) and lenient where writers in
the wild differ (``\\/`` escapes, surrogate pairs, empty or NULL meaning "no headers"). Anything we
cannot decode raises ``HeaderError`` with a reason; the drain quarantines that row with its raw text.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from queuelake.errors import HeaderError
from queuelake.nsb.message_types import full_type_name, split_types
from queuelake.nsb.times import parse_time

MESSAGE_ID = "NServiceBus.MessageId"
MESSAGE_INTENT = "NServiceBus.MessageIntent"
ENCLOSED_MESSAGE_TYPES = "NServiceBus.EnclosedMessageTypes"
CONTENT_TYPE = "NServiceBus.ContentType"
CONVERSATION_ID = "NServiceBus.ConversationId"
CORRELATION_ID = "NServiceBus.CorrelationId"
REPLY_TO_ADDRESS = "NServiceBus.ReplyToAddress"
ORIGINATING_ENDPOINT = "NServiceBus.OriginatingEndpoint"
ORIGINATING_MACHINE = "NServiceBus.OriginatingMachine"
TIME_SENT = "NServiceBus.TimeSent"
VERSION = "NServiceBus.Version"
PROCESSING_STARTED = "NServiceBus.ProcessingStarted"
PROCESSING_ENDED = "NServiceBus.ProcessingEnded"
PROCESSING_ENDPOINT = "NServiceBus.ProcessingEndpoint"
FAILED_QUEUE = "NServiceBus.FailedQ"
EXCEPTION_TYPE = "NServiceBus.ExceptionInfo.ExceptionType"
EXCEPTION_MESSAGE = "NServiceBus.ExceptionInfo.Message"
TIME_OF_FAILURE = "NServiceBus.TimeOfFailure"
DELIVER_AT = "NServiceBus.DeliverAt"
TIME_TO_BE_RECEIVED = "NServiceBus.TimeToBeReceived"
FORWARD_DESTINATION = "NServiceBus.SqlServer.ForwardDestination"
# the MessageId of the message being handled when this one was sent: which message caused which
RELATED_TO = "NServiceBus.RelatedTo"

INTENTS = {name.lower(): name for name in ("Send", "Publish", "Subscribe", "Unsubscribe", "Reply")}


_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def _json_type(value: object) -> str:
    return "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)


def decode_map(raw: str | bytes | None) -> dict[str, str | None]:
    """Decode a Headers value to a dict. Empty or NULL is no headers, as the transport reads it."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            data = raw.encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = ord(raw[exc.start])
            if 0xDC80 <= bad <= 0xDCFF:  # a byte no UTF-8 holds, as a driver's text escaped it (surrogateescape)
                raise HeaderError(
                    f"headers are not valid UTF-8: byte 0x{bad - 0xDC00:02x} at character {exc.start}"
                ) from None
            raise HeaderError(f"headers are not valid Unicode: lone surrogate at character {exc.start}") from None
    elif isinstance(raw, (bytes, bytearray, memoryview)):
        data = bytes(raw)
        if not data.strip():
            return {}
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HeaderError(f"headers are not valid UTF-8: {exc.reason} at byte {exc.start}") from None
    else:
        raise HeaderError(f"headers are a {type(raw).__name__}, not text or bytes")
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "surrogate" in str(exc).lower():
            raise HeaderError(f"headers hold an escaped lone surrogate (invalid Unicode): {exc}") from None
        raise HeaderError(f"headers are not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise HeaderError(f"headers are a JSON {_json_type(value)}, not an object of strings")
    for key, item in value.items():
        if item is not None and not isinstance(item, str):
            raise HeaderError(f"header {key!r} has a JSON {_json_type(item)} value; header values must be strings")
    return value


@dataclass
class DecodedHeaders:
    """A Headers map plus the typed fields the journal keeps as columns."""

    headers: dict[str, str | None]
    message_id: str | None = None
    message_intent: str | None = None
    enclosed_message_types: list[str] | None = None
    message_type: str | None = None
    content_type: str | None = None
    conversation_id: str | None = None
    correlation_id: str | None = None
    reply_to_address: str | None = None
    originating_endpoint: str | None = None
    originating_machine: str | None = None
    time_sent: dt.datetime | None = None
    processing_started: dt.datetime | None = None
    processing_ended: dt.datetime | None = None
    processing_endpoint: str | None = None
    failed_queue: str | None = None
    exception_type: str | None = None
    exception_message: str | None = None
    time_of_failure: dt.datetime | None = None


def normalize_intent(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    try:
        return INTENTS[value.strip().lower()]
    except KeyError:
        raise HeaderError(f"header {MESSAGE_INTENT}: unknown intent {value!r}") from None


def _time(headers: Mapping[str, str | None], name: str) -> dt.datetime | None:
    value = headers.get(name)
    return None if value is None or value == "" else parse_time(value, name)


def decode(raw: str | bytes | None, row_id: str | None = None) -> DecodedHeaders:
    """Decode a Headers value into the map and typed fields; raise HeaderError with the reason."""
    headers = decode_map(raw)
    get = headers.get
    types = split_types(get(ENCLOSED_MESSAGE_TYPES))
    return DecodedHeaders(
        headers=headers,
        message_id=get(MESSAGE_ID) or row_id,
        message_intent=normalize_intent(get(MESSAGE_INTENT)),
        enclosed_message_types=types,
        message_type=full_type_name(types[0]) if types else None,
        content_type=get(CONTENT_TYPE),
        conversation_id=get(CONVERSATION_ID),
        correlation_id=get(CORRELATION_ID),
        reply_to_address=get(REPLY_TO_ADDRESS),
        originating_endpoint=get(ORIGINATING_ENDPOINT),
        originating_machine=get(ORIGINATING_MACHINE),
        time_sent=_time(headers, TIME_SENT),
        processing_started=_time(headers, PROCESSING_STARTED),
        processing_ended=_time(headers, PROCESSING_ENDED),
        processing_endpoint=get(PROCESSING_ENDPOINT),
        failed_queue=get(FAILED_QUEUE),
        exception_type=get(EXCEPTION_TYPE),
        exception_message=get(EXCEPTION_MESSAGE),
        time_of_failure=_time(headers, TIME_OF_FAILURE),
    )


def encode(headers: Mapping[str, str | None]) -> str:
    """Compact JSON text that NServiceBus's header deserializer reads."""
    for key, value in headers.items():
        if not isinstance(key, str) or (value is not None and not isinstance(value, str)):
            raise HeaderError(f"header {key!r}: names and values must be strings (values may be None)")
    try:
        return orjson.dumps(dict(headers)).decode("utf-8")
    except orjson.JSONEncodeError as exc:  # a TypeError, e.g. for a lone surrogate
        raise HeaderError(f"headers cannot be encoded as JSON: {exc}") from None

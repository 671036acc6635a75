"""Realistic NServiceBus traffic for the demo, the tests and the benchmarks: order events, their audit
and error copies, malformed headers, and ``seed`` to send them in committed chunks.

Header sets mirror what NServiceBus 8/9 endpoints write (~600 bytes): message id, intent, enclosed
types with assembly-qualified names, content type, conversation, originating endpoint and machine,
TimeSent in the 28-character wire form, version. Audit and error copies add their own headers.
Whole conversations (causes, retries, ServiceControl's headers) are ``conversations.py``'s; audit
copies with bodies of a chosen size, ``sized_audits.py``'s.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from queuelake.nsb import headers as hdr
from queuelake.nsb.times import format_time
from queuelake.transport.db import Connection
from queuelake.transport.queues import OutgoingMessage, send
from queuelake.transport.table_refs import TableRef

ORDER_PLACED = (
    "Sales.Messages.Events.OrderPlaced, Sales.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null"
)
ORDER_EVENT = "Sales.Messages.Events.IOrderEvent, Sales.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null"
PLACE_ORDER = (
    "Sales.Messages.Commands.PlaceOrder, Sales.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null"
)
BILL_ORDER = (
    "Billing.Messages.Commands.BillOrder, Billing.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null"
)

CUSTOMERS = [f"customer-{i:04d}" for i in range(1, 201)]
PRODUCTS = ["espresso-beans", "grinder", "kettle", "filter-papers", "mug", "scale", "tamper"]


def wire_time(value: dt.datetime) -> str:
    return format_time(value)


def order_headers(
    message_id: str,
    sent: dt.datetime,
    intent: str = "Publish",
    types: str = f"{ORDER_PLACED};{ORDER_EVENT}",
    endpoint: str = "Sales",
    machine: str = "web-01",
    conversation: str | None = None,
) -> dict[str, str | None]:
    return {
        hdr.MESSAGE_ID: message_id,
        hdr.MESSAGE_INTENT: intent,
        hdr.CONVERSATION_ID: conversation or str(uuid.uuid4()),
        hdr.CORRELATION_ID: message_id,
        hdr.REPLY_TO_ADDRESS: endpoint,
        hdr.ORIGINATING_MACHINE: machine,
        hdr.ORIGINATING_ENDPOINT: endpoint,
        "$.diagnostics.originating.hostid": uuid.uuid5(uuid.NAMESPACE_DNS, machine).hex,
        hdr.CONTENT_TYPE: "application/json",
        hdr.ENCLOSED_MESSAGE_TYPES: types,
        hdr.VERSION: "9.2.3",
        hdr.TIME_SENT: wire_time(sent),
        "NServiceBus.OpenTelemetry.StartNewTrace": "True",
        "traceparent": f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01",
    }


def order_body(rng: random.Random, order_id: str) -> bytes:
    lines: list[dict[str, Any]] = [
        {"Product": rng.choice(PRODUCTS), "Quantity": rng.randint(1, 5), "UnitPrice": round(rng.uniform(2, 80), 2)}
        for _ in range(rng.randint(1, 6))
    ]
    body = {
        "OrderId": order_id,
        "CustomerId": rng.choice(CUSTOMERS),
        "Total": round(sum(item["Quantity"] * item["UnitPrice"] for item in lines), 2),
        "Currency": "EUR",
        "Lines": lines,
        "ShippingAddress": {"Street": f"{rng.randint(1, 300)} Harbour Road", "City": "Rotterdam", "Zip": "3011"},
        "Notes": "x" * rng.randint(100, 500),
    }
    return orjson.dumps(body)


def order_events(count: int, seed: int = 7, start: dt.datetime | None = None) -> Iterator[OutgoingMessage]:
    """OrderPlaced events as the Sales endpoint publishes them (about 600 B headers, ~1 KB bodies). The same
    seed gives the same messages, ids, conversations and bodies (the docs' examples name the demo's)."""
    rng = random.Random(seed)
    start = start or dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    for i in range(count):
        message_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        sent = start + dt.timedelta(milliseconds=250 * i)
        headers = order_headers(message_id, sent, conversation=str(uuid.uuid5(uuid.NAMESPACE_URL, message_id)))
        yield OutgoingMessage(hdr.encode(headers), order_body(rng, f"order-{seed}-{i}"), id=message_id)


def audit_copy(message: OutgoingMessage, processed_by: str, started: dt.datetime, millis: int) -> OutgoingMessage:
    headers = hdr.decode_map(message.headers)
    headers[hdr.PROCESSING_STARTED] = wire_time(started)
    headers[hdr.PROCESSING_ENDED] = wire_time(started + dt.timedelta(milliseconds=millis))
    headers[hdr.PROCESSING_ENDPOINT] = processed_by
    headers["NServiceBus.ProcessingMachine"] = "worker-02"
    return OutgoingMessage(hdr.encode(headers), message.body, id=str(uuid.uuid4()))


def failed_copy(
    message: OutgoingMessage, queue: str, exception: str, text: str, when: dt.datetime, stack_trace: str | None = None
) -> OutgoingMessage:
    """The error queue's copy of ``message`` failed at ``queue``; ``stack_trace``: the frames after the
    exception's first line (default: one frame, ``at <queue>.Handler.Handle()``)."""
    headers = hdr.decode_map(message.headers)
    headers[hdr.FAILED_QUEUE] = queue
    headers[hdr.PROCESSING_ENDPOINT] = queue
    headers[hdr.EXCEPTION_TYPE] = exception
    headers[hdr.EXCEPTION_MESSAGE] = text
    headers["NServiceBus.ExceptionInfo.Source"] = queue
    frames = stack_trace if stack_trace is not None else f"   at {queue}.Handler.Handle()"
    headers["NServiceBus.ExceptionInfo.StackTrace"] = f"{exception}: {text}\n{frames}"
    headers[hdr.TIME_OF_FAILURE] = wire_time(when)
    return OutgoingMessage(hdr.encode(headers), message.body, id=str(uuid.uuid4()))


MALFORMED_HEADERS: dict[str, str] = {
    "invalid_json": '{"NServiceBus.MessageId": "abc"',
    "not_an_object": '["NServiceBus.MessageId", "abc"]',
    "non_string_value": '{"NServiceBus.MessageId": 42}',
    "corrupted": "<corrupted headers",
    "bad_time": '{"NServiceBus.TimeSent": "yesterday"}',
}


def seed(conn: Connection, queue: TableRef, messages: Iterable[OutgoingMessage], chunk: int = 20000) -> int:
    """Send messages in committed chunks, so seeding a million rows holds one chunk at a time."""
    total = 0
    buf: list[OutgoingMessage] = []
    for message in messages:
        buf.append(message)
        if len(buf) >= chunk:
            total += send(conn, queue, buf)
            conn.commit()
            buf = []
    if buf:
        total += send(conn, queue, buf)
        conn.commit()
    return total

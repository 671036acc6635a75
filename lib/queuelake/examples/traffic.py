"""Realistic NServiceBus traffic for the demo, the tests and the benchmarks.

Header sets mirror what NServiceBus 8/9 endpoints write (~600 bytes): message id, intent, enclosed
types with assembly-qualified names, content type, conversation, originating endpoint and machine,
TimeSent in the 28-character wire form, version. Audit and error copies add their own headers.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from queuelake.nsb import headers as hdr
from queuelake.nsb.retry import RETRY_UNIQUE_MESSAGE_ID, unique_message_id
from queuelake.nsb.times import format_time
from queuelake.transport.db import Connection
from queuelake.transport.queues import OutgoingMessage, send
from queuelake.transport.tables import TableRef

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
    """OrderPlaced events as the Sales endpoint publishes them (about 600 B headers, ~1 KB bodies)."""
    rng = random.Random(seed)
    start = start or dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    for i in range(count):
        message_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        sent = start + dt.timedelta(milliseconds=250 * i)
        headers = order_headers(message_id, sent)
        yield OutgoingMessage(hdr.encode(headers), order_body(rng, f"order-{seed}-{i}"), id=message_id)


def audit_copy(message: OutgoingMessage, processed_by: str, started: dt.datetime, millis: int) -> OutgoingMessage:
    headers = hdr.decode_map(message.headers)
    headers[hdr.PROCESSING_STARTED] = wire_time(started)
    headers[hdr.PROCESSING_ENDED] = wire_time(started + dt.timedelta(milliseconds=millis))
    headers[hdr.PROCESSING_ENDPOINT] = processed_by
    headers["NServiceBus.ProcessingMachine"] = "worker-02"
    return OutgoingMessage(hdr.encode(headers), message.body, id=str(uuid.uuid4()))


def failed_copy(message: OutgoingMessage, queue: str, exception: str, text: str, when: dt.datetime) -> OutgoingMessage:
    headers = hdr.decode_map(message.headers)
    headers[hdr.FAILED_QUEUE] = queue
    headers[hdr.PROCESSING_ENDPOINT] = queue
    headers[hdr.EXCEPTION_TYPE] = exception
    headers[hdr.EXCEPTION_MESSAGE] = text
    headers["NServiceBus.ExceptionInfo.Source"] = queue
    headers["NServiceBus.ExceptionInfo.StackTrace"] = f"{exception}: {text}\n   at {queue}.Handler.Handle()"
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


# ---------------------------------------------------------------------------------------- conversations


def shop_type(name: str, assembly: str) -> str:
    """An assembly-qualified type name as EnclosedMessageTypes carries it."""
    return f"{name}, {assembly}, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null"


ORDER_PLACED_TYPES = f"{ORDER_PLACED};{ORDER_EVENT}"
IMPORT_ORDERS = shop_type("Sales.Messages.Commands.ImportOrders", "Sales.Messages")
ORDER_BILLED = shop_type("Billing.Messages.Events.OrderBilled", "Billing.Messages")
SHIP_ORDER = shop_type("Shipping.Messages.Commands.ShipOrder", "Shipping.Messages")
SHIPMENT_DISPATCHED = shop_type("Warehouse.Messages.ShipmentDispatched", "Warehouse.Messages")
CHECK_SHIPMENT = shop_type("Shipping.ShippingPolicy+CheckShipment", "Shipping")  # a saga's timeout to itself
TIMEOUT = ("System.TimeoutException", "The payment gateway did not answer in time")
NO_ADDRESS = ("Shipping.AddressNotFoundException", "No such street in Rotterdam")
NO_STOCK = ("Warehouse.StockUnavailableException", "No grinder left in bay 4")


@dataclass(frozen=True)
class Step:
    """One delivery of a conversation: a message sent by ``sender``, handled (or not) by ``receiver``.

    ``cause``: the step whose handling sent it (its RelatedTo; sent ``after_ms`` after that handling
    ended, or after the start). ``same_message_as``: a published event's copy to another subscriber,
    which carries the same MessageId. ``failures``: one error-queue copy per failed attempt, each
    retried by ServiceControl after ``retry_after_s`` (the retry carries ServiceControl's retry id);
    ``processed``: an audit copy in the end. ``in_queue``: the copy as sent, drained from the
    receiver's queue (with ``processed``, the same message seen twice)."""

    message_type: str
    intent: str
    sender: str
    receiver: str
    cause: int | None = None
    after_ms: int = 20
    same_message_as: int | None = None
    millis: int = 60
    failures: tuple[tuple[str, str], ...] = ()
    processed: bool = True
    in_queue: bool = False
    retry_after_s: int = 90


def conversation_traffic(
    steps: list[Step], conversation_id: str, start: dt.datetime, seed: int = 11
) -> dict[str, list[OutgoingMessage]]:
    """The rows a conversation leaves in the queues, by queue: ``audit`` (one per processing),
    ``error`` (one per failed attempt) and the receivers' queues (``in_queue`` copies). Headers as the
    endpoints and ServiceControl write them: RelatedTo, ProcessingStarted/Ended, FailedQ,
    ExceptionInfo, ServiceControl.Retry.UniqueMessageId on a retried message's later copies."""
    rng = random.Random(seed)
    ids: list[str] = []
    ends: list[dt.datetime] = []
    out: dict[str, list[OutgoingMessage]] = {"audit": [], "error": []}
    for step in steps:
        if step.same_message_as is not None:
            message_id = ids[step.same_message_as]
        else:
            message_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        ids.append(message_id)
        base = start if step.cause is None else ends[step.cause]
        sent = base + dt.timedelta(milliseconds=step.after_ms)
        headers = order_headers(
            message_id,
            sent,
            intent=step.intent,
            types=step.message_type,
            endpoint=step.sender,
            conversation=conversation_id,
        )
        if step.cause is not None:
            headers[hdr.RELATED_TO] = ids[step.cause]
        body = orjson.dumps({"Step": len(ids), "Note": "x" * rng.randint(20, 200)})
        message = OutgoingMessage(hdr.encode(headers), body, id=str(uuid.uuid4()))
        if step.in_queue:
            out.setdefault(step.receiver, []).append(message)
        attempt = sent + dt.timedelta(milliseconds=5 + rng.randint(0, 40))
        retry_id: str | None = None
        for exception, text in step.failures:
            failed_at = attempt + dt.timedelta(milliseconds=step.millis)
            copy = failed_copy(message, step.receiver, exception, text, failed_at)
            out["error"].append(_with_retry_id(copy, retry_id))
            retry_id = unique_message_id(hdr.decode_map(copy.headers))
            attempt = failed_at + dt.timedelta(seconds=step.retry_after_s)
        end = attempt
        if step.processed:
            copy = audit_copy(message, step.receiver, attempt, step.millis)
            out["audit"].append(_with_retry_id(copy, retry_id))
            end = attempt + dt.timedelta(milliseconds=step.millis)
        ends.append(end)
    return out


def _with_retry_id(message: OutgoingMessage, retry_id: str | None) -> OutgoingMessage:
    """A copy of a retried message carries ServiceControl's id of the failed message it retries."""
    if retry_id is None:
        return message
    headers = hdr.decode_map(message.headers)
    headers[RETRY_UNIQUE_MESSAGE_ID] = retry_id
    return OutgoingMessage(hdr.encode(headers), message.body, id=message.id)


def order_conversation(client: str = "ClientUI") -> list[Step]:
    """Three messages: the client's PlaceOrder (also drained from Sales' queue: seen twice), Sales'
    OrderPlaced to Billing (failed once on a timeout, then processed on a retry), and Billing's
    OrderBilled to Shipping (failed, not retried)."""
    return [
        Step(PLACE_ORDER, "Send", client, "Sales", millis=120, in_queue=True),
        Step(ORDER_PLACED_TYPES, "Publish", "Sales", "Billing", cause=0, millis=340, failures=(TIMEOUT,)),
        Step(
            ORDER_BILLED, "Publish", "Billing", "Shipping", cause=1, millis=85, failures=(NO_ADDRESS,), processed=False
        ),
    ]


def bulk_conversation(messages: int = 300, client: str = "ClientUI") -> list[Step]:
    """A bulk import as one conversation of ``messages`` deliveries: the client's ImportOrders to Sales,
    then per order Sales' OrderPlaced to Billing and Shipping (one MessageId, two subscribers),
    Billing's OrderBilled to Shipping, Shipping's ShipOrder to Warehouse and Warehouse's reply. Some
    orders fail once at Billing (retried), some twice at Warehouse (retried), some for good at
    Warehouse; a few Shipping sagas set a timeout to themselves; the last replies still sat in
    Shipping's queue when it was drained."""
    steps = [Step(IMPORT_ORDERS, "Send", client, "Sales", millis=900)]
    for order in itertools.count():
        if len(steps) >= messages:
            break
        after = 15 + 37 * order  # Sales publishes one order after the other while it handles the import
        placed = len(steps)
        billing = (TIMEOUT,) if order % 9 == 4 else ()
        steps.append(Step(ORDER_PLACED_TYPES, "Publish", "Sales", "Billing", 0, after, millis=110, failures=billing))
        steps.append(Step(ORDER_PLACED_TYPES, "Publish", "Sales", "Shipping", 0, after, same_message_as=placed))
        steps.append(Step(ORDER_BILLED, "Publish", "Billing", "Shipping", cause=placed, millis=45))
        billed = len(steps) - 1
        if order % 17 == 8:  # out of stock for good: no reply
            steps.append(
                Step(SHIP_ORDER, "Send", "Shipping", "Warehouse", billed, failures=(NO_STOCK,), processed=False)
            )
            continue
        stock = (NO_STOCK, NO_STOCK) if order % 13 == 6 else ()  # restocked before the second retry
        ship = len(steps)
        steps.append(
            Step(SHIP_ORDER, "Send", "Shipping", "Warehouse", billed, millis=230, failures=stock, retry_after_s=40)
        )
        last = ship >= messages - 12  # the last replies: still in Shipping's queue when it was drained
        steps.append(
            Step(SHIPMENT_DISPATCHED, "Reply", "Warehouse", "Shipping", ship, processed=not last, in_queue=last)
        )
        if order % 25 == 12:  # the shipping saga's timeout, to itself
            steps.append(Step(CHECK_SHIPMENT, "Send", "Shipping", "Shipping", ship + 1, after_ms=2000, millis=12))
    return steps[:messages]

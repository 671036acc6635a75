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


# --- audit copies at ServiceControl's benchmark sizes ------------------------------------------------

_SYLLABLES = [
    *("ba be bi bo bu da de di do du fa fe fi fo ka ke ki ko ku la le li lo lu ma me mi mo mu na ne ni no").split(),
    *("pa pe pi po pu ra re ri ro ru sa se si so su ta te ti to tu va ve vi vo za ze zo an en in on un").split(),
    *("ar er ir or ur al el il ol st tr pr gr br ch sh th ck nd ng nt rs ll ss").split(),
]
CITIES = ["Rotterdam", "Antwerp", "Hamburg", "Lyon", "Porto", "Gdansk", "Leeds", "Aarhus", "Turin", "Graz"]
COUNTRIES = ["NL", "BE", "DE", "FR", "PT", "PL", "GB", "DK", "IT", "AT"]
WAREHOUSES = ["AMS-1", "AMS-2", "HAM-1", "LYS-1", "OPO-1"]


def _vocabulary(size: int = 2000) -> tuple[list[str], list[float]]:
    """Made-up words of 1-4 syllables, each once, with Zipf-like weights: text drawn from them repeats
    common words and rarely the others, as prose does (so it compresses like prose, not like a
    repeated string or random bytes)."""
    rng = random.Random(1234)
    words: dict[str, None] = {}
    while len(words) < size:
        words["".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((1, 2, 2, 3, 3, 4))))] = None
    return list(words), list(itertools.accumulate(1.0 / (rank + 4) for rank in range(size)))


_WORDS, _WEIGHTS = _vocabulary()


def _text(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choices(_WORDS, cum_weights=_WEIGHTS, k=rng.randint(low, high)))


def _guid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _catalogue(size: int = 1000) -> list[dict[str, Any]]:
    """The products line items name: an order repeats what a shop sells, not fresh text per line."""
    rng = random.Random(4321)
    return [
        {
            "Sku": f"SKU-{rng.randint(10000, 99999)}-{rng.choice('ABCDEFGH')}",
            "ProductName": _text(rng, 2, 4).title(),
            "Description": _text(rng, 6, 18),
            "UnitPrice": round(rng.uniform(1.5, 450), 2),
            "TaxRate": rng.choice((0.06, 0.09, 0.19, 0.21)),
        }
        for _ in range(size)
    ]


_CATALOGUE = _catalogue()
_POPULARITY = list(itertools.accumulate(1.0 / (rank + 10) for rank in range(len(_CATALOGUE))))


def _address(rng: random.Random) -> dict[str, Any]:
    city = rng.randrange(len(CITIES))
    letters = "ABCDEFGHJKLMNPRSTVWXZ"
    return {
        "Name": _text(rng, 2, 3).title(),
        "Street": f"{rng.randint(1, 400)} {_text(rng, 1, 2).title()} Street",
        "City": CITIES[city],
        "PostalCode": f"{rng.randint(1000, 9999)} {rng.choice(letters)}{rng.choice(letters)}",
        "Country": COUNTRIES[city],
        "Phone": f"+{rng.randint(30, 49)} {rng.randint(10, 99)} {rng.randint(1000000, 9999999)}",
    }


def _line(rng: random.Random, number: int) -> dict[str, Any]:
    product = rng.choices(_CATALOGUE, cum_weights=_POPULARITY)[0]
    quantity, discount = rng.randint(1, 12), rng.choice((0, 0, 0, 5, 10, 15))
    return {
        "LineNumber": number,
        **product,
        "Quantity": quantity,
        "DiscountPercent": discount,
        "LineTotal": round(quantity * product["UnitPrice"] * (100 - discount) / 100, 2),
        "Warehouse": rng.choice(WAREHOUSES),
        "Tags": rng.choices(_WORDS[:100], k=rng.randint(0, 3)),
        "Backordered": rng.random() < 0.05,
        "Remarks": _text(rng, 1, 8) if rng.random() < 0.3 else None,
    }


def large_order_body(rng: random.Random, order_id: str, size: int, placed: dt.datetime) -> bytes:
    """A PlaceOrder body of about ``size`` bytes (within ~1%, from ~2 KB up) as System.Text.Json writes
    it: an order with customer, addresses, payment and as many line items as the size takes. Values
    are ids, numbers, catalogue products and made-up words, so the body compresses as real JSON does
    (gzip ~3-6x), where a padded or repeated body would compress far better and random bytes not at all."""
    order: dict[str, Any] = {
        "OrderId": order_id,
        "OrderNumber": f"SO-{placed.year}-{rng.randint(0, 9_999_999):07d}",
        "PlacedAt": placed.isoformat().replace("+00:00", "Z"),
        "Channel": rng.choice(("Web", "Mobile", "Store", "Partner")),
        "Customer": {
            "CustomerId": _guid(rng),
            "Name": _text(rng, 2, 3).title(),
            "Email": f"{rng.choice(_WORDS)}.{rng.choice(_WORDS)}{rng.randint(1, 999)}@example.com",
            "LoyaltyTier": rng.choice(("None", "Silver", "Gold", "Platinum")),
        },
        "BillingAddress": _address(rng),
        "ShippingAddress": _address(rng),
        "Payment": {
            "Method": rng.choice(("Card", "Invoice", "iDEAL", "PayPal")),
            "TransactionId": _guid(rng),
            "AuthorizationCode": f"{rng.getrandbits(40):010X}",
        },
        "Currency": "EUR",
        "Total": 0.0,
        "Lines": [],
        "Notes": "",
    }
    lines: list[dict[str, Any]] = order["Lines"]
    used = len(orjson.dumps(order))
    while used < size - 1200:  # a line item is ~300-800 bytes; its size is counted once, not re-dumped
        lines.append(_line(rng, len(lines) + 1))
        used += len(orjson.dumps(lines[-1])) + 1
    order["Total"] = round(sum(line["LineTotal"] for line in lines), 2)
    body = orjson.dumps(order)
    notes: list[str] = []
    while len(body) < size - 12:  # the last bytes: a note's words, about as many as are missing
        missing = size - len(body)
        notes.extend(rng.choices(_WORDS, cum_weights=_WEIGHTS, k=max(1, missing // 9)))
        order["Notes"] = " ".join(notes)
        body = orjson.dumps(order)
    return body


def audit_events(
    count: int, body_bytes: int, seed: int = 7, start: dt.datetime | None = None
) -> Iterator[OutgoingMessage]:
    """Audit copies of PlaceOrder commands Sales sent and Billing processed, as NServiceBus writes
    them to the audit queue: the sender's headers (MessageId, ConversationId, RelatedTo, intent,
    enclosed types, originating endpoint, machine and host id, TimeSent in the wire form, content
    type, version, trace context) plus the processing side's (ProcessingStarted/Ended/Endpoint/Machine,
    host id and display name), with JSON bodies of about ``body_bytes`` bytes (``large_order_body``)."""
    rng = random.Random(seed)
    start = start or dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    for i in range(count):
        message_id = _guid(rng)
        sent = start + dt.timedelta(milliseconds=250 * i, microseconds=rng.randint(0, 999_999))
        headers = order_headers(
            message_id,
            sent,
            intent="Send",
            types=PLACE_ORDER,
            machine=f"web-{rng.randint(1, 4):02d}",
            conversation=_guid(rng),
        )
        headers["NServiceBus.RelatedTo"] = _guid(rng)
        body = large_order_body(rng, f"order-{seed}-{i}", body_bytes, sent)
        started = sent + dt.timedelta(milliseconds=rng.randint(5, 2000))
        audited = audit_copy(
            OutgoingMessage(hdr.encode(headers), body, id=message_id), "Billing", started, rng.randint(3, 400)
        )
        audited_headers = hdr.decode_map(audited.headers)
        audited_headers["$.diagnostics.hostid"] = uuid.uuid5(uuid.NAMESPACE_DNS, "worker-02").hex
        audited_headers["$.diagnostics.hostdisplayname"] = "worker-02"
        yield OutgoingMessage(hdr.encode(audited_headers), body, id=str(uuid.UUID(int=rng.getrandbits(128), version=4)))

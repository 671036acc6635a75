"""Whole conversations as the queues hold them after the endpoints and ServiceControl are done: each
delivery's audit copy, its error-queue copies per failed attempt (retried or not), and the copies
still in a receiver's queue, linked by RelatedTo and ServiceControl's retry ids.

Why apart from ``traffic.py``: the conversation views, their tests and ``scripts/conversation-pictures.py``
need causes and retries; the demo and the drain's tests need only ``traffic``'s single messages.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
import uuid
from dataclasses import dataclass

import orjson

from queuelake.commands.demo.traffic import (
    ORDER_EVENT,
    ORDER_PLACED,
    PLACE_ORDER,
    audit_copy,
    failed_copy,
    order_headers,
)
from queuelake.nsb import headers as hdr
from queuelake.nsb.retry import RETRY_UNIQUE_MESSAGE_ID, unique_message_id
from queuelake.transport.queues import OutgoingMessage


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

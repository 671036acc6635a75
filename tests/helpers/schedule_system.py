"""A small NServiceBus system's traffic, round after round, for the schedule test (``test_schedule``).

Each round the system sends, to the queues a scheduled ``queuelake run`` drains: OrderPlaced events (the
worked example's transform reads them), StockCounted as Newtonsoft writes it (a byte-order mark),
PaymentTaken with Newtonsoft's ``$type`` member, and ShipOrder written by XmlSerializer in even rounds and
by System.Text.Json in odd ones (a system migrating endpoint by endpoint); audit copies of a fifth of
them, and failed copies of a seventh in ``error`` (their exception message names the round, so that a
retry between rounds can select one round's failures). ``Sent`` keeps every row's identity, to check the
journal end to end.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from dataclasses import dataclass, field

import orjson
from queuelake.commands.demo import conversations, traffic
from queuelake.nsb import headers as hdr
from queuelake.transport.queues import OutgoingMessage

BOM = b"\xef\xbb\xbf"
STOCK_COUNTED = "Shop.Messages.Events.StockCounted"
PAYMENT_TAKEN = "Shop.Messages.Events.PaymentTaken"
SHIP_ORDER = "Shop.Messages.Commands.ShipOrder"
ORDER_PLACED = "Sales.Messages.Events.OrderPlaced"
SKUS = ["espresso-beans", "grinder", "kettle", "mug"]
TAGS = ["fragile", "gift", "express"]


@dataclass
class Sent:
    """Every row sent, by queue: row ids, and the conversation of each (to take erased ones out)."""

    rows: dict[str, dict[str, str]] = field(default_factory=lambda: {"Sales": {}, "audit": {}, "error": {}})
    orders: dict[str, str] = field(default_factory=dict)  # OrderPlaced message id -> conversation
    types: dict[str, str] = field(default_factory=dict)  # message id -> its type's full name
    failed: dict[int, int] = field(default_factory=dict)  # round -> failed copies sent in it

    def add(self, queue: str, message: OutgoingMessage, conversation: str) -> None:
        self.rows[queue][str(message.id)] = conversation


def _headers(message_id: str, sent: dt.datetime, type_name: str, conversation: str, content_type: str) -> bytes:
    headers = traffic.order_headers(
        message_id,
        sent,
        intent="Send" if ".Commands." in type_name else "Publish",
        types=conversations.shop_type(type_name, type_name.rsplit(".", 2)[0]),
        conversation=conversation,
    )
    headers[hdr.CONTENT_TYPE] = content_type
    return hdr.encode(headers)


def _tags(tags: list[str]) -> str:
    return "<Tags>" + "".join(f"<string>{t}</string>" for t in tags) + "</Tags>" if tags else "<Tags />"


def _ship_order_xml(order: str, lines: list[dict]) -> bytes:
    """As XmlSerializer writes ``ShipOrder { string OrderId; List<OrderLine> Lines; string Note }``:
    a collection wrapper named after the property, one ``OrderLine`` per item (one included), an empty
    list as ``<Lines />``, null as ``xsi:nil``, namespaces on the root."""
    items = "".join(
        f"<OrderLine><Sku>{line['Sku']}</Sku><Qty>{line['Qty']}</Qty>"
        + (
            "<Tags>" + "".join(f"<string>{t}</string>" for t in line["Tags"]) + "</Tags>"
            if line["Tags"]
            else "<Tags />"
        )
        + "</OrderLine>"
        for line in lines
    )
    body = (
        '<?xml version="1.0"?>'
        '<ShipOrder xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
        'xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns="http://tempuri.net/Shop.Messages.Commands">'
        f"<OrderId>{order}</OrderId>"
        + (f"<Lines>{items}</Lines>" if lines else "<Lines />")
        + '<Note xsi:nil="true" />'
        "</ShipOrder>"
    )
    return body.encode("utf-8")


def round_traffic(round_no: int, orders: int, sent: Sent) -> dict[str, list[OutgoingMessage]]:
    """One round's rows by queue; ``sent`` records them."""
    rng = random.Random(round_no)
    start = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc) + dt.timedelta(minutes=15 * round_no)
    out: dict[str, list[OutgoingMessage]] = {"Sales": [], "audit": [], "error": []}
    for n, order in enumerate(traffic.order_events(orders, seed=1000 + round_no, start=start)):
        conversation = hdr.decode_map(order.headers)[hdr.CONVERSATION_ID] or ""
        sent.orders[str(order.id)] = conversation
        sent.types[str(order.id)] = ORDER_PLACED
        when = start + dt.timedelta(seconds=n)
        lines = [
            {"Sku": rng.choice(SKUS), "Qty": rng.randint(1, 9), "Tags": rng.sample(TAGS, rng.randint(0, 2))}
            for _ in range(n % 4)  # 0 (an empty list), 1 (one item), 2 or 3 lines
        ]
        ship_id, stock_id, pay_id = (str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(3))
        if round_no % 2 == 0:
            ship = OutgoingMessage(
                _headers(ship_id, when, SHIP_ORDER, conversation, "text/xml"),
                _ship_order_xml(f"o-{n}", lines),
                id=ship_id,
            )
        else:
            body = orjson.dumps({"OrderId": f"o-{n}", "Lines": lines, "Note": None})
            ship = OutgoingMessage(
                _headers(ship_id, when, SHIP_ORDER, conversation, "application/json"), body, id=ship_id
            )
        stock = OutgoingMessage(
            _headers(stock_id, when, STOCK_COUNTED, conversation, "application/json"),
            BOM + orjson.dumps({"Sku": rng.choice(SKUS), "Count": rng.randint(0, 500), "CountedAt": when.isoformat()}),
            id=stock_id,
        )
        payment = OutgoingMessage(
            _headers(pay_id, when, PAYMENT_TAKEN, conversation, "application/json"),
            orjson.dumps({"$type": f"{PAYMENT_TAKEN}, Shop.Messages", "OrderId": f"o-{n}", "Amount": n * 1.5}),
            id=pay_id,
        )
        for message, type_name in (
            (order, ORDER_PLACED),
            (ship, SHIP_ORDER),
            (stock, STOCK_COUNTED),
            (payment, PAYMENT_TAKEN),
        ):
            sent.types[str(message.id)] = type_name
            out["Sales"].append(message)
        if n % 5 == 0:
            out["audit"].append(traffic.audit_copy(order, "Billing", when + dt.timedelta(seconds=1), 40))
        if n % 7 == 0:
            failure = traffic.failed_copy(payment, "Sales", "System.TimeoutException", f"round-{round_no}", when)
            out["error"].append(failure)
            sent.failed[round_no] = sent.failed.get(round_no, 0) + 1
    for queue, messages in out.items():
        for message in messages:
            sent.add(queue, message, hdr.decode_map(message.headers)[hdr.CONVERSATION_ID] or "")
    return out

"""Bodies as NServiceBus's serializers write them, with the headers they travel with.

- System.Text.Json (the default serializer): compact UTF-8, PascalCase, DateTime in ISO 8601 with
  seven fractional digits and ``Z``, decimals as written (``12`` or ``12.50``), no BOM.
- Newtonsoft (NServiceBus.Newtonsoft.Json): may start with a UTF-8 byte-order mark, and with
  ``TypeNameHandling.Auto``/``All`` carries ``$type`` (``Ns.Type, Assembly``) as the first member.
- XmlSerializer (NServiceBus's own): an XML declaration, a root element named after the type with
  the ``xsi``/``xsd`` namespaces and a default namespace ``http://tempuri.net/<namespace>``; a list
  is a wrapper element of repeated elements named after the item type; null is ``xsi:nil``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator

import orjson
from queuelake.commands.demo.traffic import order_headers
from queuelake.nsb import headers as hdr
from queuelake.transport.queues import OutgoingMessage

BOM = b"\xef\xbb\xbf"
START = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.timezone.utc)


def aqn(name: str, assembly: str, version: str) -> str:
    return f"{name}, {assembly}, Version={version}, Culture=neutral, PublicKeyToken=null"


ORDER_V1 = aqn("Sales.Contracts.OrderPlaced", "Sales.Contracts", "1.0.0.0")
ORDER_V2 = aqn("Sales.Contracts.OrderPlaced", "Sales.Contracts", "2.0.0.0")
SHIPPED = aqn("Shipping.Contracts.OrderShipped", "Shipping.Contracts", "1.0.0.0")
INVOICE = aqn("Billing.Contracts.InvoiceIssued", "Billing.Contracts", "1.0.0.0")
STOCK = aqn("Stock.Contracts.StockCounted", "Stock.Contracts", "1.0.0.0")
ODD = aqn("Odd.Contracts.Everything", "Odd.Contracts", "1.0.0.0")


def net_time(when: dt.datetime) -> str:
    """A UTC DateTime as System.Text.Json and Newtonsoft write it: seven fractional digits and Z."""
    return when.strftime("%Y-%m-%dT%H:%M:%S.%f") + "0Z"


def message(types: str, body: bytes | None, content_type: str | None, i: int, **extra: str) -> OutgoingMessage:
    message_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"corpus/{types}/{i}"))
    headers = order_headers(message_id, START + dt.timedelta(seconds=i), types=types)
    if content_type is None:
        headers.pop(hdr.CONTENT_TYPE)
    else:
        headers[hdr.CONTENT_TYPE] = content_type
    headers.update(extra)
    return OutgoingMessage(hdr.encode(headers), body, id=str(uuid.uuid4()))


def system_text_json(i: int, version: int) -> bytes:
    body = {
        "OrderId": f"order-{i}",
        "CustomerId": f"customer-{i % 7}",
        "Total": 12 if i % 4 == 0 else round(10.5 + i, 2),  # decimal 12m is written "12"
        "PlacedAt": net_time(START + dt.timedelta(minutes=i)),
        "Lines": [{"Product": "mug", "Quantity": 1 + i % 3, "UnitPrice": 4.5}],
        "ShippingAddress": {"Street": "1 Harbour Road", "City": "Rotterdam"},
        "Express": i % 2 == 0,
    }
    if version == 2:
        body["DiscountCode"] = f"SPRING-{i}"  # version 2 of the contract gains a field
    return orjson.dumps(body)


def newtonsoft(i: int) -> bytes:
    body = {
        "$type": "Shipping.Contracts.OrderShipped, Shipping.Contracts",
        "OrderId": f"order-{i}",
        "Carrier": "PostNL",
        "ShippedAt": net_time(START + dt.timedelta(hours=i)),
        "Parcels": [{"$type": "Shipping.Contracts.Parcel, Shipping.Contracts", "Weight": 1.25, "Barcode": f"3S{i}"}],
    }
    return BOM + orjson.dumps(body, option=orjson.OPT_INDENT_2)


def xml_serializer(i: int, lines: int) -> bytes:
    items = "".join(
        f"<InvoiceLine><Product>p{j}</Product><Amount>{5 + j}.25</Amount></InvoiceLine>" for j in range(lines)
    )
    note = '<Note xsi:nil="true" />' if i % 2 else "<Note>paid by card</Note>"
    text = (
        '<?xml version="1.0"?>\n'
        '<InvoiceIssued xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
        'xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns="http://tempuri.net/Billing.Contracts">\n'
        f"  <InvoiceId>inv-{i}</InvoiceId>\n  <OrderId>order-{i}</OrderId>\n  <Zip>0{i}123</Zip>\n"
        f"  <Total>{100 + i}.50</Total>\n  <IssuedAt>{net_time(START)}</IssuedAt>\n  {note}\n"
        f"  <Lines>{items}</Lines>\n</InvoiceIssued>"
    )
    return text.encode("utf-8")


def changing_type(i: int) -> bytes:
    """A field whose type changes: a number, then text (StockCounted.Location)."""
    return orjson.dumps({"Sku": f"sku-{i}", "Count": i, "Location": 7 if i < 3 else f"aisle {i}"})


def odd(i: int) -> tuple[bytes | None, str | None]:
    """Bodies that do not parse: empty, null, JSON null, not UTF-8, a JSON list, unknown content type."""
    return [
        (b"", "application/json"),
        (None, "application/json"),
        (b"null", "application/json"),
        # a byte that is not UTF-8 inside a JSON string: it parsed, the value typed altered (U+FFFD)
        (b'{"Name": "caf\xe9"}', "application/json"),
        (b"[1, 2, 3]", "application/json"),
        # no content type: sniffed as JSON, parses; ``Queue`` is an identity column's name (stored as
        # ``body_Queue``) and ``body_queue`` reads like its escape (stored as ``body_body_queue``)
        (b'{"Name": "fine", "Size": 3, "Queue": "Billing", "body_queue": "x"}', None),
        (b"\x0a\x03abc", "application/x-protobuf"),
        (b"<Everything><Name>xml sniffed</Name></Everything>", None),
        (b'{"Name": "broken"', "application/json"),
    ][i]


def corpus() -> Iterator[OutgoingMessage]:
    for i in range(8):
        yield message(ORDER_V1, system_text_json(i, 1), "application/json", i)
    for i in range(8, 12):
        yield message(ORDER_V2, system_text_json(i, 2), "application/json", i)
    for i in range(5):
        yield message(SHIPPED, newtonsoft(i), "application/json; charset=utf-8", i)
    for i in range(4):
        yield message(INVOICE, xml_serializer(i, lines=1 + i % 3), "text/xml", i)
    for i in range(6):
        yield message(STOCK, changing_type(i), "application/json", i)
    for i in range(9):
        body, content_type = odd(i)
        yield message(ODD, body, content_type, i)

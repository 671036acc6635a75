"""Audit copies at ServiceControl's benchmark sizes: PlaceOrder commands as the audit queue holds them,
with JSON bodies of a chosen size that compress as real orders do.

Why apart from ``traffic.py``: the words, products and addresses these bodies are made of are built
once at import (a vocabulary and a catalogue); only the audit bench and tests need them.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
import uuid
from collections.abc import Iterator
from typing import Any

import orjson

from queuelake.commands.demo.traffic import PLACE_ORDER, audit_copy, order_headers
from queuelake.nsb import headers as hdr
from queuelake.transport.queues import OutgoingMessage

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

"""A generated NServiceBus system to ask questions of, as an operator would (issue 61's closing note):
five endpoints (ClientUI, Sales, Billing, Shipping, Warehouse), their queues, audit and error, and
Shipping's delayed store, filled with what the endpoints and ServiceControl leave there.

Why a script of its own: ``bench/where.py`` writes a journal straight into the lake (10M rows, no queue
database behind it) and the tests build their systems inside a fixture. The questions of ``where``,
``health``, ``failures`` and ``replay --canary`` are asked of whole commands over a real queue
database, drained by ``queuelake run``, so the system is made here once and the commands run after it.

What it sends (``conversations.py``'s conversations, so every copy is linked as the platform links it):
- ``--orders`` order conversations (ClientUI -> Sales -> Billing -> Shipping), spread over three UTC days:
  the PlaceOrder waits in Sales (drained: the config drains Sales), its audit copy; OrderPlaced failed
  once at Billing on a timeout and retried by ServiceControl (its retry id on the later copies);
  OrderBilled failed for good at Shipping. Processing times vary per message;
- ``--bulk`` bulk imports of 300 messages each (Warehouse's failures for good and retried, a saga's
  timeouts, replies still waiting in Shipping's queue);
- every body carries an integer ``OrderId`` (``4700 + n`` for the n-th order, bulk orders from
  100,000 on), so ``where --field OrderId --value 4711`` has something to find;
- the stack traces of the error copies as two builds print them (other paths, line numbers, async
  state machine numbers, addresses): even orders from build 1, odd from build 2;
- one message that expires before the drain (Sales, 1 ms to be received), and one CheckShipment timeout
  for order 4711 in Shipping's delayed store, due in an hour.

    python bench/system.py --workdir DIR [--dsn URI] [--orders 200] [--bulk 4] [--engine delta-rs]
    python bench/system.py endpoint -c DIR/system.yaml --queue Warehouse --take 2 [--seconds 300]

The first form installs and seeds (nothing is drained: ``queuelake run -c DIR/system.yaml`` does that)
and writes ``DIR/system.yaml`` (``transport.embedded`` in ``DIR/pg`` without ``--dsn``). The second is
an endpoint: it takes up to ``--take`` messages off ``--queue`` and puts an audit copy of each into
``audit``, as the endpoint would once it processed them: what a canary replay waits for. Prints one
JSON line (what was sent, by queue; the ids worth asking about).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
import orjson
from queuelake.commands.demo import conversations as conv
from queuelake.commands.demo import traffic
from queuelake.config import Config, load
from queuelake.context import connect
from queuelake.nsb import headers as hdr
from queuelake.transport import installer, queues
from queuelake.transport.queues import OutgoingMessage
from queuelake.transport.table_refs import queue_ref

ENDPOINTS = ["ClientUI", "Sales", "Billing", "Shipping", "Warehouse"]
DRAINED = ["Sales", "audit", "error"]
START = dt.datetime(2026, 11, 25, 6, 0, tzinfo=dt.timezone.utc)
STACK = "NServiceBus.ExceptionInfo.StackTrace"


def _frames(endpoint: str, build: int) -> str:
    """The frames of ``endpoint``'s handler as build 1 or 2 prints them: the same failure, two builds."""
    folder, line, state, address = (
        ("C:\\build\\41\\src\\", 42, 12, "0x7ffe12ab00") if build == 1 else ("/home/ci/build77/src/", 57, 7, "0x1c0")
    )
    sep = "\\" if "\\" in folder else "/"
    return "\n".join(
        [
            f"   at {endpoint}.Handler.<Handle>d__{state}.MoveNext() in {folder}{endpoint}{sep}Handler.cs:line {line}",
            "--- End of stack trace from previous location ---",
            f"   at NServiceBus.Pipeline.Invoke(Context c) in {folder}Core{sep}Pipeline.cs:line {line + 100}",
            f"   at Native.Call({address})",
        ]
    )


def _rewrite(message: OutgoingMessage, order_id: int, build: int) -> OutgoingMessage:
    """The copy with ``OrderId`` in its body and, for an error copy, its build's stack trace."""
    headers = hdr.decode_map(message.headers)
    body = orjson.loads(message.body or b"{}")
    body = {"OrderId": order_id, **body}
    if headers.get(hdr.EXCEPTION_TYPE):
        first = (headers.get(STACK) or "").split("\n", 1)[0]
        endpoint = headers.get(hdr.FAILED_QUEUE) or "Unknown"
        headers[STACK] = f"{first}\n{_frames(endpoint, build)}"
    return dataclasses.replace(message, headers=hdr.encode(headers), body=orjson.dumps(body))


def _varied(steps: list[conv.Step], rng: random.Random) -> list[conv.Step]:
    """Processing times that vary per message (percentiles worth reading)."""
    return [dataclasses.replace(s, millis=max(1, int(s.millis * rng.lognormvariate(0, 0.6)))) for s in steps]


def system_traffic(orders: int, bulk: int) -> tuple[dict[str, list[OutgoingMessage]], dict[str, Any]]:
    """Every row by queue, and the ids worth asking about."""
    rng = random.Random(61)
    out: dict[str, list[OutgoingMessage]] = {}
    asked: dict[str, Any] = {"orders": {}}
    span = dt.timedelta(days=3)
    for n in range(orders):
        order_id = 4700 + n
        conversation = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        start = START + span * n / max(orders, 1)
        steps = _varied(conv.order_conversation(), rng)
        for queue, messages in conv.conversation_traffic(steps, conversation, start, seed=n).items():
            out.setdefault(queue, []).extend(_rewrite(m, order_id, 1 + n % 2) for m in messages)
        asked["orders"][order_id] = conversation
    for b in range(bulk):
        conversation = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        start = START + span * (b + 0.5) / max(bulk, 1)
        steps = _varied(conv.bulk_conversation(300), rng)
        for queue, messages in conv.conversation_traffic(steps, conversation, start, seed=1000 + b).items():
            for i, m in enumerate(messages):
                out.setdefault(queue, []).append(_rewrite(m, 100_000 + b * 1000 + i, 1 + (b + i) % 2))
        asked.setdefault("bulk", []).append(conversation)
    return out, asked


def _order_message(order_id: int, conversation: str, type_name: str, seconds: int) -> OutgoingMessage:
    message_id = str(uuid.UUID(int=order_id * 1000 + seconds, version=4))
    headers = traffic.order_headers(
        message_id, START + dt.timedelta(seconds=seconds), "Send", type_name, "Shipping", conversation=conversation
    )
    return OutgoingMessage(hdr.encode(headers), orjson.dumps({"OrderId": order_id}), id=message_id)


def settings(workdir: Path, dsn: str | None, engine: str) -> dict[str, Any]:
    transport: dict[str, Any] = {"delayed_endpoints": ["Shipping"]}
    transport.update({"connection": dsn} if dsn else {"connection": None, "embedded": str(workdir / "pg")})
    return {
        "transport": transport,
        "lake": {"root": str(workdir / "lake"), "engine": engine},
        "spark": {"master": "local[2]"},
        "drain": {"queues": DRAINED, "batch_size": 2000},
    }


def generate(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    conf = workdir / "system.yaml"
    conf.write_text(json.dumps(settings(workdir, args.dsn, args.engine), indent=2))
    cfg = load(str(conf))
    t = cfg.transport
    rows, asked = system_traffic(args.orders, args.bulk)
    sent: dict[str, int] = {}
    with connect(cfg) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=ENDPOINTS, delayed_endpoints=["Shipping"]))
        conn.commit()
        for queue, messages in rows.items():
            sent[queue] = traffic.seed(conn, queue_ref(queue, t), messages)
        order = 4711 if 4711 - 4700 < args.orders else 4700
        conversation = asked["orders"][order]
        expiring = dataclasses.replace(_order_message(order, conversation, conv.PLACE_ORDER, 1), ttbr_ms=1)
        traffic.seed(conn, queue_ref("Sales", t), [expiring])
        timeout = _order_message(order, conversation, conv.CHECK_SHIPMENT, 2)
        headers = hdr.decode_map(timeout.headers)
        headers[hdr.FORWARD_DESTINATION] = "Shipping"
        delayed = queue_ref("Shipping", t).delayed()
        queues.store_delayed(conn, delayed, [(hdr.encode(headers), timeout.body, 3_600_000)])
        conn.commit()
    time.sleep(0.05)  # the expiring message's 1 ms runs out before any drain
    return {
        "config": str(conf),
        "endpoints": ENDPOINTS,
        "rows_by_queue": sent,
        "rows": sum(sent.values()) + 1,
        "delayed": 1,
        "order": order,
        "order_conversation": conversation,
        "expired_message_id": expiring.id,
        "delayed_message_id": timeout.id,
        "bulk_conversations": asked.get("bulk", []),
    }


def endpoint(args: argparse.Namespace) -> dict[str, Any]:
    """Takes up to ``--take`` messages off ``--queue`` and puts each one's audit copy into audit."""
    cfg: Config = load(args.config)
    t = cfg.transport
    taken: list[str] = []
    deadline = time.monotonic() + args.seconds
    with connect(cfg) as conn:
        while len(taken) < args.take and time.monotonic() < deadline:
            received = queues.receive_batch(conn, queue_ref(args.queue, t), args.take - len(taken))
            for r in received:
                message = OutgoingMessage(r.headers or "{}", r.body, id=r.id)
                now = dt.datetime.now(dt.timezone.utc)
                traffic.seed(conn, queue_ref("audit", t), [traffic.audit_copy(message, args.queue, now, 25)])
                taken.append(hdr.decode_map(message.headers).get(hdr.MESSAGE_ID) or str(r.id))
            conn.commit()
            time.sleep(0.2)
    return {"queue": args.queue, "taken": taken}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode")
    ep = sub.add_parser("endpoint", help="take messages off a queue and audit them, as the endpoint would")
    ep.add_argument("-c", "--config", required=True)
    ep.add_argument("--queue", required=True)
    ep.add_argument("--take", type=int, default=2)
    ep.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--workdir")
    parser.add_argument("--dsn", help="a PostgreSQL URI (default: an embedded server in WORKDIR/pg)")
    parser.add_argument("--orders", type=int, default=200)
    parser.add_argument("--bulk", type=int, default=4)
    parser.add_argument("--engine", default="delta-rs", choices=["auto", "delta-rs", "delta-spark"])
    args = parser.parse_args()
    if args.mode == "endpoint":
        result = endpoint(args)
    elif not args.workdir:
        parser.error("--workdir is required")
    else:
        result = generate(args)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

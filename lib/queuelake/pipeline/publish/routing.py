"""From an outbound row to the messages that go out: destinations checked, fan-out to subscribers,
the headers NServiceBus reads.

Why a module of its own: the driver and Spark executors build messages the same way, so the routing
(which queues, which are deliverable) and the wire format live here, in a picklable ``Router`` that a
publish on executors ships to its tasks with every verdict already made on the driver
(``executors.frozen``): a task never decides a destination differently from the undeliverable records
written before it ran.
"""

from __future__ import annotations

import datetime as dt
import socket
from dataclasses import dataclass, field
from typing import Any

import orjson

from queuelake.config import Config, conflict_message, drained_as
from queuelake.errors import PublishError, QueuelakeError
from queuelake.nsb import headers as hdr
from queuelake.nsb.message_types import full_type_name, split_types
from queuelake.nsb.times import format_time
from queuelake.nsb.timespan import timespan
from queuelake.pipeline.message_ids import message_id
from queuelake.transport import queues, schema, subscriptions
from queuelake.transport.db import Connection
from queuelake.transport.queues import OutgoingMessage
from queuelake.transport.tables import TableRef, bridge_ref, queue_ref

Verdict = tuple[TableRef | None, str | None]  # (queue, None) when deliverable, else (None, reason)


@dataclass
class Router:
    """Where a row's copies go, and whether each can be delivered. Verdicts and subscriber lists are
    looked up once per run and cached; a frozen router (shipped to executors) only reads its cache."""

    config: Config
    machine: str = field(default_factory=socket.gethostname)
    verdicts: dict[tuple[str | None, bool], Verdict] = field(default_factory=dict)
    subscribers_of: dict[str, list[str]] = field(default_factory=dict)
    frozen: bool = False

    @property
    def endpoint(self) -> str:
        return self.config.publish.endpoint

    def target(self, conn: Connection | None, address: str | None, delayed: bool) -> Verdict:
        """(queue, None) for a deliverable address, else (None, reason). Checked once per run: the
        address parses and fits the dialect's limits, it is not a queue this deployment drains (unless
        drain.also_destinations says so: the next drain would take the copies into the lake), and
        the table is there with the transport's columns. Untrusted text never reaches SQL: only a
        parsed, quoted name does."""
        verdict = self.verdicts.get((address, delayed))
        if verdict is None:
            if self.frozen or conn is None:
                raise PublishError(f"destination {address!r} was not checked before the round was sent")
            try:
                if address is None or not address.strip():
                    raise PublishError("queue address is empty")
                ref = queue_ref(address, self.config.transport)
                drained = drained_as(self.config, address)
                if drained is not None:  # a Send row's destination or a subscriber, found only now
                    where = f"an outbound row or subscription ({address!r})"
                    raise PublishError(conflict_message(drained, address, where))
                problem = schema.delivery_problem(conn, ref.delayed() if delayed else ref, delayed)
                verdict = (ref, None) if problem is None else (None, problem)
            except QueuelakeError as exc:
                verdict = (None, str(exc))
            self.verdicts[(address, delayed)] = verdict
        return verdict

    def subscribers(self, conn: Connection | None, message_type: str) -> list[str]:
        """Distinct subscriber addresses (raw text) of any type in the event's hierarchy."""
        found = self.subscribers_of.get(message_type)
        if found is None:
            if self.frozen or conn is None:
                raise PublishError(f"subscribers of {message_type!r} were not looked up before the round was sent")
            topics = [full_type_name(t) for t in split_types(message_type) or []]
            ref = bridge_ref(self.config.transport.subscription_table, self.config.transport)
            found = self.subscribers_of[message_type] = subscriptions.find_subscribers(conn, ref, topics)
        return found

    def routes(
        self, conn: Connection | None, intent: str, destination: str | None, message_type: str, delayed: bool
    ) -> tuple[dict[str, TableRef], list[tuple[str | None, str]]]:
        """(distinct deliverable queues by canonical name, [(address, reason) not deliverable])."""
        addresses = [destination] if intent == "Send" else self.subscribers(conn, message_type)
        targets: dict[str, TableRef] = {}
        lost: list[tuple[str | None, str]] = []
        for address in addresses:
            target, reason = self.target(conn, address, delayed)
            if target is None:
                lost.append((address, reason or "undeliverable"))
            else:
                targets.setdefault(target.canonical, target)  # one copy per distinct queue
        return targets, lost

    def build(
        self, conn: Connection | None, pipeline: str, rows: list[dict[str, Any]], now: dt.datetime, sent: str
    ) -> tuple[Outgoing, list[tuple[dict[str, Any], str | None, str]]]:
        """Every deliverable copy of a batch's rows, grouped by table, and the copies that cannot be
        delivered as (row, address, reason).

        Why one loop over the batch rather than a function per row: at 20,000-row rounds this loop
        was half of a publish's client time. Routes are looked up once per (intent, destination or
        type, delayed), and the row id of each copy is left to the COPY (a uuid4 there)."""
        out = Outgoing()
        lost: list[tuple[dict[str, Any], str | None, str]] = []
        routes: dict[tuple[str, str | None, bool], tuple[list[TableRef], list[tuple[str | None, str]]]] = {}
        endpoint, machine = self.endpoint, self.machine
        for row in rows:
            intent = row["intent"]
            message_type = row["message_type"]
            body = row["body"]
            if isinstance(body, str):
                body = body.encode("utf-8")
            user_headers = row.get("headers")
            user_headers = dict(user_headers) if user_headers else None
            ttbr = row.get("ttbr_ms")
            deliver_at = row.get("deliver_at")
            delay = None
            if deliver_at is not None:
                deliver_at = deliver_at if deliver_at.tzinfo else deliver_at.replace(tzinfo=dt.timezone.utc)
                delay = max(int((deliver_at - now).total_seconds() * 1000), 0)
            where = row.get("destination") if intent == "Send" else message_type
            route = routes.get((intent, where, delay is not None))
            if route is None:
                targets, bad = self.routes(conn, intent, row.get("destination"), message_type, delay is not None)
                route = routes[(intent, where, delay is not None)] = (list(targets.values()), bad)
            targets_of_row, bad = route
            for address, reason in bad:
                lost.append((row, address, reason))
            key = row["key"]
            for target in targets_of_row:
                mid = message_id(pipeline, key, target.canonical)
                fixed = {
                    hdr.MESSAGE_ID: mid,
                    hdr.MESSAGE_INTENT: intent,
                    hdr.ENCLOSED_MESSAGE_TYPES: message_type,
                    hdr.CONTENT_TYPE: "application/json",
                    hdr.TIME_SENT: sent,
                    hdr.CONVERSATION_ID: row.get("conversation_id") or mid,
                    hdr.CORRELATION_ID: row.get("correlation_id") or mid,
                    hdr.ORIGINATING_ENDPOINT: endpoint,
                    hdr.ORIGINATING_MACHINE: machine,
                    hdr.VERSION: "9.2.0",
                }
                if user_headers:  # theirs first (key order as before), ours win; some fall back to theirs
                    fixed[hdr.CONTENT_TYPE] = user_headers.get(hdr.CONTENT_TYPE) or "application/json"
                    fixed[hdr.CONVERSATION_ID] = (
                        row.get("conversation_id") or user_headers.get(hdr.CONVERSATION_ID) or mid
                    )
                    fixed[hdr.CORRELATION_ID] = row.get("correlation_id") or user_headers.get(hdr.CORRELATION_ID) or mid
                    fixed[hdr.VERSION] = user_headers.get(hdr.VERSION) or "9.2.0"
                    headers = {**user_headers, **fixed}
                else:
                    headers = fixed
                if ttbr is not None:
                    headers[hdr.TIME_TO_BE_RECEIVED] = timespan(int(ttbr))
                if delay is None or deliver_at is None:  # both set or neither
                    out.add_direct(target, OutgoingMessage(orjson.dumps(headers).decode(), body, None, ttbr))
                else:
                    headers[hdr.DELIVER_AT] = format_time(deliver_at)
                    headers[hdr.FORWARD_DESTINATION] = target.canonical
                    out.add_delayed(target, orjson.dumps(headers).decode(), body, delay)
        return out, lost


@dataclass
class Outgoing:
    """One batch's messages grouped by table, ready to insert."""

    direct: dict[str, tuple[TableRef, list[OutgoingMessage]]] = field(default_factory=dict)
    delayed: dict[str, tuple[TableRef, list[tuple[str, bytes | None, int]]]] = field(default_factory=dict)
    copies: int = 0

    def add_direct(self, target: TableRef, message: OutgoingMessage) -> None:
        self.copies += 1
        entry = self.direct.get(target.canonical)
        if entry is None:
            entry = self.direct[target.canonical] = (target, [])
        entry[1].append(message)

    def add_delayed(self, target: TableRef, headers: str, body: bytes | None, delay: int) -> None:
        self.copies += 1
        ref = target.delayed()
        self.delayed.setdefault(ref.canonical, (ref, []))[1].append((headers, body, delay))

    def insert(self, conn: Connection) -> None:
        """Insert every copy (in the caller's transaction, which also records the batch's ledger row)."""
        for ref, messages in self.direct.values():
            queues.send(conn, ref, messages)
        for ref, items in self.delayed.values():
            queues.store_delayed(conn, ref, items)

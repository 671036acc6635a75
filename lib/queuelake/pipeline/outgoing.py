"""From an outbound row to the messages that go out: destinations checked, headers NServiceBus reads.

Why a module of its own: the driver and Spark executors build messages the same way, so the routing
(which queues, which are deliverable) and the wire format live here, in a picklable ``Router`` that a
publish on executors ships to its tasks with every verdict already made on the driver (``freeze``):
a task never decides a destination differently from the undeliverable records written before it ran.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import socket
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from queuelake.config import Config, conflict_message, drained_as
from queuelake.errors import QueuelakeError
from queuelake.nsb import headers as hdr
from queuelake.nsb.message_types import full_type_name, split_types
from queuelake.nsb.times import format_time
from queuelake.nsb.timespan import timespan
from queuelake.transport import queues, schema, subscriptions
from queuelake.transport.db import Connection
from queuelake.transport.queues import OutgoingMessage
from queuelake.transport.tables import TableRef, bridge_ref, queue_ref

NAMESPACE = uuid.UUID("5f1d3a52-6a0e-4f3e-9d0e-7a1c0b7e2a11")  # queuelake's uuid5 namespace
_NAMESPACE_BYTES = NAMESPACE.bytes

Verdict = tuple[TableRef | None, str | None]  # (queue, None) when deliverable, else (None, reason)


def message_id(pipeline: str, key: str, destination: str) -> str:
    """uuid5(NAMESPACE, pipeline, key, destination) as text."""
    return name_uuid(f"{pipeline}\n{key}\n{destination}")


def name_uuid(name: str) -> str:
    """``str(uuid.uuid5(NAMESPACE, name))``, built from hashlib directly: the uuid module's objects
    were a quarter of a publish's per-row time, and 5 us of a replay's ~70 per row (checked equal
    in the tests)."""
    x = hashlib.sha1(_NAMESPACE_BYTES + name.encode()).hexdigest()
    # version 5 in the 13th digit, the RFC 4122 variant (10xx) in the 17th
    return f"{x[:8]}-{x[8:12]}-5{x[13:16]}-{_VARIANT[x[16]]}{x[17:20]}-{x[20:32]}"


_VARIANT = {d: "89ab"[int(d, 16) & 3] for d in "0123456789abcdef"}


def name_uuid_bytes(names: list[str]) -> np.ndarray:
    """``uuid.uuid5(NAMESPACE, name).bytes`` of each name, as an (n, 16) uint8 matrix: a hash per name
    in Python, the version and variant bits set for all at once."""
    digests = b"".join([hashlib.sha1(_NAMESPACE_BYTES + name.encode()).digest() for name in names])
    ids = np.frombuffer(digests, np.uint8).reshape(len(names), 20)[:, :16].copy()
    ids[:, 6] = (ids[:, 6] & 0x0F) | 0x50  # version 5
    ids[:, 8] = (ids[:, 8] & 0x3F) | 0x80  # the RFC 4122 variant
    return ids


# What a send reads of an outbound row (the outbound contract's columns). Columns of the user's own
# beside them are never converted to Python: a value there past what Python holds (a timestamp in year
# 20000) failed the whole round, although nothing is sent from it.
SENT_COLUMNS = [
    "key",
    "message_type",
    "intent",
    "destination",
    "body",
    "headers",
    "ttbr_ms",
    "deliver_at",
    "correlation_id",
    "conversation_id",
]


def accepted_rows(
    parquet: Any, bad_keys: set[str] | frozenset[str], row_groups: list[int] | None = None
) -> Iterator[dict[str, Any]]:
    """The rows of one outbound Parquet file (or of some of its row groups) that are sent: a key,
    not rejected; in file order, one Parquet batch in memory. The driver and the executors read a
    round through this, so both cut the same rows into batches."""
    columns = [c for c in SENT_COLUMNS if c in parquet.schema_arrow.names]
    for record_batch in parquet.iter_batches(batch_size=5000, row_groups=row_groups, columns=columns):
        mask = accepted(record_batch["key"], bad_keys)
        rows = without_rejected_values(record_batch, mask).to_pylist()
        yield from (row for row, ok in zip(rows, mask.to_pylist()) if ok)


def without_rejected_values(batch: pa.RecordBatch | pa.Table, mask: pa.Array) -> pa.RecordBatch | pa.Table:
    """``batch`` with the rejected rows' ``deliver_at`` made null (``mask``: the rows sent). A rejected
    row may hold one Python cannot (year 20000, a BC date): the contract refuses it, and converting
    it anyway failed the round. (Not a filter: pyarrow 26 has no take kernel for the string_view
    columns delta-rs rewrites.)"""
    if "deliver_at" not in batch.schema.names or pc.all(mask).as_py():
        return batch
    index = batch.schema.get_field_index("deliver_at")
    return batch.set_column(index, "deliver_at", pc.if_else(mask, batch.column(index), None))


def accepted(keys: pa.ChunkedArray | pa.Array, bad_keys: set[str] | frozenset[str]) -> pa.Array:
    """True for the rows that are sent: a key, and not rejected by the outbound contract."""
    keys = keys.cast(pa.string())  # files delta-rs rewrites store string_view (no is_in kernel)
    mask = pc.is_valid(keys)
    if bad_keys:
        mask = pc.and_(mask, pc.invert(pc.is_in(keys, pa.array(sorted(bad_keys), pa.string()))))
    return pc.fill_null(mask, False)


def in_batches(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    """``rows`` cut into lists of ``size`` (the last may be shorter)."""
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


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
                raise QueuelakeError(f"destination {address!r} was not checked before the round was sent")
            try:
                if address is None or not address.strip():
                    raise QueuelakeError("queue address is empty")
                ref = queue_ref(address, self.config.transport)
                drained = drained_as(self.config, address)
                if drained is not None:  # a Send row's destination or a subscriber, found only now
                    where = f"an outbound row or subscription ({address!r})"
                    raise QueuelakeError(conflict_message(drained, address, where))
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
                raise QueuelakeError(f"subscribers of {message_type!r} were not looked up before the round was sent")
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

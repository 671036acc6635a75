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
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from queuelake.config import Config, conflict_message, drained_as
from queuelake.errors import PublishError, QueuelakeError, RowsRefused
from queuelake.nsb import headers as hdr
from queuelake.nsb.message_types import full_type_name, split_types
from queuelake.nsb.times import format_time
from queuelake.pipeline.message_ids import message_id, name_uuid_bytes
from queuelake.pipeline.publish.headers import (
    Templates,
    quoted_ids,
    row_headers,
    template_of,
    templates,
    text_of,
    with_own_headers,
)
from queuelake.pipeline.publish.rows import table_of
from queuelake.report import log
from queuelake.transport import binary_copy, queues, schema, subscriptions
from queuelake.transport.db import Connection
from queuelake.transport.queues import OutgoingMessage
from queuelake.transport.table_refs import TableRef, bridge_ref, queue_ref

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
    # tables that refused a batch's copies in this run (``refuse``), by canonical name: the reason
    refused: dict[str, str] = field(default_factory=dict)

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
                table = ref.delayed() if delayed else ref
                problem = self.refused.get(table.canonical) or schema.delivery_problem(conn, table, delayed)
                verdict = (ref, None) if problem is None else (None, problem)
            except QueuelakeError as exc:
                verdict = (None, str(exc))
            self.verdicts[(address, delayed)] = verdict
        return verdict

    def refuse(self, table: str, reason: str) -> None:
        """``table`` (a canonical name) refused a batch's copies for what they are (a CHECK constraint,
        a trigger that raised: ``errors.RowsRefused``), which the catalog could not tell beforehand:
        every address that reaches it is undeliverable for the rest of the run, as if the catalog
        had said so. Without this, that one table failed every batch it had a copy in, and every
        other subscriber of those batches got nothing."""
        self.refused[table] = reason
        for (address, delayed), (ref, _) in list(self.verdicts.items()):
            if ref is not None and (ref.delayed() if delayed else ref).canonical == table:
                self.verdicts[(address, delayed)] = (None, reason)

    def address_of(self, table: str) -> str:
        """An address the run routed to ``table`` (a canonical name), for the record of a copy it
        refused; the table's name when none is known."""
        for (address, delayed), (ref, _) in self.verdicts.items():
            if ref is not None and address is not None and (ref.delayed() if delayed else ref).canonical == table:
                return address
        return table

    def subscribers(self, conn: Connection | None, message_type: str) -> list[str]:
        """Distinct subscriber addresses (raw text) of any type in the event's hierarchy."""
        found = self.subscribers_of.get(message_type)
        if found is None:
            if self.frozen or conn is None:
                raise PublishError(f"subscribers of {message_type!r} were not looked up before the round was sent")
            topics = [full_type_name(t) for t in split_types(message_type) or []]
            ref = bridge_ref(self.config.transport.subscription_table, self.config.transport)
            found = self.subscribers_of[message_type] = subscriptions.find_subscribers(conn, ref, topics)
            if not found:  # said once per type and run: the round sends these events to no queue, for good
                log.warning(
                    "publish: no endpoint subscribes to %s (%s): its events are sent to no queue, and a later"
                    " subscription does not bring them back",
                    ", ".join(topics) or repr(message_type),
                    ref.qualified,
                )
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
        self,
        conn: Connection | None,
        pipeline: str,
        rows: pa.Table | list[dict[str, Any]],
        now: dt.datetime,
        sent: str,
    ) -> tuple[Outgoing, list[tuple[dict[str, Any], str | None, str]]]:
        """Every deliverable copy of a batch's rows, grouped by table (in each, the rows' order), and
        the copies that cannot be delivered as (row, address, reason), in the rows' order.

        Why columns: at 20,000-row rounds a loop over the rows was half of a publish's client time,
        and a fan-out multiplied it. Routes are decided once per (intent, destination or type,
        delayed); each destination's copies are built as columns (``headers.Templates``: a template
        per row, an id per copy) with their row ids drawn by the sender. Only a delayed copy (the
        delayed store's statement) and a row with headers of its own are written in Python."""
        batch = (rows if isinstance(rows, pa.Table) else table_of(rows)).combine_chunks()
        out = Outgoing()
        if not batch.num_rows:
            return out, []
        of_row, routes = self._routes_of_rows(conn, batch)
        lost = self._lost(batch, of_row, routes)
        delayed = np.array([r.delayed for r in routes], bool)[of_row]
        self._direct(out, pipeline, batch, of_row, routes, delayed, sent)
        self._delayed(out, pipeline, batch, of_row, routes, np.flatnonzero(delayed), now, sent)
        return out, lost

    def _routes_of_rows(self, conn: Connection | None, batch: pa.Table) -> tuple[np.ndarray, list[Route]]:
        """Each row's route (an index into the routes, ordered by their first row) and the routes."""
        send = pc.fill_null(pc.equal(batch["intent"], "Send"), False)
        where = pc.if_else(send, batch["destination"], batch["message_type"]).chunk(0)
        encoded = pc.dictionary_encode(where, null_encoding="encode")
        delayed = pc.is_valid(batch["deliver_at"]).to_numpy(zero_copy_only=False)
        is_send = send.to_numpy(zero_copy_only=False)
        code = (encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64) * 2 + is_send) * 2 + delayed
        _, first, of_row = np.unique(code, return_index=True, return_inverse=True)
        order = np.argsort(first)  # routes by their first row: tables in the order rows reach them
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        names = encoded.dictionary.to_pylist()
        routes = []
        for row in first[order].tolist():
            place = names[encoded.indices[row].as_py()]
            intent = "Send" if is_send[row] else "Publish"
            targets, bad = self.routes(conn, intent, place, place, bool(delayed[row]))
            routes.append(Route(list(targets.values()), bad, bool(delayed[row])))
        return rank[of_row.reshape(-1)], routes

    def _lost(
        self, batch: pa.Table, of_row: np.ndarray, routes: list[Route]
    ) -> list[tuple[dict[str, Any], str | None, str]]:
        """(row, address, reason) of each copy not delivered, in the rows' order."""
        bad = np.array([bool(r.bad) for r in routes], bool)[of_row]
        positions = np.flatnonzero(bad)
        if not len(positions):
            return []
        rows = batch.select(["key", "intent", "message_type", "destination"]).take(pa.array(positions)).to_pylist()
        return [(row, a, reason) for row, i in zip(rows, positions.tolist()) for a, reason in routes[of_row[i]].bad]

    def _direct(
        self,
        out: Outgoing,
        pipeline: str,
        batch: pa.Table,
        of_row: np.ndarray,
        routes: list[Route],
        delayed: np.ndarray,
        sent: str,
    ) -> None:
        """The copies sent to queues: per table, the rows routed there, as columns."""
        tables: dict[str, tuple[TableRef, list[int]]] = {}
        for r, route in enumerate(routes):
            if not route.delayed:
                for target in route.targets:
                    tables.setdefault(target.canonical, (target, []))[1].append(r)
        if not tables:
            return
        ttbr = batch["ttbr_ms"].chunk(0)
        rows = BatchColumns(
            pipeline,
            self._templates(batch, ~delayed, sent),
            batch["key"].to_pylist(),
            pc.fill_null(ttbr, 0).to_numpy(zero_copy_only=False).astype(np.int64),
            pc.is_valid(ttbr).to_numpy(zero_copy_only=False),
            batch["body"].chunk(0),
        )
        everyone = len(routes) == 1 and not delayed.any()
        for canonical, (target, route_ids) in tables.items():
            at = None if everyone else np.flatnonzero(np.isin(of_row, route_ids))
            out.add_direct(target, Copies(canonical, rows, at))

    def _templates(self, batch: pa.Table, direct: np.ndarray, sent: str) -> Templates:
        """The rows' templates: by columns, then in Python for rows with headers of their own."""
        base = templates(batch, sent, self.endpoint, self.machine)
        theirs = batch["headers"].chunk(0)
        own = (np.diff(theirs.offsets.to_numpy()) > 0) & theirs.is_valid().to_numpy(zero_copy_only=False)
        positions = np.flatnonzero(own & direct)
        if not len(positions):
            return base
        rows = batch.take(pa.array(positions)).drop_columns(["body"]).to_pylist()
        endpoint, machine = self.endpoint, self.machine
        shaped = [template_of(row_headers(row, dict(row["headers"]), sent, endpoint, machine)) for row in rows]
        return with_own_headers(base, positions, shaped)

    def _delayed(
        self,
        out: Outgoing,
        pipeline: str,
        batch: pa.Table,
        of_row: np.ndarray,
        routes: list[Route],
        positions: np.ndarray,
        now: dt.datetime,
        sent: str,
    ) -> None:
        """Copies for later delivery, one by one into each endpoint's delayed table: the rare case, in
        Python. Due is deliver_at itself (``store_delayed_at``), or ``now`` (the transaction's clock)
        when that has passed; it was now() plus the delay in whole milliseconds, up to 1 ms early."""
        if not len(positions):
            return
        for i, row in zip(positions.tolist(), batch.take(pa.array(positions)).to_pylist()):
            deliver_at = row["deliver_at"]
            due = max(deliver_at, now)
            headers = row_headers(row, dict(row["headers"] or []), sent, self.endpoint, self.machine)
            for target in routes[of_row[i]].targets:
                headers[hdr.DELIVER_AT] = format_time(deliver_at)
                headers[hdr.FORWARD_DESTINATION] = target.canonical
                mid = message_id(pipeline, row["key"], target.canonical)
                out.add_delayed(target, text_of(headers, mid), row["body"], due)


@dataclass(frozen=True)
class Route:
    """Where the rows of one (intent, destination or type, delayed) go, and the copies that cannot."""

    targets: list[TableRef]  # distinct deliverable queues
    bad: list[tuple[str | None, str]]  # (address, reason) of each undeliverable one
    delayed: bool


@dataclass(frozen=True)
class BatchColumns:
    """What every table's copies of a batch are built from: its rows' columns, once."""

    pipeline: str
    templates: Templates
    keys: list[str]
    ttbr_ms: np.ndarray  # int64, 0 where none
    has_ttbr: np.ndarray  # bool
    bodies: pa.Array  # binary


@dataclass(frozen=True)
class Copies:
    """One table's copies of a batch, as columns, built when they are sent (``messages``): a batch
    fanned out to hundreds of tables holds one table's copies at a time, not all of them."""

    table: str  # its canonical name: each copy's MessageId is uuid5(pipeline, key, table)
    rows: BatchColumns
    at: np.ndarray | None  # the batch's rows that have a copy here (None: every row)

    def __len__(self) -> int:
        return len(self.rows.keys) if self.at is None else len(self.at)

    def messages(self) -> binary_copy.Messages:
        """The copies: each row's template joined with its copy's MessageId, the row's TTBR and
        body; row ids drawn by the sender."""
        rows, at = self.rows, self.at
        keys = rows.keys if at is None else [rows.keys[i] for i in at.tolist()]
        ids = quoted_ids(name_uuid_bytes([f"{rows.pipeline}\n{key}\n{self.table}" for key in keys]))
        return binary_copy.Messages(
            None,
            rows.ttbr_ms if at is None else rows.ttbr_ms[at],
            rows.has_ttbr if at is None else rows.has_ttbr[at],
            rows.templates.headers(at, ids),
            rows.bodies if at is None else rows.bodies.take(pa.array(at, pa.int64())),
        )

    def __iter__(self) -> Iterator[OutgoingMessage]:
        """The copies one by one (tests read them so)."""
        return iter(self.messages())


# What a batch built ahead holds of its tables' COPY streams (``Outgoing.prepare``): a batch fanned out
# to hundreds of tables builds the rest as each is sent, so memory follows the batch, not the fan-out.
PREPARED_BYTES = 32 << 20


@dataclass
class Outgoing:
    """One batch's messages grouped by table, ready to insert."""

    direct: dict[str, tuple[TableRef, Copies]] = field(default_factory=dict)
    delayed: dict[str, tuple[TableRef, list[tuple[str, bytes | None, dt.datetime]]]] = field(default_factory=dict)
    copies: int = 0
    # tables whose copies are built already (``prepare``), by canonical name
    ready: dict[str, binary_copy.Messages | binary_copy.Stream] = field(default_factory=dict)

    def add_direct(self, target: TableRef, copies: Copies) -> None:
        """One table's copies (a table is given its copies once per batch)."""
        self.copies += len(copies)
        self.direct[target.canonical] = (target, copies)

    def add_delayed(self, target: TableRef, headers: str, body: bytes | None, due: dt.datetime) -> None:
        self.copies += 1
        ref = target.delayed()
        self.delayed.setdefault(ref.canonical, (ref, []))[1].append((headers, body, due))

    def prepare(self, binary_copy_stream: bool, budget: int = PREPARED_BYTES) -> None:
        """Build the tables' copies now, before the batch's transaction (the driver does it in a
        builder thread while the previous batch is sent): as COPY streams where the driver takes
        them (``binary_copy.prepared``), table after table until ``budget`` bytes are held."""
        held = 0
        for canonical, (_, copies) in self.direct.items():
            if held >= budget:
                return
            built = binary_copy.prepared(copies.messages(), binary_copy_stream)
            self.ready[canonical] = built
            held += built.nbytes

    def insert(self, conn: Connection, now: dt.datetime | None = None, isolate: Collection[str] = ()) -> list[Refused]:
        """Insert every copy (in the caller's transaction, which also records the batch's ledger
        row): one COPY stream per table (``binary_copy.send``, the sender replay uses too), each
        table's copies built just before their COPY unless ``prepare`` built them. ``now``: the
        transaction's, when the caller has read it (Expires is now() plus the TTBR). A table that
        refuses its copies raises ``errors.RowsRefused`` naming it; the transaction is then lost,
        unless the table is one of ``isolate`` (it refused copies before): its copies are sent in
        savepoints (``send_isolating``) and the ones it refuses returned, the others delivered."""
        refused: list[Refused] = []
        for canonical, (ref, copies) in self.direct.items():
            built = self.ready.pop(canonical, None)
            if canonical in isolate:
                refused.extend(send_isolating(conn, ref, copies, now))
            else:
                binary_copy.send(conn, ref, copies.messages() if built is None else built, now)
        for ref, items in self.delayed.values():
            queues.store_delayed_at(conn, ref, items)
        return refused


@dataclass(frozen=True)
class Refused:
    """One copy a table refused (``send_isolating``): its row in the batch, the table, the reason."""

    row: int
    table: str
    reason: str


def send_isolating(conn: Connection, ref: TableRef, copies: Copies, now: dt.datetime | None) -> list[Refused]:
    """A table's copies sent in the caller's transaction, part by part in the rows' order: each part probed
    (``queues.probe``: sent, then undone) and, taken, sent at once; halved where the table refuses it
    until the refused copies stand alone, which are returned. Why: a table that refused one copy (a
    CHECK constraint, a trigger that raised for some values, a deferred foreign key) was taken out of the
    whole run, and a subscriber refusing one row in ten got none of the others (a review). Why sent at
    once: each probe sees the copies sent before it, so a refusal of two copies together (a unique
    index on the payload, a trigger counting) refuses the later one; probed alone and sent together at
    the end, such a pair failed the batch on every run (a review). A part of n copies with r refused
    costs about 2·r·log2(n/r) probes and as many sends; a table that refuses nothing, one probe and one
    send. A copy refused at its send (a table refusing what it took in the probe just before) fails the
    batch, which is rolled back and sent again."""
    refused: list[Refused] = []
    parts = [copies.at if copies.at is not None else np.arange(len(copies))]
    while parts:
        at = parts.pop()
        part = Copies(copies.table, copies.rows, at)
        try:
            with queues.probe(conn):
                binary_copy.send(conn, ref, part.messages(), now)
        except RowsRefused as exc:
            if len(at) == 1:
                refused.append(Refused(int(at[0]), ref.canonical, f"the table refused the copy: {exc}"))
            else:
                half = len(at) // 2
                parts += [at[half:], at[:half]]  # the first half next: the rows' order kept
            continue
        binary_copy.send(conn, ref, part.messages(), now)
    return refused

"""A round sent from the driver: its accepted rows in the round's fixed order, batch by batch, each
batch's copies and its ledger row in one DB transaction.

While batch k is sent, a builder thread reads batch k + 1 and builds its copies' COPY streams
(``pipeline.replay.ahead``): the COPY waits for the server without the GIL, so the client's work and
the server's overlap instead of taking turns (issue 60: a round of 300,000 rows was the client's
build plus the server's COPY, one after the other). What a batch built ahead cannot know yet is
written in its transaction: Expires (now() plus the TTBR, ``binary_copy.Stream``), and every batch
with a copy for later delivery or a destination not checked yet is built there whole, as before.
TimeSent is the database's clock when the batch was built (``DbClock``), at most one batch earlier
than its transaction's now().
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from queuelake import stopping
from queuelake.errors import RowsRefused, TransportError
from queuelake.lake.port import LakeEngine
from queuelake.nsb.times import format_time
from queuelake.pipeline.batches.keys import RoundKeys
from queuelake.pipeline.batches.sender import (
    DROPPED,
    FAILED,
    SKIPPED,
    STOPPED,
    Batch,
    Book,
    Sent,
    ready,
    send_batches,
)
from queuelake.pipeline.publish.result import OutputResult
from queuelake.pipeline.publish.rounds import Round
from queuelake.pipeline.publish.routing import Outgoing, Refused, Router
from queuelake.pipeline.publish.rows import round_batches
from queuelake.pipeline.publish.undeliverable import BadDestinations, record_batch, undeliverable_record
from queuelake.pipeline.replay.ahead import ahead
from queuelake.report import log
from queuelake.status import Status
from queuelake.transport import queues
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef

Lost = list[tuple[dict[str, Any], str | None, str]]


# batches in a row, sent in parts, in which a table refused every copy, after which it takes none this run
REFUSED_WHOLE_BATCHES = 2


class DbClock:
    """The database's clock, read between queries: its offset from this machine's clock, taken when
    a batch's transaction reads now() (``db_utc_now``), and at least every ``MAX_AGE`` seconds. A
    builder thread cannot ask the connection (it is sending), and the headers must not carry this
    machine's clock."""

    MAX_AGE = 10.0  # seconds: an offset between two clocks does not move in that time

    def __init__(self, db_now: dt.datetime) -> None:
        self.offset = dt.timedelta(0)
        self.read_at = 0.0
        self.update(db_now)

    def update(self, db_now: dt.datetime) -> None:
        self.offset = db_now - dt.datetime.now(dt.timezone.utc)
        self.read_at = time.monotonic()

    def stale(self) -> bool:
        return time.monotonic() - self.read_at >= self.MAX_AGE

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.timezone.utc) + self.offset


@dataclass(frozen=True)
class Prepared:
    """A batch's rows and, when it was built ahead, its copies (their streams ready) and the copies
    that cannot be delivered."""

    rows: pa.Table
    built: tuple[Outgoing, Lost] | None = None


class DriverSender:
    """Sends rounds from the driver, on the caller's connection."""

    def __init__(self, lake: LakeEngine, router: Router, ledger_ref: TableRef, bad: BadDestinations) -> None:
        self.lake = lake
        self.router = router
        self.ledger = ledger_ref
        self.bad = bad
        # queue tables that refused copies this run: sent in parts from then on (``routing.send_isolating``)
        self.isolated: set[str] = set()
        # isolated tables that refused every copy of their last batch(es) sent in parts: how many in a row
        self.refused_whole: dict[str, int] = {}

    def send_round(
        self,
        conn: Connection,
        pipeline: str,
        output: str,
        rnd: Round,
        n: int,
        files: list[str],
        bad_keys: set[str],
        done: set[int],
        result: OutputResult,
    ) -> None:
        """The round's ``n`` batches, skipping those ``done`` already; a batch that fails is rolled
        back whole and recorded in the result, and the next one goes on (``batches.sender``)."""
        book = Book(self.ledger, pipeline, output, RoundKeys(rnd, n), f"publish {output}", "publish")
        clock = DbClock(queues.db_utc_now(conn))
        conn.rollback()
        source = round_batches(files, bad_keys, rnd.batch_size)
        binary = conn.driver.binary_copy

        def prepare(k: int) -> Prepared | None:
            """In the builder thread: batch k read (in order) and, unless sent already, built."""
            rows = next(source, None)
            if rows is None:
                return None
            return Prepared(rows, None if k in done else self._build_ahead(pipeline, rows, clock, binary))

        batches = _batches(ahead(list(range(n)), prepare))
        send = partial(self.insert_batch, pipeline, output, clock)
        started = time.monotonic()
        for outcome in send_batches(conn, book, batches, send, done, stop=stopping.requested):
            if outcome.status == STOPPED:  # a stop asked (SIGTERM, Ctrl-C): the batches sent are committed
                result.status = Status.INTERRUPTED
                log.info(
                    "publish %s: stopped as asked after %d batch(es); the next run sends the rest",
                    output,
                    result.batches,
                )
                break
            result.rows += outcome.rows
            if outcome.status == SKIPPED:
                result.batches_skipped += 1
                continue
            if outcome.status == FAILED:
                result.status = Status.FAILED
                result.failed_batches.append(outcome.key)
                result.error, result.error_kind = outcome.error, outcome.error_kind
                continue
            result.batches += 1
            result.published += outcome.rows
            result.copies += outcome.copies
            result.undeliverable += outcome.lost
            elapsed = time.monotonic() - started
            log.info(
                "publish %s: batch %d of %d sent, %d row(s) as %d message(s); %d as %d so far at %.0f msg/s, "
                "%d batch(es) left",
                output,
                outcome.k + 1,
                n,
                outcome.rows,
                outcome.copies,
                result.published,
                result.copies,
                result.copies / elapsed if elapsed else 0,  # messages: a fan-out's rate, not its rows'
                n - outcome.k - 1,
            )

    def _build_ahead(self, pipeline: str, rows: pa.Table, clock: DbClock, binary: bool) -> tuple[Outgoing, Lost] | None:
        """The batch's copies built before its transaction, or None where they are built in it: a
        copy for later delivery (its delay is counted from the transaction's now()), a destination
        not checked yet (checking needs the connection), or any failure here (in the transaction a
        real one fails the batch, as it did)."""
        if rows.num_rows and pc.any(pc.is_valid(rows["deliver_at"])).as_py():
            return None
        now = clock.now()
        try:
            out, lost = self.router.build(None, pipeline, rows, now, format_time(now))
            out.prepare(binary)
        except Exception:  # built again in the transaction, where an error counts
            return None
        return out, lost

    def insert_batch(
        self, pipeline: str, output: str, clock: DbClock, conn: Connection, batch_key: str, batch: Prepared
    ) -> Sent:
        """Every deliverable copy of every row, in the batch's transaction (its ledger row and the
        commit follow, in the sender). Copies that cannot be delivered are recorded after the
        inserts, before the commit (an idempotent lake append keyed by the batch), so a rerun after a
        crash records them once. A batch built ahead with every copy deliverable asks the database
        for now() only when its copies carry Expires (``binary_copy.send``) or the clock's offset is
        old: a round trip per batch was 0.1-0.17 s of a 300,000-row publish.

        A table that refuses copies for what they are (``errors.RowsRefused``: a CHECK constraint,
        a trigger that raised, a deferred foreign key) rolls the batch back once; from then on, for
        the rest of the run, its copies are sent in savepoints and halved where refused
        (``routing.send_isolating``): the copies it refuses are recorded as undeliverable with the
        database's reason, the others delivered, and every other destination gets its copies. Before,
        the table was taken out of the run at its first refusal: a subscriber refusing one row in ten
        got none of the other nine (a review). A delayed table that refuses is taken out of the run
        as before (``Router.refuse``)."""
        rows = batch.rows
        built = batch.built
        refused_delayed: set[str] = set()
        refused: list[Refused] = []  # copies a table in ``isolated`` refused
        now: dt.datetime | None = None
        sent = False
        if built is not None and set(built[0].direct) & set(self.router.refused):
            built = None  # built before a table it holds was taken out of the run: built again without it
        if built is not None and not built[1] and not clock.stale():
            try:
                queues.immediate_constraints(conn)
                refused = built[0].insert(conn, isolate=self.isolated)
                out, lost = built
                sent = True
            except RowsRefused as exc:
                self._refused(conn, exc, built[0], refused_delayed)
            except TransportError as exc:
                self._gone(conn, exc, built[0])
            built = None
        while not sent:
            queues.immediate_constraints(conn)
            now = queues.db_utc_now(conn)
            clock.update(now)
            out, lost = built if built is not None else self.router.build(conn, pipeline, rows, now, format_time(now))
            built = None
            try:
                refused = out.insert(conn, now, self.isolated)
                sent = True
            except RowsRefused as exc:
                self._refused(conn, exc, out, refused_delayed)
            except TransportError as exc:
                self._gone(conn, exc, out)
        recorded_at = now or clock.now()
        bad: list[dict[str, Any]] = []
        for row, address, reason in lost:
            bad.append(undeliverable_record(row, address, reason, batch_key, recorded_at))
            self.bad.report(output, address, reason)
        for row, address, reason in self._refused_copies(rows, refused):
            bad.append(undeliverable_record(row, address, reason, batch_key, recorded_at))
            self.bad.report(output, address, reason)
        if bad:
            record_batch(self.lake, output, batch_key, bad)
        self._refusing_everything(out, refused)  # after the records: they name the addresses routed there
        return Sent(rows.num_rows, out.copies - len(refused), len(bad))

    def _refused(self, conn: Connection, exc: RowsRefused, out: Outgoing, refused_delayed: set[str]) -> None:
        """Roll the batch back after a table refused copies: a queue table's copies are sent in parts
        from now on (``isolated``); a delayed table is taken out of the run's destinations (its
        addresses then logged once as undeliverable, with this reason). A table that refuses again
        where it cannot (no table named, a delayed table refused already) fails the batch."""
        table = exc.table
        if table is None or table in self.isolated or table in refused_delayed:
            raise exc
        conn.rollback()
        if table in out.direct:
            self.isolated.add(table)
            log.warning(
                "publish: table %s refused copies (%s); its copies are sent in parts from now on, the ones it "
                "refuses recorded as undeliverable",
                table,
                exc,
            )
            return
        refused_delayed.add(table)
        self.router.refuse(table, f"the table refused the copies: {exc}")

    def _gone(self, conn: Connection, exc: TransportError, out: Outgoing) -> None:
        """Roll the batch back after one of its tables was found gone (dropped since the run looked it
        up: a subscriber taken down): that table is out of the run's destinations, its copies recorded
        as undeliverable with this reason, and the batch is built again for the others. Before, the
        whole run failed, and no subscriber got the rest of the round (a review). Any other error
        fails the batch, as before."""
        table = exc.table
        if not exc.missing_table or table is None or (table not in out.direct and table not in out.delayed):
            raise exc
        if table in self.router.refused:  # gone again after it was taken out: not this batch's build
            raise exc
        conn.rollback()
        log.warning(
            "publish: table %s is gone (dropped during the run); its copies are recorded as undeliverable", table
        )
        self.router.refuse(table, f"{DROPPED}: {exc}")

    def _refusing_everything(self, out: Outgoing, refused: list[Refused]) -> None:
        """A table sent its copies in parts that refused every one of them (more than one) in
        ``REFUSED_WHOLE_BATCHES`` batches in a row takes no more copies this run (``Router.refuse``):
        the parts cost two sends a copy, and such a table (a policy, a constraint no row meets) refuses
        the next batch whole as well. Two, not one: a table whose first batch in parts held only the
        copies it refuses got none of the good ones after it (a review)."""
        by_table: dict[str, list[Refused]] = {}
        for r in refused:
            by_table.setdefault(r.table, []).append(r)
        for table in (self.isolated & set(out.direct)) - set(by_table):
            self.refused_whole.pop(table, None)  # it took copies (or had none): the count starts again
        for table, gone in by_table.items():
            sent = len(out.direct[table][1]) if table in out.direct else 0
            whole = len(gone) == sent > 1
            self.refused_whole[table] = self.refused_whole.get(table, 0) + 1 if whole else 0
            if self.refused_whole[table] >= REFUSED_WHOLE_BATCHES:
                self.isolated.discard(table)
                self.router.refuse(table, gone[0].reason)
                log.warning(
                    "publish: table %s refused every copy of a batch; it takes none for the rest of the run", table
                )

    def _refused_copies(self, rows: pa.Table, refused: list[Refused]) -> Lost:
        """(row, address, reason) of each copy a table refused: the row's destination for a Send, else an
        address the run routed to that table."""
        if not refused:
            return []
        columns = rows.select(["key", "intent", "message_type", "destination"]).combine_chunks()
        picked = columns.take(pa.array([r.row for r in refused], pa.int64())).to_pylist()
        return [
            (row, row["destination"] if row["intent"] == "Send" else self.router.address_of(r.table), r.reason)
            for row, r in zip(picked, refused)
        ]


def _batches(prepared: Iterator[tuple[int, Callable[[], Prepared | None]]]) -> Iterator[Batch[Prepared]]:
    """The round's batches from ``ahead``'s (k, result) pairs: batch k's rows are read (and built)
    by the time the sender asks for it; the rows run out only where the round's count was off."""
    for k, result in prepared:
        batch = result()
        if batch is None:
            return
        yield ready(k, batch, batch.rows.num_rows)

"""The ledger-keyed batch loop that publish and replay share, on the driver and in Spark tasks.

The protocol (design section 3, "Guarantees"): a batch is sent iff its ledger row exists. So each
batch not yet in the ledger is sent in ONE database transaction: its messages inserted into the
target queue table(s) (the caller's ``send``), then its ledger row, then the commit. A batch that
fails is rolled back whole (no message, no ledger row) and reported; the loop goes on with the next
one. A rerun after a crash at any instant reads the ledger first (``Book.done``) and skips the
batches it holds, so every message reaches its destination exactly once.

What differs between the callers is given, not written here: the key of batch k and which batch a
ledger key names (``keys.RoundKeys`` / ``keys.ReplayKeys``), the ledger row's pipeline and output
table, how a batch's content is built (``Batch.content``: a call, so a caller can build the next
batch meanwhile, ``replay.ahead``), how it is inserted (``send``), pacing before the commit
(``pace``), stopping (``stop``), timing (``timed``). The caller counts and logs its own progress
from the outcomes; the loop logs only a failed batch.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from queuelake import kill_points, stopping
from queuelake.errors import QueuelakeError, RowsRefused, TransportError
from queuelake.report import log
from queuelake.transport import ledger
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef

P = TypeVar("P")

SENT, SKIPPED, FAILED, STOPPED = "sent", "skipped", "failed", "stopped"


class BatchKeys(Protocol):
    def key(self, k: int) -> str: ...

    def index(self, batch_key: str) -> int | None: ...


@dataclass(frozen=True)
class Book:
    """Where a round's or a replay's batches are recorded: its ledger rows (pipeline, output table)
    and their keys. ``label`` starts its log lines ("publish Orders", "replay r1"); ``point`` names
    the kill points around its commits (``before_<point>_commit``, ``after_<point>_commit``)."""

    ledger: TableRef
    pipeline: str
    output_table: str
    keys: BatchKeys
    label: str
    point: str

    def done(self, conn: Connection) -> set[int]:
        """The batches the ledger already holds (the caller's transaction is ended)."""
        batch_keys = ledger.batch_keys(conn, self.ledger, self.pipeline, self.output_table)
        conn.rollback()
        return {k for k in map(self.keys.index, batch_keys) if k is not None}

    def commit(self, conn: Connection, batch_key: str, sent: Sent) -> None:
        """The batch's ledger row, then the commit: the batch's inserts and their record go together.
        A second stop signal during the COMMIT waits for it (``stopping.at_boundary_only``): raised
        inside it, the batch was delivered and its ledger row written, but the summary and the
        ``runs`` row did not count it (3 runs in 40 of a publish stopped twice: a review)."""
        ledger.record(conn, self.ledger, self.pipeline, self.output_table, batch_key, sent.rows, sent.copies)
        kill_points.reached(f"before_{self.point}_commit")
        with stopping.at_boundary_only(f"{self.label}: batch {batch_key} is committing"):
            conn.commit()
        kill_points.reached(f"after_{self.point}_commit")


@dataclass(frozen=True)
class Batch(Generic[P]):
    """Batch ``k``: ``content`` builds what ``send`` inserts; it is called only when the batch is
    sent, inside its attempt (a failure to build it fails the batch). ``rows``: its rows when known
    before it is built (what a skipped or failed batch counts)."""

    k: int
    content: Callable[[], P]
    rows: int = 0


def ready(k: int, content: P, rows: int) -> Batch[P]:
    """Batch ``k`` whose content is built already (a stream of rows cut into batches)."""
    return Batch(k, functools.partial(_given, content), rows)


def _given(content: P) -> P:
    return content


@dataclass(frozen=True)
class Sent:
    """What ``send`` inserted: the ledger row's rows and copies, and copies that could not be
    delivered (recorded by the caller)."""

    rows: int
    copies: int
    lost: int = 0


@dataclass(frozen=True)
class Outcome(Generic[P]):
    """One batch: sent, skipped (in the ledger already), failed (rolled back, ``error``) or stopped
    (not tried: ``stop`` asked; the last outcome). ``content``: what was sent; ``seconds``: from the
    start of its attempt (building included) to its commit; ``refused``: the table that refused the
    failed batch's rows for what they are (``errors.RowsRefused``) or was found gone, where the caller
    can send it again without that table."""

    k: int
    key: str
    status: str
    rows: int
    copies: int = 0
    lost: int = 0
    content: P | None = None
    error: str = ""
    error_kind: str | None = None
    seconds: float = 0.0
    refused: str | None = None


DROPPED = "the table was dropped during the run"


def dropped(error: str) -> bool:
    """Whether a table's failed send (``Outcome.refused``) found it gone, dropped since the run looked it up,
    rather than refusing the rows: by our own error's words (``db.Connection.error``)."""
    return " does not exist (" in error


def _untimed(step: str) -> contextlib.AbstractContextManager[Any]:
    return contextlib.nullcontext()


def send_batches(
    conn: Connection,
    book: Book,
    batches: Iterable[Batch[P]],
    send: Callable[[Connection, str, P], Sent],
    done: set[int],
    *,
    recheck: bool = False,
    stop: Callable[[], bool] | None = None,
    pace: Callable[[Sent], None] | None = None,
    timed: Callable[[str], contextlib.AbstractContextManager[Any]] = _untimed,
) -> Generator[Outcome[P], None, None]:
    """Each batch in order: skipped when ``done`` holds it, else sent with its ledger row in one
    transaction on ``conn`` (``send(conn, key, content)`` inserts, never commits). A failure
    (``QueuelakeError``) rolls the batch back; with ``recheck`` the ledger is read again, and a batch
    another run committed meanwhile (the ledger's key held) counts as skipped. ``stop`` is asked
    before each batch to send; ``pace(sent)`` runs between the inserts and the ledger row (a paced
    replay waits there, so its rows become visible on pace); ``timed("send")`` and ``timed("ledger")``
    wrap the two halves of the transaction."""
    for batch in batches:
        key = book.keys.key(batch.k)
        if batch.k in done:
            yield Outcome(batch.k, key, SKIPPED, batch.rows)
            continue
        if stop is not None and stop():
            yield Outcome(batch.k, key, STOPPED, batch.rows)
            return
        started = time.monotonic()
        sending = True
        try:
            content = batch.content()
            with timed("send"):
                sent = send(conn, key, content)
            sending = False
            if pace is not None:
                pace(sent)
            with timed("ledger"):
                book.commit(conn, key, sent)
        except QueuelakeError as exc:
            conn.rollback()
            if recheck and batch.k in book.done(conn):  # sent meanwhile by another run
                yield Outcome(batch.k, key, SKIPPED, batch.rows)
                continue
            log.error("%s batch %s failed, nothing of it was sent: %s", book.label, key, exc)
            # a destination that refused the rows (not the ledger row, nor a refusal at COMMIT), or that is
            # gone (dropped since the run looked it up): sent again without it, as the caller decides
            refused = None
            if sending and (isinstance(exc, RowsRefused) or (isinstance(exc, TransportError) and exc.missing_table)):
                refused = exc.table
            yield Outcome(batch.k, key, FAILED, batch.rows, error=str(exc), error_kind=exc.kind, refused=refused)
            if conn.lost:  # the next batch's statement would fail with the driver's own error (a review)
                log.error("%s: the database connection was lost; the batches after %s wait", book.label, key)
                return
            continue
        yield Outcome(
            batch.k, key, SENT, sent.rows, sent.copies, sent.lost, content, seconds=time.monotonic() - started
        )

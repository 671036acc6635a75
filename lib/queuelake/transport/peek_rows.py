"""The rows of a queue or delayed-delivery table that hold a text, read without taking or locking any
row: what ``queuelake where`` asks of the queue database (``sql/<dialect>/where_queue.sql``,
``where_delayed.sql``).

Why a module of its own: the transport's other reads either take rows (receive) or count them
(``peek``); "is message X still waiting?" must read the rows themselves without ever holding up an
endpoint. Each table is read in its own read-only transaction, rolled back at once: PostgreSQL's
plain SELECT takes no row lock and waits on none, SQL Server's READPAST skips the rows a receiver
holds. A time limit bounds the read (PostgreSQL: ``statement_timeout`` and ``lock_timeout``, local to
the transaction; SQL Server: ``LOCK_TIMEOUT`` and the driver's query timeout where it has one). A
table that is missing, or whose read runs out of time, is reported, not raised: the caller says it
was not searched.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef
from queuelake.transport.timeouts import lock_timeout_seconds, timeout_millis, timeout_setting

DEFAULT_LIMIT = 1000  # rows read per table at most: a conversation waiting in one queue is rarely more


@dataclass(frozen=True)
class PeekedRow:
    """One row as the table holds it. ``when``: a queue row's ``expires``, a delayed row's ``due``, as
    the database writes it (text: PostgreSQL's ``infinity`` included); ``flag``: the queue row has
    expired, or the delayed row is due, by the database's clock."""

    id: str | None
    seq: int | None
    when: str | None
    flag: bool
    headers: str | None
    body: bytes | None


@dataclass(frozen=True)
class Peeked:
    """What one table's read found, or why it found nothing."""

    table: str  # canonical address
    delayed: bool
    rows: list[PeekedRow]
    seconds: float
    missing: bool = False  # no such table
    error: str | None = None  # the read failed (its time limit, a lock it waited on too long, ...)
    truncated: bool = False  # the limit was reached: more rows may match


def _bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    return bytes(value)


def peek_matching(
    conn: Connection,
    ref: TableRef,
    header_text: str | None = None,
    body_bytes: bytes | None = None,
    delayed: bool = False,
    limit: int = DEFAULT_LIMIT,
    time_limit_s: float = 5.0,
) -> Peeked:
    """The rows of ``ref`` whose headers hold ``header_text`` (or whose id is it), or whose body holds
    ``body_bytes`` (bodies are returned only then), oldest first, at most ``limit``. Candidates: the
    caller checks each row's headers or body for what it means by a match."""
    name = "where_delayed" if delayed else "where_queue"
    millis = max(1, int(time_limit_s * 1000))
    lock_seconds = lock_timeout_seconds(time_limit_s)  # shorter: a table held locked is told as such
    params = {
        "statement_timeout": f"{millis}ms",
        "lock_timeout": timeout_setting(lock_seconds),
        "header_text": header_text,
        "body_text": body_bytes,
    }
    started = time.monotonic()
    conn.rollback()  # a transaction of its own: SET TRANSACTION must come first
    raw = conn.raw
    previous = getattr(raw, "timeout", None)  # a driver's query timeout (pyodbc), where it has one
    if previous is not None:
        raw.timeout = max(1, math.ceil(time_limit_s))
    rows: list[tuple[Any, ...]] = []
    try:
        integers = {"limit": limit, "lock_timeout_ms": timeout_millis(lock_seconds)}
        for stmt in conn.statements(name, ref.identifiers(), integers):
            cur = raw.cursor()
            cur.execute(stmt.sql, stmt.args(params))
            if cur.description is not None:
                rows = [tuple(r) for r in cur.fetchall()]
    except Exception as exc:  # driver-specific classes: said, not raised
        conn.rollback()
        seconds = time.monotonic() - started
        if conn.rules.is_missing_table(exc):
            return Peeked(ref.canonical, delayed, [], seconds, missing=True)
        return Peeked(ref.canonical, delayed, [], seconds, error=str(conn.error(exc, name, ref.canonical)))
    finally:
        if previous is not None:
            raw.timeout = previous
    conn.rollback()  # nothing was written: end the read-only transaction, release the table lock
    found = [
        PeekedRow(
            id=None if r[0] is None else str(r[0]),
            seq=None if r[1] is None else int(r[1]),
            when=None if r[2] is None else str(r[2]),
            flag=bool(r[3]),
            headers=r[4],
            body=_bytes(r[5]),
        )
        for r in rows
    ]
    return Peeked(ref.canonical, delayed, found, time.monotonic() - started, truncated=len(found) >= limit)

"""What a queue row is made of before it is sent (``OutgoingMessage``), the database's clock, and the
row-by-row send of the drivers without binary COPY (pyodbc).

Why a module of its own: the columnar sender (``binary_copy``) falls back to this send and reads this
clock, and ``queues.send`` hands its rows to ``binary_copy``; with these in ``queues`` the two imported
each other. Functions here never commit.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef

SEND_CHUNK = 1000  # rows per executemany: bounds the parameter array pyodbc holds in memory


@dataclass(frozen=True)
class OutgoingMessage:
    headers: str  # encoded JSON
    body: bytes | None
    id: str | None = None  # a fresh uuid4 when None
    ttbr_ms: int | None = None


def as_utc(value: Any) -> dt.datetime | None:
    """A driver's timestamp (a datetime, naive meaning UTC, or ISO text) as an aware UTC datetime."""
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc)


def db_utc_now(conn: Connection) -> dt.datetime:
    rows = conn.run("db_now")
    value = as_utc(rows[0][0])
    assert value is not None
    return value


def has_recoverable(conn: Connection, queue: TableRef) -> bool:
    if not conn.rules.legacy_recoverable_column:
        return False
    rows = conn.run("has_recoverable", queue.identifiers(), queue.params(), what=queue.canonical)
    return bool(rows and rows[0][0])


def send_rows(conn: Connection, queue: TableRef, batch: list[OutgoingMessage]) -> int:
    """The send of the drivers without binary COPY (pyodbc): the dialect's INSERT, executemany in
    chunks of ``SEND_CHUNK`` rows, with ODBC array binding (``fast_executemany``) where the dialect
    says its ODBC driver takes it (SQL Server; see ``Connection.executemany``)."""
    name = "send_recoverable" if has_recoverable(conn, queue) else "send"
    (stmt,) = conn.statements(name, queue.identifiers())
    for start in range(0, len(batch), SEND_CHUNK):
        chunk = batch[start : start + SEND_CHUNK]
        conn.executemany(
            stmt,
            [
                {"id": m.id or str(uuid.uuid4()), "ttbr_ms": m.ttbr_ms, "headers": m.headers, "body": m.body}
                for m in chunk
            ],
            what=queue.canonical,
        )
    return len(batch)

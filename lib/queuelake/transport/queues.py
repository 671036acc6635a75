"""Queue operations: batched receive, peek, purge of expired rows, bulk send, delayed store.

Transactions belong to the caller: the drain holds a receive open until its Delta commit lands, and
publish commits a batch's inserts with its ledger row. Functions here never commit.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from queuelake.errors import TransportError
from queuelake.report import log
from queuelake.transport import binary_copy
from queuelake.transport.db import Connection

# the row-by-row send and its parts, here as before: callers import them from queues
from queuelake.transport.row_sends import SEND_CHUNK, OutgoingMessage, send_rows
from queuelake.transport.row_sends import as_utc as _utc
from queuelake.transport.row_sends import db_utc_now as db_utc_now
from queuelake.transport.row_sends import has_recoverable as has_recoverable
from queuelake.transport.sqlfiles import Statement
from queuelake.transport.table_refs import TableRef
from queuelake.transport.timeouts import lock_timeout_seconds, timeout_millis, timeout_setting


@dataclass(frozen=True)
class ReceivedRow:
    id: str | None  # None: a table made by hand let a NULL in; the journal quarantines it under a stand-in
    seq: int
    expired: bool
    expires: dt.datetime | None  # aware UTC
    headers: str | None
    body: bytes | None
    # the original text of an Expires value outside 0001-01-01 .. 9999-12-31 23:59:59.999999
    # (infinity, BC, year 20000), which ``expires`` then holds clamped; None for every other value
    raw_expires: str | None = None


def _uuid_text(value: Any) -> str | None:
    if value is None:  # the row is quarantined with a stand-in id (journal.quarantine), not refused here
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):  # text from a SQL_ASCII database (psycopg)
        value = bytes(value).decode("ascii")
    if isinstance(value, str) and len(value) == 36:
        return value.lower()
    return str(value) if isinstance(value, uuid.UUID) else str(uuid.UUID(str(value)))


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "t", "true")
    return bool(value)


def _text(value: Any) -> str | None:
    """A text column's value as text: bytes as their UTF-8, and a ``jsonb`` column's value (a table not
    made by the transport; psycopg hands it parsed) as its JSON again."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="surrogateescape")
    return json.dumps(value, ensure_ascii=False)


def to_received(row: Sequence[Any]) -> ReceivedRow:
    rid, seq, expired, expires, raw_expires, headers, body = row
    return ReceivedRow(
        _uuid_text(rid),
        int(seq),
        _bool(expired),
        _utc(expires),
        _text(headers),
        None if body is None else bytes(body),
        _text(raw_expires),
    )


def receive_batch(conn: Connection, queue: TableRef, batch_size: int) -> list[ReceivedRow]:
    """Delete and return up to batch_size of the oldest unlocked rows, sorted by seq."""
    rows = conn.run("receive_batch", queue.identifiers(), {"batch_size": batch_size}, what=queue.canonical)
    return sorted((to_received(r) for r in rows), key=lambda r: r.seq)


RECEIVED_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("expired", pa.bool_(), nullable=False),
        pa.field("expires", pa.timestamp("us", tz="UTC")),
        pa.field("raw_expires", pa.string()),  # see ReceivedRow.raw_expires
        pa.field("headers", pa.string()),
        pa.field("body", pa.binary()),
    ]
)


# ADBC's PostgreSQL driver grows each column's buffer by reallocation until a record batch reaches
# this many bytes (its default is 16 MiB, more than a 10,000-row batch of ~2 KB rows holds). Buffers
# that big come from fresh memory on every receive (glibc maps them, then hands them back): a page
# fault per 4 KB, ~60,000 per 100,000 rows, half the drain's page faults. In 1 MiB record batches the
# same memory is reused from one batch to the next. Measured on 100,000 rows, 2 receivers, separate
# processes: page faults 60,000-72,000 -> 21,000-35,000, the receive's CPU 0.20-0.28 s -> 0.14-0.19 s.
RECEIVE_CHUNK_BYTES = 1 << 20
_BATCH_SIZE_HINT = "adbc.postgresql.batch_size_hint_bytes"


def receive_batch_arrow(conn: Connection, queue: TableRef, batch_size: int, chunk_bytes: int | None = None) -> pa.Table:
    """``receive_batch`` as Arrow (RECEIVED_SCHEMA), sorted by seq. Through ADBC no Python object is
    made per value, and the columns come in chunks of about ``chunk_bytes`` (``RECEIVE_CHUNK_BYTES``
    by default); other drivers go through ReceivedRow."""
    if not conn.driver.arrow_results:
        rows = receive_batch(conn, queue, batch_size)
        return pa.Table.from_arrays(
            [
                pa.array([r.id for r in rows], pa.string()),
                pa.array([r.seq for r in rows], pa.int64()),
                pa.array([r.expired for r in rows], pa.bool_()),
                pa.array([r.expires for r in rows], RECEIVED_SCHEMA.field("expires").type),
                pa.array([r.raw_expires for r in rows], pa.string()),
                text_column([r.headers for r in rows]),
                pa.array([r.body for r in rows], pa.binary()),
            ],
            schema=RECEIVED_SCHEMA,
        )
    # The batch size is written into the statement: with no bound parameter ADBC's PostgreSQL driver
    # streams the result through COPY (binary) into Arrow; with one, it builds the whole result in
    # libpq's memory first and copies it over. Measured per 10,000-row receive: 0.06-0.085 s against
    # 0.10-0.12 s, and about a quarter less CPU on the machine (client and server together).
    (stmt,) = conn.statements("receive_batch", queue.identifiers(), integers={"batch_size": int(batch_size)})
    hint = {_BATCH_SIZE_HINT: str(int(chunk_bytes or RECEIVE_CHUNK_BYTES))}
    cur = conn.execute(stmt, {}, what=queue.canonical, adbc_options=hint)
    try:
        data = cur.fetch_arrow_table()
    except Exception as exc:
        raise conn.error(exc, "receive_batch", queue.canonical) from None
    finally:
        cur.close()
    columns = [data.column(f.name).cast(f.type) for f in RECEIVED_SCHEMA]  # naive UTC -> aware UTC
    table = pa.Table.from_arrays(columns, schema=RECEIVED_SCHEMA)
    return table if _ascending(table["seq"]) else table.sort_by("seq")


def text_column(values: list[str | None]) -> pa.Array:
    """Driver text as a string column. Text that is not valid Unicode (bytes the driver could not
    decode, kept surrogate-escaped by ``_text``; a lone UTF-16 surrogate from an nvarchar) keeps its
    bytes, unvalidated, as ADBC hands such bytes over: the journal builder quarantines those rows
    with their text shown escaped. Raising here instead would roll the receive back, and that one
    row would block the queue on every run."""
    try:
        return pa.array(values, pa.string())
    except UnicodeEncodeError:
        return pa.array([None if v is None else _utf8_bytes(v) for v in values], pa.binary()).view(pa.string())


def _utf8_bytes(text: str) -> bytes:
    try:
        return text.encode("utf-8", errors="surrogateescape")  # the driver's bytes, as they came
    except UnicodeEncodeError:  # a surrogate that is not an escaped byte: UTF-16 text
        return text.encode("utf-8", errors="surrogatepass")


def _ascending(seq: pa.ChunkedArray) -> bool:
    """Rows often come back in index order already: checking is cheap, a sort copies every body."""
    values = seq.to_numpy()
    return len(values) < 2 or bool((values[1:] > values[:-1]).all())


def receive_one(conn: Connection, queue: TableRef) -> ReceivedRow | None:
    """One row per statement, as NServiceBus itself receives: the batched receive with a batch of 1."""
    rows = receive_batch(conn, queue, 1)
    return rows[0] if rows else None


def peek(conn: Connection, queue: TableRef) -> int:
    rows = conn.run("peek", queue.identifiers(), {}, what=queue.canonical)
    return int(rows[0][0]) if rows and rows[0][0] is not None else 0


DEPTHS_PER_STATEMENT = 200


def depths(conn: Connection, refs: list[TableRef]) -> dict[str, int | None]:
    """Every queue's ``peek``, as one ``UNION ALL`` statement per 200 queues: a drain of hundreds of
    queues estimates them all in a few round trips. Each part is the dialect's own ``peek.sql``, so
    the estimate is the one ``status`` shows. When a statement fails (a missing table fails the
    whole union), its queues are peeked one by one, and a queue whose own peek fails is None.

    A union that gave up waiting for a table lock (``configure_estimate_session``: 5 s) has its queues
    peeked without waiting for one: the table it waited for is still locked, and its own peek waited
    as long once more (a review: 10 s for the estimate of one locked table). Its depth is unknown
    (drained as if deep); the others are read as they were."""
    out: dict[str, int | None] = {}
    for start in range(0, len(refs), DEPTHS_PER_STATEMENT):
        chunk = refs[start : start + DEPTHS_PER_STATEMENT]
        peeks = [conn.statements("peek", ref.identifiers())[0].sql for ref in chunk]
        try:
            union = Statement("peek", peek_union(peeks), ())
            rows = conn.execute(union, {}, what=f"{len(chunk)} queue(s)").fetchall()
            conn.rollback()
            for i, depth in rows:
                out[chunk[int(i)].canonical] = int(depth) if depth is not None else 0
        except TransportError as failed:
            conn.rollback()
            if not failed.lock_timeout:
                _peek_each(conn, chunk, out)
                continue
            with _no_lock_wait(conn):  # the table the union waited for is still locked: once is enough
                _peek_each(conn, chunk, out)
    return out


def _peek_each(conn: Connection, chunk: list[TableRef], out: dict[str, int | None]) -> None:
    """``chunk``'s depths into ``out``, one ``peek`` each; None where it fails."""
    for ref in chunk:
        try:
            out[ref.canonical] = peek(conn, ref)
            conn.rollback()
        except TransportError as exc:
            conn.rollback()
            out[ref.canonical] = None
            if not exc.missing_table:  # a missing table: its drain names it, once
                log.warning("drain: the depth of %s could not be read (%s); drained as if deep", ref.canonical, exc)


@contextlib.contextmanager
def _no_lock_wait(conn: Connection) -> Iterator[None]:
    """The estimate's session without a wait for a table lock for the block, its own wait set back after."""
    before = conn.session_settings
    waited = before[1] if isinstance(before, tuple) and before[:1] == ("estimate",) else ESTIMATE_LOCK_WAIT_SECONDS
    configure_estimate_session(conn, 0)
    try:
        yield
    finally:
        configure_estimate_session(conn, waited)


def peek_union(peeks: list[str]) -> str:
    """One statement of many rendered ``peek`` statements: rows of (position, depth)."""
    parts = [f"SELECT {i} AS i, d.depth FROM ({sql.strip().rstrip(';')}\n) d" for i, sql in enumerate(peeks)]
    return "\nUNION ALL\n".join(parts)


def newest_seq(conn: Connection, queue: TableRef) -> int | None:
    """The newest row's seq, None when the queue is empty: cheap at any depth (see newest_seq.sql)."""
    rows = conn.run("newest_seq", queue.identifiers(), {}, what=queue.canonical)
    return int(rows[0][0]) if rows and rows[0][0] is not None else None


def oldest_headers(conn: Connection, queue: TableRef) -> str | None:
    rows = conn.run("oldest", queue.identifiers(), {}, what=queue.canonical)
    return _text(rows[0][0]) if rows else None


def purge_expired_batch(conn: Connection, queue: TableRef, batch_size: int = 10000) -> int:
    """Delete one batch of expired rows; returns how many went."""
    total = 0
    for stmt in conn.statements("purge_expired", queue.identifiers()):
        cur = conn.execute(stmt, {"batch_size": batch_size}, what=queue.canonical)
        total += max(cur.rowcount, 0)
    return total


def send(conn: Connection, queue: TableRef, messages: Iterable[OutgoingMessage]) -> int:
    """Insert messages in bulk. Expires is computed from TTBR by the database clock. Messages given
    one by one go through the columnar sender (``binary_copy.send``), so every queue row a driver
    with binary COPY writes is written one way: one binary COPY stream per call."""
    batch = list(messages)
    if not batch:
        return 0
    if not conn.driver.binary_copy:
        return send_rows(conn, queue, batch)
    return binary_copy.send(conn, queue, binary_copy.Messages.of(batch))


def immediate_constraints(conn: Connection) -> None:
    """At the start of a send's transaction: constraints deferred to COMMIT are checked at each insert,
    where a refusal names its table (``errors.RowsRefused``); servers without deferrable ones skip it."""
    if conn.rules.deferrable_constraints:
        conn.run("immediate_constraints")


@contextlib.contextmanager
def probe(conn: Connection) -> Iterator[None]:
    """The work inside undone when it ends, raising or not (the batch's transaction goes on): did the
    table take it? Why: a table that refuses some copies of a batch is sent its copies in parts, each
    probed so, to find the refused ones; the others are then sent once, together
    (``routing.send_isolating``). Parts kept in savepoints overflowed PostgreSQL's cache of a
    transaction's subtransactions (64) in every batch of 1,000 copies with one in ten refused (a review):
    an overflowed transaction slows every snapshot on the server. A part rolled back leaves none."""
    conn.run("rows_savepoint")
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # a connection lost: the original error is the one to tell
            conn.run("rows_savepoint_rollback")
            if conn.rules.releases_savepoints:
                conn.run("rows_savepoint_release")


def store_delayed(conn: Connection, delayed: TableRef, messages: Iterable[tuple[str, bytes | None, int]]) -> int:
    """Insert (headers, body, delay_ms) rows into an endpoint's delayed table."""
    (stmt,) = conn.statements("store_delayed", delayed.identifiers())
    rows = [{"id": str(uuid.uuid4()), "headers": h, "body": b, "delay_ms": d} for h, b, d in messages]
    for start in range(0, len(rows), SEND_CHUNK):
        conn.executemany(stmt, rows[start : start + SEND_CHUNK], what=delayed.canonical)
    return len(rows)


def store_delayed_at(
    conn: Connection, delayed: TableRef, messages: Iterable[tuple[str, bytes | None, dt.datetime]]
) -> int:
    """Insert (headers, body, due) rows into an endpoint's delayed table, each due at its instant (aware,
    or naive UTC) to the microsecond (SQL Server's datetime: to 1/300 s), not the database's now() plus
    a delay in whole milliseconds: a deliver_at came back in Due about 1 ms off (a review)."""
    (stmt,) = conn.statements("store_delayed_at", delayed.identifiers())
    rows = [{"id": str(uuid.uuid4()), "headers": h, "body": b, "due": _utc_text(due)} for h, b, due in messages]
    for start in range(0, len(rows), SEND_CHUNK):
        conn.executemany(stmt, rows[start : start + SEND_CHUNK], what=delayed.canonical)
    return len(rows)


def _utc_text(when: dt.datetime) -> str:
    """``when``'s UTC wall clock as ``yyyy-mm-dd hh:mm:ss.ffffff`` (what both dialects' statements read)."""
    if when.tzinfo is not None:
        when = when.astimezone(dt.timezone.utc)
    return f"{when.year:04d}-{when.month:02d}-{when.day:02d} {when:%H:%M:%S}.{when.microsecond:06d}"


def count_rows(conn: Connection, queue: TableRef) -> int:
    """All rows, held by other sessions or not; after an empty receive, what others hold."""
    rows = conn.run("count_rows", queue.identifiers(), {}, what=queue.canonical)
    return int(rows[0][0]) if rows and rows[0][0] is not None else 0


def count_null_seq(conn: Connection, queue: TableRef) -> int:
    """Rows no receive can take: their seq is NULL (a table not made by the transport)."""
    rows = conn.run("count_null_seq", queue.identifiers(), {}, what=queue.canonical)
    return int(rows[0][0]) if rows and rows[0][0] is not None else 0


CONNECTION_CHECK_INTERVAL = "2s"


# the longest the depth estimate's session (and status's) waits for a table lock (``estimate_session.sql``)
ESTIMATE_LOCK_WAIT_SECONDS = 5.0


def configure_estimate_session(conn: Connection, wait_seconds: float = ESTIMATE_LOCK_WAIT_SECONDS) -> None:
    """The depth estimate's session waits a bounded time for a table lock (``estimate_session.sql``):
    one queue table another program held locked stalled the estimate of every queue (a review).
    ``wait_seconds`` 0: not at all (PostgreSQL's shortest, 1 ms). Recorded in ``conn.session_settings``."""
    millis = max(0, math.ceil(wait_seconds * 1000))
    for stmt in conn.statements("estimate_session", {}, {"lock_timeout_ms": millis}):
        conn.execute(stmt, {"lock_timeout": timeout_setting(wait_seconds)})
    conn.commit()
    conn.session_settings = ("estimate", wait_seconds)


def configure_lock_session(conn: Connection, statement_timeout_s: float) -> None:
    """Session settings of a drain's lock session (``lock_session.sql``): a bounded wait for a table lock."""
    seconds = lock_timeout_seconds(statement_timeout_s)
    for stmt in conn.statements("lock_session", {}, {"lock_timeout_ms": timeout_millis(seconds)}):
        conn.execute(stmt, {"lock_timeout": timeout_setting(seconds)})
    conn.commit()


def configure_drain_session(conn: Connection, statement_timeout_s: float, idle_timeout_s: float) -> None:
    """Session settings of a drain connection (``drain_session.sql``): a drain that dies or hangs
    mid-statement must not keep running server-side holding its batch's rows. Commits: a rolled-back
    ``set_config`` would be undone. A session kept from a previous queue with the same settings
    (``pipeline/drain/sessions.py``) is left as it is."""
    settings = ("drain", statement_timeout_s, idle_timeout_s)
    if conn.session_settings == settings:
        return
    lock_seconds = lock_timeout_seconds(statement_timeout_s)
    params = {
        "check_interval": CONNECTION_CHECK_INTERVAL,
        "statement_timeout": timeout_setting(statement_timeout_s),
        "idle_timeout": timeout_setting(idle_timeout_s),
        "lock_timeout": timeout_setting(lock_seconds),
    }
    for stmt in conn.statements("drain_session", {}, {"lock_timeout_ms": timeout_millis(lock_seconds)}):
        conn.execute(stmt, params)
    conn.commit()
    conn.session_settings = settings

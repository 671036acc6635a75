"""The one sender of queue rows: a batch of messages for one table, as columns, sent as one
PostgreSQL binary COPY stream assembled by Arrow and numpy (publish, replay and ``queues.send`` all
come here; drivers without binary COPY send the same columns through ``row_sends.send_rows``).

Why: psycopg's ``write_row`` turns each row into its binary form in Python: a ``uuid.UUID`` and a
datetime per row and a call that holds the GIL for the whole batch. Here the rows' fixed parts (the
field count, the id, Expires, the lengths) are written as numpy byte matrices and joined with the
headers and bodies by one Arrow kernel; the stream is handed to COPY in one write, during which the
connection waits for the server without the GIL (another thread can build the next batch). A batch
built as columns (a publish's fan-out copies, a replay's rewritten headers) never becomes a Python
object per message on this path.

The format (PostgreSQL's "Binary Format" of COPY): a signature, flags and header extension; per row
an int16 field count, then per field an int32 length (-1 for NULL) and the value in the type's binary
send format (``uuid``: 16 bytes; ``timestamp``: int64 microseconds since 2000-01-01; ``text``: UTF-8;
``bytea``: the bytes); an int16 -1 at the end. All integers are big-endian.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from queuelake.transport import row_sends
from queuelake.transport.db import Connection
from queuelake.transport.row_sends import OutgoingMessage
from queuelake.transport.table_refs import TableRef

SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # the signature, flags 0, no header extension
TRAILER = b"\xff\xff"
PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970-01-01
COLUMNS = "(id, expires, headers, body)"

_FIELDS = np.frombuffer(b"\x00\x04", np.uint8)  # four fields a row
_UUID_LENGTH = np.frombuffer(b"\x00\x00\x00\x10", np.uint8)
_TIMESTAMP_LENGTH = np.frombuffer(b"\x00\x00\x00\x08", np.uint8)
_NULL_LENGTH = np.frombuffer(b"\xff\xff\xff\xff", np.uint8)


@dataclass(frozen=True)
class Messages:
    """A batch of messages for one queue table, as columns."""

    # (n, 16) uint8: each row's id, the uuid's 16 bytes; None: a fresh uuid4 each, drawn when sent
    ids: np.ndarray | None
    ttbr_ms: np.ndarray  # int64: each message's time to be received (Expires = the database's now + it)
    has_ttbr: np.ndarray  # bool: False where the message has none (Expires NULL)
    headers: pa.Array  # string, no nulls: the headers' JSON
    bodies: pa.Array  # binary, nulls allowed

    def __len__(self) -> int:
        return len(self.headers)

    @property
    def nbytes(self) -> int:
        return self.headers.nbytes + self.bodies.nbytes

    @classmethod
    def of(cls, messages: list[OutgoingMessage]) -> Messages:
        """Columns of messages given one by one (a message without an id gets a fresh uuid4)."""
        ids = b"".join(uuid.UUID(m.id).bytes if m.id else uuid.uuid4().bytes for m in messages)
        return cls(
            np.frombuffer(ids, np.uint8).reshape(len(messages), 16),
            np.array([m.ttbr_ms or 0 for m in messages], np.int64),
            np.array([m.ttbr_ms is not None for m in messages], bool),
            pa.array([m.headers for m in messages], pa.string()),
            pa.array([m.body for m in messages], pa.binary()),
        )

    def take(self, positions: np.ndarray) -> Messages:
        """The rows at ``positions``, in that order."""
        at = pa.array(positions, pa.int64())
        return Messages(
            None if self.ids is None else self.ids[positions],
            self.ttbr_ms[positions],
            self.has_ttbr[positions],
            self.headers.take(at),
            self.bodies.take(at),
        )

    def slice(self, start: int, stop: int) -> Messages:
        """The rows ``start`` to ``stop`` (not included), without copying them."""
        return Messages(
            None if self.ids is None else self.ids[start:stop],
            self.ttbr_ms[start:stop],
            self.has_ttbr[start:stop],
            self.headers.slice(start, stop - start),
            self.bodies.slice(start, stop - start),
        )

    def outgoing(self) -> list[OutgoingMessage]:
        """The same messages one by one (the drivers without binary COPY send those; a message
        whose id is drawn when sent has none yet)."""
        ttbrs = [int(t) if has else None for t, has in zip(self.ttbr_ms.tolist(), self.has_ttbr.tolist(), strict=True)]
        ids = [None] * len(self) if self.ids is None else [str(uuid.UUID(bytes=bytes(i))) for i in self.ids]
        return [
            OutgoingMessage(h, b, id=i, ttbr_ms=t)
            for h, b, i, t in zip(self.headers.to_pylist(), self.bodies.to_pylist(), ids, ttbrs, strict=True)
        ]

    def __iter__(self) -> Iterator[OutgoingMessage]:
        return iter(self.outgoing())


def fresh_ids(n: int) -> np.ndarray:
    """``n`` random (version 4) uuids as an (n, 16) uint8 matrix: what ``uuid.uuid4().bytes`` gives
    each, drawn at once from the same source (``os.urandom``)."""
    ids = np.frombuffer(os.urandom(16 * n), np.uint8).reshape(n, 16).copy()
    ids[:, 6] = (ids[:, 6] & 0x0F) | 0x40  # version 4
    ids[:, 8] = (ids[:, 8] & 0x3F) | 0x80  # the RFC 4122 variant
    return ids


@dataclass(frozen=True)
class Stream:
    """A batch's rows as the body of its COPY stream, assembled before its transaction (a builder
    thread makes the next batch's while this one is sent, ``pipeline.replay.ahead``). Only Expires
    waits for the transaction: it is the transaction's now() plus the TTBR, so each timed row's 8
    bytes are written when the batch is sent (``at``), everything else is final."""

    data: memoryview  # the rows, each timed row's Expires holding its TTBR alone (now() = 1970)
    expires_at: np.ndarray  # int64: where each timed row's Expires value starts in ``data``
    expires_us: np.ndarray  # int64: those values (TTBR less 2000-01-01, in microseconds)
    rows: int

    def __len__(self) -> int:
        return self.rows

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    def at(self, now_us: int) -> memoryview:
        """The rows with Expires written for a transaction whose now() is ``now_us`` (microseconds
        since 1970): a copy, with the timed rows' 8 bytes set, when any row has a TTBR."""
        if not len(self.expires_at):
            return self.data
        out = np.frombuffer(self.data, np.uint8).copy()  # Arrow's buffer is read-only
        values = (self.expires_us + now_us).astype(">i8").view(np.uint8).reshape(-1, 8)
        out[self.expires_at[:, None] + np.arange(8)] = values
        return memoryview(out)


def stream_of(messages: Messages) -> Stream:
    """The batch's rows assembled (``rows``) with Expires left for the send to write."""
    data, starts = _assemble(messages, 0)
    timed = np.flatnonzero(messages.has_ttbr)
    return Stream(
        data,
        starts[timed] + _EXPIRES_AT,
        messages.ttbr_ms[timed].astype(np.int64) * 1000 - PG_EPOCH_US,
        len(messages),
    )


def prepared(messages: Messages, binary_copy: bool) -> Messages | Stream:
    """What ``send`` takes, built as far as it can be before the batch's transaction: the COPY
    stream where the driver takes binary COPY, else the messages themselves."""
    return stream_of(messages) if binary_copy and len(messages) else messages


def send(conn: Connection, queue: TableRef, messages: Messages | Stream, now: dt.datetime | None = None) -> int:
    """Insert a batch given as columns (or as its assembled ``Stream``), in the caller's transaction
    (never commits: publish and replay commit it with their ledger row). On PostgreSQL one binary
    COPY stream assembled in bulk (``rows``); with the other drivers their bulk statement
    (``row_sends.send_rows``: pyodbc binds arrays where the dialect's ODBC driver allows it).
    Binary, because text COPY hex-escapes bodies (twice the bytes, parsed back by the server).
    Expires is the transaction's now() plus the TTBR: now() is fixed inside a transaction, so this
    is what the INSERT statement would have written. ``now``: the transaction's, when the caller
    has read it already (``row_sends.db_utc_now``)."""
    if not len(messages):
        return 0
    if not conn.driver.binary_copy:
        if isinstance(messages, Stream):
            raise ValueError(f"the {conn.driver.name} driver takes no binary COPY stream")
        return row_sends.send_rows(conn, queue, messages.outgoing())
    cur = conn.raw.cursor()
    sql = f"COPY {queue.qualified} {COLUMNS} FROM STDIN (FORMAT BINARY)"
    try:
        stream = messages if isinstance(messages, Stream) else stream_of(messages)
        data = stream.data
        if len(stream.expires_at):
            now = now or row_sends.db_utc_now(conn)
            data = stream.at((now - _UNIX_EPOCH) // dt.timedelta(microseconds=1))
        with cur.copy(sql) as copy:
            copy.write(SIGNATURE)
            copy.write(data)
            copy.write(TRAILER)
    except Exception as exc:
        raise conn.error(exc, "send (COPY)", queue.canonical) from None
    return len(messages)


_UNIX_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


_EXPIRES_AT = 26  # in a timed row: its field count (2), the id's length and bytes (20), Expires' length (4)


def rows(messages: Messages, now_us: int) -> memoryview:
    """The rows of the COPY stream (without signature and trailer), as one contiguous buffer.
    ``now_us``: the database's now() in microseconds since 1970 (Expires = now + TTBR)."""
    return _assemble(messages, now_us)[0]


def _assemble(messages: Messages, now_us: int) -> tuple[memoryview, np.ndarray]:
    """``rows``, and where each row starts in them (int64)."""
    n = len(messages)
    if n == 0:
        return memoryview(b""), np.zeros(0, np.int64)
    if messages.headers.null_count:
        raise ValueError("a message without headers cannot be sent (the queue's Headers column is NOT NULL)")
    header_lengths = pc.binary_length(messages.headers).to_numpy(zero_copy_only=False).astype(">i4")
    expires = now_us + messages.ttbr_ms.astype(np.int64) * 1000 - PG_EPOCH_US
    # with Expires: count, id, its 8 bytes, the headers' length; without: the NULL length instead
    timed = np.empty((n, 38), np.uint8)
    timed[:, 0:2] = _FIELDS
    timed[:, 2:6] = _UUID_LENGTH
    timed[:, 6:22] = fresh_ids(n) if messages.ids is None else messages.ids
    timed[:, 22:26] = _TIMESTAMP_LENGTH
    timed[:, 26:34] = expires.astype(">i8").view(np.uint8).reshape(n, 8)
    timed[:, 34:38] = header_lengths.view(np.uint8).reshape(n, 4)
    untimed = np.empty((n, 30), np.uint8)
    untimed[:, 0:22] = timed[:, 0:22]
    untimed[:, 22:26] = _NULL_LENGTH
    untimed[:, 26:30] = timed[:, 34:38]
    prefix = pc.if_else(pa.array(messages.has_ttbr, pa.bool_()), _binary(timed), _binary(untimed))
    bodies = messages.bodies
    body_lengths = pc.fill_null(pc.binary_length(bodies), -1).to_numpy(zero_copy_only=False)
    body_prefix = _binary(body_lengths.astype(">i4").view(np.uint8).reshape(n, 4))
    # large_binary: 64-bit offsets, so a batch of large bodies cannot overflow the joined column
    joined = pc.binary_join_element_wise(
        prefix,
        messages.headers.cast(pa.large_binary()),
        body_prefix,
        pc.fill_null(bodies.cast(pa.large_binary()), pa.scalar(b"", pa.large_binary())),
        pa.scalar(b"", pa.large_binary()),
    )
    offsets = np.frombuffer(joined.buffers()[1], np.int64)[joined.offset : joined.offset + n + 1]
    data = joined.buffers()[2]
    starts = offsets[:-1] - offsets[0]
    if data is None:
        return memoryview(b""), starts
    return memoryview(data)[int(offsets[0]) : int(offsets[-1])], starts


def _binary(matrix: np.ndarray) -> pa.Array:
    """Each row of a (n, w) uint8 matrix as a w-byte value, typed large_binary for the join."""
    n, width = matrix.shape
    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), n, [None, pa.py_buffer(np.ascontiguousarray(matrix))]
    )
    return fixed.cast(pa.large_binary())

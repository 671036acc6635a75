"""The bench's queue table and the raw limit of receiving from it, shared by the drain benches
(``bench/drain.py``, ``bench/audit.py``).

Why one module: a drain's ratio is only comparable across benches if "the raw limit" is the same
measurement everywhere: the receive's own statement (sql/postgresql/receive_batch.sql, the batched
``DELETE ... RETURNING`` with SKIP LOCKED), k rows per statement, on as many psycopg connections as
the drain has workers, rows fetched and discarded, one commit per statement, nothing else.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
import psycopg
from queuelake.config import Config
from queuelake.transport import db, installer, sqlfiles
from queuelake.transport.table_refs import TableRef


def recreate(cfg: Config, uri: str, ref: TableRef) -> None:
    """Drop the bench's queue table and install it anew, autovacuum off: the raw limit and the drain
    then meet exactly the same table state."""
    with psycopg.connect(uri, autocommit=True) as c:
        c.execute(f"DROP TABLE IF EXISTS {ref.qualified}")
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
    with psycopg.connect(uri, autocommit=True) as c:
        c.execute(f"ALTER TABLE {ref.qualified} SET (autovacuum_enabled = false)")


def checkpoint(uri: str) -> None:
    """Flush the seeding's dirty pages now, not during the measurement (needs superuser or
    pg_checkpoint; skipped without). The send benches call it between legs too."""
    with psycopg.connect(uri, autocommit=True) as c, contextlib.suppress(psycopg.Error):
        c.execute("CHECKPOINT")


def raw_drain(
    uri: str, ref: TableRef, batch: int, connections: int, firsts: list[float] | None = None
) -> tuple[int, float]:
    """The raw limit: rows received and seconds taken by the receive statement alone, binary protocol.
    ``firsts`` (if given) gets each connection's first statement's seconds (see ``until_empty``)."""
    (stmt,) = sqlfiles.render("postgresql", "receive_batch", ref.identifiers(), "format")

    def receive(conn: psycopg.Connection) -> int:
        with conn.cursor(binary=True) as cur:
            cur.execute(stmt.sql, stmt.args({"batch_size": batch}))
            return len(cur.fetchall())

    return until_empty(uri, connections, receive, firsts)


def raw_copy_drain(uri: str, ref: TableRef, batch: int, connections: int) -> tuple[int, float]:
    """``raw_drain`` through COPY: the bytes are read and dropped, rows counted by COPY's command tag."""
    (stmt,) = sqlfiles.render("postgresql", "receive_batch", ref.identifiers(), "format", {"batch_size": batch})
    copy_sql = f"COPY ({stmt.sql}) TO STDOUT (FORMAT binary)"

    def receive(conn: psycopg.Connection) -> int:
        with conn.cursor() as cur, cur.copy(copy_sql) as copy:
            for _ in copy:  # raw blocks, never parsed
                pass
            return max(cur.rowcount, 0)

    return until_empty(uri, connections, receive)


def until_empty(
    uri: str, connections: int, receive: Callable[[psycopg.Connection], int], firsts: list[float] | None = None
) -> tuple[int, float]:
    """``receive`` (one statement, returns its row count) then commit, on each of ``connections``
    psycopg connections in parallel, until it returns no row; rows received and seconds taken.

    ``firsts`` (if given) gets each connection's first statement and commit seconds: on a churned table
    the first receives step over the dead index entries at the head (the drain's depth estimate does
    that before its workers start), the later ones do not."""
    counts = [0] * connections
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            with psycopg.connect(uri) as conn:
                first = True
                while True:
                    started = time.perf_counter()
                    rows = receive(conn)
                    conn.commit()
                    if first and firsts is not None:
                        firsts.append(time.perf_counter() - started)
                    first = False
                    if not rows:
                        return
                    counts[i] += rows
        except BaseException as exc:
            errors.append(exc)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(counts), time.perf_counter() - t0

"""The drain's shared ADBC database: connections of one database, each its own session.

Why these checks: the workers of a drain used to open a database each; now they share one, held
open by a connection of the shared object's own. Sharing must not share a transaction, and a
worker's connection must outlive the source's close (a worker still landing when the run ends).
"""

from __future__ import annotations

import threading

import psycopg
import pytest
from queuelake.config_sections import TransportConfig
from queuelake.errors import TransportError
from queuelake.transport import db


def test_connections_share_the_database_but_not_the_session(fresh_pg_uri: str) -> None:
    with psycopg.connect(fresh_pg_uri, autocommit=True) as setup:
        setup.execute("CREATE TABLE t (v int)")
    shared = db.SharedAdbc(TransportConfig(driver="psycopg", connection=fresh_pg_uri)).start()
    first, second = shared.connect(), shared.connect()
    try:
        backends = set()
        for conn in (first, second):
            cur = conn.raw.cursor()
            cur.execute("SELECT pg_backend_pid()")
            backends.add(cur.fetchone()[0])
            cur.close()
        assert len(backends) == 2  # a session each
        # manual commit: an uncommitted insert is invisible to the sibling and gone after rollback
        cur = first.raw.cursor()
        cur.execute("INSERT INTO t VALUES (1)")
        cur.close()
        other = second.raw.cursor()
        other.execute("SELECT count(*) FROM t")
        assert other.fetchone()[0] == 0
        other.close()
        second.rollback()
        first.rollback()
        shared.close()  # the source goes; the workers' connections keep the database
        cur = first.raw.cursor()
        cur.execute("INSERT INTO t VALUES (2)")
        cur.close()
        first.commit()
        cur = second.raw.cursor()
        cur.execute("SELECT array_agg(v) FROM t")
        assert cur.fetchone()[0] == [2]
        cur.close()
    finally:
        first.close()
        second.close()
        shared.close()
    with psycopg.connect(fresh_pg_uri) as check:
        assert check.execute("SELECT count(*) FROM t").fetchone()[0] == 1


def test_many_workers_connect_at_once_and_none_after_close(fresh_pg_uri: str) -> None:
    """Workers of every queue ask at the same instant: each gets a session of its own. After the
    run closes the shared database, asking again is a clear error, not a crash in the driver."""
    shared = db.SharedAdbc(TransportConfig(driver="psycopg", connection=fresh_pg_uri))  # started by connect
    conns: list[db.Connection] = []
    barrier = threading.Barrier(6)

    def worker() -> None:
        barrier.wait()
        conns.append(shared.connect())

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    backends = set()
    for conn in conns:
        cur = conn.raw.cursor()
        cur.execute("SELECT pg_backend_pid()")
        backends.add(cur.fetchone()[0])
        cur.close()
        conn.close()
    assert len(conns) == 6 and len(backends) == 6
    shared.close()
    with pytest.raises(TransportError, match="closed"):
        shared.connect()

"""The drain run's kept sessions (``pipeline/drain/sessions.py``) on a real PostgreSQL: a queue's lock
is released when its session is given back, never more sessions open than the limit, and a session
that failed is closed rather than handed to the next queue."""

from __future__ import annotations

import time

import psycopg
import pytest
from queuelake.config import from_dict
from queuelake.pipeline.drain.queue_drain import release_drain_lock, take_drain_lock
from queuelake.pipeline.drain.sessions import LOCK, RECEIVE, SessionPool
from queuelake.transport import db
from queuelake.transport.table_refs import queue_ref


def sessions_named(uri: str, name: str, expected: int) -> int:
    """The sessions named ``name``: the count once it is ``expected``, else the last one seen after 10 s.
    Why wait: a session the pool closed leaves ``pg_stat_activity`` when its backend has exited, a moment
    after the close returned; counted at once, a loaded machine still saw it about one time in 25. A
    session kept (or one never closed) stays, and fails the count all the same."""
    deadline = time.monotonic() + 10
    with psycopg.connect(uri, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()",
                (name,),
            ).fetchone()
            count = row[0] if row else 0
            if count == expected or time.monotonic() > deadline:
                return count
            time.sleep(0.05)


@pytest.fixture
def setup(fresh_pg_uri: str):
    cfg = from_dict({"transport": {"connection": fresh_pg_uri}, "lake": {"root": "/tmp/unused"}}, env={})

    def open_session(kind: str) -> db.Connection:
        return db.connect(cfg.transport, f"pool-test-{kind}")

    return cfg, open_session


def test_the_lock_is_released_and_the_session_kept(fresh_pg_uri: str, setup) -> None:
    cfg, open_session = setup
    ref = queue_ref("Sales", cfg.transport)
    pool = SessionPool(2, open_session)
    try:
        with pool.session(LOCK, lambda c: release_drain_lock(c, ref)) as conn:
            assert take_drain_lock(conn, ref)
            with db.connect(cfg.transport) as other:  # held while the queue drains
                assert not take_drain_lock(other, ref)
        assert sessions_named(fresh_pg_uri, "pool-test-lock", 1) == 1  # kept, idle
        with db.connect(cfg.transport) as other:  # ... and no longer holding the queue's lock
            assert take_drain_lock(other, ref)
            release_drain_lock(other, ref)
        with pool.session(LOCK, lambda c: release_drain_lock(c, ref)) as again:
            assert again is conn and take_drain_lock(again, ref)
        assert pool.opened == 1
    finally:
        pool.close()
    assert sessions_named(fresh_pg_uri, "pool-test-lock", 0) == 0


def test_never_more_sessions_than_the_limit(fresh_pg_uri: str, setup) -> None:
    _, open_session = setup
    pool = SessionPool(2, open_session)
    try:
        with pool.session(LOCK, lambda c: c.rollback()), pool.session(RECEIVE, lambda c: c.rollback()):
            pass
        assert pool.peak == 2
        # a lock session in use, a receive session idle: another lock session closes the idle one first
        with pool.session(LOCK, lambda c: c.rollback()), pool.session(LOCK, lambda c: c.rollback()):
            assert sessions_named(fresh_pg_uri, "pool-test-lock", 2) == 2
            assert sessions_named(fresh_pg_uri, "pool-test-receive", 0) == 0
        assert pool.peak == 2 and pool.opened == 3
    finally:
        pool.close()


def test_a_session_that_failed_is_closed_not_kept(fresh_pg_uri: str, setup) -> None:
    _, open_session = setup
    pool = SessionPool(4, open_session)
    try:
        with pytest.raises(RuntimeError), pool.session(RECEIVE, lambda c: c.rollback()):
            assert sessions_named(fresh_pg_uri, "pool-test-receive", 1) == 1
            raise RuntimeError("the worker failed mid-batch")
        assert sessions_named(fresh_pg_uri, "pool-test-receive", 0) == 0

        def failing_clean(c: db.Connection) -> None:
            raise RuntimeError("the release failed")

        with pool.session(LOCK, failing_clean):  # the caller's work went well: no error for it
            pass
        assert sessions_named(fresh_pg_uri, "pool-test-lock", 0) == 0
        with pool.session(LOCK, lambda c: c.rollback()):
            pass
        assert pool.opened == 3
    finally:
        pool.close()


def session_state(uri: str, pid: int) -> str:
    with psycopg.connect(uri) as conn:
        row = conn.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
        return row[0] if row else "gone"


@pytest.mark.parametrize("pg_driver", ["psycopg", "pyodbc", "adbc"])
def test_a_lock_session_holds_no_transaction_between_its_statements(fresh_pg_uri: str, pg_driver: str) -> None:
    """The run's lock sessions are in autocommit: their reads (the queue's table, its claims, its
    newest seq, its depth) cost no BEGIN and ROLLBACK round trips, and leave no transaction open
    while the queue's workers drain. With psycopg and with pyodbc (psqlodbc); ADBC's connection has
    no autocommit switch, and its lock session works in manual commit as before."""
    from queuelake.pipeline.drain.run import _open_session
    from queuelake.transport import queues, schema
    from queuelake.transport.database import QueueDatabase

    from tests.helpers.db import connection_string

    connection = connection_string(fresh_pg_uri, pg_driver) if pg_driver == "pyodbc" else fresh_pg_uri
    cfg = from_dict(
        {
            "transport": {"connection": connection, "driver": pg_driver},
            "lake": {"root": "/tmp/unused"},
        },
        env={},
    )
    ref = queue_ref("Sales", cfg.transport)
    with db.connect(cfg.transport) as setup_conn:
        setup_conn.raw.cursor().execute('CREATE TABLE "public"."Sales" (seq bigint)')
        setup_conn.commit()
    with _open_session(QueueDatabase(cfg.transport), pg_driver, LOCK, None, 300.0) as conn:
        pid = conn.raw.cursor().execute("SELECT pg_backend_pid()").fetchone()[0]
        # a wait for a table lock is bounded (a locked queue table held the whole run: a review)
        assert conn.raw.cursor().execute("SELECT current_setting('lock_timeout')").fetchone()[0] == "30s"
        assert take_drain_lock(conn, ref)
        schema.require_table(conn, ref)
        assert queues.newest_seq(conn, ref) is None
        expected = "idle in transaction" if pg_driver == "adbc" else "idle"
        assert session_state(fresh_pg_uri, pid) == expected
        with db.connect(cfg.transport) as other:
            assert not take_drain_lock(other, ref)
        release_drain_lock(conn, ref)
        with db.connect(cfg.transport) as other:
            assert take_drain_lock(other, ref)

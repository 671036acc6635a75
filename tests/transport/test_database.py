"""The queue database handle (``transport/database.py``): what the commands open once and pass down,
and what ships to Spark tasks and drain processes. It must pickle, name the same tables the
transport's functions name, never show the connection string, and leave the loaded config as it was."""

from __future__ import annotations

import pickle

import pytest
from queuelake.config import from_dict
from queuelake.context import open_database
from queuelake.errors import TransportError
from queuelake.transport.claims import claims_ref
from queuelake.transport.database import QueueDatabase
from queuelake.transport.table_refs import bridge_ref, queue_ref

SECRET = "s3cr3t-Pa55"
CONNECTION = f"postgresql://queuelake:{SECRET}@db.example:5432/nsb"


def _config(**transport: object):  # type: ignore[no-untyped-def]
    return from_dict(
        {"transport": {"connection": CONNECTION, "default_schema": "nsb", **transport}, "drain": {"queues": ["Sales"]}},
        env={},
    )


def test_the_handle_names_the_tables_the_transport_names() -> None:
    cfg = _config(ledger_table="my_ledger", claims_table="my_claims", subscription_table="Routes")
    database = open_database(cfg)
    t = cfg.transport
    assert database.queue("Sales") == queue_ref("Sales", t)
    assert database.ledger == bridge_ref("my_ledger", t)
    assert database.claims == claims_ref(t)
    assert database.subscriptions == bridge_ref("Routes", t)
    assert database.queue("Sales").canonical == '"nsb"."Sales"'
    assert (database.dialect, database.driver, database.reachable) == ("postgresql", "psycopg", True)


def test_opening_changes_nothing_of_the_loaded_config() -> None:
    """A connection string already set is the handle's as it is; the config is not rewritten."""
    cfg = _config()
    before = repr(cfg)
    database = open_database(cfg)
    assert database.transport is cfg.transport
    assert repr(cfg) == before


def test_the_handle_pickles_with_its_tables() -> None:
    """It travels to Spark tasks and drain processes (pickled), its cached table names too."""
    database = open_database(_config())
    assert database.claims.canonical  # cached before pickling
    copy = pickle.loads(pickle.dumps(database))
    assert copy == database
    assert copy.claims == database.claims and copy.ledger == database.ledger
    assert copy.transport.connection == CONNECTION


def test_its_repr_and_errors_never_show_the_connection_string() -> None:
    database = QueueDatabase(_config().transport)
    for text in (repr(database), str(database), repr([database]), f"{database!r}"):
        assert SECRET not in text and CONNECTION not in text
        assert "postgresql" in text
    unreachable = QueueDatabase(
        _config(connection=f"host=127.0.0.1 port=1 password={SECRET} connect_timeout=1").transport
    )
    with pytest.raises(TransportError) as caught:
        unreachable.connect("queuelake-tests")
    assert SECRET not in str(caught.value)


class _FakeServer:
    def get_uri(self, database: str) -> str:
        return f"postgresql://postgres:@/{database}?host=/tmp/fake-socket"


def test_an_embedded_server_starts_on_the_first_connection_not_on_opening(monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening the handle starts nothing (an idle publish never needs the server); the first
    connection, or pickling the handle for a Spark task or a drain process, starts it, once."""
    from queuelake.transport import db, embedded

    started: list[str] = []
    monkeypatch.setattr(embedded, "embedded_server", lambda data: started.append(str(data)) or _FakeServer())
    monkeypatch.setattr(db, "connect", lambda transport, name, driver: transport.connection)
    cfg = from_dict(
        {"transport": {"connection": None, "embedded": "/tmp/nowhere/pgdata"}, "drain": {"queues": ["Sales"]}}, env={}
    )
    database = open_database(cfg)
    assert database.reachable and database.queue("Sales").canonical == '"public"."Sales"' and database.ledger
    assert started == []
    assert database.connect("t") == "postgresql://postgres:@/postgres?host=/tmp/fake-socket"
    assert database.connect("t") and started == ["/tmp/nowhere/pgdata"]
    assert cfg.transport.connection is None  # the loaded config is unchanged


def test_a_pickled_embedded_handle_carries_its_connection_string(monkeypatch: pytest.MonkeyPatch) -> None:
    """What ships to a Spark task or a drain process connects to this process's server: pickling fills
    the connection string in (starting the server here) so the copy never starts one of its own."""
    from queuelake.transport import embedded

    started: list[str] = []
    monkeypatch.setattr(embedded, "embedded_server", lambda data: started.append(str(data)) or _FakeServer())
    cfg = from_dict(
        {"transport": {"connection": None, "embedded": "/tmp/nowhere/pgdata"}, "drain": {"queues": ["Sales"]}}, env={}
    )
    database = open_database(cfg)
    shipped = pickle.dumps(database)
    assert started == ["/tmp/nowhere/pgdata"]
    monkeypatch.setattr(embedded, "embedded_server", lambda data: pytest.fail("the copy started a server"))
    copy = pickle.loads(shipped)
    assert copy == database
    assert copy._connectable.connection == "postgresql://postgres:@/postgres?host=/tmp/fake-socket"


def test_a_connection_variable_set_but_empty_is_named_where_the_database_is_opened() -> None:
    """``QUEUELAKE_CONNECTION=""``: a command that opens the queue database failed telling to set the variable
    in the config, where it was set (a review). Said where the database is opened, not when the config loads:
    lake-only commands (find, maintain, failures) run with it empty (a check at load failed all of them)."""
    raw = {"transport": {"connection": "${QUEUELAKE_CONNECTION}"}, "drain": {"queues": ["Sales"]}}
    for value in ("", "  "):
        cfg = from_dict(raw, env={"QUEUELAKE_CONNECTION": value})  # loads: a lake-only command goes on
        with pytest.raises(TransportError, match="environment variable QUEUELAKE_CONNECTION is set but empty"):
            open_database(cfg).connect("queuelake-tests")
        shipped = pickle.loads(pickle.dumps(open_database(cfg)))  # as a Spark task or a drain process has it
        with pytest.raises(TransportError, match="QUEUELAKE_CONNECTION is set but empty"):
            shipped.connect("queuelake-tests")
    two = {"transport": {"connection": "${HOST}${REST}"}}
    with pytest.raises(TransportError, match="environment variables HOST, REST are set but empty"):
        open_database(from_dict(two, env={"HOST": "", "REST": ""})).connect("queuelake-tests")
    with pytest.raises(TransportError, match=r"set it \(e\.g\. \$\{QUEUELAKE_CONNECTION\}\) in the config"):
        open_database(from_dict({"transport": {"connection": None}}, env={})).connect("queuelake-tests")
    with pytest.raises(Exception, match="unknown key"):  # what loading sets is no key of the file
        from_dict({"transport": {"connection": "x", "empty_variables": ["A"]}}, env={})

"""Shared fixtures: one real PostgreSQL per session, a fresh database per module, one local Spark.

Set QUEUELAKE_TEST_PG_DSN to a libpq URI to use your own server instead of the embedded one.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from queuelake.transport.embedded import odbc_from_uri, start_embedded, with_database


@pytest.fixture(scope="session")
def pg_server_uri() -> Iterator[str]:
    dsn = os.environ.get("QUEUELAKE_TEST_PG_DSN")
    if dsn:
        yield dsn
        return
    # Not under pytest's tmp_path: the server runs as another OS user when we are root, and a second
    # pytest session re-chmods pytest's tmp root to 0700, which cut a running server off its data.
    data = tempfile.mkdtemp(prefix="queuelake-test-pg-")
    server = start_embedded(data)
    yield server.get_uri("postgres")
    server.cleanup()
    shutil.rmtree(data, ignore_errors=True)


def _fresh_database(server_uri: str, hint: str) -> str:
    name = "ql_" + re.sub(r"[^a-z0-9]", "_", hint.lower())[-40:] + "_" + uuid.uuid4().hex[:8]
    with psycopg.connect(server_uri, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return with_database(server_uri, name)


@pytest.fixture(scope="module")
def pg_uri(pg_server_uri: str, request: pytest.FixtureRequest) -> str:
    """A libpq URI of a database of this test module's own."""
    return _fresh_database(pg_server_uri, request.module.__name__)


@pytest.fixture
def fresh_pg_uri(pg_server_uri: str, request: pytest.FixtureRequest) -> str:
    """A database of this one test's own."""
    return _fresh_database(pg_server_uri, request.node.name)


@pytest.fixture(params=["psycopg", "pyodbc"])
def pg_driver(request: pytest.FixtureRequest) -> str:
    return request.param


def connection_string(uri: str, driver: str) -> str:
    return uri if driver == "psycopg" else odbc_from_uri(uri)


@pytest.fixture(scope="session")
def spark():
    from queuelake.config import SparkConfig
    from queuelake.spark import get_spark

    session = get_spark(SparkConfig(master="local[2]", app_name="queuelake-tests"))
    yield session
    session.stop()

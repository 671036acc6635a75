"""The Python database drivers queuelake reaches a queue database with, each an object.

Why objects: what differs between drivers (how statements take parameters, what a connection string
looks like, whether results arrive as Arrow, whether a bulk COPY or ODBC array binding is there) was
a string compared in four files; a third driver would have fallen into whichever ``else`` came first.
Each ``Driver`` says what it can do, ``DRIVERS`` lists them, and ``driver(name)`` is the one place a
name becomes a driver. Which dialects a driver reaches is the dialect's to say (``dialects/dialect.py``).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from queuelake.dialects.dialect import Dialect
from queuelake.errors import ConfigError

# libpq waits for a server without end by default (the kernel's SYN retries: over 2 min for a host that
# is down, for ever for one that accepts and never answers): a scheduled run hung on each connection
# (a review). A connection string's own connect_timeout, or PGCONNECT_TIMEOUT, wins.
CONNECT_TIMEOUT_SECONDS = 30


def with_connect_timeout(connection: str) -> str:
    """The libpq connection string (URI or key=value) with ``connect_timeout`` where it sets none."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        given = conninfo_to_dict(connection)
    except Exception:  # noqa: BLE001 - libpq's own error about the string is the one to show
        return connection
    if "connect_timeout" in given or os.environ.get("PGCONNECT_TIMEOUT"):
        return connection
    if "service" in given or os.environ.get("PGSERVICE"):  # its pg_service.conf entry may set one: it wins
        return connection
    if "://" in connection:
        joint = "" if connection.endswith(("?", "&")) else "&" if "?" in connection else "?"
        return f"{connection}{joint}connect_timeout={CONNECT_TIMEOUT_SECONDS}"
    return f"{connection} connect_timeout={CONNECT_TIMEOUT_SECONDS}"


def _open_psycopg(connection: str, application_name: str, rules: Dialect) -> Any:
    import psycopg

    # bytea and text arrive as bytes/str with no per-row Python adaptation beyond the default
    return psycopg.connect(with_connect_timeout(connection), autocommit=False, application_name=application_name)


def _open_adbc(connection: str, application_name: str, rules: Dialect) -> Any:
    import adbc_driver_postgresql.dbapi as adbc

    return adbc.connect(with_connect_timeout(connection), autocommit=False)


def _open_pyodbc(connection: str, application_name: str, rules: Dialect) -> Any:
    import pyodbc

    raw = pyodbc.connect(connection, autocommit=False)
    if rules.odbc_text_decoding:
        # psqlodbc: read text as UTF-8. Statements and str parameters keep pyodbc's default
        # (UTF-16, the W entry points): with setencoding("utf-8") the statement text goes
        # through the narrow API and psqlodbc re-encodes it, so a non-ASCII table name in
        # the SQL ("ünï") reached the server as mojibake ("Ã¼nÃ¯").
        raw.setdecoding(pyodbc.SQL_CHAR, encoding=rules.odbc_text_decoding)
        raw.setdecoding(pyodbc.SQL_WCHAR, encoding=rules.odbc_text_decoding)
    return raw


@dataclass(frozen=True)
class Driver:
    """One driver: how to open it and what it can do."""

    name: str
    module: str  # the Python module that brings it (``available`` looks for it)
    paramstyle: str  # how sqlfiles renders a statement's parameters for it
    # "libpq": a PostgreSQL URI or key=value string; "odbc": an ODBC connection string
    connection_string: str
    # results arrive as Arrow without a Python object per value (the drain's fast receive path);
    # statements take ADBC options (the receive's batch size hint)
    arrow_results: bool
    # PostgreSQL's binary COPY FROM STDIN: sends write one stream, not a statement per row
    binary_copy: bool
    # executemany can bind arrays (pyodbc's fast_executemany) where the dialect's ODBC driver allows it
    odbc_array_binding: bool
    open: Callable[[str, str, Dialect], Any]
    # the DB-API ``autocommit`` attribute switches the connection to a transaction per statement
    # (psycopg, pyodbc); ADBC's DB-API connection has none
    autocommit_attribute: bool = False

    def available(self) -> bool:
        """Is its module installed? (adbc-driver-postgresql is an optional dependency.)"""
        try:
            importlib.import_module(self.module)
        except ImportError:
            return False
        return True


PSYCOPG = Driver(
    name="psycopg",
    module="psycopg",
    paramstyle="format",
    connection_string="libpq",
    arrow_results=False,
    binary_copy=True,
    odbc_array_binding=False,
    open=_open_psycopg,
    autocommit_attribute=True,
)
ADBC = Driver(
    name="adbc",
    module="adbc_driver_postgresql.dbapi",
    paramstyle="dollar",
    connection_string="libpq",
    arrow_results=True,
    binary_copy=False,
    odbc_array_binding=False,
    open=_open_adbc,
)
PYODBC = Driver(
    name="pyodbc",
    module="pyodbc",
    paramstyle="qmark",
    connection_string="odbc",
    arrow_results=False,
    binary_copy=False,
    odbc_array_binding=True,
    open=_open_pyodbc,
    autocommit_attribute=True,
)

DRIVERS: dict[str, Driver] = {d.name: d for d in (PSYCOPG, ADBC, PYODBC)}


def driver(name: str) -> Driver:
    try:
        return DRIVERS[name]
    except KeyError:
        raise ConfigError(f"unknown driver {name!r}: use one of {', '.join(DRIVERS)}") from None


def receive_driver(configured: str, wanted: str, reaches: tuple[str, ...]) -> Driver:
    """The driver a drain receives with: ``wanted``, or under ``auto`` an Arrow driver that takes the
    same connection string as the configured one and reaches the dialect (``reaches``), when it is
    installed (ADBC beside psycopg: one libpq URI serves both), else the configured driver."""
    if wanted != "auto":
        return driver(wanted)
    mine = driver(configured)
    if mine.arrow_results:
        return mine
    for candidate in DRIVERS.values():
        same_string = candidate.connection_string == mine.connection_string
        if candidate.arrow_results and same_string and candidate.name in reaches and candidate.available():
            return candidate
    return mine

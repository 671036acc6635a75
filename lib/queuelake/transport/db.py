"""Connections to the queue database through any of its drivers (``drivers.py``), behind one small wrapper.

The wrapper exists for three reasons: statements come from ``sql/`` rendered in the driver's
parameter style; driver errors become ``TransportError`` naming the table, with the connection
string (a secret) scrubbed; and the pyodbc path is the same code for SQL Server and PostgreSQL
(psqlodbc), so the SQL Server plumbing is exercised for real in our tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from queuelake import redaction
from queuelake.config_sections import TransportConfig
from queuelake.dialects.dialect import dialect as named_dialect
from queuelake.errors import RowsRefused, TransportError
from queuelake.transport import sqlfiles
from queuelake.transport.drivers import ADBC, Driver, with_connect_timeout
from queuelake.transport.drivers import driver as named_driver
from queuelake.transport.sqlfiles import Statement


def redact(text: str, secret: str | None) -> str:
    """Remove the connection string, its password and any password field from a driver's message
    (the rules, and why they mask whole words only, are in ``queuelake.redaction``)."""
    return redaction.redact(text, [secret])


def _redacted(error: TransportError) -> TransportError:
    """Mark an error whose driver text was redacted here: the rest is ours, and the CLI leaves its
    words alone (a password such as ``queue`` must not mask "the postgresql queue database")."""
    error.redacted = True
    return error


class Connection:
    """One database connection in manual-commit mode."""

    def __init__(self, raw: Any, config: TransportConfig) -> None:
        self.raw = raw
        self.dialect = config.dialect
        self.rules = named_dialect(config.dialect)
        self.driver: Driver = named_driver(config.driver)
        self._secret = config.connection
        self.paramstyle = self.driver.paramstyle
        self.session_settings: object = None  # what was last set on the session (a kept session's)
        # taken around its statements by each thread of several that share this session (a drain task's
        # lock session: its queues' workers confirm their locks on it while its committer reads the
        # claims): a session serves one statement at a time, and an ADBC one hung when two overlapped
        self.shared = threading.Lock()

    # -- statements -----------------------------------------------------------------------------

    def statements(
        self, name: str, identifiers: Mapping[str, str] | None = None, integers: Mapping[str, int] | None = None
    ) -> list[Statement]:
        """``integers``: parameters written into the SQL as literals (see ``sqlfiles.render``)."""
        return _render_cached(
            self.dialect,
            name,
            tuple(sorted((identifiers or {}).items())),
            self.paramstyle,
            tuple(sorted((integers or {}).items())),
        )

    def run(
        self,
        name: str,
        identifiers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        what: str | None = None,
    ) -> list[tuple[Any, ...]]:
        """Run every statement of a SQL file; return the rows of the last one that returns rows."""
        rows: list[tuple[Any, ...]] = []
        for stmt in self.statements(name, identifiers):
            cur = self.execute(stmt, params or {}, what=what)
            if cur.description is not None:
                rows = [tuple(r) for r in cur.fetchall()]
        return rows

    def execute(
        self,
        stmt: Statement,
        params: Mapping[str, Any],
        what: str | None = None,
        adbc_options: Mapping[str, str] | None = None,
    ) -> Any:
        """``adbc_options``: ADBC statement options, used when the connection is an ADBC one. A
        connection closed under it (a terminated session) fails at its cursor: ours too (it was the
        driver's bare error, which ended a drain whose lock session had been terminated)."""
        try:
            if adbc_options and self.driver.arrow_results:
                cur = self.raw.cursor(adbc_stmt_kwargs=dict(adbc_options))
            else:
                cur = self.raw.cursor()
            cur.execute(stmt.sql, stmt.args(params))
        except Exception as exc:  # driver-specific classes; re-raised as ours with context
            raise self.error(exc, stmt.name, what) from None
        return cur

    def executemany(self, stmt: Statement, rows: Sequence[Mapping[str, Any]], what: str | None = None) -> None:
        cur = self.raw.cursor()
        if self.driver.odbc_array_binding:
            cur.fast_executemany = self.rules.odbc_array_binding
        try:
            cur.executemany(stmt.sql, [stmt.args(r) for r in rows])
        except Exception as exc:
            raise self.error(exc, stmt.name, what) from None

    def error(self, exc: BaseException, statement: str, what: str | None) -> TransportError:
        message = redact(_first_line(exc), self._secret)
        target = f" on {what}" if what else ""
        if self.rules.is_missing_table(exc):
            missing = TransportError(f"table{target} does not exist ({statement}): {message}")
            missing.missing_table, missing.table = True, what
            return _redacted(missing)
        if self.rules.is_refusal(exc):
            return _redacted(RowsRefused(f"{statement}{target} failed: {message}", what))
        failed = TransportError(f"{statement}{target} failed: {message}")
        failed.lock_timeout = self.rules.is_lock_timeout(exc)
        return _redacted(failed)

    # -- transactions ---------------------------------------------------------------------------

    def use_autocommit(self) -> Connection:
        """Each statement its own transaction from now on (psycopg and pyodbc; ``commit`` and
        ``rollback`` then do nothing; a driver without the switch, ADBC's, stays in manual commit,
        which the callers' commits and rollbacks serve as before). For a session that only reads and
        holds session locks, a queue's drain lock: in manual-commit mode each of its reads cost a
        BEGIN and a ROLLBACK round trip besides itself, 12 of its 18 round trips per queue drained."""
        if self.driver.autocommit_attribute:
            self.rollback()
            self.raw.autocommit = True
        return self

    def commit(self) -> None:
        """Commit; the server's refusal (a deferred constraint, a serialization failure, a lost
        connection) is a ``TransportError`` like a statement's, so the caller's handling of a failed
        batch applies (it escaped as the driver's own exception and ended the whole command)."""
        try:
            self.raw.commit()
        except Exception as exc:
            raise self.error(exc, "commit", None) from None

    def rollback(self) -> None:
        with contextlib.suppress(Exception):
            self.raw.rollback()

    @property
    def lost(self) -> bool:
        """Whether the connection is gone (the server restarted, the session was terminated): no
        statement can run on it any more. psycopg says ``closed``/``broken``, pyodbc ``closed``."""
        return bool(getattr(self.raw, "closed", False) or getattr(self.raw, "broken", False))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Connection]:
        try:
            yield self
        except BaseException:
            self.rollback()
            raise
        else:
            self.commit()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.raw.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            self.rollback()
        self.close()


@functools.lru_cache(maxsize=4096)
def _render_cached(
    dialect: str,
    name: str,
    identifiers: tuple[tuple[str, str], ...],
    style: str,
    integers: tuple[tuple[str, int], ...] = (),
) -> list[Statement]:
    return sqlfiles.render(dialect, name, dict(identifiers), style, dict(integers))


def _first_line(exc: BaseException) -> str:
    args: tuple[object, ...] = getattr(exc, "args", ())
    message = args[1] if len(args) == 2 and isinstance(args[0], str) else None
    if isinstance(message, str) and message.startswith("["):
        # pyodbc: (sqlstate, message); str() would show the tuple's repr with escaped line breaks
        text = message.strip()
    else:
        text = str(exc).strip()
    text = text or type(exc).__name__
    lines = [line.strip() for line in text.splitlines() if not line.strip().startswith(_ROW_DATA)]
    return _TRUNCATED_VALUE.sub(r"\1'...'", _DUPLICATE_VALUE.sub(r"\1(...)", " ".join(lines[:3])))


# the parts of a driver's error that quote a row's values (PostgreSQL's "DETAIL:  Failing row contains
# (...)" and "Key (id)=(...)", its "CONTEXT:  COPY t, line 1, column body: ...", SQL Server's "The
# duplicate key value is (...)" and "Truncated value: '...'"): a message's headers and body went into
# summaries, logs and ``runs``, where an erase of the message does not reach (found by a review)
_ROW_DATA = ("DETAIL:", "CONTEXT:")
_TRUNCATED_VALUE = re.compile(r"(Truncated value: )'(?:[^']|'')*'?")
_DUPLICATE_VALUE = re.compile(r"(The duplicate key value is )\((?:[^()]|\([^()]*\))*\)")


def adbc_available() -> bool:
    return ADBC.available()


def connect(config: TransportConfig, application_name: str = "queuelake", driver: str | None = None) -> Connection:
    """Open a connection; errors name the driver and never print the connection string.

    ``driver`` overrides the configured one (the drain receives through ADBC, whose results arrive
    as Arrow without a Python object per value, with a psycopg config's connection string)."""
    connection = config.connection
    if not connection or not connection.strip():  # blank: libpq would connect to its defaults
        raise TransportError(_empty_connection(config))
    if driver is not None and driver != config.driver:
        config = dataclasses.replace(config, driver=driver)
    chosen = named_driver(config.driver)
    try:
        raw = chosen.open(connection, application_name, named_dialect(config.dialect))
    except Exception as exc:
        raise _connect_error(exc, config) from None
    return Connection(raw, config)


def _empty_connection(config: TransportConfig) -> str:
    """Why there is no connection string: the config sets none, or its variables are set but empty
    (``QUEUELAKE_CONNECTION=""``, which was told to set the variable it had set: a review)."""
    names = config.empty_variables
    if not names:
        return "transport.connection is empty: set it (e.g. ${QUEUELAKE_CONNECTION}) in the config"
    said = f"environment variable {names[0]} is" if len(names) == 1 else f"environment variables {', '.join(names)} are"
    return f"transport.connection is empty: {said} set but empty (give it the queue database's connection string)"


def _connect_error(exc: BaseException, config: TransportConfig) -> TransportError:
    return _redacted(
        TransportError(
            f"cannot connect to the {config.dialect} queue database with {config.driver}: "
            f"{redact(redaction.conninfo_refusal(_first_line(exc), config.connection), config.connection)}"
        )
    )


class SharedAdbc:
    """ADBC connections of one run that share one ADBC database.

    Why: opening an ADBC database connects once more and loads the server's type catalogue
    (45-60 ms on our machines, per worker of every queue), while a connection of an open database
    takes 2-4 ms. ``start`` opens the database in the background, so that its cost overlaps the
    run's set-up (journal table, drain lock, claims) instead of delaying the first receive.
    The database is held through a connection of its own in autocommit (never in a transaction),
    so a worker that ends early does not close it under the others: a run holds one connection more
    than the workers' (idle, outside any transaction)."""

    def __init__(self, config: TransportConfig) -> None:
        self._config = dataclasses.replace(config, driver=ADBC.name)
        # libpq's connect timeout, as every other connection's (this is the drain's receive path); made
        # here, in the caller's thread: made in the opening thread, its import of psycopg's conninfo
        # raced the caller's own import of psycopg, which then failed as a circular import (CI, twice)
        connection = config.connection
        self._connection = with_connect_timeout(connection) if connection else connection
        self._source: Any = None
        self._error: BaseException | None = None
        self._opened = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one start; one clone at a time (the driver's database is shared)

    def start(self) -> SharedAdbc:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._open, name="adbc-open", daemon=True)
                self._thread.start()
        return self

    def _open(self) -> None:
        try:
            import adbc_driver_postgresql.dbapi as adbc

            self._source = adbc.connect(self._connection, autocommit=True)
        except BaseException as exc:  # raised (redacted) by every connect()
            self._error = exc
        finally:
            self._opened.set()

    def connect(self) -> Connection:
        """A new connection in manual-commit mode; a connect error names the driver, never the
        connection string (as ``connect``)."""
        self.start()
        self._opened.wait()
        if self._error is not None:
            raise _connect_error(self._error, self._config) from None
        with self._lock:
            if self._source is None:
                raise TransportError("the run's ADBC connections are closed")
            try:
                raw = self._source.adbc_clone()
            except Exception as exc:
                raise _connect_error(exc, self._config) from None
        return Connection(raw, self._config)

    def close(self) -> None:
        """Close the source; connections still open keep the database until they close."""
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._source is not None:
                with contextlib.suppress(Exception):
                    self._source.close()
                self._source = None

    def __enter__(self) -> SharedAdbc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

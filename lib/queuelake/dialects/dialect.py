"""The two SQL dialects as objects: what differs between SQL Server and PostgreSQL, in one place.

Why: every difference between the transports (address syntax and quoting, the defaults, which drivers
reach the server, how a script is split and shown to a DBA, which error codes mean "no such table",
which statements must exist in ``sql/<dialect>/``) used to be an ``if dialect == ...`` somewhere in
eight modules. The rest of the code asks the dialect instead, so a third dialect is one object here,
one folder of SQL files and one set of address rules (``address.py``: parse, format, check, quote,
qualify; this module imports them, never the other way round). ``tests/dialects/test_dialect.py``
checks that each dialect provides exactly the statements it declares.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from queuelake.dialects import address as addr
from queuelake.dialects.address import QueueAddress
from queuelake.errors import AddressError

# The statements (``sql/<dialect>/<name>.sql``) every dialect provides. Placeholders and result
# columns are the same across dialects; each file's header comment says what it returns.
STATEMENTS: frozenset[str] = frozenset(
    {
        # install
        "create_schema",
        "schema_exists",
        "table_exists",
        "index_exists",
        "create_queue",
        "create_delayed",
        "create_subscription",
        "create_ledger",
        "create_claims",
        # schema checks, status
        "check_expires_index",
        "check_rowversion_index",
        "check_headers_type",
        "table_columns",
        "columns_needing_values",
        "can_insert",
        "count_rows",
        "count_null_seq",
        "oldest",
        "peek",
        "newest_seq",
        "db_now",
        # queues
        "receive_batch",
        "send",
        "store_delayed",
        "store_delayed_at",
        "purge_expired",
        # subscriptions
        "find_subscribers",
        "subscriber_addresses",
        "subscribe",
        "unsubscribe",
        # the publish / replay ledger
        "ledger_batches",
        "ledger_insert",
        "ledger_of_pipeline",
        # a part of a table's copies probed within a batch (``queues.probe``)
        "rows_savepoint",
        "rows_savepoint_rollback",
        # the drain's claims, lock and session
        "claim_insert",
        "claim_delete",
        "claims_of_queue",
        "claims_all",
        "claims_summary",
        "drain_lock",
        "drain_unlock",
        "drain_session",
        "lock_session",
        "estimate_session",
        "claim_fence_shared",
        "claim_fence_wait",
        # queuelake where: rows read without taking or locking them
        "where_queue",
        "where_delayed",
    }
)


@dataclass(frozen=True)
class Dialect:
    """One SQL dialect of the NServiceBus SQL transports."""

    name: str
    default_schema: str
    drivers: tuple[str, ...]  # the drivers that reach this server, the first being the default
    has_catalogs: bool  # addresses may name a catalog (database) beside the schema
    embeddable: bool  # transport.embedded can start a throwaway server of this dialect
    sequence_column: str  # the column receives order by, as a DBA knows it
    headers_type: str  # the headers column type the transport creates (checked by `status`)
    required_columns: frozenset[str]  # what a sender writes into a queue table (lower case)
    required_delayed_columns: frozenset[str]  # ... into a delayed-delivery table
    # SQLSTATEs that mean "no such table", as the drivers report them (psycopg's sqlstate, pyodbc's
    # first argument): matched instead of error texts, which differ by server language.
    missing_table_states: frozenset[str]
    # SQLSTATE prefixes (classes, or whole codes) with which the server refuses rows for what they are,
    # not for a passing condition (``is_refusal``)
    refusal_states: tuple[str, ...]
    # its address rules (``address.py``). No defaults: a dialect that forgot one would otherwise get
    # another dialect's quoting, silently.
    _parse: Callable[[str], QueueAddress] = field(repr=False)
    _format: Callable[[QueueAddress], str] = field(repr=False)
    _check: Callable[[QueueAddress], QueueAddress] = field(repr=False)
    _quote: Callable[[str], str] = field(repr=False)
    _qualify: Callable[[QueueAddress], str] = field(repr=False)
    # statements beyond STATEMENTS, used only where a capability below says so
    extra_statements: frozenset[str] = field(default_factory=frozenset)
    # install creates a queue's schema first (PostgreSQL); T-SQL scripts expect the schema to exist
    creates_schemas: bool = False
    # install looks for the table (and index) before running a create script, because the script
    # would lock a live table even when there is nothing to create (CREATE INDEX IF NOT EXISTS)
    install_checks_first: bool = False
    # queue tables may carry the legacy Recoverable column, which a send must fill
    legacy_recoverable_column: bool = False
    # pyodbc's fast_executemany (array binding) works with this server's ODBC driver
    odbc_array_binding: bool = False
    # constraints may be deferred to COMMIT (``immediate_constraints`` checks them at each insert)
    deferrable_constraints: bool = False
    # a savepoint is released once its work is taken (PostgreSQL; T-SQL has no RELEASE)
    releases_savepoints: bool = False
    # how pyodbc must decode text from this server's ODBC driver (None: pyodbc's default)
    odbc_text_decoding: str | None = None
    # one script file may hold several statements, split at ';' line ends (T-SQL: one batch per file)
    splits_statements: bool = False
    batch_terminator: str = ";"  # what ends each statement in a script shown to a DBA
    unicode_literal_prefix: str = ""  # N'...' on SQL Server
    # native error numbers that refuse rows where the SQLSTATE is the generic one (``is_refusal``), and
    # the first number of user-defined errors (a trigger's RAISERROR or THROW); 0: none
    refusal_errors: frozenset[int] = frozenset()
    user_errors_from: int = 0
    # a wait for a lock that ran out (``is_lock_timeout``): PostgreSQL's lock_not_available SQLSTATE, and
    # the native error numbers that say so where the SQLSTATE is a generic one (SQL Server's 1222)
    lock_timeout_states: frozenset[str] = frozenset({"55P03"})
    lock_timeout_errors: frozenset[int] = frozenset()
    # the headers column types a send can write (``schema.delivery_problem``); empty: not checked
    sendable_headers_types: frozenset[str] = frozenset()

    # -- addresses ---------------------------------------------------------------------------------

    def parse(self, address: str) -> QueueAddress:
        """A queue address as this transport writes it (canonical or short)."""
        return self._parse(address)

    def format(self, address: QueueAddress) -> str:
        """The canonical address, as the transport and the journal's ``queue`` column write it."""
        return self._format(address)

    def check(self, address: QueueAddress) -> QueueAddress:
        """The address, if this server accepts it as a table name without truncating; else AddressError."""
        return self._check(address)

    def resolve(self, address: str, default_schema: str | None, default_catalog: str | None = None) -> QueueAddress:
        """A configured or stored address (canonical or short) with the defaults applied, checked.
        The catalog default applies only where addresses have catalogs."""
        catalog = default_catalog if self.has_catalogs else None
        return self.check(self.parse(address).with_defaults(default_schema, catalog))

    def quote(self, name: str) -> str:
        """One identifier, quoted (and refused where this server would truncate or misread it)."""
        return self._quote(name)

    def qualified(self, address: QueueAddress) -> str:
        """The quoted two- or three-part name a statement uses for this table. A None schema or
        catalog is left to the server (apply ``with_defaults`` first to pin them)."""
        return self._qualify(address)

    def table_identifiers(self, address: QueueAddress) -> dict[str, str]:
        """The quoted ``{placeholders}`` a SQL file may use for this table."""
        ids = {"queue": self.qualified(address), "table": self.qualified(address)}
        ids["schema"] = self.quote(address.schema or self.default_schema)
        # index names: the PostgreSQL transport's 55-byte table limit leaves room for these suffixes
        ids["expires_index"] = self.quote(address.table + "_Expires")
        ids["due_index"] = self.quote(address.table + "_Due")
        ids["catalog_prefix"] = self.quote(address.catalog) + "." if address.catalog else ""
        return ids

    # -- statements and scripts ----------------------------------------------------------------------

    @property
    def statements(self) -> frozenset[str]:
        """Every SQL file ``sql/<name>/`` must hold (and nothing else)."""
        return STATEMENTS | self.extra_statements

    def string_literal(self, value: str) -> str:
        """A value written into a script for a DBA to read (never used to run a statement)."""
        return self.unicode_literal_prefix + "'" + value.replace("'", "''") + "'"

    def end_statement(self, text: str) -> str:
        return text + self.batch_terminator

    # -- errors ------------------------------------------------------------------------------------

    def is_missing_table(self, exc: BaseException) -> bool:
        """Does this driver error say that a table does not exist? By SQLSTATE, not by message text."""
        return _sqlstate(exc) in self.missing_table_states

    def is_refusal(self, exc: BaseException) -> bool:
        """Does this driver error refuse the rows themselves (a constraint, a trigger that raised, a
        permission or policy, a value the column cannot hold), so that sending them again fails again?
        A dropped connection, a deadlock, a lock or statement timeout, a missing table are not: a retry
        can cure those. By SQLSTATE; SQL Server's trigger errors and permission errors share the
        generic 42000 with syntax errors, so its native error number decides there (``_native_error``)."""
        state = _sqlstate(exc)
        if state is not None and state.upper().startswith(self.refusal_states):
            return True
        native = _native_error(exc)
        return native is not None and (native in self.refusal_errors or native >= self.user_errors_from > 0)

    def is_lock_timeout(self, exc: BaseException) -> bool:
        """Did the statement give up waiting for a lock another session held (``lock_timeout``, SQL
        Server's ``SET LOCK_TIMEOUT``)? A drain's queue whose table is held locked fails at the first such
        error, rather than wait once more for each statement it would still send (a review: three waits)."""
        if _sqlstate(exc) in self.lock_timeout_states:
            return True
        native = _native_error(exc)
        return native is not None and native in self.lock_timeout_errors


def _sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a driver error: psycopg's and ADBC's ``sqlstate``, pyodbc's first argument."""
    state = getattr(exc, "sqlstate", None)
    if state is None:
        args: tuple[object, ...] = getattr(exc, "args", ())
        state = args[0] if len(args) >= 2 and isinstance(args[0], str) else None
    return state if isinstance(state, str) else None


# pyodbc ends a SQL Server message with its native error number: "... [SQL Server]text (50000) (SQLExecDirectW)"
_NATIVE_ERROR = re.compile(r"\((\d+)\)\s*\(SQL\w+\)\s*$")


def _native_error(exc: BaseException) -> int | None:
    args: tuple[object, ...] = getattr(exc, "args", ())
    text = args[1] if len(args) >= 2 and isinstance(args[1], str) else None
    found = _NATIVE_ERROR.search(text) if text else None
    return int(found.group(1)) if found else None


# PostgreSQL's classes of errors that refuse rows for what they are: data exception (22), integrity
# constraint (23), triggered data change (27), WITH CHECK OPTION (44), triggered action (09), routine
# exceptions a trigger's function raises (2F, 38, 39, and PL/pgSQL's P0: RAISE, ASSERT), and
# insufficient privilege (42501: also a row-level security policy's "new row violates")
_POSTGRESQL_REFUSALS = ("22", "23", "27", "44", "09", "2F", "38", "39", "P0", "42501")

POSTGRESQL = Dialect(
    name="postgresql",
    default_schema="public",
    drivers=("psycopg", "pyodbc", "adbc"),
    has_catalogs=False,
    embeddable=True,
    sequence_column="seq",
    headers_type="text",
    required_columns=frozenset({"id", "expires", "headers", "body", "seq"}),
    required_delayed_columns=frozenset({"id", "headers", "body", "due"}),
    missing_table_states=frozenset({"42P01"}),  # undefined_table
    refusal_states=_POSTGRESQL_REFUSALS,
    # what information_schema calls text and varchar(n): a binary COPY's text fits them, not jsonb's format
    sendable_headers_types=frozenset({"text", "character varying"}),
    creates_schemas=True,
    install_checks_first=True,
    deferrable_constraints=True,
    releases_savepoints=True,
    extra_statements=frozenset({"immediate_constraints", "rows_savepoint_release"}),
    splits_statements=True,
    batch_terminator=";",
    odbc_text_decoding="utf-8",  # psqlodbc: the pyodbc plumbing runs against PostgreSQL in tests
    _parse=addr.parse_postgresql,
    _format=addr.format_postgresql,
    _check=addr.checked_postgresql,
    _quote=addr.quote_postgresql,
    _qualify=addr.qualified_postgresql,
)

SQLSERVER = Dialect(
    name="sqlserver",
    default_schema="dbo",
    drivers=("pyodbc",),
    has_catalogs=True,
    embeddable=False,
    sequence_column="RowVersion",
    headers_type="nvarchar(max)",
    required_columns=frozenset({"id", "correlationid", "replytoaddress", "expires", "headers", "body", "rowversion"}),
    required_delayed_columns=frozenset({"headers", "body", "due", "rowversion"}),
    # ODBC's "base table or view not found" (error 208, "Invalid object name"); 42P01 is what psqlodbc
    # reports for the same error when the pyodbc plumbing runs against PostgreSQL in our tests
    missing_table_states=frozenset({"42S02", "42P01"}),
    # ODBC's integrity (23000: a CHECK, foreign key, unique or NOT NULL refusal) and data (22xxx: a value
    # truncated or out of range) classes, WITH CHECK OPTION (44000); by native number, permission
    # denied (229, 230), a transaction a trigger ended (3609), a security policy's block predicate
    # (33504) and any user error (50000 on: RAISERROR, THROW). PostgreSQL's classes too, for the pyodbc
    # plumbing our tests run against PostgreSQL. Not run against a real SQL Server.
    refusal_states=_POSTGRESQL_REFUSALS,
    refusal_errors=frozenset({229, 230, 3609, 33504}),
    user_errors_from=50000,
    lock_timeout_errors=frozenset({1222}),  # "Lock request time out period exceeded" (not run for real)
    extra_statements=frozenset({"has_recoverable", "send_recoverable"}),
    legacy_recoverable_column=True,
    odbc_array_binding=True,
    batch_terminator="\nGO",
    unicode_literal_prefix="N",
    _parse=addr.parse_sqlserver,
    _format=addr.format_sqlserver,
    _check=addr.checked_sqlserver,
    _quote=addr.quote_sqlserver,
    _qualify=addr.qualified_sqlserver,
)

DIALECTS: dict[str, Dialect] = {d.name: d for d in (POSTGRESQL, SQLSERVER)}


def dialect(name: str) -> Dialect:
    """The dialect called ``name`` (``transport.dialect``); AddressError names the known ones."""
    try:
        return DIALECTS[name]
    except (KeyError, TypeError):
        raise AddressError(f"unknown dialect {name!r}; expected {' or '.join(sorted(DIALECTS))}") from None


# -- by name: for callers holding ``transport.dialect`` rather than the object (tests, scripts) ------


def parse(address: str, dialect_name: str) -> QueueAddress:
    return dialect(dialect_name).parse(address)


def format_address(address: QueueAddress, dialect_name: str) -> str:
    return dialect(dialect_name).format(address)


def quote_identifier(name: str, dialect_name: str) -> str:
    return dialect(dialect_name).quote(name)


def qualified_name(address: QueueAddress, dialect_name: str) -> str:
    return dialect(dialect_name).qualified(address)

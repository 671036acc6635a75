"""Every SQL file renders with hostile identifiers and parses, and the quoting holds.

There is no SQL Server in the test environment: the T-SQL files are checked by sqlglot's tsql
parser (strict: any statement it would only keep as an opaque command counts as a failure). The
PostgreSQL files run for real in the other suites and are parsed here too, with the same rule.
"""

from __future__ import annotations

import re
from typing import cast

import pytest
import sqlglot
from queuelake.config import from_dict
from queuelake.dialects.dialect import dialect as named_dialect
from queuelake.dialects.dialect import parse
from queuelake.transport import db, installer, queues, sqlfiles
from queuelake.transport.table_refs import TableRef, resolve_address
from sqlglot import exp

SQLSERVER_ADDRESSES = [
    "my.tb[e@[my.[sch@ma]@[my.c@ta]]og]",
    "Special_]_Characters@[db@]@[n service.bus&#]",
    "[SpecialCharacters]",
    "Sales",
    "wh?t %s :x 'q' -- /*@[sch]]ema]",
]
POSTGRES_ADDRESSES = [
    "my.tb[e@[my.[sch@ma]@[my.c@ta]]og]",
    '"we""ird.sch"."a%sb?c:x \'q\' -- /*"',
    '"Line\nBreak; SELECT 1"',
    "Sales",
]
FILES_WITH_TABLE = re.compile(r"\{(queue|table)\}")


def _ref(text: str, dialect: str, default_schema: str) -> TableRef:
    return resolve_address(parse(text, dialect).with_defaults(default_schema), dialect)


# statements sqlglot has no grammar for (it keeps them as opaque commands): each names no table and is
# run against the real PostgreSQL elsewhere (immediate_constraints: tests/transport/test_errors.py)
OPAQUE = {"SET CONSTRAINTS ALL IMMEDIATE"}
# statements sqlglot cannot parse at all, taken as they are: they name no table. SAVEPOINT (sqlglot 30.31
# stopped parsing it) and RELEASE SAVEPOINT run against the real PostgreSQL (a publish's refused copies,
# tests/pipeline/publish/test_publish.py); T-SQL's SAVE TRANSACTION is unverified, no SQL Server runs here
NO_GRAMMAR = {"SAVE TRANSACTION queuelake_rows", "SAVEPOINT queuelake_rows", "RELEASE SAVEPOINT queuelake_rows"}


def _parse(sql: str, read: str) -> list[exp.Expression]:
    if sql.strip().rstrip(";").strip() in NO_GRAMMAR:
        return [exp.Command(this=sql)]
    trees = [t for t in sqlglot.parse(sql, read=read, error_level=sqlglot.ErrorLevel.RAISE) if t is not None]
    assert trees, sql
    opaque = [node for tree in trees for node in tree.find_all(exp.Command) if node.sql(read) not in OPAQUE]
    assert not opaque, f"sqlglot kept these as opaque commands, not parsed statements: {opaque}"
    return trees


def _tables(trees: list[exp.Expression]) -> set[tuple[str, str, str]]:
    return {(t.name, t.db, t.catalog) for tree in trees for t in tree.find_all(exp.Table)}


def _cases(dialect: str, addresses: list[str]) -> list[tuple[str, str]]:
    return [(name, a) for name in sqlfiles.sql_names(dialect) for a in addresses]


def test_the_sql_folders_hold_the_expected_files() -> None:
    core = {
        "create_queue",
        "create_delayed",
        "create_subscription",
        "create_ledger",
        "receive_batch",
        "send",
        "peek",
        "newest_seq",
        "purge_expired",
        "subscribe",
        "unsubscribe",
        "find_subscribers",
        "table_exists",
    }
    assert core <= set(sqlfiles.sql_names("sqlserver"))
    assert core <= set(sqlfiles.sql_names("postgresql"))


def test_both_dialects_provide_the_same_statements() -> None:
    """A statement missing from one dialect would fail only at run time, on that dialect's servers.
    SQL Server alone has the optional Recoverable column (NServiceBus 7 and older); PostgreSQL alone
    defers constraints to COMMIT."""
    sqlserver_only = {"has_recoverable", "send_recoverable"}
    postgresql_only = {"immediate_constraints", "rows_savepoint_release"}  # T-SQL: no deferred constraints, no RELEASE
    assert (
        set(sqlfiles.sql_names("sqlserver")) - sqlserver_only == set(sqlfiles.sql_names("postgresql")) - postgresql_only
    )


@pytest.mark.parametrize(("name", "address"), _cases("sqlserver", SQLSERVER_ADDRESSES))
def test_sqlserver_file_renders_and_parses(name: str, address: str) -> None:
    ref = _ref(address, "sqlserver", "dbo")
    statements = sqlfiles.render("sqlserver", name, ref.identifiers(), paramstyle="named")
    assert len(statements) == 1, "a T-SQL file is one batch"
    (stmt,) = statements
    trees = _parse(stmt.sql, "tsql")
    for p in stmt.params:
        assert "@" + p in stmt.sql
    tables = _tables(trees)
    a = ref.address
    if FILES_WITH_TABLE.search(sqlfiles.read_sql("sqlserver", name)):
        # the quoting holds: the parser finds exactly the hostile three-part name
        assert (a.table, a.schema or "", a.catalog or "") in tables, tables
    if "{catalog_prefix}sys." in sqlfiles.read_sql("sqlserver", name):
        catalogs = {c for (t, db, c) in tables if db == "sys"}
        assert catalogs == {a.catalog or ""}, catalogs
    # each name survives a round trip through sqlglot's T-SQL generator (bracket quoting)
    for tree in trees:
        for table in tree.find_all(exp.Table):
            name = exp.table_(table.name, table.db or None, table.catalog or None, quoted=True).sql(dialect="tsql")
            again = sqlglot.parse_one(f"SELECT 1 FROM {name}", read="tsql").find(exp.Table)
            assert again is not None and (again.name, again.db, again.catalog) == (table.name, table.db, table.catalog)


@pytest.mark.parametrize(("name", "address"), _cases("postgresql", POSTGRES_ADDRESSES))
def test_postgresql_file_renders_and_parses(name: str, address: str) -> None:
    ref = _ref(address, "postgresql", "public")
    text = sqlfiles.read_sql("postgresql", name)
    a = ref.address
    found: set[tuple[str, str, str]] = set()
    for stmt in sqlfiles.render("postgresql", name, ref.identifiers(), paramstyle="named"):
        trees = _parse(stmt.sql, "postgres")
        found |= _tables(trees)
    if FILES_WITH_TABLE.search(text):
        assert (a.table, a.schema, "") in found, found
    if "{schema}" in text:
        schemas = {db for (_, db, _) in found}
        assert a.schema in schemas


def test_parameters_are_never_taken_from_identifiers() -> None:
    """A quoted name holding ':x', '?', '%s' or '@p' adds no parameter in any style."""
    ref = _ref("wh?t %s :x @p@[sch]]ema]", "sqlserver", "dbo")
    for name in sqlfiles.sql_names("sqlserver"):
        text = sqlfiles.read_sql("sqlserver", name)
        template = sqlfiles.split_statements(text, "sqlserver")[0]
        expected = re.findall(r"(?<![:\w]):([A-Za-z_]\w*)", template)
        for style in ("named", "qmark", "format"):
            (stmt,) = sqlfiles.render("sqlserver", name, ref.identifiers(), paramstyle=style)
            assert list(stmt.params) == expected, (name, style)
        # the format style: Python's % operator (as format-style drivers apply it) fills exactly
        # the parameters and gives the identifiers back unchanged
        (stmt,) = sqlfiles.render("sqlserver", name, ref.identifiers(), paramstyle="format")
        markers = [f"<<{i}>>" for i in range(len(stmt.params))]
        filled = stmt.sql % tuple(markers)
        assert all(filled.count(m) == 1 for m in markers)
        if FILES_WITH_TABLE.search(text):
            assert ref.qualified in filled


def test_integers_are_written_as_literals_and_only_integers() -> None:
    """``integers``: the named parameter becomes a decimal literal, the others keep their places
    (renumbered in the dollar style); anything but an int (text, bool, float) is refused."""
    ref = _ref('"we""ird.sch"."a%sb?c:x \'q\' -- /*"', "postgresql", "public")
    (bound,) = sqlfiles.render("postgresql", "receive_batch", ref.identifiers(), paramstyle="dollar")
    assert bound.params == ("batch_size",) and "LIMIT $1" in bound.sql
    (inlined,) = sqlfiles.render(
        "postgresql", "receive_batch", ref.identifiers(), paramstyle="dollar", integers={"batch_size": 10_000}
    )
    assert inlined.params == () and "LIMIT 10000" in inlined.sql and "$" not in inlined.sql.replace(ref.qualified, "")
    assert inlined.sql == bound.sql.replace("LIMIT $1", "LIMIT 10000")
    _parse(inlined.sql, "postgres")
    # a statement with several parameters: the rest are renumbered, in order
    (claim,) = sqlfiles.render("postgresql", "claim_insert", ref.identifiers(), paramstyle="dollar")
    (claim_inlined,) = sqlfiles.render(
        "postgresql", "claim_insert", ref.identifiers(), paramstyle="dollar", integers={"version": 7}
    )
    assert claim_inlined.params == tuple(p for p in claim.params if p != "version")
    assert [f"${i}" for i in range(1, len(claim_inlined.params) + 1)] == re.findall(r"\$\d+", claim_inlined.sql)
    for hostile in ("1; DROP TABLE x", True, 1.5, None):
        with pytest.raises(TypeError, match="batch_size"):
            sqlfiles.render("postgresql", "receive_batch", ref.identifiers(), integers={"batch_size": hostile})


def test_sqlserver_install_script_parses_batch_by_batch() -> None:
    """`install --print-sql` for SQL Server: GO-separated batches, parameters as N'...' literals."""
    cfg = from_dict(
        {
            "transport": {
                "dialect": "sqlserver",
                "driver": "pyodbc",
                "connection": "x",
                "default_catalog": "n service.bus&#",
            },
            "drain": {"queues": ["my.tb[e@[my.[sch@ma]@[my.c@ta]]og]", "Special_]_Characters@[db@]", "it's"]},
        },
        env={},
    )
    plan = installer.plan(cfg, delayed_endpoints=["it's"])
    text = installer.script("sqlserver", plan)
    batches = [b for b in re.split(r"^GO$", text, flags=re.MULTILINE) if b.strip()]
    steps = plan.steps()
    assert len(batches) == len(steps)
    for batch, (_, ref) in zip(batches, steps, strict=True):
        trees = _parse(batch, "tsql")
        a = ref.address
        assert (a.table, a.schema or "", a.catalog or "") in _tables(trees)
        lock = [e for t in trees for e in t.find_all(exp.Execute)]
        assert lock, "each create holds sp_getapplock"
        literal = lock[0].find(exp.Literal, bfs=True)
        assert literal is not None or "N'" in batch
        assert "N'" + (ref.canonical + "_lock").replace("'", "''") + "'" in batch
        assert "?" not in batch.replace(ref.qualified, "")


@pytest.mark.parametrize(
    ("dialect", "read", "addresses"),
    [("sqlserver", "tsql", SQLSERVER_ADDRESSES), ("postgresql", "postgres", POSTGRES_ADDRESSES)],
)
def test_the_union_of_peeks_parses_and_names_every_queue(dialect: str, read: str, addresses: list[str]) -> None:
    """The drain estimates every queue in one statement made of the dialect's own peek.sql."""
    from queuelake.transport.queues import peek_union

    default_schema = named_dialect(dialect).default_schema
    refs = [_ref(a, dialect, default_schema) for a in addresses]
    peeks = [sqlfiles.render(dialect, "peek", r.identifiers())[0].sql for r in refs]
    (tree,) = _parse(peek_union(peeks), read)
    assert {t for t in _tables([tree])} == {
        t for r in refs for t in _tables(_parse(sqlfiles.render(dialect, "peek", r.identifiers())[0].sql, read))
    }
    assert len(list(tree.find_all(exp.Union))) == len(refs) - 1


def test_the_sqlserver_receive_leaves_rows_without_a_rowversion() -> None:
    """SQL Server sorts NULL first: a hand-made table's row without a RowVersion was taken first by every
    batch and failed it in ``int(None)`` (a review). PostgreSQL's ``seq = ANY(...)`` never takes one."""
    ref = _ref("Sales", "sqlserver", "dbo")
    (receive,) = sqlfiles.render("sqlserver", "receive_batch", ref.identifiers())
    (tree,) = _parse(receive.sql, "tsql")
    cte = tree.find(exp.CTE)
    assert cte is not None
    where = cte.this.args.get("where")
    assert where is not None and where.sql(dialect="tsql") == "WHERE NOT RowVersion IS NULL", where


def test_a_delayed_message_is_due_at_its_instant_not_the_clock_plus_a_delay() -> None:
    """Due was GETUTCDATE() (the statement's clock, later than the batch's clock read) plus a delay in whole
    milliseconds, rounded twice to datetime's 1/300 s: a deliver_at came back a few ms off (a review). It is
    the instant given, as text, converted once: datetime's rounding (at most 1/600 s) is all that is left."""
    from queuelake.transport.queues import _utc_text

    ref = _ref("Sales", "sqlserver", "dbo")
    (store,) = sqlfiles.render("sqlserver", "store_delayed_at", ref.identifiers(), paramstyle="named")
    (tree,) = _parse(store.sql, "tsql")
    assert set(store.params) == {"headers", "body", "due"}
    values = tree.find(exp.Tuple)
    assert values is not None
    due = values.expressions[2]
    assert isinstance(due, exp.Cast) and due.to.sql(dialect="tsql") == "DATETIME", due
    assert "GETUTCDATE" not in store.sql.upper() and "DATEADD" not in store.sql.upper()
    assert due.sql(dialect="tsql") == "CAST(CONVERT(DATETIME2(7), @due, 121) AS DATETIME)", due.sql(dialect="tsql")
    # the text both dialects read: the UTC wall clock, four-digit years, six-digit fractions (style 121)
    import datetime as dt

    east = dt.timezone(dt.timedelta(hours=14))
    assert _utc_text(dt.datetime(2026, 12, 3, 0, 0, 0, 1_000, tzinfo=east)) == "2026-12-02 10:00:00.001000"
    assert _utc_text(dt.datetime(1, 1, 1, 0, 0, 0, 999, tzinfo=dt.timezone.utc)) == "0001-01-01 00:00:00.000999"
    assert _utc_text(dt.datetime(9999, 12, 31, 23, 59, 59, 997_000)) == "9999-12-31 23:59:59.997000"


class _Recorded:
    """The statements a SQL Server connection would be sent (none runs here: no SQL Server)."""

    dialect, paramstyle, session_settings = "sqlserver", "named", None
    statements = db.Connection.statements

    def __init__(self) -> None:
        self.sent: list[str] = []

    def execute(self, stmt: sqlfiles.Statement, params: dict[str, object], **_: object) -> None:
        assert set(stmt.params) <= set(params), (stmt.params, params)
        self.sent.append(stmt.sql)

    def commit(self) -> None:
        pass


@pytest.mark.parametrize(("statement_timeout", "lock_ms"), [(300, 30_000), (10, 9_000), (1.5, 750)])
def test_sqlserver_sessions_wait_for_a_lock_less_than_the_statement_timeout(
    statement_timeout: float, lock_ms: int
) -> None:
    """SQL Server's ``SET LOCK_TIMEOUT`` follows the statement timeout as PostgreSQL's ``lock_timeout`` does
    (30 s at most, shorter than the statement timeout): it was 30 s whatever the setting."""
    for configure in (
        lambda conn: queues.configure_lock_session(conn, statement_timeout),
        lambda conn: queues.configure_drain_session(conn, statement_timeout, 600),
    ):
        conn = _Recorded()
        configure(cast(db.Connection, conn))
        (batch,) = conn.sent
        assert f"SET LOCK_TIMEOUT {lock_ms};" in batch, batch
        _parse(batch, "tsql")

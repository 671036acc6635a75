"""The dialect objects: each provides exactly the statements it declares, and the rest of the code
asks them instead of naming a dialect."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest
from queuelake.dialects.dialect import DIALECTS, STATEMENTS
from queuelake.errors import TransportError
from queuelake.transport import sqlfiles

from tests.helpers.transport import connect

LIB = Path(__file__).resolve().parents[2] / "lib" / "queuelake"


@pytest.mark.parametrize("name", sorted(DIALECTS))
def test_each_dialect_provides_exactly_its_statements(name: str) -> None:
    rules = DIALECTS[name]
    provided = set(sqlfiles.sql_names(name))
    assert provided - rules.statements == set(), f"sql/{name}/ holds statements no dialect declares"
    assert rules.statements - provided == set(), f"sql/{name}/ lacks statements the code runs"


def test_both_dialects_share_the_statement_set() -> None:
    common = [rules.statements - rules.extra_statements for rules in DIALECTS.values()]
    assert all(s == STATEMENTS for s in common)


def _statement_literals(path: Path) -> set[str]:
    known = set().union(*(r.statements for r in DIALECTS.values()))
    return {name for name in re.findall(r'"([a-z_]+)"', path.read_text(encoding="utf-8")) if name in known}


def test_statement_names_used_by_the_code_are_declared() -> None:
    used: set[str] = set()
    for path in (LIB / "transport").glob("*.py"):
        used |= _statement_literals(path)
    declared = set().union(*(r.statements for r in DIALECTS.values()))
    assert used <= declared
    # a dialect-specific statement is only run behind the capability that declares it
    for rules in DIALECTS.values():
        assert rules.extra_statements <= used


def test_nothing_outside_transport_runs_a_sql_file_by_name() -> None:
    offenders = {}
    for path in LIB.rglob("*.py"):
        if "transport" in path.relative_to(LIB).parts:
            continue
        text = path.read_text(encoding="utf-8")
        calls = re.findall(r'(?:\.run|\.statements|sqlfiles\.render)\(\s*"([a-z_]+)"', text)
        if calls:
            offenders[str(path.relative_to(LIB))] = calls
    assert offenders == {}


def test_no_dialect_branches_outside_the_dialect_modules() -> None:
    # ``dialect == "postgresql"`` and ``rules.name != "sqlserver"`` alike: quoting, addresses and
    # capabilities are the dialect object's (address.py holds per-dialect rules and no names at all)
    branch = re.compile(r"""(?:dialect|\.name)\s*[!=]=\s*["'](postgresql|sqlserver)["']""")
    offenders = [
        str(p.relative_to(LIB))
        for p in LIB.rglob("*.py")
        if p.relative_to(LIB).as_posix() != "dialects/dialect.py" and branch.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []


@pytest.mark.parametrize("driver", ["psycopg", "pyodbc"])
def test_a_missing_table_is_recognised_by_its_error_code_not_its_text(pg_uri: str, driver: str) -> None:
    """An error whose text reads like a missing table but whose code says otherwise (a trigger's or
    a function's RAISE) is not reported as a missing table, and a real one is, by SQLSTATE."""
    with connect(pg_uri, driver) as conn:
        with psycopg.connect(pg_uri, autocommit=True) as raw:
            with pytest.raises(psycopg.Error) as fake:
                raw.execute("""DO $$ BEGIN RAISE EXCEPTION 'relation "Orders" does not exist'; END $$""")
            with pytest.raises(psycopg.Error) as real:
                raw.execute('SELECT 1 FROM "NoSuchTable"')
        assert fake.value.sqlstate == "P0001" and real.value.sqlstate == "42P01"
        fake_error = conn.error(fake.value, "peek", "Orders")
        real_error = conn.error(real.value, "peek", "NoSuchTable")
        assert isinstance(fake_error, TransportError) and "peek on Orders failed" in str(fake_error)
        assert str(real_error).startswith("table on NoSuchTable does not exist")
        # and through the driver under test (pyodbc reports the SQLSTATE as its first argument)
        with pytest.raises(TransportError, match="does not exist"):
            conn.run("count_rows", {"queue": '"NoSuchTable"'}, {})


class _OdbcError(Exception):
    """What pyodbc raises: (SQLSTATE, message ending in the native error number)."""


@pytest.mark.parametrize(
    ("state", "text", "refused"),
    [
        ("23000", "[SQL Server]The INSERT statement conflicted with the CHECK constraint (547) (SQLExecDirectW)", True),
        ("22001", "[SQL Server]String or binary data would be truncated (2628) (SQLExecDirectW)", True),
        ("42000", "[SQL Server]closed for maintenance (50000) (SQLExecDirectW)", True),
        ("42000", "[SQL Server]a user's THROW (51234) (SQLExecDirectW)", True),
        ("42000", "[SQL Server]The INSERT permission was denied on the object (229) (SQLExecDirectW)", True),
        ("42000", "[SQL Server]Incorrect syntax near 'x'. (102) (SQLExecDirectW)", False),
        ("40001", "[SQL Server]Transaction was deadlocked (1205) (SQLExecDirectW)", False),
        ("HYT00", "[Microsoft][ODBC Driver 18 for SQL Server]Query timeout expired (0) (SQLExecute)", False),
        ("42S02", "[SQL Server]Invalid object name 'dbo.X'. (208) (SQLExecDirectW)", False),
        ("P0001", "ERROR: closed for maintenance;\nError while executing the query (1) (SQLExecDirectW)", True),
    ],
)
def test_sql_server_refusals_are_told_by_state_and_native_number(state: str, text: str, refused: bool) -> None:
    """A trigger's RAISERROR and a permission error share SQLSTATE 42000 with a syntax error on SQL
    Server: the native number tells them apart. Messages written from SQL Server's documented format
    (not checked against a real server); the last is psqlodbc's, which our pyodbc tests meet."""
    assert DIALECTS["sqlserver"].is_refusal(_OdbcError(state, text)) is refused


@pytest.mark.parametrize(
    ("state", "refused"),
    [("23514", True), ("P0001", True), ("42501", True), ("22P02", True), ("40001", False), ("57014", False)],
)
def test_postgresql_refusals_are_told_by_sqlstate_class(state: str, refused: bool) -> None:
    error = psycopg.errors.lookup(state)("refused")
    assert DIALECTS["postgresql"].is_refusal(error) is refused


@pytest.mark.parametrize(
    ("dialect", "error", "timed_out"),
    [
        ("postgresql", psycopg.errors.lookup("55P03")("canceling statement due to lock timeout"), True),
        ("postgresql", psycopg.errors.lookup("57014")("canceling statement due to statement timeout"), False),
        ("postgresql", psycopg.errors.lookup("40P01")("deadlock detected"), False),
        (
            "sqlserver",
            _OdbcError("HY000", "[SQL Server]Lock request time out period exceeded. (1222) (SQLExecDirectW)"),
            True,
        ),
        (
            "sqlserver",
            _OdbcError("HYT00", "[Microsoft][ODBC Driver 18 for SQL Server]Query timeout expired (0) (SQLExecute)"),
            False,
        ),
        (
            "sqlserver",
            _OdbcError("55P03", "ERROR: canceling statement due to lock timeout;\n (1) (SQLExecDirectW)"),
            True,
        ),
    ],
)
def test_a_lock_wait_that_ran_out_is_told_apart(dialect: str, error: Exception, timed_out: bool) -> None:
    """A drain fails a queue whose table is held locked at the first wait that runs out, rather than wait
    once more per statement: the lock timeout is told by SQLSTATE (55P03, also psqlodbc's), or by SQL
    Server's native 1222 (its documented message; not checked against a real server)."""
    assert DIALECTS[dialect].is_lock_timeout(error) is timed_out


def test_a_timeout_under_a_millisecond_is_not_no_limit() -> None:
    """PostgreSQL reads a timeout of "0ms" as no limit: a setting under 1 ms is rounded up, never down."""
    from queuelake.transport.timeouts import lock_timeout, timeout_setting

    assert timeout_setting(0.0004) == "1ms" and timeout_setting(2.0) == "2000ms" and timeout_setting(0.0015) == "2ms"
    assert lock_timeout(0.0004) == "1ms" and lock_timeout(300.0) == "30000ms"

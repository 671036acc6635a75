"""The driver objects: each says what it can do, and the rest of the code asks it instead of
comparing a driver's name (issue 31 found ten such branches in four files)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from queuelake.dialects.dialect import DIALECTS
from queuelake.errors import ConfigError
from queuelake.transport import drivers

LIB = Path(__file__).resolve().parents[2] / "lib" / "queuelake"
# a driver's name compared: ``driver == "psycopg"``, ``receive_driver(config) != "adbc"``, ``driver in ("pyodbc",``
_NAMES = "|".join(drivers.DRIVERS)
BRANCH = re.compile(rf"""driver\w*(?:\([^)]*\))?\s*(?:[!=]=|\bin\b|\bnot in\b)\s*[("']*({_NAMES})["']""")


def test_every_driver_a_dialect_names_exists_and_every_driver_reaches_a_dialect() -> None:
    named = {name for rules in DIALECTS.values() for name in rules.drivers}
    assert named == set(drivers.DRIVERS)


def test_no_driver_branches_outside_the_driver_module() -> None:
    """``driver == "psycopg"``, ``conn.driver != "adbc"`` and the like: the capability is the
    driver object's. Naming one to choose it (``driver="adbc"``) is no branch."""
    offenders = [
        f"{p.relative_to(LIB)}:{n}"
        for p in LIB.rglob("*.py")
        if p.name != "drivers.py"
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if BRANCH.search(line)
    ]
    assert offenders == []


def test_the_check_sees_a_branch() -> None:
    assert BRANCH.search('    if config.transport.driver == "psycopg" and db.adbc_available():')
    assert BRANCH.search('    if conn.driver != "adbc":')
    assert BRANCH.search('    shared = db.SharedAdbc(t) if receive_driver(config) == "adbc" else None')
    assert not BRANCH.search('    conn = connect(cfg, "x", driver="adbc")')


def test_receive_driver_auto_takes_arrow_beside_the_same_connection_string() -> None:
    postgres = DIALECTS["postgresql"].drivers
    arrow = drivers.ADBC if drivers.ADBC.available() else drivers.PSYCOPG
    assert drivers.receive_driver("psycopg", "auto", postgres) is arrow
    assert drivers.receive_driver("pyodbc", "auto", postgres) is drivers.PYODBC  # an ODBC string is not libpq
    assert drivers.receive_driver("psycopg", "auto", ("psycopg",)) is drivers.PSYCOPG  # the dialect's to say
    assert drivers.receive_driver("psycopg", "psycopg", postgres) is drivers.PSYCOPG
    assert drivers.receive_driver("adbc", "auto", postgres) is drivers.ADBC


def test_an_unknown_driver_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown driver 'odbc2'"):
        drivers.driver("odbc2")


def test_a_libpq_connection_gets_a_connect_timeout_unless_it_sets_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """libpq waits for a server without end: a host that was down held a scheduled run (a review)."""
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    add = drivers.with_connect_timeout
    assert add("postgresql://u:p@h/db") == "postgresql://u:p@h/db?connect_timeout=30"
    assert add("postgresql://u@h/db?sslmode=require") == "postgresql://u@h/db?sslmode=require&connect_timeout=30"
    assert add("host=h dbname=db") == "host=h dbname=db connect_timeout=30"
    assert add("postgresql://u@h/db?") == "postgresql://u@h/db?connect_timeout=30"  # a query left empty
    assert add("postgresql://h/db?connect_timeout=5") == "postgresql://h/db?connect_timeout=5"  # the user's wins
    assert add("host=h connect_timeout=5") == "host=h connect_timeout=5"
    assert add("host='unterminated") == "host='unterminated"  # libpq's own error says what is wrong
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "7")
    assert add("postgresql://u@h/db") == "postgresql://u@h/db"

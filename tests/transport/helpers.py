"""Shared helpers of the transport integration tests (real PostgreSQL, both drivers).

Import as ``from tests.transport.helpers import ...``: the suite runs with --import-mode=importlib,
under which ``tests`` is a package and ``conftest`` is not importable by its bare name.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import psycopg
import yaml
from queuelake.config import Config, from_dict
from queuelake.transport import db
from queuelake.transport.db import Connection
from queuelake.transport.tables import TableRef, queue_ref

from tests.conftest import connection_string

REPO = Path(__file__).resolve().parents[2]


def make_config(uri: str, driver: str, queues: Sequence[str] = ("Sales",), **transport: Any) -> Config:
    data = {
        "transport": {
            "dialect": "postgresql",
            "driver": driver,
            "connection": connection_string(uri, driver),
            **transport,
        },
        "drain": {"queues": list(queues)},
    }
    return from_dict(data, env={})


def connect(uri: str, driver: str) -> Connection:
    return db.connect(make_config(uri, driver).transport, "queuelake-tests")


def ref(name: str, driver: str = "psycopg", uri: str = "postgresql://x@localhost/x") -> TableRef:
    return queue_ref(name, make_config(uri, driver).transport)


def sql(uri: str, query: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
    """Run one statement in autocommit through psycopg (the test's own view of the database)."""
    with psycopg.connect(uri, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def catalog_snapshot(uri: str) -> dict[str, list[tuple[Any, ...]]]:
    """Everything install can create, as comparable sorted lists (user schemas only)."""
    user = "n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')"
    return {
        "schemas": sql(uri, f"SELECT n.nspname FROM pg_namespace n WHERE {user} ORDER BY 1"),
        "relations": sql(
            uri,
            f"SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE {user} ORDER BY 1, 2, 3",
        ),
        "columns": sql(
            uri,
            "SELECT table_schema, table_name, column_name, ordinal_position, data_type, character_maximum_length, "
            "is_nullable, column_default FROM information_schema.columns "
            "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2, 4",
        ),
        "indexes": sql(
            uri,
            "SELECT schemaname, tablename, indexname, indexdef FROM pg_indexes "
            "WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2, 3",
        ),
        "constraints": sql(
            uri,
            f"SELECT n.nspname, t.relname, con.conname, con.contype, pg_get_constraintdef(con.oid) "
            f"FROM pg_constraint con JOIN pg_class t ON t.oid = con.conrelid "
            f"JOIN pg_namespace n ON n.oid = t.relnamespace WHERE {user} ORDER BY 1, 2, 3",
        ),
    }


def columns(uri: str, schema: str, table: str) -> dict[str, tuple[str, int | None, str, str | None]]:
    """column -> (data_type, character_maximum_length, is_nullable, column_default)."""
    rows = sql(
        uri,
        "SELECT column_name, data_type, character_maximum_length, is_nullable, column_default "
        "FROM information_schema.columns WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
        (schema, table),
    )
    return {r[0]: tuple(r[1:]) for r in rows}  # type: ignore[misc]


def primary_key(uri: str, schema: str, table: str) -> list[str]:
    rows = sql(
        uri,
        "SELECT a.attname FROM pg_constraint con "
        "JOIN pg_class t ON t.oid = con.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace "
        "CROSS JOIN LATERAL unnest(con.conkey) WITH ORDINALITY AS k(attnum, ord) "
        "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum "
        "WHERE con.contype = 'p' AND n.nspname = %s AND t.relname = %s ORDER BY k.ord",
        (schema, table),
    )
    return [r[0] for r in rows]


def indexes(uri: str, schema: str, table: str) -> dict[str, str]:
    """index name -> pg_get_indexdef."""
    rows = sql(
        uri, "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = %s", (schema, table)
    )
    return dict(rows)  # type: ignore[arg-type]


def write_config(
    tmp_path: Path, driver: str, queues: Iterable[str], name: str = "queuelake.yaml", **transport: Any
) -> Path:
    """A config file whose connection comes from ${QUEUELAKE_CONNECTION}, as a deployment's would."""
    data = {
        "transport": {
            "dialect": "postgresql",
            "driver": driver,
            "connection": "${QUEUELAKE_CONNECTION}",
            **transport,
        },
        "drain": {"queues": list(queues)},
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


class CliResult:
    def __init__(self, code: int, stdout: str, stderr: str) -> None:
        self.code, self.stdout, self.stderr = code, stdout, stderr
        # the summary is stdout's last line; with --print-sql stdout is only SQL and it is stderr's
        self.summary: dict[str, Any] = _last_json(stdout) or _last_json(stderr) or {}

    def __repr__(self) -> str:
        return f"CliResult(code={self.code}, stdout={self.stdout[-2000:]!r}, stderr={self.stderr[-2000:]!r})"


def _last_json(text: str) -> dict[str, Any] | None:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    try:
        value = json.loads(lines[-1])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def run_cli(args: Sequence[str], connection: str | None, timeout: float = 60) -> CliResult:
    """``python -m queuelake ARGS`` with QUEUELAKE_CONNECTION set, in a process of its own."""
    env = dict(os.environ)
    env.pop("QUEUELAKE_CONNECTION", None)
    if connection is not None:
        env["QUEUELAKE_CONNECTION"] = connection
    env["PYTHONPATH"] = str(REPO / "lib") + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "queuelake", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


# A "name" in a message: a run of word characters, joined by single dots or hyphens
# (postgresql, 127.0.0.1, typo_key.yaml, transport.dialect, s3cr3t-Pa55).
_NAMES = re.compile(r"\w+(?:[.-]\w+)*")
# what substring replacement does to the words around a secret: postgres in postgresql -> ***ql
# (an escape before the mark, a repr's \n, is not a word)
_CUT_WORD = re.compile(r"(?<!\\)\w\*\*\*|\*\*\*\w")


def shows_secret(text: str, secret: str) -> bool:
    """Whether ``text`` shows ``secret``: as one of its names (for a secret that is itself a name,
    such as "postgres" or "a": inside a longer name, as in "postgresql", it is not shown), else
    anywhere. Redaction must make this false for every message a user can see."""
    if _NAMES.fullmatch(secret):
        return secret in _NAMES.findall(text)
    return secret in text


def cut_words(text: str) -> list[str]:
    """The places where a redaction mark is glued to a word: the mark of a secret replaced inside
    a word it is only a part of."""
    return _CUT_WORD.findall(text)

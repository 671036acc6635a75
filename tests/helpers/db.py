"""The queue database as the tests see it, beside the library: a connection string for either driver, one
statement in autocommit through psycopg, and what ``install`` created (the catalogue's schemas, tables,
columns, keys and indexes), to compare."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from queuelake.transport.embedded import odbc_from_uri


def connection_string(uri: str, driver: str) -> str:
    """``uri`` (a libpq URI) as ``driver`` takes it: itself for psycopg, an ODBC string for pyodbc."""
    return uri if driver == "psycopg" else odbc_from_uri(uri)


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

"""Schema checks of existing queue tables, as the transport warns about them at start-up."""

from __future__ import annotations

from queuelake.errors import TransportError
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef


def table_exists(conn: Connection, ref: TableRef) -> bool:
    rows = conn.run("table_exists", ref.identifiers(), ref.params(), what=ref.canonical)
    return bool(rows and rows[0][0])


def require_table(conn: Connection, ref: TableRef) -> None:
    if not table_exists(conn, ref):
        conn.rollback()
        raise TransportError(
            f"queue table {ref.canonical} does not exist: its endpoint creates it, or `queuelake install` "
            "does once the queue is in drain.queues (a PostgreSQL address splits schema and table at its "
            'first dot: for a table named Sales.Test write \'"public"."Sales.Test"\')'
        )


def warnings(conn: Connection, ref: TableRef) -> list[str]:
    """Human-readable warnings: missing Expires or RowVersion index, headers column type."""
    out: list[str] = []
    params = ref.params()
    if not conn.run("check_expires_index", ref.identifiers(), params, what=ref.canonical)[0][0]:
        out.append(f"{ref.canonical}: no index on the expires column; purging expired messages scans the table")
    if not conn.run("check_rowversion_index", ref.identifiers(), params, what=ref.canonical)[0][0]:
        column = conn.rules.sequence_column
        out.append(f"{ref.canonical}: no index on {column}; every receive scans the table")
    rows = conn.run("check_headers_type", ref.identifiers(), params, what=ref.canonical)
    kind = str(rows[0][0]).lower() if rows and rows[0][0] is not None else ""
    expected = conn.rules.headers_type
    if kind and kind != expected:
        out.append(
            f"{ref.canonical}: headers column is {kind}, expected {expected}; large or non-Latin headers may be lost"
        )
    return out


def delivery_problem(conn: Connection, ref: TableRef, delayed: bool = False) -> str | None:
    """Why messages cannot be inserted into this table (missing, or not a queue / delayed table), or
    None. Reads the catalog only; never commits or rolls back (it runs inside a publish batch)."""
    rows = conn.run("table_columns", ref.identifiers(), ref.params(), what=ref.canonical)
    have = {str(r[0]).lower() for r in rows}
    kind = "delayed-delivery table" if delayed else "queue table"
    if not have:
        return f"{kind} {ref.canonical} does not exist"
    missing = (conn.rules.required_delayed_columns if delayed else conn.rules.required_columns) - have
    if missing:
        return f"{ref.canonical} is not a {kind}: no column(s) {', '.join(sorted(missing))}"
    return None

"""Schema checks of existing queue tables, as the transport warns about them at start-up."""

from __future__ import annotations

from queuelake.errors import TransportError
from queuelake.transport.db import Connection
from queuelake.transport.tables import TableRef


def table_exists(conn: Connection, ref: TableRef) -> bool:
    rows = conn.run("table_exists", ref.identifiers(), ref.params(), what=ref.canonical)
    return bool(rows and rows[0][0])


def require_table(conn: Connection, ref: TableRef) -> None:
    if not table_exists(conn, ref):
        conn.rollback()
        raise TransportError(f"queue table {ref.canonical} does not exist (run `queuelake install`)")


def warnings(conn: Connection, ref: TableRef) -> list[str]:
    """Human-readable warnings: missing Expires or RowVersion index, headers column type."""
    out: list[str] = []
    params = ref.params()
    if not conn.run("check_expires_index", ref.identifiers(), params, what=ref.canonical)[0][0]:
        out.append(f"{ref.canonical}: no index on the expires column; purging expired messages scans the table")
    if not conn.run("check_rowversion_index", ref.identifiers(), params, what=ref.canonical)[0][0]:
        column = "RowVersion" if conn.dialect == "sqlserver" else "seq"
        out.append(f"{ref.canonical}: no index on {column}; every receive scans the table")
    rows = conn.run("check_headers_type", ref.identifiers(), params, what=ref.canonical)
    kind = str(rows[0][0]).lower() if rows and rows[0][0] is not None else ""
    expected = "nvarchar(max)" if conn.dialect == "sqlserver" else "text"
    if kind and kind != expected:
        out.append(
            f"{ref.canonical}: headers column is {kind}, expected {expected}; large or non-Latin headers may be lost"
        )
    return out


# the columns a sender writes (and the transport reads), per dialect and kind of table
_REQUIRED_COLUMNS = {
    ("postgresql", False): {"id", "expires", "headers", "body", "seq"},
    ("postgresql", True): {"id", "headers", "body", "due"},
    ("sqlserver", False): {"id", "correlationid", "replytoaddress", "expires", "headers", "body", "rowversion"},
    ("sqlserver", True): {"headers", "body", "due", "rowversion"},
}


def delivery_problem(conn: Connection, ref: TableRef, delayed: bool = False) -> str | None:
    """Why messages cannot be inserted into this table (missing, or not a queue / delayed table), or
    None. Reads the catalog only; never commits or rolls back (it runs inside a publish batch)."""
    rows = conn.run("table_columns", ref.identifiers(), ref.params(), what=ref.canonical)
    have = {str(r[0]).lower() for r in rows}
    kind = "delayed-delivery table" if delayed else "queue table"
    if not have:
        return f"{kind} {ref.canonical} does not exist"
    missing = _REQUIRED_COLUMNS[(conn.dialect, delayed)] - have
    if missing:
        return f"{ref.canonical} is not a {kind}: no column(s) {', '.join(sorted(missing))}"
    return None

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
    """Why messages cannot be inserted into this table, or None: it is missing, not a queue / delayed
    table, has a column an insert must fill that a send does not write, or this login may not insert
    into it. Reads the catalog only; never commits or rolls back (it runs inside a publish batch).

    Why the last two: such a table refuses every copy, and its refusal failed the whole batch, every
    run, so one subscriber whose table another team changed (or never granted INSERT on) stopped the
    delivery to every other subscriber (found by a review). A table with a trigger that may fill such a
    column is left to the send, as are refusals the catalog cannot tell (a trigger that raises, a CHECK
    constraint): publish takes a table that refuses its copies out of the run (``errors.RowsRefused``)."""
    what = ref.canonical
    rows = conn.run("table_columns", ref.identifiers(), ref.params(), what=what)
    have = {str(r[0]) for r in rows}  # as the server compares them (``table_columns``: per dialect)
    kind = "delayed-delivery table" if delayed else "queue table"
    if not have:
        return f"{kind} {what} does not exist"
    written = conn.rules.required_delayed_columns if delayed else conn.rules.required_columns
    missing = written - have
    if missing:
        return f"{what} is not a {kind}: no column(s) {', '.join(sorted(missing))}"
    sendable = conn.rules.sendable_headers_types
    if sendable:  # a jsonb headers column refused the binary COPY of every batch (a review)
        types = conn.run("check_headers_type", ref.identifiers(), ref.params(), what=what)
        headers_type = str(types[0][0]).lower() if types and types[0][0] is not None else ""
        if headers_type and headers_type not in sendable:
            return f"{kind} {what} has a headers column of type {headers_type}; a send writes {conn.rules.headers_type}"
    if conn.rules.legacy_recoverable_column and not delayed:
        written = written | {"recoverable"}  # the SQL Server transport's, written when the table has it
    needing = conn.run("columns_needing_values", ref.identifiers(), ref.params(), what=what)
    # the sequence column is the server's to fill (a serial); one that lost its default needs a value too
    unfilled = {str(r[0]).lower() for r in needing} - (written - {conn.rules.sequence_column.lower()})
    if unfilled:
        columns = ", ".join(sorted(unfilled))
        return f"{kind} {what} has NOT NULL column(s) without a default that a send does not write: {columns}"
    allowed = conn.run("can_insert", ref.identifiers(), ref.params(), what=what)
    if allowed and allowed[0][0] is not None and not allowed[0][0]:
        return f"this login may not insert into {kind} {what} (no INSERT permission)"
    return None

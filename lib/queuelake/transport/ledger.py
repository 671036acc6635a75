"""The publish ledger: one row per batch sent, committed in the transaction of the batch's inserts.

Why a module: publish and replay both keep their exactly-once promise through this table (a batch is
sent iff its ledger row exists), so the statements and their parameters live in one place. Functions
here never commit: the transaction belongs to the caller, whose inserts must commit with the row.
"""

from __future__ import annotations

from dataclasses import dataclass

from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef


@dataclass(frozen=True)
class LedgerRow:
    output_table: str
    batch_key: str
    rows_sent: int
    copies_sent: int = 0  # every subscriber's copy of the rows (a Publish row's fan-out)


def batch_keys(conn: Connection, ledger: TableRef, pipeline: str, output_table: str) -> list[str]:
    """The keys of the batches a pipeline has sent from one output table."""
    rows = conn.run(
        "ledger_batches",
        ledger.identifiers(),
        {"pipeline": pipeline, "output_table": output_table},
        what=ledger.canonical,
    )
    return [str(r[0]) for r in rows]


def rows_of_pipeline(conn: Connection, ledger: TableRef, pipeline: str) -> list[LedgerRow]:
    """Every batch a pipeline has sent, from any output table."""
    rows = conn.run("ledger_of_pipeline", ledger.identifiers(), {"pipeline": pipeline}, what=ledger.canonical)
    return [LedgerRow(str(out), str(key), int(n), int(copies or 0)) for out, key, n, copies in rows]


def record(
    conn: Connection,
    ledger: TableRef,
    pipeline: str,
    output_table: str,
    batch_key: str,
    rows_sent: int,
    copies_sent: int,
) -> None:
    """Record a batch as sent; a second record of the same key fails on the ledger's key."""
    conn.run(
        "ledger_insert",
        ledger.identifiers(),
        {
            "pipeline": pipeline,
            "output_table": output_table,
            "batch_key": batch_key,
            "rows_sent": rows_sent,
            "copies_sent": copies_sent,
        },
        what=ledger.canonical,
    )

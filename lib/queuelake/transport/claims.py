"""The drain's durable claims: one small row per batch, written in the DELETE's transaction.

Why: a row may leave a queue only in a transaction that also records, durably, where its content is.
Copying whole rows into a claim table would halve the database side (design section 3); instead the
batch's Parquet files are staged in the journal's folder first and the claim names them. After the
DB commit the rows are gone from the queue and their content is in the lake; the Delta commit that
makes them visible can then be retried by anyone holding the claim, as often as needed.

Functions here never commit: the transaction belongs to the drain.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from queuelake.config_sections import TransportConfig
from queuelake.errors import TransportError
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef, bridge_ref


@dataclass(frozen=True)
class Claim:
    app_id: str  # the drain worker's Delta application id
    version: int  # its application transaction version for this batch
    queue: str  # canonical address
    lake_table: str
    row_count: int
    staged: str  # JSON from the lake engine: the staged files and their statistics


@dataclass(frozen=True)
class QueueClaims:
    queue: str
    claims: int
    rows: int
    oldest: dt.datetime | None


def claims_ref(transport: TransportConfig) -> TableRef:
    return bridge_ref(transport.claims_table, transport)


def insert(conn: Connection, table: TableRef, claim: Claim) -> None:
    conn.run(
        "claim_insert",
        table.identifiers(),
        {
            "app_id": claim.app_id,
            "version": claim.version,
            "queue": claim.queue,
            "lake_table": claim.lake_table,
            "row_count": claim.row_count,
            "staged": claim.staged,
        },
        what=table.canonical,
    )


def delete(conn: Connection, table: TableRef, app_id: str, version: int) -> None:
    conn.run("claim_delete", table.identifiers(), {"app_id": app_id, "version": version}, what=table.canonical)


def delete_many(conn: Connection, table: TableRef, done: Sequence[tuple[str, int]]) -> None:
    """Clear many claims (app id, version) at once: a group commit's, in one round trip where the
    driver batches (psycopg pipelines an executemany) instead of one per claim."""
    (stmt,) = conn.statements("claim_delete", table.identifiers())
    conn.executemany(stmt, [{"app_id": app_id, "version": version} for app_id, version in done], what=table.canonical)


def of_queue(conn: Connection, table: TableRef, queue: str) -> list[Claim]:
    try:
        rows = conn.run("claims_of_queue", table.identifiers(), {"queue": queue}, what=table.canonical)
    except TransportError as exc:
        if "does not exist" in str(exc):
            raise TransportError(f"{exc} (run `queuelake install` to create the drain claims table)") from None
        raise
    return [Claim(str(a), int(v), queue, str(t), int(n), str(s)) for a, v, t, n, s in rows]


def every_claim(conn: Connection, table: TableRef) -> list[Claim]:
    """Every unresolved claim, each app id's in version order, read in one statement: a claim seen at
    version N means the claim at N-1 was seen too or already cleared (a worker claims in order)."""
    rows = conn.run("claims_all", table.identifiers(), {}, what=table.canonical)
    return [Claim(str(a), int(v), str(q), str(t), int(n), str(s)) for q, a, v, t, n, s in rows]


def summary(conn: Connection, table: TableRef) -> list[QueueClaims]:
    rows = conn.run("claims_summary", table.identifiers(), {}, what=table.canonical)
    out = []
    for queue, count, total, oldest in rows:
        if isinstance(oldest, dt.datetime) and oldest.tzinfo is None:
            oldest = oldest.replace(tzinfo=dt.timezone.utc)
        out.append(QueueClaims(str(queue), int(count), int(total or 0), oldest))
    return out

"""The SubscriptionRouting table: subscribe (an upsert), unsubscribe, find subscribers.

Addresses read back from this table are untrusted: callers parse them with ``queue_ref`` before
they go anywhere near SQL.
"""

from __future__ import annotations

from collections.abc import Iterable

from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef


def subscribe(conn: Connection, table: TableRef, queue_address: str, endpoint: str, topic: str) -> None:
    conn.run(
        "subscribe",
        table.identifiers(),
        {"queue_address": queue_address, "endpoint": endpoint, "topic": topic},
        what=table.canonical,
    )


def unsubscribe(conn: Connection, table: TableRef, endpoint: str, topic: str) -> None:
    conn.run("unsubscribe", table.identifiers(), {"endpoint": endpoint, "topic": topic}, what=table.canonical)


def find_subscribers(conn: Connection, table: TableRef, topics: Iterable[str]) -> list[str]:
    """Each distinct address subscribed to any of the topics (an event's type hierarchy), once,
    in first-seen order so that fan-out is deterministic."""
    seen: dict[str, None] = {}
    for topic in dict.fromkeys(topics):
        rows = conn.run("find_subscribers", table.identifiers(), {"topic": topic}, what=table.canonical)
        for (address,) in sorted(rows):
            seen.setdefault(address, None)
    return list(seen)


def all_subscribers(conn: Connection, table: TableRef) -> list[str]:
    """Every distinct subscriber address, sorted (status shows each queue events fan out to)."""
    rows = conn.run("subscriber_addresses", table.identifiers(), {}, what=table.canonical)
    return sorted(str(address) for (address,) in rows if address is not None)

"""The SubscriptionRouting table against a real PostgreSQL, through both drivers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from queuelake.transport import installer, subscriptions
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef

from tests.helpers.db import sql
from tests.helpers.transport import connect, make_config

ORDER_ACCEPTED = "Sales.Messages.OrderAccepted"
IORDER_EVENT = "Sales.Messages.IOrderEvent"
IEVENT = "Shared.IEvent"
HIERARCHY = [ORDER_ACCEPTED, IORDER_EVENT, IEVENT]


@pytest.fixture
def routing(fresh_pg_uri: str, pg_driver: str) -> Iterator[tuple[Connection, TableRef]]:
    cfg = make_config(fresh_pg_uri, pg_driver, [])
    plan = installer.plan(cfg)
    with connect(fresh_pg_uri, pg_driver) as conn:
        installer.install(conn, plan)
        assert plan.subscription is not None
        yield conn, plan.subscription


def _subscribe(conn: Connection, table: TableRef, rows: list[tuple[str, str, str]]) -> None:
    with conn.transaction():
        for address, endpoint, topic in rows:
            subscriptions.subscribe(conn, table, address, endpoint, topic)


def _find(conn: Connection, table: TableRef, topics: list[str]) -> list[str]:
    with conn.transaction():
        return subscriptions.find_subscribers(conn, table, topics)


def test_find_subscribers_over_a_type_hierarchy(routing: tuple[Connection, TableRef]) -> None:
    conn, table = routing
    _subscribe(
        conn,
        table,
        [
            ('"public"."Billing"', "Billing", ORDER_ACCEPTED),
            ('"public"."Billing"', "Billing", IORDER_EVENT),  # same queue via two types: one copy
            ('"public"."Shipping"', "Shipping", IEVENT),
            ('"public"."Audit"', "Audit", IORDER_EVENT),
            ('"public"."Audit"', "AuditMirror", IEVENT),  # two endpoints, one queue: one copy
            ('"public"."Unrelated"', "Unrelated", "Other.Event"),
            ('"ünï"."cödé 😀"', "Unicode", ORDER_ACCEPTED),
        ],
    )
    found = _find(conn, table, HIERARCHY)
    assert sorted(found) == sorted(['"public"."Billing"', '"public"."Shipping"', '"public"."Audit"', '"ünï"."cödé 😀"'])
    assert len(found) == len(set(found))
    assert _find(conn, table, HIERARCHY) == found, "fan-out order is deterministic"
    assert _find(conn, table, [IEVENT, IEVENT]) == sorted(['"public"."Audit"', '"public"."Shipping"'])
    assert _find(conn, table, ["No.Such.Type"]) == []
    assert _find(conn, table, []) == []


def test_subscribe_is_an_upsert(routing: tuple[Connection, TableRef], fresh_pg_uri: str) -> None:
    conn, table = routing
    _subscribe(conn, table, [('"public"."Billing"', "Billing", ORDER_ACCEPTED)])
    _subscribe(conn, table, [('"public"."Billing"', "Billing", ORDER_ACCEPTED)])  # again: no error, no copy
    assert _find(conn, table, [ORDER_ACCEPTED]) == ['"public"."Billing"']
    # the endpoint moved to a new queue address: the subscription moves with it
    _subscribe(conn, table, [('"billing"."Billing-v2"', "Billing", ORDER_ACCEPTED)])
    assert _find(conn, table, [ORDER_ACCEPTED]) == ['"billing"."Billing-v2"']
    assert sql(fresh_pg_uri, 'SELECT queueaddress, endpoint, topic FROM "SubscriptionRouting"') == [
        ('"billing"."Billing-v2"', "Billing", ORDER_ACCEPTED)
    ]


def test_unsubscribe_removes(routing: tuple[Connection, TableRef]) -> None:
    conn, table = routing
    _subscribe(
        conn,
        table,
        [
            ('"public"."Billing"', "Billing", ORDER_ACCEPTED),
            ('"public"."Billing"', "Billing", IEVENT),
            ('"public"."Shipping"', "Shipping", ORDER_ACCEPTED),
        ],
    )
    with conn.transaction():
        subscriptions.unsubscribe(conn, table, "Billing", ORDER_ACCEPTED)
        subscriptions.unsubscribe(conn, table, "Nobody", ORDER_ACCEPTED)  # absent: not an error
    assert _find(conn, table, [ORDER_ACCEPTED]) == ['"public"."Shipping"']
    assert _find(conn, table, HIERARCHY) == ['"public"."Shipping"', '"public"."Billing"']
    with conn.transaction():
        subscriptions.unsubscribe(conn, table, "Shipping", ORDER_ACCEPTED)
        subscriptions.unsubscribe(conn, table, "Billing", IEVENT)
    assert _find(conn, table, HIERARCHY) == []


def test_subscriptions_roll_back_with_their_transaction(routing: tuple[Connection, TableRef]) -> None:
    conn, table = routing
    with pytest.raises(RuntimeError):
        with conn.transaction():
            subscriptions.subscribe(conn, table, '"public"."Billing"', "Billing", ORDER_ACCEPTED)
            raise RuntimeError("boom")
    assert _find(conn, table, [ORDER_ACCEPTED]) == []

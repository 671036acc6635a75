"""`queuelake status` against a real PostgreSQL, through both drivers."""

from __future__ import annotations

import datetime as dt

from queuelake.nsb import headers as hdr
from queuelake.nsb.times import format_time
from queuelake.transport import installer, queues
from queuelake.transport.queues import OutgoingMessage

from tests.helpers.cli import run_cli
from tests.helpers.db import connection_string, sql
from tests.helpers.transport import connect, make_config, write_config


def test_status_reports_depth_age_and_schema_warnings(fresh_pg_uri: str, pg_driver: str, tmp_path) -> None:
    installed = ["Sales", "Billing", '"legacy"."Orders"']
    cfg = make_config(fresh_pg_uri, pg_driver, installed)
    plan = installer.plan(cfg)
    sales = plan.queues[0]
    with connect(fresh_pg_uri, pg_driver) as conn:
        installer.install(conn, plan)
        with conn.transaction():
            now = queues.db_utc_now(conn)
        sent = format_time(now - dt.timedelta(hours=1))
        oldest = hdr.encode({hdr.TIME_SENT: sent, hdr.MESSAGE_INTENT: "not-an-intent"})
        newer = hdr.encode({hdr.TIME_SENT: format_time(now)})
        with conn.transaction():
            queues.send(
                conn, sales, [OutgoingMessage(oldest, b"1"), OutgoingMessage(newer, b"2"), OutgoingMessage("", None)]
            )
    sql(fresh_pg_uri, 'DROP INDEX "Sales_Expires"')
    sql(fresh_pg_uri, 'ALTER TABLE "legacy"."Orders" ALTER COLUMN headers TYPE varchar(4000)')
    sql(fresh_pg_uri, 'ALTER TABLE "legacy"."Orders" DROP CONSTRAINT "Orders_seq_key"')

    path = write_config(tmp_path, pg_driver, [*installed, "Missing"])
    result = run_cli(["status", "-c", str(path)], connection_string(fresh_pg_uri, pg_driver))
    # a configured queue that does not exist: not "ok" (issue 59), the table named, everything else listed
    assert result.code == 1, result
    assert result.summary["command"] == "status" and result.summary["status"] == "failed"
    assert result.summary["missing_tables"] == ['"public"."Missing"'] and result.summary["error_kind"] == "transport"
    assert '"public"."Missing"' in result.summary["error"] and "queuelake install" in result.summary["error"]
    by_queue = {q["queue"]: q for q in result.summary["queues"]}
    assert list(by_queue) == ['"public"."Sales"', '"public"."Billing"', '"legacy"."Orders"', '"public"."Missing"']

    s = by_queue['"public"."Sales"']
    assert s["exists"] is True and s["depth"] == 3
    assert 3000 < s["oldest_age_seconds"] < 4200  # an hour by the database clock, give or take
    assert len(s["warnings"]) == 1 and "expires" in s["warnings"][0] and '"public"."Sales"' in s["warnings"][0]
    assert "expires" in result.stderr  # logged too

    b = by_queue['"public"."Billing"']
    assert (b["exists"], b["depth"], b["warnings"], b["oldest_age_seconds"]) == (True, 0, [], None)

    legacy = by_queue['"legacy"."Orders"']
    assert len(legacy["warnings"]) == 2, legacy
    assert "no index on seq" in legacy["warnings"][0]
    assert "headers column is character varying" in legacy["warnings"][1]

    missing = by_queue['"public"."Missing"']
    assert missing["exists"] is False and "does not exist" in missing["warnings"][0]

    # install puts the dropped index back; status is then quiet about it
    assert run_cli(["install", "-c", str(path)], connection_string(fresh_pg_uri, pg_driver)).code == 0
    again = run_cli(["status", "-c", str(path)], connection_string(fresh_pg_uri, pg_driver))
    assert {q["queue"]: q["warnings"] for q in again.summary["queues"]}['"public"."Sales"'] == []
    assert again.code == 0 and again.summary["status"] == "ok" and "missing_tables" not in again.summary, again


def test_status_lists_unresolved_drain_claims(fresh_pg_uri: str, pg_driver: str, tmp_path) -> None:
    from queuelake.transport import claims

    cfg = make_config(fresh_pg_uri, pg_driver, ["Sales"])
    with connect(fresh_pg_uri, pg_driver) as conn:
        installer.install(conn, installer.plan(cfg))
        table = claims.claims_ref(cfg.transport)
        with conn.transaction():
            for version in (1, 2):
                claims.insert(
                    conn, table, claims.Claim("queuelake.drain/x/0", version, '"public"."Sales"', "messages", 10, "{}")
                )
    path = write_config(tmp_path, pg_driver, ["Sales"])
    result = run_cli(["status", "-c", str(path)], connection_string(fresh_pg_uri, pg_driver))
    assert result.code == 0, result
    (pending,) = result.summary["unresolved_claims"]
    assert pending["queue"] == '"public"."Sales"' and pending["claims"] == 2 and pending["rows"] == 20
    assert pending["oldest"] is not None
    assert "unresolved drain claim" in result.stderr


def test_status_covers_every_queue_the_config_touches(fresh_pg_uri: str, tmp_path) -> None:
    """Drained queues, the transforms' Send destinations, the delayed stores, and every subscriber in
    SubscriptionRouting, each once with its role and depth (status listed the drained queues only,
    not the queues holding what publish sent)."""
    import yaml
    from queuelake.config import from_dict
    from queuelake.transport import subscriptions
    from queuelake.transport.table_refs import bridge_ref, queue_ref

    data = {
        "transport": {"connection": "${QUEUELAKE_CONNECTION}", "delayed_endpoints": ["Billing"]},
        "drain": {"queues": ["Sales"]},
        "transforms": [
            {"name": "t", "function": "queuelake.commands.demo.orders:customer_totals", "output": "o"}
            | {"destinations": ["Billing"]}
        ],
    }
    path = tmp_path / "touched.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    cfg = from_dict({**data, "transport": {**data["transport"], "connection": fresh_pg_uri}}, env={})
    with connect(fresh_pg_uri, "psycopg") as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=["Shipping"]))
        routing = bridge_ref("SubscriptionRouting", cfg.transport)
        subscriptions.subscribe(conn, routing, "Shipping", "Shipping", "Sales.OrderPlaced")
        subscriptions.subscribe(conn, routing, "Billing", "Billing", "Sales.OrderPlaced")  # listed once
        subscriptions.subscribe(conn, routing, '"un"terminated', "Rogue", "Sales.OrderPlaced")
        queues.send(conn, queue_ref("Shipping", cfg.transport), [OutgoingMessage("{}", b"1")] * 2)
        queues.store_delayed(conn, queue_ref("Billing", cfg.transport).delayed(), [("{}", b"2", 60_000)])
        conn.commit()
    # a subscriber's table another team gave a NOT NULL column a send does not write: said (a review)
    sql(fresh_pg_uri, 'ALTER TABLE "Shipping" ADD COLUMN extra integer NOT NULL DEFAULT 0')
    sql(fresh_pg_uri, 'ALTER TABLE "Shipping" ALTER COLUMN extra DROP DEFAULT')
    result = run_cli(["status", "-c", str(path)], fresh_pg_uri)
    assert result.code == 0, result
    warned = {q["queue"]: q["warnings"] for q in result.summary["queues"]}
    assert warned['"public"."Billing"'] == [] and len(warned['"public"."Shipping"']) == 1, warned
    assert (
        "extra" in warned['"public"."Shipping"'][0] and "publish and replay skip it" in warned['"public"."Shipping"'][0]
    )
    listed = [(q["queue"], q["role"], q["depth"]) for q in result.summary["queues"]]
    assert listed == [
        ('"public"."Sales"', "drained", 0),
        ('"public"."Billing"', "destination", 0),
        ('"public"."Billing.Delayed"', "delayed", 1),
        ('"public"."Shipping"', "subscriber", 2),
    ], listed
    assert "is not a queue address" in result.stderr  # the rogue row is named, the rest listed


def test_one_table_another_program_altered_is_named_and_the_others_still_listed(
    fresh_pg_uri: str, pg_driver: str, tmp_path
) -> None:
    """One of many queue tables had its ``headers`` column renamed: ``status`` failed as a whole, no
    queue listed, where ``drain`` and ``where`` failed that queue alone (a review)."""
    installed = ["Sales", "Billing", "Shipping"]
    cfg = make_config(fresh_pg_uri, pg_driver, installed)
    with connect(fresh_pg_uri, pg_driver) as conn:
        installer.install(conn, installer.plan(cfg))
    sql(fresh_pg_uri, 'ALTER TABLE "Billing" RENAME COLUMN headers TO "Headers"')

    path = write_config(tmp_path, pg_driver, installed)
    result = run_cli(["status", "-c", str(path)], connection_string(fresh_pg_uri, pg_driver))

    assert result.code == 1 and result.summary["status"] == "failed", result
    assert result.summary["unreadable_tables"] == ['"public"."Billing"'], result.summary
    by_queue = {q["queue"]: q for q in result.summary["queues"]}
    assert list(by_queue) == ['"public"."Sales"', '"public"."Billing"', '"public"."Shipping"']
    billing = by_queue['"public"."Billing"']
    assert billing["depth"] is None and "headers" in billing["error"], billing
    assert any("cannot be read" in w for w in billing["warnings"]), billing
    assert by_queue['"public"."Shipping"']["depth"] == 0 and by_queue['"public"."Shipping"']["warnings"] == []


def test_a_table_another_program_holds_locked_is_named_not_waited_on(fresh_pg_uri: str, tmp_path) -> None:
    """A migration held one queue table locked: ``status`` waited with it, as long as the lock lasted (a
    review). It waits at most 5 s for a table lock and names the table."""
    import threading

    import psycopg

    installed = ["Sales", "Billing"]
    cfg = make_config(fresh_pg_uri, "psycopg", installed)
    with connect(fresh_pg_uri, "psycopg") as conn:
        installer.install(conn, installer.plan(cfg))
    path = write_config(tmp_path, "psycopg", installed)
    with psycopg.connect(fresh_pg_uri) as holder:
        holder.execute('LOCK TABLE "public"."Billing" IN ACCESS EXCLUSIVE MODE')
        release = threading.Timer(60, holder.rollback)  # what status waited for before
        release.start()
        try:
            result = run_cli(["status", "-c", str(path)], connection_string(fresh_pg_uri, "psycopg"))
        finally:
            release.cancel()
            holder.rollback()
    assert result.code == 1 and result.summary["unreadable_tables"] == ['"public"."Billing"'], result.summary
    assert "lock" in result.summary["queues"][1]["error"], result.summary
    assert result.summary["queues"][0]["depth"] == 0


def test_a_connection_variable_set_but_empty_is_said_as_such(tmp_path) -> None:
    """``QUEUELAKE_CONNECTION=""`` (a deployment's secret not filled in): the error told to set the variable
    in the config, where it was (a review). It says the variable is set but empty."""
    path = write_config(tmp_path, "psycopg", ["Sales"])
    result = run_cli(["status", "-c", str(path)], "")
    assert result.code == 1 and result.summary.get("error_kind") == "transport", result
    assert "environment variable QUEUELAKE_CONNECTION is set but empty" in result.summary["error"], result

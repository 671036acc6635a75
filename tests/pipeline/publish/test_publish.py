"""Transform and publish against real PostgreSQL, Spark and Delta files."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from queuelake.commands.demo import orders, traffic
from queuelake.lake.engines import open_lake
from queuelake.lake.reading import read_table
from queuelake.nsb import headers as hdr
from queuelake.nsb.times import FIRST_INSTANT, LAST_INSTANT
from queuelake.nsb.timespan import MAX_TTBR_MS
from queuelake.pipeline.message_ids import message_id
from queuelake.pipeline.transform import transform
from queuelake.quality import outbound
from queuelake.transport import db
from queuelake.transport.table_refs import queue_ref

from tests.helpers.jvm import require_delta_jvm
from tests.helpers.publish import (
    BASE,
    CONCRETE,
    KILL_SCRIPT,
    OUTBOUND,
    config,
    drain_all,
    row,
    setup_db,
    subscribe,
    write_outbound,
)
from tests.helpers.stages import drain, publish
from tests.helpers.transport import make_config as transport_config


def _add_trigger(cfg, table: str, name: str, body: str, *, deferred: bool = False) -> None:
    """A plpgsql row trigger `name` on `table` running `body` before each insert (after it, checked at
    COMMIT, when `deferred`): how these tests make a subscriber's table refuse or misbehave."""
    kind, when, late = (
        ("CONSTRAINT TRIGGER", "AFTER INSERT", " DEFERRABLE INITIALLY DEFERRED")
        if deferred
        else ("TRIGGER", "BEFORE INSERT", "")
    )
    with db.connect(cfg.transport) as conn:
        conn.raw.execute(f"CREATE FUNCTION {name}_rows() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {body} END $$")
        conn.raw.execute(
            f'CREATE {kind} "{name}" {when} ON "public"."{table}"{late} FOR EACH ROW EXECUTE FUNCTION {name}_rows()'
        )
        conn.commit()


def test_round_trip_drain_transform_publish(
    fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(orders, "DISCOUNT_THRESHOLD", 500.0)
    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_customer_totals"], ["Sales"])
    setup_db(cfg, ["Billing", "Shipping", "Reporting"])
    subscribe(cfg, "Shipping", "Shipping", BASE)
    subscribe(cfg, '"public"."Reporting"', "Reporting", CONCRETE)
    events = list(traffic.order_events(300, seed=9))
    with db.connect(cfg.transport) as conn:
        traffic.seed(conn, queue_ref("Sales", cfg.transport), events)
    lake = open_lake(cfg.lake, spark)
    assert drain(cfg, lake)["landed"] == 300
    t = transform(cfg, spark, lake)
    assert t["status"] == "ok" and t["transforms"][0]["rows_in"] == 300, t
    again = transform(cfg, spark, lake)
    assert again["transforms"][0]["rows_out"] == 0, "a rerun must not repeat input"

    expected: dict[str, dict] = {}
    for m in events:
        body = orjson.loads(m.body)
        e = expected.setdefault(body["CustomerId"], {"Orders": 0, "Total": 0.0})
        e["Orders"] += 1
        e["Total"] += body["Total"]
    summary = publish(cfg, spark, lake)
    assert summary["status"] == "ok", summary
    n_customers = len(expected)
    n_discounts = sum(1 for e in expected.values() if round(e["Total"], 2) >= orders.DISCOUNT_THRESHOLD)
    assert 0 < n_discounts < n_customers
    assert summary["published"] == n_customers + n_discounts
    assert summary["copies"] == 2 * n_customers + n_discounts

    for queue in ("Shipping", "Reporting"):
        got = drain_all(cfg, queue)
        assert len(got) == n_customers
        for r in got:
            d = hdr.decode(r.headers, r.id)
            body = orjson.loads(r.body)
            e = expected[body["CustomerId"]]
            assert body["Orders"] == e["Orders"] and body["Total"] == pytest.approx(e["Total"], abs=0.01)
            assert d.message_intent == "Publish" and d.message_type == CONCRETE
            assert d.enclosed_message_types[1].startswith(BASE)
            assert d.content_type == "application/json" and d.originating_endpoint == "Lakehouse"
            assert d.time_sent is not None and d.originating_machine
            assert uuid.UUID(d.message_id).version == 5
    billing = drain_all(cfg, "Billing")
    assert len(billing) == n_discounts
    for r in billing:
        d = hdr.decode(r.headers, r.id)
        assert d.message_intent == "Send" and d.message_type == "Billing.Messages.Commands.ApplyLoyaltyDiscount"
        assert r.expires is not None and d.headers[hdr.TIME_TO_BE_RECEIVED] == "1.00:00:00"

    rerun = publish(cfg, spark, lake)
    assert rerun["published"] == 0 and rerun["copies"] == 0
    assert not drain_all(cfg, "Shipping")


@pytest.mark.parametrize("from_rows", [None, 1], ids=["driver", "executors"])
def test_fan_out_and_rejects(fresh_pg_uri: str, tmp_path: Path, spark, from_rows: int | None) -> None:
    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_test"], [], executors_from_rows=from_rows)
    subs = ["SubA", "SubB", "SubC", "SubD", "Billing"]
    setup_db(cfg, subs)
    for q in ("SubA", "SubB", "SubC"):
        subscribe(cfg, q, q, BASE)
    subscribe(cfg, "SubD", "SubD", CONCRETE)
    subscribe(cfg, "SubA", "SubA-second-endpoint", CONCRETE)  # same address twice: one copy
    lake = open_lake(cfg.lake, spark)
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    write_outbound(
        lake,
        "outbound_test",
        [
            row("event-1"),
            row("cmd-1", "Send", "Billing", "Billing.Messages.Commands.Charge, Billing.Messages", ttbr_ms=60_000),
            row("delayed-1", "Send", "Billing", "Billing.Messages.Commands.Remind, Billing.Messages", deliver_at=later),
            row("bad-send", "Send", None),
            row("bad-intent", "Reply"),
            row("bad-body", body=b""),
            row("dup"),
            row("dup"),
            row("bad-both", "Send", "Billing", ttbr_ms=1000, deliver_at=later),
            row(None),
        ],
    )
    summary = publish(cfg, spark, lake)
    out = summary["outputs"][0]
    assert out["status"] == "ok", summary
    assert out["rejected"] == 7 and out["published"] == 3
    copies = {q: drain_all(cfg, q) for q in subs}
    assert [len(copies[q]) for q in ("SubA", "SubB", "SubC", "SubD")] == [1, 1, 1, 1]
    assert len(copies["Billing"]) == 1
    with db.connect(cfg.transport) as conn:
        delayed = conn.raw.execute('SELECT headers, due FROM "public"."Billing.Delayed"').fetchall()
    assert len(delayed) == 1
    dh = orjson.loads(delayed[0][0])
    assert dh[hdr.FORWARD_DESTINATION] == '"public"."Billing"'
    assert abs((delayed[0][1] - later).total_seconds()) < 5
    rejected = read_table(str(tmp_path / "lake" / "outbound_test_rejected")).to_pylist()
    reasons = {r["key"]: r["reasons"] for r in rejected}
    assert "destination is required for Send" in reasons["bad-send"]
    assert "intent must be Send or Publish" in reasons["bad-intent"]
    assert "body is empty" in reasons["bad-body"]
    assert "key is not unique" in reasons["dup"]
    assert any("TTBR" in r for r in reasons["bad-both"])
    assert "key is null" in reasons[None]
    # ids: a fresh row id per copy, a deterministic MessageId per (pipeline, key, destination)
    ids = [hdr.decode_map(copies[q][0].headers)[hdr.MESSAGE_ID] for q in ("SubA", "SubB", "SubC", "SubD")]
    assert len(set(ids)) == 4
    assert ids[0] == message_id("Lakehouse/outbound_test", "event-1", '"public"."SubA"')


@pytest.mark.parametrize("from_rows", [None, 1], ids=["driver", "executors"])
def test_publish_batch_size_counts_every_subscribers_copy(
    fresh_pg_uri: str, tmp_path: Path, spark, from_rows: int | None
) -> None:
    """``publish.batch_size`` rows of an event with 300 subscribers made 1,500,000 copies in one
    transaction (a review): a round's rows per batch keep its messages, fan-out copies counted, within
    ``publish.batch_copies``. Here 3 subscribers and 7 copies at most: 2 rows (6 copies) per batch,
    recorded in the round's ledger keys (``@2``) so that a rerun cuts the same batches."""
    from tests.helpers.db import sql

    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_test"], [], executors_from_rows=from_rows, batch_copies=7)
    subs = ["SubA", "SubB", "SubC", "Billing"]
    setup_db(cfg, subs)
    for q in ("SubA", "SubB", "SubC"):
        subscribe(cfg, q, q, BASE)
    lake = open_lake(cfg.lake, spark)
    events = [row(f"event-{i}") for i in range(9)]
    sends = [row(f"cmd-{i}", "Send", "Billing", "Billing.Messages.Commands.Charge, Billing.Messages") for i in range(2)]
    write_outbound(lake, "outbound_test", events + sends)
    out = publish(cfg, spark, lake)["outputs"][0]
    assert out["status"] == "ok" and out["published"] == 11 and out["copies"] == 29, out
    rounds = "FROM queuelake_publish_ledger WHERE batch_key NOT LIKE 'table:%'"  # not the row naming the table
    batches = sql(fresh_pg_uri, f"SELECT batch_key, rows_sent, copies_sent {rounds}")
    assert batches and all(key.rsplit("@", 1)[1].rstrip("g") == "2" for key, _, _ in batches), batches
    assert max(copies for _, _, copies in batches) <= 7 and sum(r for _, r, _ in batches) == 11, batches
    assert [len(drain_all(cfg, q)) for q in subs] == [9, 9, 9, 2]
    # a round of Send rows: a copy each
    write_outbound(
        lake,
        "outbound_test",
        [row(f"more-{i}", "Send", "Billing", "Billing.Messages.Commands.Charge, Billing.Messages") for i in range(3)],
        version=2,
    )
    assert publish(cfg, spark, lake)["outputs"][0]["published"] == 3
    keys = [k for (k,) in sql(fresh_pg_uri, f"SELECT batch_key {rounds}")]
    assert any(k.rsplit("@", 1)[1].rstrip("g") == "7" for k in keys), keys


@pytest.mark.parametrize("from_rows", [None, 1], ids=["driver", "executors"])
def test_a_send_to_a_bad_destination_is_recorded_row_by_row(
    fresh_pg_uri: str, tmp_path: Path, spark, from_rows: int | None
) -> None:
    cfg = config(
        fresh_pg_uri, tmp_path / "lake", ["outbound_bad"], ["Sales"], batch_size=2, executors_from_rows=from_rows
    )
    setup_db(cfg, ["Good"])
    lake = open_lake(cfg.lake, spark)
    write_outbound(
        lake,
        "outbound_bad",
        [
            row("a", "Send", "Good", "X.Cmd"),
            row("b", "Send", "Missing", "X.Cmd"),  # batch 0: one good, one missing table
            row("c", "Send", "Good", "X.Cmd"),
            row("d", "Send", '"un"terminated', "X.Cmd"),  # batch 1: malformed address
            row("e", "Send", "Good", "X.Cmd"),  # batch 2: fine
            row("f", "Send", "public.Sales", "X.Cmd"),  # batch 2: a queue this deployment drains
        ],
    )
    summary = publish(cfg, spark, lake)
    out = summary["outputs"][0]
    assert out["status"] == "ok" and out["failed_batches"] == [], out
    assert out["undeliverable"] == 3 and out["published"] == 6
    got = drain_all(cfg, "Good")
    assert sorted(orjson.loads(r.body)["key"] for r in got) == ["a", "c", "e"]
    lost = {r["key"]: r for r in read_table(str(tmp_path / "lake" / "outbound_bad_undeliverable")).to_pylist()}
    assert set(lost) == {"b", "d", "f"}
    assert lost["b"]["destination"] == "Missing" and "does not exist" in lost["b"]["reason"]
    assert "drain.queues drains Sales" in lost["f"]["reason"] and "also_destinations" in lost["f"]["reason"]
    assert drain_all(cfg, "Sales") == [], "nothing sent to a drained queue"
    assert lost["d"]["destination"] == '"un"terminated' and lost["d"]["reason"]
    second = publish(cfg, spark, lake)  # nothing pending, nothing duplicated
    assert second["outputs"][0]["status"] == "ok" and second["published"] == 0
    assert drain_all(cfg, "Good") == []
    assert read_table(str(tmp_path / "lake" / "outbound_bad_undeliverable")).num_rows == 3
    runs = sorted(
        (r for r in read_table(str(tmp_path / "lake" / "runs")).to_pylist() if r["command"] == "publish"),
        key=lambda r: r["started_at"],
    )
    assert [(r["table"], r["published"], r["fanned_out"], r["undeliverable"]) for r in runs][0] == (
        "outbound_bad",
        6,
        3,
        3,
    )


@pytest.mark.parametrize("from_rows", [None, 1], ids=["driver", "executors"])
def test_hostile_subscriptions_never_block_the_valid_subscriber(
    fresh_pg_uri: str, tmp_path: Path, spark, from_rows: int | None
) -> None:
    """SubscriptionRouting is written by every endpoint; queuelake does not own it. One valid
    subscriber beside empty, malformed, hostile, over-long, non-queue and missing-table addresses, and
    a queue table with a NOT NULL column a send does not write (another team's change; its refusal
    failed every batch, and the valid subscriber got nothing: a review): the valid one gets each event
    exactly once, round after round; each bad one is recorded."""
    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_events"], [], batch_size=3, executors_from_rows=from_rows)
    setup_db(cfg, ["Valid", "Strict"])
    with db.connect(cfg.transport) as conn:
        conn.raw.execute('ALTER TABLE "public"."Strict" ADD COLUMN "Tenant" integer NOT NULL')
        conn.raw.execute('CREATE TABLE "public"."Tripwire" (x int)')
        conn.raw.execute('INSERT INTO "public"."Tripwire" VALUES (1), (2), (3)')
        conn.commit()
    bad = {
        "empty": "",
        "hostile": '"public"."X"; DROP TABLE "public"."Tripwire"; --',
        "malformed": '"un"terminated',
        "long": "L" * 190,
        "lookalike": "Valid ",
        "not a queue": "Tripwire",
        "missing": "NoSuchQueue",
        "refusing": "Strict",
    }
    subscribe(cfg, "Valid", "ValidEndpoint", BASE)
    for endpoint, address in bad.items():
        subscribe(cfg, address, f"Bad-{endpoint}", BASE)
    lake = open_lake(cfg.lake, spark)
    received: list[str] = []
    for version, keys in enumerate((["e1", "e2", "e3", "e4"], ["e5"], ["e6", "e7"]), start=1):
        write_outbound(lake, "outbound_events", [row(k) for k in keys], version=version)
        summary = publish(cfg, spark, lake)
        out = summary["outputs"][0]
        assert out["status"] == "ok", out
        assert out["undeliverable"] > 0
        received += [orjson.loads(r.body)["key"] for r in drain_all(cfg, "Valid")]
    assert sorted(received) == [f"e{i}" for i in range(1, 8)], "each event exactly once to the valid subscriber"
    assert publish(cfg, spark, lake)["published"] == 0 and drain_all(cfg, "Valid") == []
    lost = read_table(str(tmp_path / "lake" / "outbound_events_undeliverable")).to_pylist()
    by_address: dict[str, set[str]] = {}
    for r in lost:
        assert r["reason"], r
        by_address.setdefault(r["destination"], set()).add(r["key"])
    # every bad address is recorded for every event; the lookalike parses to the valid queue or is refused
    for endpoint, address in bad.items():
        if endpoint == "lookalike" and address not in by_address:
            continue
        assert by_address.get(address) == {f"e{i}" for i in range(1, 8)}, endpoint
    assert len(lost) == sum(len(v) for v in by_address.values())
    with db.connect(cfg.transport) as conn:
        assert conn.raw.execute('SELECT count(*) FROM "public"."Tripwire"').fetchone()[0] == 3
        tables = conn.raw.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'X'").fetchone()[0]
        assert tables == 0, "no DDL ran"


def test_a_subscriber_table_refusing_copies_never_blocks_the_others(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """A subscriber's table with a CHECK constraint or a trigger that raises refuses every copy, and the
    catalog cannot tell beforehand. Before, that failed every batch, on every run, and the valid
    subscriber got nothing. Now such a table's refused copies are recorded with the
    database's reason and the others get each event exactly once; a refusal a retry can cure (a
    serialization failure) still fails the batch, and a later run sends it once."""
    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_events"], [], batch_size=2)
    setup_db(cfg, ["Valid", "Checked", "Closed", "Busy", "Deferred"])
    with db.connect(cfg.transport) as conn:
        conn.raw.execute('ALTER TABLE "public"."Checked" ADD CONSTRAINT "no_bodies" CHECK (body IS NULL)')
        # refused only at COMMIT unless checked at once: it failed the whole publish (a review)
        conn.raw.execute('CREATE TABLE "public"."tenants" (id uuid PRIMARY KEY)')
        conn.raw.execute(
            'ALTER TABLE "public"."Deferred" ADD CONSTRAINT "known_id" FOREIGN KEY (id) '
            'REFERENCES "public"."tenants" (id) DEFERRABLE INITIALLY DEFERRED'
        )
        conn.commit()
    _add_trigger(cfg, "Closed", "closed", "RAISE EXCEPTION 'closed for maintenance';")
    for address in ("Valid", "Checked", "Closed", "Deferred"):
        subscribe(cfg, address, address, BASE)
    lake = open_lake(cfg.lake, spark)
    write_outbound(lake, "outbound_events", [row(f"e{i}") for i in range(1, 6)])
    out = publish(cfg, spark, lake)["outputs"][0]
    assert out["status"] == "ok" and out["failed_batches"] == [], out
    assert out["published"] == 5 and out["undeliverable"] == 15, out
    assert sorted(orjson.loads(r.body)["key"] for r in drain_all(cfg, "Valid")) == [f"e{i}" for i in range(1, 6)]
    lost = read_table(str(tmp_path / "lake" / "outbound_events_undeliverable")).to_pylist()
    assert sorted((r["destination"], r["key"]) for r in lost) == sorted(
        (address, f"e{i}") for address in ("Checked", "Closed", "Deferred") for i in range(1, 6)
    )
    reasons = {r["destination"]: r["reason"] for r in lost}
    assert "no_bodies" in reasons["Checked"] and "closed for maintenance" in reasons["Closed"], reasons
    assert "known_id" in reasons["Deferred"], reasons

    # a trigger raising what a retry can cure fails its batches; once it is gone, they go out once
    _add_trigger(cfg, "Busy", "busy", "RAISE EXCEPTION 'try later' USING ERRCODE = 'serialization_failure';")
    subscribe(cfg, "Busy", "Busy", BASE)
    write_outbound(lake, "outbound_events", [row("e6"), row("e7")], version=2)
    out = publish(cfg, spark, lake)["outputs"][0]
    assert out["status"] == "failed" and len(out["failed_batches"]) == 1 and "try later" in out["error"], out
    assert drain_all(cfg, "Valid") == [], "nothing of a failed batch is sent"
    with db.connect(cfg.transport) as conn:
        conn.raw.execute('DROP TRIGGER "busy" ON "public"."Busy"')
        conn.commit()
    out = publish(cfg, spark, lake)["outputs"][0]
    assert out["status"] == "ok" and out["published"] == 2, out
    assert sorted(orjson.loads(r.body)["key"] for r in drain_all(cfg, "Valid")) == ["e6", "e7"]
    assert sorted(orjson.loads(r.body)["key"] for r in drain_all(cfg, "Busy")) == ["e6", "e7"]
    assert read_table(str(tmp_path / "lake" / "outbound_events_undeliverable")).num_rows == 15 + 6


def test_a_subscriber_table_dropped_during_the_run_fails_only_its_own_copies(
    fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subscriber's table dropped after the run looked it up (an endpoint taken down mid-run): its COPY
    failed with "does not exist", and so did the whole run, every other subscriber getting nothing of the
    rest of the round (a review). Its copies are recorded as undeliverable from then on, saying why; the
    others get each event exactly once."""
    from queuelake.pipeline.publish import routing

    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_events"], [], batch_size=2)
    setup_db(cfg, ["Valid", "Leaving"])
    for address in ("Valid", "Leaving"):
        subscribe(cfg, address, address, BASE)
    built = routing.Router.build

    def build_then_drop(self, conn, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = built(self, conn, *args, **kwargs)
        if '"public"."Leaving"' in out[0].direct:  # looked up and routed to: now its endpoint takes it away
            with db.connect(cfg.transport) as other:
                other.raw.execute('DROP TABLE IF EXISTS "public"."Leaving"')
                other.commit()
        return out

    monkeypatch.setattr(routing.Router, "build", build_then_drop)
    lake = open_lake(cfg.lake, spark)
    write_outbound(lake, "outbound_events", [row(f"e{i}") for i in range(1, 6)])
    out = publish(cfg, spark, lake)["outputs"][0]
    assert out["status"] == "ok" and out["failed_batches"] == [], out
    assert out["published"] == 5 and out["undeliverable"] == 5, out
    assert sorted(orjson.loads(r.body)["key"] for r in drain_all(cfg, "Valid")) == [f"e{i}" for i in range(1, 6)]
    lost = read_table(str(tmp_path / "lake" / "outbound_events_undeliverable")).to_pylist()
    assert sorted(r["key"] for r in lost) == [f"e{i}" for i in range(1, 6)]
    assert all(r["destination"] == "Leaving" and "dropped during the run" in r["reason"] for r in lost), lost


@pytest.mark.parametrize(
    ("deferred", "driver"),
    [(False, "psycopg"), (True, "psycopg"), (False, "pyodbc")],
    ids=["trigger", "deferred-constraint-trigger", "trigger-pyodbc"],
)
def test_a_subscriber_refusing_some_copies_gets_all_the_others(
    fresh_pg_uri: str, tmp_path: Path, spark, deferred: bool, driver: str
) -> None:
    """A subscriber's table refusing a few copies (a trigger raising for some values; one deferred to
    COMMIT) was taken out of the whole run at its first refusal: with one row in ten refused it got
    none of the others, every run (a review). Now only the refused copies are recorded as
    undeliverable, each with the database's reason, and every other copy reaches it once, in order."""
    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_events"], [], batch_size=4)
    setup_db(cfg, ["Valid", "Picky"])
    # the savepoints through pyodbc (psqlodbc): the plumbing SQL Server's path takes
    sends = dataclasses.replace(cfg, transport=transport_config(fresh_pg_uri, driver).transport)
    _add_trigger(
        cfg,
        "Picky",
        "picky",
        "IF convert_from(NEW.body, 'UTF8') ~ '\"e(3|7|8)\"' THEN "
        "RAISE EXCEPTION 'not for this endpoint'; END IF; RETURN NEW;",
        deferred=deferred,
    )
    for address in ("Valid", "Picky"):
        subscribe(cfg, address, address, BASE)
    lake = open_lake(cfg.lake, spark)
    write_outbound(lake, "outbound_events", [row(f"e{i}") for i in range(1, 11)])
    out = publish(sends, spark, lake)["outputs"][0]
    assert out["status"] == "ok" and out["failed_batches"] == [], out
    assert out["published"] == 10 and out["undeliverable"] == 3 and out["copies"] == 17, out
    every = [f"e{i}" for i in range(1, 11)]
    assert [orjson.loads(r.body)["key"] for r in drain_all(cfg, "Valid")] == every
    taken = [k for k in every if k not in ("e3", "e7", "e8")]
    assert [orjson.loads(r.body)["key"] for r in drain_all(cfg, "Picky")] == taken
    lost = read_table(str(tmp_path / "lake" / "outbound_events_undeliverable")).to_pylist()
    assert sorted((r["destination"], r["key"]) for r in lost) == [("Picky", "e3"), ("Picky", "e7"), ("Picky", "e8")]
    assert all("not for this endpoint" in r["reason"] for r in lost), lost
    again = publish(sends, spark, lake)["outputs"][0]
    assert again["published"] == 0 and drain_all(cfg, "Picky") == [], again


def test_a_connection_lost_mid_publish_ends_the_output_with_its_counts(
    fresh_pg_uri: str, tmp_path: Path, spark
) -> None:
    """The database restarted under a publish: the failed batch was said, and the next batch's
    statement on the dead connection ended the command with psycopg's own error, no counts (a review).
    A trigger here ends its own session at the 6th row (a restart's effect on one connection)."""
    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_events"], [], batch_size=4)
    setup_db(cfg, ["Valid"])
    _add_trigger(
        cfg,
        "Valid",
        "ender",
        "IF convert_from(NEW.body, 'UTF8') ~ '\"e6\"' THEN "
        "PERFORM pg_terminate_backend(pg_backend_pid()); END IF; RETURN NEW;",
    )
    subscribe(cfg, "Valid", "Valid", BASE)
    lake = open_lake(cfg.lake, spark)
    write_outbound(lake, "outbound_events", [row(f"e{i}") for i in range(1, 11)])
    out = publish(cfg, spark, lake)["outputs"][0]
    assert out["status"] == "failed" and out["published"] == 4, out
    assert out["error_kind"] == "transport", out  # the summary's kind: the database's (it said "publish")
    with db.connect(cfg.transport) as conn:
        conn.raw.execute('DROP TRIGGER "ender" ON "public"."Valid"')
        conn.commit()
    again = publish(cfg, spark, lake)["outputs"][0]
    assert again["status"] == "ok", again
    assert [orjson.loads(r.body)["key"] for r in drain_all(cfg, "Valid")] == [f"e{i}" for i in range(1, 11)]


def test_two_copies_a_table_refuses_together_leave_the_later_one_undeliverable(
    fresh_pg_uri: str, tmp_path: Path, spark
) -> None:
    """A subscriber whose unique index refuses a second copy of one payload: each part probed alone (and
    undone) was taken, the taken copies then sent together were refused, and the batch failed on every
    run, the batch after it delivered first (a review). Each taken part is sent before the next is
    probed: the second copy is refused and recorded, the others delivered in order."""
    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_events"], [], batch_size=4)
    setup_db(cfg, ["Dedup"])
    with db.connect(cfg.transport) as conn:
        conn.raw.execute('CREATE UNIQUE INDEX "one_payload" ON "public"."Dedup" (md5(body))')
        conn.commit()
    subscribe(cfg, "Dedup", "Dedup", BASE)
    lake = open_lake(cfg.lake, spark)
    same = orjson.dumps({"sku": 1})
    outbound_rows = [row("e1", body=same), row("e2", body=same), *(row(f"e{i}") for i in range(3, 7))]
    write_outbound(lake, "outbound_events", outbound_rows)
    first = publish(cfg, spark, lake)["outputs"][0]
    assert first["status"] == "ok" and first["undeliverable"] == 1, first
    delivered = [orjson.loads(r.body).get("key", "same") for r in drain_all(cfg, "Dedup")]
    assert delivered == ["same", "e3", "e4", "e5", "e6"], delivered
    assert publish(cfg, spark, lake)["outputs"][0]["status"] == "ok"


def test_a_table_refusing_one_copy_in_ten_leaves_no_pile_of_subtransactions(
    fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of 1,000 copies, one in ten refused by a CHECK: the parts kept in savepoints left every
    batch's transaction with more subtransactions than PostgreSQL's per-backend cache holds (64,
    overflowed: every snapshot on the server then reads pg_subtrans; a review). Probes rolled back
    leave none; the 1,800 good copies arrive, in order."""
    from queuelake.pipeline.batches import sender

    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_events"], [], batch_size=1000)
    setup_db(cfg, ["Picky"])
    with db.connect(cfg.transport) as conn:
        conn.raw.execute(
            'ALTER TABLE "public"."Picky" ADD CONSTRAINT "tenth" CHECK (convert_from(body, \'UTF8\') !~ \'"e[0-9]*3"\')'
        )
        conn.commit()
    subscribe(cfg, "Picky", "Picky", BASE)
    held = (
        "SELECT (pg_stat_get_backend_subxact(s)).subxact_count, (pg_stat_get_backend_subxact(s)).subxact_overflowed "
        "FROM pg_stat_get_backend_idset() s WHERE pg_stat_get_backend_pid(s) = pg_backend_pid()"
    )
    seen, real = [], sender.Book.commit

    def commit(self, conn, batch_key, sent):  # type: ignore[no-untyped-def]
        seen.append(conn.raw.execute(held).fetchone())
        return real(self, conn, batch_key, sent)

    monkeypatch.setattr(sender.Book, "commit", commit)
    lake = open_lake(cfg.lake, spark)
    write_outbound(lake, "outbound_events", [row(f"e{i}") for i in range(1, 2001)])
    out = publish(cfg, spark, lake)["outputs"][0]
    assert out["status"] == "ok" and out["undeliverable"] == 200, out
    taken = [orjson.loads(r.body)["key"] for r in drain_all(cfg, "Picky")]
    assert taken == [f"e{i}" for i in range(1, 2001) if i % 10 != 3]
    assert seen and all(count == 0 and not overflowed for count, overflowed in seen), seen


def test_a_table_refusing_every_copy_of_a_batch_takes_none_for_the_rest_of_the_run(
    fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copies sent in parts cost two sends a copy: a table that refuses them all (a CHECK no row meets)
    is taken out of the run after two such batches in a row, not sent every later batch in parts (after
    one, a table whose first batch in parts held only the copies it refuses got none of the others)."""
    from queuelake.pipeline.publish import routing

    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_events"], [], batch_size=4)
    setup_db(cfg, ["Valid", "Checked"])
    with db.connect(cfg.transport) as conn:
        conn.raw.execute('ALTER TABLE "public"."Checked" ADD CONSTRAINT "no_bodies" CHECK (body IS NULL)')
        conn.commit()
    for address in ("Valid", "Checked"):
        subscribe(cfg, address, address, BASE)
    real, sends = routing.binary_copy.send, []

    def counted(conn, queue, messages, now=None):  # type: ignore[no-untyped-def]
        sends.append(queue.table)
        return real(conn, queue, messages, now)

    monkeypatch.setattr(routing.binary_copy, "send", counted)
    lake = open_lake(cfg.lake, spark)
    write_outbound(lake, "outbound_events", [row(f"e{i}") for i in range(1, 13)])
    out = publish(cfg, spark, lake)["outputs"][0]
    assert out["status"] == "ok" and out["published"] == 12 and out["undeliverable"] == 12, out
    assert len(drain_all(cfg, "Valid")) == 12 and drain_all(cfg, "Checked") == []
    # its first batch: the whole (refused, rolled back), then in parts: 1 + 2 + 4; the second in parts
    # (1 + 2 + 4); the third, none
    assert sends.count("Checked") == 15, sends


def test_a_table_whose_first_batch_in_parts_holds_only_refused_copies_gets_the_others(
    fresh_pg_uri: str, tmp_path: Path, spark
) -> None:
    """A trigger refusing e1 and e2 only, batches of 2: the first batch is refused whole, then in parts;
    the table stays, and e3..e6 reach it. After one such batch it was out of the run, and the four
    good copies were recorded undeliverable with the trigger's reason (a review)."""
    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_events"], [], batch_size=2)
    setup_db(cfg, ["Picky"])
    _add_trigger(
        cfg,
        "Picky",
        "first_two",
        "IF convert_from(NEW.body, 'UTF8') ~ '\"e(1|2)\"' THEN RAISE EXCEPTION 'not these'; END IF; RETURN NEW;",
    )
    subscribe(cfg, "Picky", "Picky", BASE)
    lake = open_lake(cfg.lake, spark)
    write_outbound(lake, "outbound_events", [row(f"e{i}") for i in range(1, 7)])
    out = publish(cfg, spark, lake)["outputs"][0]
    assert out["status"] == "ok" and out["undeliverable"] == 2, out
    assert [orjson.loads(r.body)["key"] for r in drain_all(cfg, "Picky")] == ["e3", "e4", "e5", "e6"]


def test_a_stop_now_inside_an_output_keeps_its_sent_batches_in_the_summary_and_runs(
    fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second signal (``Interrupted`` in the main thread) during batch 3 of the only output: batches
    1 and 2 are committed, and the summary and the ``runs`` rows say so. Only the outputs finished
    before the stop were kept: "published: 0" and no ``runs`` row (a review)."""
    from queuelake import stopping
    from queuelake.pipeline.publish import driver

    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_events"], [], batch_size=2)
    setup_db(cfg, ["Valid"])
    subscribe(cfg, "Valid", "Valid", BASE)
    lake = open_lake(cfg.lake, spark)
    write_outbound(lake, "outbound_events", [row(f"e{i}") for i in range(1, 11)])
    real, calls = driver.DriverSender.insert_batch, []

    def stop_now_on_the_third(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 3:
            raise stopping.Interrupted("stopped by signal SIGTERM")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(driver.DriverSender, "insert_batch", stop_now_on_the_third)
    with pytest.raises(stopping.Interrupted) as stopped:
        publish(cfg, spark, lake)
    done = stopping.done_before(stopped.value)["publish"]
    assert [orjson.loads(r.body)["key"] for r in drain_all(cfg, "Valid")] == ["e1", "e2", "e3", "e4"]
    assert done["published"] == 4 and done["outputs"][0]["status"] == "interrupted", done
    runs = [r for r in lake.read_arrow("runs").to_pylist() if r["command"] == "publish"]
    assert [(r["status"], r["published"]) for r in runs] == [("interrupted", 4)], runs


def test_a_stop_asked_during_a_round_ends_it_at_a_batch_boundary_with_its_counts(
    fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGTERM during a publish raised at once (publish was not graceful): the summary said
    "interrupted" with no counts and no ``runs`` row while batches had gone out, and under ``run`` the
    first SIGTERM let the whole round go on (a review). The round now stops after the batch in hand."""
    from queuelake import stopping
    from queuelake.pipeline.publish import driver

    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_events"], [], batch_size=2)
    setup_db(cfg, ["Valid"])
    subscribe(cfg, "Valid", "Valid", BASE)
    lake = open_lake(cfg.lake, spark)
    write_outbound(lake, "outbound_events", [row(f"e{i}") for i in range(1, 11)])
    real, calls = driver.DriverSender.insert_batch, {"n": 0}

    def then_stop(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 2:
            stopping.request()  # the signal handler's doing, during the second batch
        return real(self, *args, **kwargs)

    monkeypatch.setattr(driver.DriverSender, "insert_batch", then_stop)
    try:
        stopped = publish(cfg, spark, lake)
    finally:
        stopping.reset()
    out = stopped["outputs"][0]
    assert out["status"] == "interrupted" and out["published"] == 4 and out["batches"] == 2, out
    runs = [r for r in lake.read_arrow("runs").to_pylist() if r["run_id"] == stopped["run_id"]]
    assert [r["status"] for r in runs] == ["interrupted"], runs
    monkeypatch.undo()
    rest = publish(cfg, spark, lake)["outputs"][0]
    assert rest["status"] == "ok" and rest["published"] == 6, rest
    assert [orjson.loads(r.body)["key"] for r in drain_all(cfg, "Valid")] == [f"e{i}" for i in range(1, 11)]


def test_a_second_publish_of_an_output_being_sent_skips_it(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """A round is known to other runs only once a batch of it is in the ledger: an overlapping
    publish planned a longer round over the rows the first was sending, and every one went out twice
    (found by a review). One publish per output at a time: the second, finding the output's lock
    held, skips it; the next run sends every row once."""
    from queuelake.transport import locks

    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_events"], [], batch_size=2)
    setup_db(cfg, ["Valid"])
    subscribe(cfg, "Valid", "Valid", BASE)
    lake = open_lake(cfg.lake, spark)
    write_outbound(lake, "outbound_events", [row(f"e{i}") for i in range(1, 4)])
    with db.connect(cfg.transport) as sending:  # another publish, in the middle of this output's round
        assert locks.try_lock(sending, f"queuelake.publish:{cfg.publish.endpoint}/outbound_events")
        out = publish(cfg, spark, lake)
        assert out["status"] == "ok" and out["published"] == 0, out
        assert out["outputs"][0]["status"] == "skipped" and "another publish" in out["outputs"][0]["error"]
    assert drain_all(cfg, "Valid") == []
    assert publish(cfg, spark, lake)["published"] == 3
    assert sorted(orjson.loads(r.body)["key"] for r in drain_all(cfg, "Valid")) == ["e1", "e2", "e3"]


def test_an_outbound_table_created_again_is_published_not_taken_as_sent(
    fresh_pg_uri: str, tmp_path: Path, spark
) -> None:
    """The ledger knew an output by its name: a table dropped and written again (or a new lake's, on the
    same queue database) had its rounds taken as sent, "nothing new", until its versions passed the old
    ones (a review). Its rounds are its own, by its Delta id; the first table's are still known as sent."""
    import shutil

    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_events"], [], batch_size=2)
    setup_db(cfg, ["Valid"])
    subscribe(cfg, "Valid", "Valid", BASE)
    lake = open_lake(cfg.lake, spark)
    for i in range(1, 4):  # three versions: the second table's own stay behind them
        write_outbound(lake, "outbound_events", [row(f"e{i}")], version=i)
    assert publish(cfg, spark, lake)["published"] == 3
    assert publish(cfg, spark, lake)["published"] == 0
    shutil.rmtree(tmp_path / "lake" / "outbound_events")
    write_outbound(lake, "outbound_events", [row("f1"), row("f2")])
    assert publish(cfg, spark, lake)["published"] == 2
    write_outbound(lake, "outbound_events", [row("f3")], version=2)
    assert publish(cfg, spark, lake)["published"] == 1
    assert publish(cfg, spark, lake)["published"] == 0
    sent = sorted(orjson.loads(r.body)["key"] for r in drain_all(cfg, "Valid"))
    assert sent == ["e1", "e2", "e3", "f1", "f2", "f3"], sent


def test_a_ledger_knows_which_table_its_rounds_were_of() -> None:
    from queuelake.pipeline.batches.keys import Round, parse_round
    from queuelake.pipeline.publish.rounds import EARLIER_TABLE, last_round, table_tag

    first, other = "11111111-2222-3333-4444-555555555555", "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
    assert table_tag([], first, 0) == ("", f"table:{first}")  # a new ledger: this table's
    old = [Round(None, 5, 2).key(0, 1)]  # written before the table row was kept
    assert table_tag(old, first, 7) == ("", f"table:{first}")  # versions went on: the same table, as assumed
    assert table_tag(old, first, 2) == ("111111112222", f"table:{EARLIER_TABLE}")  # went back: another
    keyed = [f"table:{first}", *old]
    assert table_tag(keyed, first, 2) == ("", None)
    assert table_tag(keyed, other, 9) == ("aaaaaaaabbbb", None)
    tagged = Round(None, 3, 2, table="aaaaaaaabbbb")
    assert parse_round(tagged.key(1, 4)) == (tagged, 1, 4) and tagged.key(1, 4) == "aaaaaaaabbbb~-3:1/4@2"
    both = [*keyed, tagged.key(0, 1)]
    assert last_round(both)[0] == Round(None, 5, 2) and last_round(both, "aaaaaaaabbbb")[0] == tagged


@pytest.mark.slow
def test_exactly_once_publish_under_sigkill(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    lake_root = tmp_path / "lake"
    cfg = config(fresh_pg_uri, lake_root, ["outbound_big"], [], batch_size=1000)
    setup_db(cfg, ["Target", "Sub1", "Sub2"])
    subscribe(cfg, "Sub1", "Sub1", "Big.Event")
    subscribe(cfg, "Sub2", "Sub2", "Big.Event")
    lake = open_lake(cfg.lake, spark)

    def rows(start: int, stop: int) -> list[dict]:
        return [
            row(f"k{i}", "Send", "Target", "Big.Command") if i % 2 else row(f"k{i}", message_type="Big.Event")
            for i in range(start, stop)
        ]

    n, rounds = 50_000, 1
    write_outbound(lake, "outbound_big", rows(0, n))
    conf = tmp_path / "publish.yaml"
    conf.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
                "lake": {"root": str(lake_root), "engine": "delta-rs"},
                "spark": {"master": "local[1]", "conf": {"spark.sql.shuffle.partitions": "1"}},
                "publish": {"endpoint": "Lakehouse", "outputs": ["outbound_big"], "batch_size": 1000},
            }
        )
    )
    env = {**os.environ, "QUEUELAKE_CONNECTION": fresh_pg_uri}
    rng = random.Random(7)
    kills = attempts = 0
    full_run: float | None = None  # seconds the last run that nobody killed took
    # 12 kills: every third attempt at the commit's two hook points, the rest anywhere (each costs a Spark start-up)
    while kills < 12 and attempts < 50:
        attempts += 1
        e = dict(env)
        started = time.monotonic()
        if attempts % 3 == 0:
            e["QUEUELAKE_TEST_KILL_AT"] = (
                f"{rng.choice(['before_publish_commit', 'after_publish_commit'])}:{rng.randint(1, 3)}"
            )
            proc = subprocess.run(
                [sys.executable, "-c", KILL_SCRIPT, str(conf)], env=e, capture_output=True, timeout=600
            )
            killed = proc.returncode == -9
        else:
            proc = subprocess.Popen(
                [sys.executable, "-c", KILL_SCRIPT, str(conf)],
                env=e,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            # anywhere from the session's start to the last batches: Spark starts in ~5 s and a clean
            # round needs no Spark job; once a run has gone uninterrupted, within its length, so that
            # kills land on a fast machine too
            until = started + (rng.uniform(0.3, 0.95) * full_run if full_run else rng.uniform(3.0, 10.0))
            while proc.poll() is None and time.monotonic() < until:
                time.sleep(0.05)
            killed = proc.poll() is None
            if killed:
                proc.kill()
            proc.wait()
        kills += killed
        if not killed:  # the run published everything: a new round of rows, so that the next run has work
            full_run = time.monotonic() - started
            rounds += 1
            write_outbound(lake, "outbound_big", rows(n, n + 10_000), version=rounds)
            n += 10_000
    print(f"kills {kills} in {attempts} attempts; {rounds} round(s) of rows, {n} rows")
    assert kills >= 12, f"only {kills} kills landed in {attempts} attempts"
    final = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT, str(conf)], env=env, capture_output=True, text=True, timeout=900
    )
    assert final.returncode == 0 and final.stdout.strip().endswith("ok"), final.stderr[-3000:]
    target = [orjson.loads(r.body)["key"] for r in drain_all(cfg, "Target")]
    sub1 = [orjson.loads(r.body)["key"] for r in drain_all(cfg, "Sub1")]
    sub2 = [orjson.loads(r.body)["key"] for r in drain_all(cfg, "Sub2")]
    sends = {f"k{i}" for i in range(n) if i % 2}
    events = {f"k{i}" for i in range(n) if not i % 2}
    for got, want in ((target, sends), (sub1, events), (sub2, events)):
        assert len(got) == len(set(got)), f"{len(got) - len(set(got))} duplicates"
        assert set(got) == want


def test_ids_are_the_uuids_the_uuid_module_gives() -> None:
    """message_id formats uuids by hand (speed): same text as the uuid module's."""
    import random
    import uuid

    from queuelake.pipeline.message_ids import NAMESPACE

    for pipeline, key, dest in [("Lakehouse/out", "k1", '"public"."Billing"'), ("p", "ключ\n", "[dbo].[Q]")]:
        assert message_id(pipeline, key, dest) == str(uuid.uuid5(NAMESPACE, f"{pipeline}\n{key}\n{dest}"))
    rng = random.Random(5)
    for i in range(2000):  # every value of the variant digit, many times over
        key = "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(rng.randrange(0, 20)))
        assert message_id("p", key, f"q{i}") == str(uuid.uuid5(NAMESPACE, f"p\n{key}\nq{i}"))


def _timestamps(micros: list[int | None]) -> pa.Array:
    """Timestamps as Arrow holds them, past what Python's datetime can (year 20000, BC)."""
    return pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC"))


@pytest.mark.parametrize("from_rows", [None, 1], ids=["driver", "executors"])
def test_times_spark_wrote_as_int96_are_sent_at_their_times(
    fresh_pg_uri: str, tmp_path: Path, spark, from_rows: int | None
) -> None:
    """An outbound table a Spark job wrote (on a delta-spark lake, or the user's own job): Spark stores
    timestamps as Parquet INT96, which pyarrow read in nanoseconds (1677-2262). A deliver_at of year
    2300 or 9999 wrapped round to a time in the past and the message was sent at once; 1600 became 2184.
    Every time Spark holds must reach the delayed table as it is, and the edges be judged as they are."""
    require_delta_jvm(spark)
    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_spark"], [], executors_from_rows=from_rows)
    setup_db(cfg, ["Billing"])
    send = {"intent": "Send", "destination": "Billing", "message_type": "Billing.Messages.Commands.Charge, Billing"}
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)

    def micros(when: dt.datetime) -> int:
        return (when - epoch) // dt.timedelta(microseconds=1)

    delays = {
        "due-first-instant": micros(FIRST_INSTANT),
        "due-1600": micros(dt.datetime(1600, 1, 1, tzinfo=dt.timezone.utc)),
        "due-2300": micros(dt.datetime(2300, 1, 1, tzinfo=dt.timezone.utc)),
        "due-last-instant": micros(LAST_INSTANT),
        "due-last-microsecond-of-9999": micros(LAST_INSTANT) + 2999,
    }
    table = pa.Table.from_pylist([row(k, **send) for k in delays], schema=OUTBOUND)
    due = _timestamps(list(delays.values()))
    table = table.set_column(table.schema.get_field_index("deliver_at"), "deliver_at", due)
    # a job of the user's own, on Spark's default (queuelake's sessions write microseconds since round 53)
    spark.conf.set("spark.sql.parquet.outputTimestampType", "INT96")
    try:
        spark.createDataFrame(table).write.format("delta").save(str(tmp_path / "lake" / "outbound_spark"))
    finally:
        spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    written = list((tmp_path / "lake" / "outbound_spark").glob("*.parquet"))
    kinds = {leaf.path: leaf.physical_type for f in written for leaf in pq.ParquetFile(f).schema}
    assert kinds["deliver_at"] == "INT96", "Spark writes no INT96 now: this test reads nothing it is about"
    lake = open_lake(cfg.lake, spark)
    held = lake.read_arrow("outbound_spark", columns=["key", "deliver_at"])
    assert dict(zip(held["key"].to_pylist(), held["deliver_at"].cast(pa.int64()).to_pylist())) == delays

    out = publish(cfg, spark, lake)["outputs"][0]
    assert out["status"] == "ok" and out["published"] == 4 and out["rejected"] == 1, out
    rejected = read_table(str(tmp_path / "lake" / "outbound_spark_rejected"), columns=["key", "reasons"]).to_pylist()
    assert rejected == [{"key": "due-last-microsecond-of-9999", "reasons": [outbound.DELIVER_AT_OUT_OF_RANGE]}]
    with db.connect(cfg.transport) as conn:
        dues = sorted(r[0] for r in conn.raw.execute('SELECT due FROM "public"."Billing.Delayed"').fetchall())
    # a due is the database's clock plus the delay: a past one is due now, the others to the second
    now = dt.datetime.now(dt.timezone.utc)
    assert len(dues) == 4 and dues[1] < now + dt.timedelta(minutes=1), dues
    assert abs(dues[2] - dt.datetime(2300, 1, 1, tzinfo=dt.timezone.utc)) < dt.timedelta(seconds=5), dues
    assert abs(dues[3] - LAST_INSTANT) < dt.timedelta(seconds=5), dues


@pytest.mark.parametrize("from_rows", [None, 1], ids=["driver", "executors"])
def test_values_at_the_edges_of_their_types_are_rejected_row_by_row_or_sent(
    fresh_pg_uri: str, tmp_path: Path, spark, from_rows: int | None
) -> None:
    """ttbr_ms and deliver_at at the edges of their types (issue 30): a row that cannot be sent
    faithfully is rejected with its reason, and the round's other rows go out; the round never fails.
    A deliver_at past year 9999 failed the whole round (its conversion to Python), and so did a
    ttbr_ms whose expiry passes year 9999."""
    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_edges"], [], executors_from_rows=from_rows)
    setup_db(cfg, ["Billing"])
    lake = open_lake(cfg.lake, spark)
    send = {"intent": "Send", "destination": "Billing", "message_type": "Billing.Messages.Commands.Charge, Billing"}
    ttbrs = {"ttbr-1ms": 1, "ttbr-under-100y": MAX_TTBR_MS - 1, "ttbr-100y": MAX_TTBR_MS, "ttbr-max": 2**63 - 1}
    ttbrs |= {"ttbr-min": -(2**63), "ttbr-0": 0}
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    last = (LAST_INSTANT - epoch) // dt.timedelta(microseconds=1)
    first = (FIRST_INSTANT - epoch) // dt.timedelta(microseconds=1)
    delays = {
        "due-first-instant": first,
        "due-last-instant": last,
        "due-last-microsecond-of-9999": last + 2999,
        "due-year-20000": last + 10_001 * 365 * 86_400_000_000,
        "due-bc": first - 365 * 86_400_000_000,
        "due-before-first": first - 1,
    }
    rows = [row(k, **send, ttbr_ms=v) for k, v in ttbrs.items()] + [row(k, **send) for k in delays]
    table = pa.Table.from_pylist(rows, schema=OUTBOUND)
    deliver_at = _timestamps([None] * len(ttbrs) + list(delays.values()))
    table = table.set_column(table.schema.get_field_index("deliver_at"), "deliver_at", deliver_at)
    lake.append("outbound_edges", table, "test/outbound_edges", 1)

    summary = publish(cfg, spark, lake)
    out = summary["outputs"][0]
    assert out["status"] == "ok", summary
    sent = {"ttbr-1ms", "ttbr-under-100y", "due-first-instant", "due-last-instant"}
    # (the rejected rows keep their deliver_at as it was: year 20000 is more than Python can hold)
    rejected = read_table(str(tmp_path / "lake" / "outbound_edges_rejected"), columns=["key", "reasons"])
    reasons = {r["key"]: r["reasons"] for r in rejected.to_pylist()}
    assert out["published"] == len(sent) and out["rejected"] == len(rows) - len(sent), (out, sorted(reasons))
    assert set(reasons) == (set(ttbrs) | set(delays)) - sent
    for key in ("ttbr-100y", "ttbr-max"):
        assert reasons[key] == [outbound.TTBR_TOO_LONG], reasons[key]
    for key in ("ttbr-min", "ttbr-0"):
        assert reasons[key] == ["ttbr_ms must be positive"], reasons[key]
    for key in ("due-last-microsecond-of-9999", "due-year-20000", "due-bc", "due-before-first"):
        assert reasons[key] == [outbound.DELIVER_AT_OUT_OF_RANGE], reasons[key]
    direct = {hdr.decode_map(r.headers)[hdr.MESSAGE_ID]: r for r in drain_all(cfg, "Billing")}
    assert len(direct) == 2
    long_lived = direct[message_id("Lakehouse/outbound_edges", "ttbr-under-100y", '"public"."Billing"')]
    assert long_lived.expires is not None and long_lived.expires.year > 2100
    with db.connect(cfg.transport) as conn:
        dues = sorted(r[0] for r in conn.raw.execute('SELECT due FROM "public"."Billing.Delayed"').fetchall())
        assert len(dues) == 2 and dues[1].year == 9999 and dues[0] < dt.datetime.now(dt.timezone.utc)
    assert publish(cfg, spark, lake)["published"] == 0  # the rerun adds nothing


@pytest.mark.parametrize("max_age", [10.0, 0.0], ids=["clock-kept", "clock-read-every-batch"])
def test_batches_built_ahead_write_expires_from_their_transactions_now(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_age: float
) -> None:
    """A batch built ahead with every copy deliverable no longer asks the database for now() (the clock's
    offset is kept up to 10 s): its Expires is still its own transaction's now() plus the TTBR, one value
    per transaction, and TimeSent is the database's clock, never later than that now(). Both with the
    offset kept and with it read again for every batch (the path before)."""
    from queuelake.nsb.times import parse_time
    from queuelake.pipeline.publish import driver

    monkeypatch.setattr(driver.DbClock, "MAX_AGE", max_age)
    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_t"], [], batch_size=50)
    setup_db(cfg, ["Billing"])
    lake = open_lake(cfg.lake)
    charge = "Billing.Messages.Commands.Charge, Billing"
    rows = [row(f"k{i}", "Send", "Billing", charge, ttbr_ms=3_600_000 if i % 2 else None) for i in range(400)]
    write_outbound(lake, "outbound_t", rows)
    with db.connect(cfg.transport) as conn:
        before = conn.raw.execute("SELECT now()").fetchone()[0]
    summary = publish(cfg, None, lake)
    with db.connect(cfg.transport) as conn:
        after = conn.raw.execute("SELECT now()").fetchone()[0]
        got = conn.raw.execute('SELECT expires, headers, xmin::text FROM "public"."Billing"').fetchall()
    assert summary["outputs"][0]["published"] == 400 and summary["outputs"][0]["batches"] == 8, summary
    timed = [(expires, orjson.loads(headers), tx) for expires, headers, tx in got if expires is not None]
    assert len(got) == 400 and len(timed) == 200
    as_utc = [e.replace(tzinfo=dt.timezone.utc) if e.tzinfo is None else e for e, _, _ in timed]
    starts = [e - dt.timedelta(hours=1) for e in as_utc]
    assert all(before <= s <= after for s in starts), (before, min(starts), max(starts), after)
    per_transaction: dict[str, set] = {}
    for (_, _, tx), expires in zip(timed, as_utc, strict=True):
        per_transaction.setdefault(tx, set()).add(expires)
    assert len(per_transaction) == 8 and all(len(v) == 1 for v in per_transaction.values()), per_transaction
    for (_, headers, _), start in zip(timed, starts, strict=True):
        sent = parse_time(headers[hdr.TIME_SENT])
        sent = sent.replace(tzinfo=dt.timezone.utc) if sent.tzinfo is None else sent
        assert before - dt.timedelta(seconds=1) <= sent <= start + dt.timedelta(milliseconds=1), (sent, start)


def test_events_no_endpoint_subscribes_to_are_said_not_sent_silently(
    fresh_pg_uri: str, tmp_path: Path, spark, caplog: pytest.LogCaptureFixture
) -> None:
    """149 events published to no one said "sent, 149 row(s) as 0 message(s)" and nothing else, and the
    next round had nothing new: lost for good without a word (a review)."""
    import logging

    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_test"], [])
    setup_db(cfg, [])
    lake = open_lake(cfg.lake, spark)
    write_outbound(lake, "outbound_test", [row(f"event-{i}") for i in range(3)])
    with caplog.at_level(logging.WARNING, logger="queuelake"):
        out = publish(cfg, spark, lake)["outputs"][0]
    assert out["status"] == "ok" and out["published"] == 3 and out["copies"] == 0, out
    said = [r.getMessage() for r in caplog.records if "no endpoint subscribes" in r.getMessage()]
    assert len(said) == 1 and CONCRETE in said[0] and BASE in said[0], said


def test_a_deliver_at_is_the_delayed_tables_due_to_the_microsecond(fresh_pg_uri: str, tmp_path: Path) -> None:
    """Due was the transaction's now() plus the delay in whole milliseconds (the delay truncated): a
    deliver_at came back in the delayed table's Due about 1 ms early (a review). It is written as the
    instant itself (in the UTC wall clock the endpoint compares with), microseconds and millisecond edges
    kept; a deliver_at passed is due now, as before."""
    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_due"], [])
    setup_db(cfg, ["Billing"])
    lake = open_lake(cfg.lake)
    hour = dt.datetime.now(dt.timezone.utc).replace(minute=0, second=0, microsecond=0) + dt.timedelta(hours=2)
    wanted = {
        "micros": hour + dt.timedelta(seconds=7, microseconds=123_457),
        "under-a-second": hour + dt.timedelta(seconds=8, microseconds=999_999),
        "a-millisecond-in": hour + dt.timedelta(seconds=9, microseconds=1_000),
        "under-a-millisecond": hour + dt.timedelta(seconds=10, microseconds=999),
    }
    charge = "Billing.Messages.Commands.Charge, Billing"
    rows = [row(k, "Send", "Billing", charge, deliver_at=at) for k, at in wanted.items()]
    rows.append(row("passed", "Send", "Billing", charge, deliver_at=hour - dt.timedelta(days=1)))
    write_outbound(lake, "outbound_due", rows)
    with db.connect(cfg.transport) as conn:
        before = conn.raw.execute("SELECT now()").fetchone()[0]
    assert publish(cfg, None, lake)["outputs"][0]["published"] == 5
    with db.connect(cfg.transport) as conn:
        got = conn.raw.execute(
            """SELECT headers, CAST(due AS timestamp) FROM "public"."Billing.Delayed" """
            """WHERE due > CAST(now() AT TIME ZONE 'UTC' AS timestamptz)"""
        ).fetchall()
        passed = conn.raw.execute(
            """SELECT CAST(due AS timestamp) FROM "public"."Billing.Delayed" """
            """WHERE due <= CAST(now() AT TIME ZONE 'UTC' AS timestamptz)"""
        ).fetchall()
    by_time = {orjson.loads(h)[hdr.DELIVER_AT]: due.replace(tzinfo=dt.timezone.utc) for h, due in got}
    assert sorted(by_time.values()) == sorted(wanted.values()), by_time
    assert len(passed) == 1 and passed[0][0].replace(tzinfo=dt.timezone.utc) >= before.astimezone(dt.timezone.utc)

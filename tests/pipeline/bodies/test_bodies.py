"""Typed body tables (issue 33) against a real PostgreSQL queue, a real drain, real Spark and real
Delta tables, on both engines: the corpus of bodies as the serializers write them
(``tests/helpers/bodies_corpus/corpus.py``), schema evolution across increments, audit copies counted once, and
reruns that add nothing."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from pathlib import Path

import pytest
from queuelake.commands.demo import traffic
from queuelake.lake.engines import open_lake
from queuelake.pipeline.bodies import run as bodies_run
from queuelake.transport import db, installer

from tests.helpers.bodies import config, rows, send
from tests.helpers.bodies_corpus import corpus as c
from tests.helpers.jvm import require_delta_jvm
from tests.helpers.stages import drain

ORDERS = "body_sales_contracts_orderplaced"
SHIPPED = "body_shipping_contracts_ordershipped"
INVOICES = "body_billing_contracts_invoiceissued"
STOCK = "body_stock_contracts_stockcounted"
ODD = "body_odd_contracts_everything"


@pytest.mark.slow
def test_corpus_to_typed_tables_and_evolution(fresh_pg_uri: str, tmp_path: Path, spark, lake_engine: str) -> None:
    cfg = config(fresh_pg_uri, tmp_path / "lake", lake_engine)
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        conn.commit()
    first = list(c.corpus())
    send(cfg, "Sales", first)
    lake = open_lake(cfg.lake, spark)
    assert drain(cfg, lake)["status"] == "ok"
    heard = logging.Handler()
    lines: list[str] = []
    heard.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("queuelake")
    level = logger.level
    logger.addHandler(heard)
    logger.setLevel(logging.INFO)
    try:
        out = bodies_run.bodies(cfg, spark, lake)
    finally:
        logger.removeHandler(heard)
        logger.setLevel(level)
    assert out["status"] == "ok", out
    assert {t["table"] for t in out["tables"]} == {ORDERS, SHIPPED, INVOICES, STOCK, ODD}

    # System.Text.Json, versions 1 and 2 in one table, the version a column, the field v2 gained
    orders = rows(lake, ORDERS)
    assert len(orders) == 12
    schema = lake.schema(ORDERS)
    assert schema.names[:10] == [
        "message_id", "queue", "message_type", "type_version", "conversation_id", "time_sent",
        "originating_endpoint", "processing_endpoint", "processing_started", "processing_ended",
    ]  # fmt: skip
    assert str(schema.field("Total").type) == "double"  # 12 and 18.5 in one sample: double
    assert str(schema.field("PlacedAt").type).startswith("timestamp")
    assert str(schema.field("Express").type) == "bool"
    assert schema.field("Lines").type.value_type.names == ["Product", "Quantity", "UnitPrice"]
    assert schema.field("ShippingAddress").type.names == ["Street", "City"]
    by_id = {r["OrderId"]: r for r in orders}
    assert by_id["order-9"]["DiscountCode"] == "SPRING-9" and by_id["order-1"]["DiscountCode"] is None
    assert by_id["order-9"]["type_version"] == "2.0.0.0" and by_id["order-1"]["type_version"] == "1.0.0.0"
    assert by_id["order-0"]["Total"] == 12.0 and by_id["order-3"]["Total"] == 13.5
    assert by_id["order-2"]["PlacedAt"] == c.START + dt.timedelta(minutes=2)
    assert by_id["order-2"]["Lines"] == [{"Product": "mug", "Quantity": 3, "UnitPrice": 4.5}]
    assert by_id["order-2"]["message_type"] == c.ORDER_V1 and by_id["order-2"]["queue"] == '"public"."Sales"'

    # Newtonsoft: BOM, indented, $type dropped at the root, kept inside (it says which subtype)
    shipped = rows(lake, SHIPPED)
    assert len(shipped) == 5 and "$type" not in lake.schema(SHIPPED).names
    assert shipped[0]["Carrier"] == "PostNL" and shipped[0]["Parcels"][0]["Weight"] == 1.25

    # XmlSerializer: namespaces, a list as a wrapper of items (one item too: a list, as JSON would say),
    # xsi:nil, a zip code
    invoices = {r["InvoiceId"]: r for r in rows(lake, INVOICES)}
    assert len(invoices) == 4
    assert invoices["inv-2"]["Lines"] == [
        {"Product": "p0", "Amount": 5.25},
        {"Product": "p1", "Amount": 6.25},
        {"Product": "p2", "Amount": 7.25},
    ]
    assert invoices["inv-0"]["Lines"] == [{"Product": "p0", "Amount": 5.25}]
    assert invoices["inv-1"]["Note"] is None and invoices["inv-0"]["Note"] == "paid by card"
    assert invoices["inv-1"]["Zip"] == "01123" and invoices["inv-3"]["Total"] == 103.5

    # a field whose type changes within the sample: a string keeping the text, the conflict recorded
    stock = {r["Sku"]: r for r in rows(lake, STOCK)}
    assert stock["sku-0"]["Location"] == "7" and stock["sku-4"]["Location"] == "aisle 4"
    changes = lake.read_arrow("body_schema_changes").to_pylist()
    assert any(ch["table"] == STOCK and ch["change"] == "conflict" and ch["column"] == "Location" for ch in changes), (
        changes
    )
    assert any(
        ch["table"] == ORDERS and ch["change"] == "added" and ch["column"] == "DiscountCode"
        and ch["type_version"] == "2.0.0.0"
        for ch in changes
    ), changes  # fmt: skip
    assert {ch["table"] for ch in changes if ch["change"] == "created"} == {ORDERS, SHIPPED, INVOICES, STOCK, ODD}

    # what does not parse goes to body_unparsed with its reason; the type's parseable bodies still land
    odd = rows(lake, ODD)
    assert sorted(r["Name"] for r in odd) == ["fine", "xml sniffed"]
    # a field named as an identity column and one named as its escape: each its own column (the two
    # shared ``body_queue`` and failed the type's every ``bodies``)
    (fine,) = [r for r in odd if r["Name"] == "fine"]
    assert (fine["queue"], fine["body_Queue"], fine["body_body_queue"]) == ('"public"."Sales"', "Billing", "x"), fine
    unparsed = lake.read_arrow("body_unparsed").to_pylist()
    reasons = sorted(r["reason"] for r in unparsed)
    assert reasons == sorted(
        [
            "empty body",
            "no body",
            "the body is JSON null",
            "the body's bytes are not UTF-8",  # {"Name": "caf\xe9"}: it was typed "caf\ufffd"
            "the JSON body is not an object",
            "content type application/x-protobuf is neither JSON nor XML",
            "malformed JSON",  # {"Name": "broken"
        ]
    ), reasons
    # each type's count says its rows no parser could take too (it said only those its parse left out)
    per_type = {t["table"]: t.get("unparsed", 0) for t in out["tables"]}
    assert sum(per_type.values()) == out["unparsed"] == len(unparsed), (per_type, out["unparsed"])
    # and each type's log line says what its summary says (it said only the rows its parse left out)
    said = {t["table"]: f"written to {t['table']}, {t.get('unparsed', 0)} unparsed" for t in out["tables"]}
    assert all(any(text in line for line in lines) for text in said.values()), (said, lines)

    # a rerun adds nothing
    again = bodies_run.bodies(cfg, spark, lake)
    assert again.get("note") == "nothing new"
    assert len(rows(lake, ORDERS)) == 12

    # increment 2: widening, a conflict against the table, audit copies of messages already in it
    later = [c.message(c.ORDER_V1, c.system_text_json(i, 1), "application/json", i) for i in range(20, 23)]
    stock_text = [
        c.message(c.STOCK, b'{"Sku": "sku-9", "Count": 2.5, "Location": {"Aisle": 3}}', "application/json", 9)
    ]
    send(cfg, "Sales", later + stock_text)
    audit = [traffic.audit_copy(m, "Billing", c.START, 30) for m in first[:4]]
    audit += [traffic.audit_copy(m, "Billing", c.START, 30) for m in later[:1]]
    send(cfg, "audit", audit)
    assert drain(cfg, lake)["status"] == "ok"
    out = bodies_run.bodies(cfg, spark, lake)
    assert out["status"] == "ok", out
    orders = rows(lake, ORDERS)
    assert len(orders) == 15  # 12 + 3 new; their audit copies counted once
    assert len({r["message_id"] for r in orders}) == 15
    by_id = {r["OrderId"]: r for r in orders}
    assert by_id["order-20"]["queue"] == '"public"."Sales"'  # the business copy preferred
    stock = {r["Sku"]: r for r in rows(lake, STOCK)}
    assert str(lake.schema(STOCK).field("Count").type) == "double"  # widened: long -> double
    assert stock["sku-1"]["Count"] == 1.0 and stock["sku-9"]["Count"] == 2.5
    assert stock["sku-9"]["Location"] == '{"Aisle":3}'  # the JSON text, the column already a string
    changes = lake.read_arrow("body_schema_changes").to_pylist()
    assert any(ch["table"] == STOCK and ch["change"] == "widened" and ch["column"] == "Count" for ch in changes)

    again = bodies_run.bodies(cfg, spark, lake)
    assert again.get("note") == "nothing new" and len(rows(lake, ORDERS)) == 15


@pytest.mark.slow
def test_typed_tables_registered_by_name(fresh_pg_uri: str, tmp_path: Path, spark, lake_engine: str) -> None:
    """With lake.catalog/lake.schema, every table the bodies stage writes is registered in the metastore
    (issue 33): ``spark.table('<schema>.body_<type>')`` reads the typed table, with the lake's rows and
    columns, and so do body_schema_changes, body_unparsed and body_increments. The name points at the
    table's folder, so a later increment that changes a table's schema (a column widened: the table
    rewritten) reads through it too. Registration goes through Spark's Delta catalog on either engine."""
    require_delta_jvm(spark)
    schema = "ql_" + uuid.uuid4().hex[:8]
    root = tmp_path / "lake"
    cfg = config(fresh_pg_uri, root, lake_engine, names={"catalog": "spark_catalog", "schema": schema})
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        conn.commit()
    send(cfg, "Sales", c.corpus())
    lake = open_lake(cfg.lake, spark)

    def same_by_name(table: str, key: str) -> None:
        by_name = spark.table(f"{schema}.{table}")
        assert by_name.columns == lake.schema(table).names, table
        assert by_name.count() == lake.read_arrow(table).num_rows > 0, table
        keys = sorted(str(r[0]) for r in by_name.select(key).collect())
        assert keys == sorted(str(v) for v in lake.read_arrow(table, columns=[key]).column(key).to_pylist()), table
        location = spark.sql(f"DESCRIBE DETAIL spark_catalog.{schema}.{table}").first()["location"]
        assert location.rstrip("/").endswith(str(root / table)), (table, location)  # the lake's folder

    try:
        assert drain(cfg, lake)["status"] == "ok"
        out = bodies_run.bodies(cfg, spark, lake)
        assert out["status"] == "ok", out
        typed = sorted(t["table"] for t in out["tables"])
        assert typed == sorted([ORDERS, SHIPPED, INVOICES, STOCK, ODD])
        for table in typed:
            same_by_name(table, "message_id")
        same_by_name(bodies_run.CHANGES, "table")
        same_by_name(bodies_run.UNPARSED, "reason")
        same_by_name(bodies_run.INCREMENTS, "journal_version")
        registered = {t.name for t in spark.catalog.listTables(schema)}
        assert {*typed, bodies_run.CHANGES, bodies_run.UNPARSED, bodies_run.INCREMENTS} <= registered, registered
        assert dict(spark.table(f"{schema}.{STOCK}").dtypes)["Count"] == "bigint"

        # a second increment widens StockCounted.Count (the table rewritten): the name reads the new schema
        widened = c.message(c.STOCK, b'{"Sku": "sku-9", "Count": 2.5, "Location": "aisle 9"}', "application/json", 9)
        send(cfg, "Sales", [widened])
        assert drain(cfg, lake)["status"] == "ok"
        assert bodies_run.bodies(cfg, spark, lake)["status"] == "ok"
        assert dict(spark.table(f"{schema}.{STOCK}").dtypes)["Count"] == "double"
        same_by_name(STOCK, "message_id")
        same_by_name(bodies_run.CHANGES, "table")
        same_by_name(bodies_run.INCREMENTS, "journal_version")
        assert spark.table(f"{schema}.{bodies_run.INCREMENTS}").count() == 2
    finally:
        spark.sql(f"DROP SCHEMA IF EXISTS spark_catalog.{schema} CASCADE")
    assert lake.read_arrow(STOCK).num_rows == 7  # dropping the names never drops the data


@pytest.mark.slow
def test_bodies_command_as_a_subprocess(fresh_pg_uri: str, tmp_path: Path) -> None:
    """``queuelake bodies`` through its real entry point: one JSON summary line, exit 0, the typed
    table of the seeded type; a rerun finds nothing new and adds nothing; an idle rerun starts no Spark."""
    import json

    from tests.helpers.cli import cli_logged

    root = tmp_path / "lake"
    conf = tmp_path / "bodies.yaml"
    conf.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
                "lake": {"root": str(root), "engine": "delta-rs"},
                "spark": {"master": "local[1]", "conf": {"spark.sql.shuffle.partitions": "1"}},
                "drain": {"queues": ["Sales"], "batch_size": 100},
            }
        ),
        encoding="utf-8",
    )
    cfg = config(fresh_pg_uri, root, "delta-rs")
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
    send(cfg, "Sales", traffic.order_events(40, seed=5))
    drained, _ = cli_logged(["drain", "-c", str(conf)], fresh_pg_uri, tmp_path)
    assert drained["landed"] == 40, drained
    first, _ = cli_logged(["bodies", "-c", str(conf)], fresh_pg_uri, tmp_path)
    assert first["status"] == "ok" and first["rows_read"] == 40 and first["rows_written"] == 40, first
    (table,) = first["tables"]
    assert table["table"] == "body_sales_messages_events_orderplaced" and table["rows_out"] == 40, table
    lake = open_lake(cfg.lake, None)
    typed = lake.read_arrow(table["table"])
    assert typed.num_rows == 40 and {"OrderId", "CustomerId", "Total", "Currency"} <= set(typed.column_names)
    assert typed.schema.field("Total").type == "double"
    again, stderr = cli_logged(["bodies", "-c", str(conf)], fresh_pg_uri, tmp_path)
    assert again["status"] == "ok" and again["tables"] == [] and again["note"] == "nothing new", again
    assert "no Spark session started" in stderr and "SparkContext" not in stderr, stderr[-2000:]
    assert lake.read_arrow(table["table"]).num_rows == 40
    bad = subprocess_exit(["bodies", "-c", str(tmp_path / "missing.yaml")], fresh_pg_uri, tmp_path)
    assert bad[0] != 0 and bad[1]["status"] == "failed" and bad[1]["error_kind"], bad


def subprocess_exit(args: list[str], uri: str, cwd: Path) -> tuple[int, dict]:
    from tests.helpers.cli import run_cli  # not at module level: this module's other tests are in the fast tier

    result = run_cli(args, uri, cwd=cwd, timeout=300)
    assert result.summary, result
    return result.returncode, result.summary


def test_dedupe_reads_only_the_rows_sent_at_the_increments_times(tmp_path: Path) -> None:
    """The duplicate check asks the table only for rows whose ``time_sent`` is one of the increment's
    ranges (every copy of a message carries its TimeSent): rows sent at other times are not returned,
    rows without a time are checked against the table's rows without one."""
    import pyarrow as pa
    from queuelake.pipeline.bodies.seen import GAP_US, MAX_RANGES, Times, seen_ids

    ts = pa.timestamp("us", tz="UTC")
    day = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    lake = open_lake(config("postgresql://unused/none", tmp_path / "lake", "delta-rs").lake, None)
    schema = pa.schema([pa.field("message_id", pa.string()), pa.field("time_sent", ts)])
    for n, start in enumerate((day, day + dt.timedelta(days=30))):  # two files, a month apart
        sent = [start + dt.timedelta(seconds=i) for i in range(100)] + [None]
        ids = [f"m{n}-{i}" for i in range(101)]
        lake.append("body_x", pa.table([ids, pa.array(sent, ts)], schema=schema), "t", n)
    increment = Times.of([pa.array([day + dt.timedelta(seconds=5), day + dt.timedelta(seconds=7)], ts)])
    assert increment.ranges and not increment.nulls
    held = sorted(seen_ids(lake, "body_x", increment)["message_id"].to_pylist())
    assert held == ["m0-5", "m0-6", "m0-7"]
    with_null = Times.of([pa.array([None, day + dt.timedelta(days=30, seconds=99)], ts)])
    assert sorted(seen_ids(lake, "body_x", with_null)["message_id"].to_pylist()) == ["m0-100", "m1-100", "m1-99"]
    assert seen_ids(lake, "body_x", Times.of([])).num_rows == 0
    # send times far apart: at most MAX_RANGES ranges, every time inside one of them
    spread = [day + dt.timedelta(microseconds=i * 3 * GAP_US) for i in range(500)]
    wide = Times.of([pa.array(spread, ts)])
    assert len(wide.ranges) == MAX_RANGES
    micros = [int((t - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)) / dt.timedelta(microseconds=1)) for t in spread]
    assert all(any(lo <= m <= hi for lo, hi in wide.ranges) for m in micros)


@pytest.mark.slow
def test_a_failure_between_two_tables_is_redone_without_duplicates(
    fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that wrote one type's table and then failed on the next (a crash between table writes):
    no checkpoint is committed; the rerun skips the table already written (its application
    transaction holds the journal version) and writes the other, each message once."""
    cfg = config(fresh_pg_uri, tmp_path / "lake", "delta-rs")
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        conn.commit()
    stock = [c.message(c.STOCK, b'{"Sku": "s%d", "Count": %d}' % (i, i), "application/json", i) for i in range(5)]
    send(cfg, "Sales", list(traffic.order_events(6, seed=2)) + stock)
    lake = open_lake(cfg.lake, spark)
    assert drain(cfg, lake)["status"] == "ok"
    orders, counted = "body_sales_messages_events_orderplaced", "body_stock_contracts_stockcounted"
    real = type(lake).append_dataframe

    def crash_on_stock(self, table: str, df, app_id: str, version: int) -> bool:
        if table == counted:
            raise OSError("the driver died here")
        return real(self, table, df, app_id, version)

    monkeypatch.setattr(type(lake), "append_dataframe", crash_on_stock)
    failed = bodies_run.bodies(cfg, spark, lake)
    assert failed["status"] == "failed", failed
    assert len(rows(lake, orders)) == 6 and not lake.exists("body_increments")
    monkeypatch.setattr(type(lake), "append_dataframe", real)
    again = bodies_run.bodies(cfg, spark, lake)
    assert again["status"] == "ok", again
    by_table = {t["table"]: t for t in again["tables"]}
    assert by_table[orders].get("note") == "already written" and by_table[counted]["rows_out"] == 5
    assert len(rows(lake, orders)) == 6 and len(rows(lake, counted)) == 5
    assert bodies_run.bodies(cfg, spark, lake).get("note") == "nothing new"


@pytest.mark.parametrize(
    ("bodies", "named"),
    [
        ({"sample_rows": 0}, "bodies.sample_rows"),
        ({"parallel_tables": 0}, "bodies.parallel_tables"),
        ({"parallel_tables": True}, "bodies.parallel_tables"),
        ({"table_prefix": "Body"}, "bodies.table_prefix"),
        ({"tables": {"Sales.OrderPlaced": "Orders"}}, "bodies.tables.Sales.OrderPlaced"),
    ],
)
def test_bodies_config_is_checked(bodies: dict, named: str, tmp_path: Path) -> None:
    from queuelake.errors import ConfigError

    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        config("postgresql://unused/none", tmp_path, "delta-rs", **bodies)


def test_bodies_stopped_before_its_first_slice_records_an_interrupted_run(tmp_path: Path, spark) -> None:
    """A stop asked while Spark started: no slice runs, and the summary and the ``runs`` row say
    "interrupted" (they said "ok" with nothing done: a review); the next run types the journal."""
    from queuelake import stopping
    from queuelake.config import from_dict

    from tests.helpers.journal_rows import append, batch

    cfg = from_dict({"transport": {"connection": "x"}, "lake": {"root": str(tmp_path), "engine": "delta-rs"}}, env={})
    lake = open_lake(cfg.lake, spark)
    append(lake, batch('"public"."Sales"', range(0, 10), dt.datetime.now(dt.timezone.utc)))
    stopping.request()
    try:
        summary = bodies_run.bodies(cfg, spark, lake)
    finally:
        stopping.reset()
    assert summary["status"] == "interrupted", summary
    runs = [r for r in lake.read_arrow("runs").to_pylist() if r["run_id"] == summary["run_id"]]
    assert [(r["table"], r["status"]) for r in runs] == [("body_increments", "interrupted")], runs
    assert bodies_run.bodies(cfg, spark, lake)["status"] == "ok"

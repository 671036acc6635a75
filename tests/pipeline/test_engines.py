"""The pipeline on both lake engines, against real PostgreSQL, Spark and Delta.

Drain -> transform -> publish must give the same messages whichever engine writes the outputs (the
journal and ``runs`` are always written by delta-rs, see ``lake/engines.py`` ``journal_engine``), and
every table the pipeline leaves must read identically through the other engine: users read a lake
written by a delta-rs job from Databricks, and the other way round. Metastore names (``lake.catalog``
/ ``lake.schema``) are tested on the JVM engine's session catalog.

delta-spark runs where the Delta JVM jars are on the session's classpath (tests/conftest.py), else
skips saying why (fails with QUEUELAKE_REQUIRE_DELTA_JVM=1).
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from queuelake.commands.demo import orders, traffic
from queuelake.config import from_dict
from queuelake.config_sections import LakeConfig
from queuelake.errors import ConfigError, LakeError
from queuelake.lake import metastore
from queuelake.lake.delta_rs.engine import DeltaRsEngine
from queuelake.lake.delta_spark.engine import DeltaSparkEngine
from queuelake.lake.engines import journal_engine, open_lake
from queuelake.lake.marks import engine_of
from queuelake.nsb import headers as hdr
from queuelake.pipeline.journal.schema import MESSAGES
from queuelake.pipeline.message_ids import message_id
from queuelake.pipeline.runs import RUNS
from queuelake.pipeline.transform import checkpoint_app_id, transform
from queuelake.transport import db, installer, subscriptions
from queuelake.transport.table_refs import bridge_ref, queue_ref

from tests.helpers.jvm import require_delta_jvm
from tests.helpers.publish import drain_all
from tests.helpers.stages import drain, publish

ENGINES = ["delta-rs", "delta-spark"]
OUTPUT = "outbound_customer_totals"
BASE_EVENT = "Lakehouse.Events.ICustomerEvent"
TOTALS = "Lakehouse.Events.CustomerTotalsUpdated"
DISCOUNT = "Billing.Messages.Commands.ApplyLoyaltyDiscount"
# the key each table's rows are compared by (unique per row)
ROW_KEYS = {MESSAGES: ["queue", "seq"], RUNS: ["run_id", "command", "queue"], OUTPUT: ["key"]}


def pipeline_config(uri: str, root: Path, engine: str, **lake: object):
    return from_dict(
        {
            "transport": {"connection": uri},
            "lake": {"root": str(root), "engine": engine, **lake},
            "drain": {"queues": ["Sales"], "batch_size": 70, "workers_per_queue": 2},
            "transforms": [
                {
                    "name": "customer_totals",
                    "function": "queuelake.commands.demo.orders:customer_totals",
                    "output": OUTPUT,
                }
            ],
            "publish": {"endpoint": "Lakehouse", "outputs": [OUTPUT]},
        },
        env={},
    )


def seed(cfg, n: int, seed_: int) -> list:
    """Install Sales, Billing, Shipping; Shipping subscribes to the base event; n OrderPlaced in Sales."""
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=["Billing", "Shipping"]))
        subscriptions.subscribe(
            conn, bridge_ref("SubscriptionRouting", cfg.transport), "Shipping", "Shipping", BASE_EVENT
        )
        conn.commit()
    events = list(traffic.order_events(n, seed=seed_))
    with db.connect(cfg.transport) as conn:
        traffic.seed(conn, queue_ref("Sales", cfg.transport), events)
    return events


def expected_totals(events: list) -> dict[str, tuple[int, float]]:
    """Per customer: (orders, total), computed here from what was seeded, not by the pipeline."""
    acc: dict[str, list] = {}
    for m in events:
        body = orjson.loads(m.body)
        e = acc.setdefault(body["CustomerId"], [0, 0.0])
        e[0] += 1
        e[1] += body["Total"]
    return {c: (n, round(t, 2)) for c, (n, t) in acc.items()}


def engines_on(root: Path, spark) -> dict[str, object]:
    return {"delta-rs": DeltaRsEngine(str(root), spark), "delta-spark": DeltaSparkEngine(str(root), spark)}


def rows_by_key(table: pa.Table, keys: list[str], columns: list[str]) -> list[dict]:
    return table.select(columns).sort_by([(k, "ascending") for k in keys]).to_pylist()


def read_both(root: Path, spark, table: str) -> tuple[list[dict], list[dict]]:
    """The table's rows as delta-rs reads it (Arrow on the driver) and as delta-spark reads it (Spark
    DataFrame of the ``delta`` format), both cast to the schema the log declares and sorted by key."""
    rs, jvm = engines_on(root, spark)["delta-rs"], engines_on(root, spark)["delta-spark"]
    by_rs = rs.read_arrow(table)
    by_jvm = jvm.read(table).toArrow()
    columns = by_rs.column_names
    assert sorted(by_jvm.column_names) == sorted(columns), table
    by_jvm = by_jvm.select(columns).cast(by_rs.schema)
    keys = ROW_KEYS[table]
    return rows_by_key(by_rs, keys, columns), rows_by_key(by_jvm, keys, columns)


@pytest.mark.parametrize("engine", ENGINES)
def test_round_trip_on_engine(
    engine: str, fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeded orders in, exactly the expected events and commands out, on the configured engine; and
    every table the run leaves reads the same through both engines."""
    if engine == "delta-spark":
        require_delta_jvm(spark)
    monkeypatch.setattr(orders, "DISCOUNT_THRESHOLD", 500.0)
    root = tmp_path / "lake"
    cfg = pipeline_config(fresh_pg_uri, root, engine)
    events = seed(cfg, 240, seed_=12)
    expected = expected_totals(events)
    discounted = {c for c, (_, total) in expected.items() if total >= orders.DISCOUNT_THRESHOLD}
    assert 0 < len(discounted) < len(expected), "the seed must exercise both kinds of output"

    lake = open_lake(cfg.lake, spark)
    assert lake.name == engine
    drained = drain(cfg, lake)
    assert drained["landed"] == 240, drained
    t = transform(cfg, spark, lake)
    assert t["status"] == "ok" and t["transforms"][0]["rows_in"] == 240, t
    assert t["transforms"][0]["rows_out"] == len(expected) + len(discounted), t
    assert transform(cfg, spark, lake)["transforms"][0]["rows_out"] == 0, "a rerun must not repeat input"
    published = publish(cfg, spark, lake)
    assert published["status"] == "ok", published
    assert published["published"] == len(expected) + len(discounted), published
    again = publish(cfg, spark, lake)
    assert again["status"] == "ok" and again.get("published", 0) == 0, again
    # a compaction of the journal adds versions and no rows: the transform is not run on nothing, and its
    # checkpoint moves past them in a commit of no rows on the output's own engine (``rearranged``)
    before = lake.table_version(MESSAGES)
    journal_engine(lake).maintain(MESSAGES)
    assert lake.table_version(MESSAGES) > before, "the compaction made no version"
    moved = transform(cfg, spark, lake)["transforms"][0]
    assert moved["status"] == "ok" and moved["rows_in"] == moved["rows_out"] == moved["slices"] == 0, moved
    assert lake.last_version(OUTPUT, checkpoint_app_id("customer_totals")) == lake.table_version(MESSAGES)

    # the journal and runs are delta-rs's; outputs are the configured engine's (marked on the table)
    assert open_lake(cfg.lake, spark).name == engine
    for table, writer in ((MESSAGES, "delta-rs"), (OUTPUT, engine), (RUNS, "delta-rs")):
        meta = DeltaTable(str(root / table)).metadata()
        assert engine_of(meta.configuration, meta.description) == writer, (table, meta.configuration)

    # the target queues hold exactly the expected messages, once each
    shipping = drain_all(cfg, "Shipping")
    got_totals = {}
    for r in shipping:
        d = hdr.decode(r.headers, r.id)
        body = orjson.loads(r.body)
        assert d.message_intent == "Publish" and d.message_type == TOTALS
        assert body["CustomerId"] not in got_totals, "one event per customer"
        got_totals[body["CustomerId"]] = (body["Orders"], round(body["Total"], 2))
    assert got_totals == expected
    billing = drain_all(cfg, "Billing")
    got_discounts = {}
    for r in billing:
        d = hdr.decode(r.headers, r.id)
        body = orjson.loads(r.body)
        assert d.message_intent == "Send" and d.message_type == DISCOUNT
        assert body["CustomerId"] not in got_discounts
        got_discounts[body["CustomerId"]] = round(body["QualifyingTotal"], 2)
    assert got_discounts == {c: expected[c][1] for c in discounted}
    # deterministic message ids: uuid5 of (pipeline, key, destination), whichever engine wrote the key
    keys = lake.read_arrow(OUTPUT, columns=["key", "intent"]).to_pylist()
    pipeline = f"Lakehouse/{OUTPUT}"
    assert {hdr.decode(r.headers, r.id).message_id for r in billing} == {
        message_id(pipeline, k["key"], '"public"."Billing"') for k in keys if k["intent"] == "Send"
    }
    assert {hdr.decode(r.headers, r.id).message_id for r in shipping} == {
        message_id(pipeline, k["key"], '"public"."Shipping"') for k in keys if k["intent"] == "Publish"
    }

    # tables written by one engine read identically with the other
    for table in (MESSAGES, OUTPUT, RUNS):
        by_rs, by_jvm = read_both(root, spark, table)
        assert len(by_rs) > 0, table
        assert by_rs == by_jvm, f"{table}: delta-rs and delta-spark read different rows"
    journal_rows, _ = read_both(root, spark, MESSAGES)
    assert sorted(r["id"] for r in journal_rows) == sorted(str(m.id) for m in events)


def test_auto_engine_commands_with_and_without_spark_share_the_runs_table(
    fresh_pg_uri: str, tmp_path: Path, spark
) -> None:
    """``lake.engine: auto``: ``queuelake drain`` outside spark-submit has no session and writes with
    delta-rs; transform, with the Delta JVM classes, writes its outputs with delta-spark. Both append
    to ``runs``, in any order, and every run is recorded once."""
    require_delta_jvm(spark)
    root = tmp_path / "lake"
    cfg = pipeline_config(fresh_pg_uri, root, "auto")
    seed(cfg, 50, seed_=3)
    first = drain(cfg, open_lake(cfg.lake, None))  # no session: delta-rs
    assert first["status"] == "ok" and first["landed"] == 50, first
    lake = open_lake(cfg.lake, spark)
    assert lake.name == "delta-spark"
    transformed = transform(cfg, spark, lake)
    assert transformed["status"] == "ok" and transformed["transforms"][0]["rows_in"] == 50, transformed
    with db.connect(cfg.transport) as conn:
        traffic.seed(conn, queue_ref("Sales", cfg.transport), traffic.order_events(20, seed=4))
    again = drain(cfg, open_lake(cfg.lake, None))
    assert again["status"] == "ok" and again["landed"] == 20, again
    assert transform(cfg, spark, lake)["transforms"][0]["rows_in"] == 20
    runs = DeltaRsEngine(str(root)).read_arrow(RUNS).to_pylist()
    # the example transform reads the typed OrderPlaced table: each transform first brought it up to
    # the journal (the bodies step, recorded as its own run), as ``queuelake run`` would have
    assert sorted(r["command"] for r in runs) == ["bodies", "bodies", "drain", "drain", "transform", "transform"]
    meta = DeltaTable(str(root / RUNS)).metadata()
    assert engine_of(meta.configuration, meta.description) == "delta-rs"
    meta = DeltaTable(str(root / OUTPUT)).metadata()
    assert engine_of(meta.configuration, meta.description) == "delta-spark"


def test_journal_registered_by_name_in_session_catalog(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """With lake.catalog/lake.schema on the JVM engine, the tables a drain and a transform write are
    registered in the metastore: ``spark.table('<schema>.messages')`` reads the journal by name."""
    require_delta_jvm(spark)
    schema = "ql_" + uuid.uuid4().hex[:8]
    root = tmp_path / "lake"
    cfg = pipeline_config(fresh_pg_uri, root, "delta-spark", catalog="spark_catalog", schema=schema)
    seed(cfg, 60, seed_=3)
    lake = open_lake(cfg.lake, spark)
    try:
        assert drain(cfg, lake)["landed"] == 60
        assert transform(cfg, spark, lake)["status"] == "ok"
        by_name = spark.table(f"{schema}.{MESSAGES}")
        assert by_name.count() == 60
        assert sorted(r["seq"] for r in by_name.select("seq").collect()) == sorted(
            lake.read_arrow(MESSAGES, columns=["seq"]).column("seq").to_pylist()
        )
        assert spark.table(f"spark_catalog.{schema}.{OUTPUT}").count() == lake.read(OUTPUT).count() > 0
        assert spark.table(f"{schema}.{RUNS}").count() >= 1
        # the names point at the lake's folders, not at copies in the warehouse
        location = spark.sql(f"DESCRIBE DETAIL {schema}.{MESSAGES}").first()["location"]
        assert location.rstrip("/").endswith(str(root / MESSAGES))
    finally:
        spark.sql(f"DROP SCHEMA IF EXISTS spark_catalog.{schema} CASCADE")


def test_names_on_delta_rs_through_the_session(tmp_path: Path, spark) -> None:
    """delta-rs with a Spark session that has the Delta classes registers through it: tables already
    under the root when the lake is opened (written before names were configured) and tables created
    afterwards; a table by name reads what the engine wrote."""
    require_delta_jvm(spark)
    root = tmp_path / "o'brien_lake"  # the location is a quoted SQL literal: a quote must not break it
    plain = open_lake(LakeConfig(root=str(root), engine="delta-rs"), spark)
    before = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", None]})
    assert plain.append("older", before, "test/older", 1)
    schema = "ql_" + uuid.uuid4().hex[:8]
    lake = open_lake(LakeConfig(root=str(root), engine="delta-rs", catalog="spark_catalog", schema=schema), spark)
    try:
        assert lake.name == "delta-rs"
        assert sorted(r["id"] for r in spark.table(f"{schema}.older").collect()) == [1, 2, 3]
        assert [t.name for t in spark.catalog.listTables(schema)] == ["older"]
        assert lake.append("fresh", pa.table({"id": pa.array([7], pa.int64())}), "test/fresh", 1)
        assert [r["id"] for r in spark.table(f"spark_catalog.{schema}.fresh").collect()] == [7]
        # the name reads the engine's next commit too: it points at the folder, it is not a copy
        assert lake.append("fresh", pa.table({"id": pa.array([8], pa.int64())}), "test/fresh", 2)
        assert sorted(r["id"] for r in spark.table(f"{schema}.fresh").collect()) == [7, 8]
    finally:
        spark.sql(f"DROP SCHEMA IF EXISTS spark_catalog.{schema} CASCADE")
    # dropping the names never drops the data
    assert plain.read_arrow("fresh").num_rows == 2


def test_names_refused_or_warned(tmp_path: Path, spark, caplog: pytest.LogCaptureFixture) -> None:
    """Bad names are errors naming the key; without a Spark session the run warns and writes anyway."""
    with pytest.raises(ConfigError, match="lake.catalog needs lake.schema"):
        LakeConfig(root=str(tmp_path), catalog="spark_catalog")
    with pytest.raises(ConfigError, match="lake.schema 'bad name; DROP' cannot be a metastore name"):
        LakeConfig(root=str(tmp_path), engine="delta-rs", schema="bad name; DROP")  # refused as the config loads
    with pytest.raises(LakeError, match="lake.schema 'bad name; DROP'"):  # and by the metastore, behind it
        metastore.quote_identifier("bad name; DROP", "lake.schema")
    logger = logging.getLogger("queuelake")
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger="queuelake"):
            lake = open_lake(LakeConfig(root=str(tmp_path / "lake"), engine="delta-rs", schema="queuelake"), None)
    finally:
        logger.removeHandler(caplog.handler)
    assert "no Spark session in this run" in caplog.text and "queuelake" in caplog.text
    assert lake.append("t", pa.table({"id": pa.array([1], pa.int64())}), "test/t", 1)


def test_auto_keeps_each_table_with_the_engine_that_made_it(tmp_path: Path, spark) -> None:
    """lake.engine: auto decides per table (issue 35): a table made in a run without the Delta JVM
    classes (delta-rs) is still written by delta-rs once a run has them (it failed with "created by
    delta-rs, this job writes with delta-spark"), a new table goes to that run's engine, and a table
    delta-spark made is refused by a run without the JVM classes, saying what to change, before
    anything is written."""
    import pyarrow as pa
    from queuelake.config_sections import LakeConfig
    from queuelake.errors import LakeError
    from queuelake.lake.engines import open_lake as open_engine

    require_delta_jvm(spark)
    config = LakeConfig(root=str(tmp_path / "lake"), engine="auto")
    rows = pa.table({"key": ["a"], "n": [1]})
    without_jvm = open_engine(config)
    assert without_jvm.name == "delta-rs"
    without_jvm.append("made_by_rs", rows, "test/rs", 1)
    with_jvm = open_engine(config, spark)
    assert with_jvm.name == "delta-spark"
    assert with_jvm.append("made_by_rs", rows, "test/rs", 2)  # its own engine, not the run's
    with_jvm.append("made_by_spark", rows, "test/spark", 1)
    assert (with_jvm.written_by("made_by_rs"), with_jvm.written_by("made_by_spark")) == ("delta-rs", "delta-spark")
    assert with_jvm.read_arrow("made_by_rs").num_rows == 2
    again = open_engine(config)  # a run without the JVM classes again
    with pytest.raises(LakeError, match="made_by_spark.*made by delta-spark.*spark-packages"):
        again.append("made_by_spark", rows, "test/spark", 2)
    assert again.table_version("made_by_spark") == with_jvm.table_version("made_by_spark")  # nothing written
    assert again.append("made_by_rs", rows, "test/rs", 3)


def test_delta_spark_asked_for_without_its_jvm_classes_says_what_to_change(tmp_path: Path) -> None:
    """``lake.engine: delta-spark`` in a run whose session lacks the Delta classes failed at its first
    Delta call with "'JavaPackage' object is not callable" or a parse error at VACUUM, error_kind
    unexpected (found by a review); it is now a lake error that says what to change."""
    from queuelake.config_sections import LakeConfig
    from queuelake.errors import LakeError
    from queuelake.lake.engines import open_lake as open_engine

    class NoDelta:  # a session whose JVM knows no Delta class (has_delta_jvm asks it)
        _jvm = None

    with pytest.raises(LakeError, match="no Delta JVM classes.*spark-packages.*QUEUELAKE_DELTA_JARS"):
        open_engine(LakeConfig(root=str(tmp_path / "lake"), engine="delta-spark"), NoDelta())  # type: ignore[arg-type]
    # maintain's and erase's lake starts its session when a table first needs Spark: checked then, alike
    later = open_engine(LakeConfig(root=str(tmp_path / "lake"), engine="delta-spark"), None, start_spark=NoDelta)
    with pytest.raises(LakeError, match="no Delta JVM classes.*spark-packages.*QUEUELAKE_DELTA_JARS"):
        later.spark  # noqa: B018 - the first use starts (and checks) the session


def test_delta_classes_without_the_settings_that_turn_them_on_are_not_taken_for_delta(tmp_path: Path) -> None:
    """spark-submit with Delta's ``--packages`` and without its two ``--conf`` settings: ``auto`` chose
    delta-spark for the new tables, the drain ran, and ``bodies`` failed at its first table with
    CANNOT_CREATE_DATA_SOURCE_TABLE naming neither setting (a review). ``auto`` now writes them with
    delta-rs, saying why; ``delta-spark`` refuses, naming both."""
    from types import SimpleNamespace

    from queuelake.config_sections import LakeConfig
    from queuelake.errors import LakeError
    from queuelake.lake.engines import open_lake as open_engine

    loader = SimpleNamespace(getContextClassLoader=lambda: None)
    lang = SimpleNamespace(Thread=SimpleNamespace(currentThread=lambda: loader), Class=SimpleNamespace(forName=print))

    class ClassesOnly:  # the Delta classes on the classpath (has_delta_jvm finds them), no setting
        _jvm = SimpleNamespace(java=SimpleNamespace(lang=lang))
        conf = SimpleNamespace(get=lambda key, default=None: default)

    root = str(tmp_path / "lake")
    chosen = open_engine(LakeConfig(root=root, engine="auto"), ClassesOnly())  # type: ignore[arg-type]
    assert chosen.name == "delta-rs"
    with pytest.raises(LakeError, match="spark.sql.extensions=io.delta.*spark_catalog=.*DeltaCatalog"):
        open_engine(LakeConfig(root=root, engine="delta-spark"), ClassesOnly())  # type: ignore[arg-type]

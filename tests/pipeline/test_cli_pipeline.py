"""The scheduled job through its real entry point: `queuelake run`, then `queuelake maintain`,
with a SQL transform next to a Python one."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from deltalake import DeltaTable
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.lake.reading import read_table
from queuelake.transport import db, installer, queues, subscriptions
from queuelake.transport.table_refs import bridge_ref, queue_ref

from tests.helpers.cli import REPO, cli, cli_logged


@pytest.mark.slow
def test_run_then_maintain(fresh_pg_uri: str, tmp_path: Path) -> None:
    lake_root = tmp_path / "lake"
    conf = tmp_path / "job.yaml"
    conf.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
                "lake": {"root": str(lake_root), "engine": "auto"},
                "spark": {"master": "local[1]", "conf": {"spark.sql.shuffle.partitions": "1"}},
                "drain": {"queues": ["Sales"], "batch_size": 100},
                "transforms": [
                    {
                        "name": "activity",
                        "sql": str(REPO / "sql/transforms/messages_per_endpoint.sql"),
                        "output": "outbound_activity",
                    },
                ],
                "publish": {"endpoint": "Lakehouse", "outputs": ["outbound_activity"]},
            }
        )
    )
    cfg = from_dict({"transport": {"connection": fresh_pg_uri}, "drain": {"queues": ["Sales"]}}, env={})
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=["Monitoring"]))
        subscriptions.subscribe(
            conn,
            bridge_ref("SubscriptionRouting", cfg.transport),
            "Monitoring",
            "Monitoring",
            "Lakehouse.Events.EndpointActivity",
        )
        conn.commit()
        traffic.seed(conn, queue_ref("Sales", cfg.transport), traffic.order_events(250, seed=4))

    first = cli(["run", "-c", str(conf)], fresh_pg_uri, tmp_path)
    assert first["status"] == "ok", first
    assert first["drain"]["landed"] == 250
    assert first["transform"]["transforms"][0]["rows_out"] == 1  # one endpoint, one message type
    assert first["publish"]["copies"] == 1
    with db.connect(cfg.transport) as conn:
        rows = queues.receive_batch(conn, queue_ref("Monitoring", cfg.transport), 10)
        conn.commit()
    body = orjson.loads(rows[0].body)
    assert body == {**body, "Endpoint": "Sales", "MessageType": "Sales.Messages.Events.OrderPlaced", "Messages": 250}

    second, log = cli_logged(["run", "-c", str(conf)], fresh_pg_uri, tmp_path)  # nothing new anywhere
    assert second["status"] == "ok", second
    assert second["drain"]["dequeued"] == 0 and second["publish"]["copies"] == 0
    assert second["transform"]["transforms"][0]["note"] == "nothing new"
    # an idle run starts no Spark: it says so, and the JVM's start-up line never shows
    assert "transform: nothing new, no Spark session started" in log, log
    assert "publish: nothing new, no Spark session started" in log, log
    assert "incubator" not in log and "SparkContext" not in log, log
    for command in ("transform", "publish"):  # the same on their own
        idle, log = cli_logged([command, "-c", str(conf)], fresh_pg_uri, tmp_path)
        assert idle["status"] == "ok", idle
        assert f"{command}: nothing new, no Spark session started" in log and "incubator" not in log, log

    maintained = cli(["maintain", "-c", str(conf)], fresh_pg_uri, tmp_path)
    assert maintained["status"] == "ok"
    assert {"messages", "runs", "outbound_activity"} <= set(maintained["tables"])
    assert len(read_table(str(lake_root / "messages"))) == 250  # compaction keeps every row
    listed = cli(["tables", "-c", str(conf)], fresh_pg_uri, tmp_path)  # the lake, as an operator sees it
    by_name = {t["table"]: t for t in listed["tables"]}
    assert {"messages", "runs", "outbound_activity"} <= set(by_name), listed
    assert by_name["messages"]["engine"] == "delta-rs" and by_name["messages"]["files"] >= 1, listed
    assert by_name["messages"]["version"] >= 1 and by_name["outbound_activity"]["about"], listed  # outbound_{output}
    # The compaction made new versions but brought no rows: the next run moves the checkpoints past them
    # (one left behind would fail once the Delta log's retention drops those commits) with no Spark
    # session (it started one for nothing: a review), sends nothing, and the runs after it are idle.
    after, log = cli_logged(["run", "-c", str(conf)], fresh_pg_uri, tmp_path)
    assert after["status"] == "ok" and after["publish"]["copies"] == 0, after
    assert after["transform"]["transforms"][0]["rows_out"] == 0, after
    for step in ("bodies", "transform"):  # publish records its round of no rows, without a session too
        assert f"{step}: nothing new, no Spark session started" in log, log
    assert "incubator" not in log and "SparkContext" not in log, log
    assert "added no rows (a compaction or a delete); checkpoint moved" in log, log
    journal = DeltaTable(str(lake_root / "messages")).version()
    moved = {"outbound_activity": "queuelake.transform/activity", "body_increments": "queuelake.bodies"}
    for table, app_id in moved.items():
        assert DeltaTable(str(lake_root / table)).transaction_version(app_id) == journal, table
    again, log = cli_logged(["run", "-c", str(conf)], fresh_pg_uri, tmp_path)
    assert again["status"] == "ok" and again["publish"]["copies"] == 0, again
    assert "transform: nothing new, no Spark session started" in log, log
    assert "publish: nothing new, no Spark session started" in log and "incubator" not in log, log


def test_tables_on_an_empty_lake_says_so(tmp_path: Path) -> None:
    conf = tmp_path / "job.yaml"
    conf.write_text(json.dumps({"transport": {"connection": "unused"}, "lake": {"root": str(tmp_path / "lake")}}))
    # a lake root that does not exist is the same mistake to every command: exit 1, error_kind lake
    every = (["tables"], ["maintain"], ["erase", "--where", "seq = 1"], ["find", "--message-id", "x"])
    for args in (*every, ["where", "--message-id", "x"], ["health"], ["failures"], ["conversation", "x"]):
        failed, _ = cli_logged([*args, "-c", str(conf)], "unused", tmp_path)
        assert failed["status"] == "failed" and failed["error_kind"] == "lake", (args, failed)
        assert "does not exist" in failed["error"], failed
    (tmp_path / "lake").mkdir()
    summary, log = cli_logged(["tables", "-c", str(conf)], "unused", tmp_path)
    assert summary["status"] == "ok" and summary["tables"] == [], summary
    assert "tables: no lake tables under" in log and "nothing to show" in log, log

"""User expectations (great-expectations) per output, against real PostgreSQL, Spark and Delta.

A failing suite blocks the output's round: nothing reaches the queue, no ledger row, no rejects; a
rerun after the data is fixed publishes each row exactly once. No suite configured: GX is never
imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from queuelake.config import from_dict
from queuelake.errors import ConfigError
from queuelake.lake.engines import open_lake
from queuelake.lake.reading import read_table
from queuelake.transport import db, installer
from queuelake.transport.table_refs import queue_ref

from tests.helpers.stages import publish

OUTBOUND = pa.schema(
    [
        ("key", pa.string()),
        ("message_type", pa.string()),
        ("intent", pa.string()),
        ("destination", pa.string()),
        ("body", pa.binary()),
        ("total", pa.float64()),  # a business column the user's expectations are about
    ]
)
NON_NEGATIVE = {"expect_column_values_to_be_between": {"column": "total", "min_value": 0}}


def config(uri: str, lake_root: Path, expectations: dict | None = None, source: str | None = None):
    publish_section: dict = {"endpoint": "Lakehouse", "outputs": ["outbound_totals"], "batch_size": 2}
    if expectations is not None:
        publish_section["expectations"] = expectations
    return from_dict(
        {
            "transport": {"connection": uri},
            "lake": {"root": str(lake_root), "engine": "delta-rs"},
            "publish": publish_section,
        },
        env={},
        source=source,
    )


def rows(totals: list[float | None], intent: str = "Send") -> list[dict]:
    return [
        {
            "key": f"k{i}",
            "message_type": "Billing.Commands.Charge, Billing",
            "intent": intent,
            "destination": "Billing",
            "body": orjson.dumps({"i": i, "total": t}),
            "total": t,
        }
        for i, t in enumerate(totals)
    ]


def prepare(cfg, spark, data: list[dict]):
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=["Billing"]))
    lake = open_lake(cfg.lake, spark)
    lake.append("outbound_totals", pa.Table.from_pylist(data, schema=OUTBOUND), "test/outbound_totals", 1)
    return lake


def queued(cfg) -> int:
    with db.connect(cfg.transport) as conn:
        return conn.raw.execute(f"SELECT count(*) FROM {queue_ref('Billing', cfg.transport).qualified}").fetchone()[0]


def ledger_rows(cfg) -> int:
    with db.connect(cfg.transport) as conn:
        return conn.raw.execute('SELECT count(*) FROM "public"."queuelake_publish_ledger"').fetchone()[0]


def test_a_failing_suite_blocks_the_round_and_a_rerun_after_the_fix_publishes_once(
    fresh_pg_uri: str, tmp_path: Path, spark, capfd: pytest.CaptureFixture[str]
) -> None:
    expectations = [{"expect_column_values_to_not_be_null": {"column": "key"}}, NON_NEGATIVE]
    cfg = config(fresh_pg_uri, tmp_path / "lake", {"outbound_totals": expectations})
    data = rows([10.0, 20.5, -3.0, 7.0, 0.0])
    data.append({**rows([1.0])[0], "key": "no-destination", "destination": None})  # a contract reject
    lake = prepare(cfg, spark, data)

    blocked = publish(cfg, spark, lake)
    out = blocked["outputs"][0]
    assert blocked["status"] == "failed" and out["status"] == "blocked", blocked
    assert out["published"] == 0 and out["expectations"] == 2
    assert queued(cfg) == 0 and ledger_rows(cfg) == 0, "a blocked round sends nothing and records no batch"
    assert not lake.exists("outbound_totals_rejected"), "a blocked round writes nothing of the round"
    [failed] = out["failed_expectations"]
    assert failed["expectation_type"] == "expect_column_values_to_be_between"
    assert failed["column"] == "total" and failed["unexpected_count"] == 1
    assert -3.0 in failed["partial_unexpected_list"]
    assert "expect_column_values_to_be_between(total)" in out["error"]
    assert "Calculating Metrics" not in capfd.readouterr().err, "GX progress bars reached the job log"

    runs = [r for r in read_table(str(tmp_path / "lake" / "runs")).to_pylist() if r["command"] == "publish"]
    assert [r["status"] for r in runs] == ["blocked"]
    assert json.loads(runs[0]["failed_expectations"])[0]["unexpected_count"] == 1
    results = read_table(str(tmp_path / "lake" / "expectation_results")).to_pylist()
    assert [(r["output"], r["success"], r["failed"], r["run_id"]) for r in results] == [
        ("outbound_totals", False, 1, blocked["run_id"])
    ]
    gx_result = json.loads(results[0]["result"])  # GX's own validation result, readable later
    assert gx_result["success"] is False and len(gx_result["results"]) == 2

    again = publish(cfg, spark, lake)  # unchanged data: still blocked, still nothing sent
    assert again["outputs"][0]["status"] == "blocked" and queued(cfg) == 0

    DeltaTable(lake.path("outbound_totals")).delete("total < 0")  # the fix
    fixed = publish(cfg, spark, lake)
    out = fixed["outputs"][0]
    assert fixed["status"] == "ok" and out["status"] == "ok", fixed
    assert out["failed_expectations"] == [] and out["rejected"] == 1 and out["published"] == 4
    assert queued(cfg) == 4
    assert publish(cfg, spark, lake)["published"] == 0
    assert queued(cfg) == 4, "each row exactly once"
    assert read_table(str(tmp_path / "lake" / "outbound_totals_rejected")).num_rows == 1
    results = read_table(str(tmp_path / "lake" / "expectation_results")).to_pylist()
    assert sorted(r["success"] for r in results) == [False, False, True]


def test_a_passing_suite_file_lets_the_round_through(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    suite = {
        "name": "totals",
        "expectations": [
            {"type": "expect_column_values_to_be_between", "kwargs": {"column": "total", "min_value": 0}},
            # a suite saved by GX 0.x names the type "expectation_type"
            {"expectation_type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1}},
        ],
    }
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "totals.json").write_text(json.dumps(suite))
    # a relative path is taken relative to the config file
    cfg = config(
        fresh_pg_uri,
        tmp_path / "lake",
        {"outbound_totals": "suites/totals.json"},
        source=str(tmp_path / "publish.yaml"),
    )
    lake = prepare(cfg, spark, rows([1.0, 2.0, 3.0]))
    summary = publish(cfg, spark, lake)
    out = summary["outputs"][0]
    assert summary["status"] == "ok" and out["status"] == "ok", summary
    assert out["expectations"] == 2 and out["failed_expectations"] == []
    assert out["published"] == 3 and queued(cfg) == 3
    [result] = read_table(str(tmp_path / "lake" / "expectation_results")).to_pylist()
    assert result["success"] is True and result["suite"].endswith("totals.json")
    runs = [r for r in read_table(str(tmp_path / "lake" / "runs")).to_pylist() if r["command"] == "publish"]
    assert runs[0]["status"] == "ok" and runs[0]["failed_expectations"] is None


def test_an_inline_suite_that_passes(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    cfg = config(fresh_pg_uri, tmp_path / "lake", {"outbound_totals": [NON_NEGATIVE]})
    lake = prepare(cfg, spark, rows([0.0, 5.0]))
    summary = publish(cfg, spark, lake)
    assert summary["status"] == "ok" and summary["outputs"][0]["expectations"] == 1, summary
    assert queued(cfg) == 2


def test_a_resumed_round_is_finished_even_if_the_suite_now_fails(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """Batches of a round are only sent after its suite passed; a round resumed after a crash is not
    validated again, so a suite edited in between cannot leave it half sent."""
    cfg = config(fresh_pg_uri, tmp_path / "lake", {"outbound_totals": [NON_NEGATIVE]})
    lake = prepare(cfg, spark, rows([1.0, 2.0, -3.0, 4.0]))
    version = lake.table_version("outbound_totals")
    with db.connect(cfg.transport) as conn:  # batch 0 of 2 went out before the crash
        conn.raw.execute(
            'INSERT INTO "public"."queuelake_publish_ledger"'
            " (pipeline, output_table, batch_key, rows_sent, copies_sent) VALUES (%s, %s, %s, 2, 2)",
            ("Lakehouse/outbound_totals", "outbound_totals", f"-{version}:0/2@2"),
        )
        conn.commit()
    summary = publish(cfg, spark, lake)
    out = summary["outputs"][0]
    assert summary["status"] == "ok" and out["batches_skipped"] == 1 and out["published"] == 2, summary
    assert out["expectations"] == 0 and queued(cfg) == 2
    assert not lake.exists("expectation_results")


def test_suite_mistakes_are_config_errors_naming_them(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    lake_root = tmp_path / "lake"
    bad_name = config(fresh_pg_uri, lake_root, {"outbound_totals": [{"expect_totals_to_be_nice": {"column": "x"}}]})
    lake = prepare(bad_name, spark, rows([-1.0]))
    with pytest.raises(ConfigError, match="unknown expectation 'expect_totals_to_be_nice'"):
        publish(bad_name, spark, lake)
    no_column = config(fresh_pg_uri, lake_root, {"outbound_totals": [{"expect_column_values_to_not_be_null": {}}]})
    with pytest.raises(ConfigError, match="expect_column_values_to_not_be_null: invalid arguments"):
        publish(no_column, spark, lake)
    missing = config(fresh_pg_uri, lake_root, {"outbound_totals": str(tmp_path / "nope.json")})
    with pytest.raises(ConfigError, match="nope.json does not exist"):
        publish(missing, spark, lake)
    with pytest.raises(ConfigError, match="publish.expectations.outbound_other: not one of publish.outputs"):
        config(fresh_pg_uri, lake_root, {"outbound_other": [NON_NEGATIVE]})
    with pytest.raises(ConfigError, match="publish.expectations.outbound_totals"):
        config(fresh_pg_uri, lake_root, {"outbound_totals": {"column": "x"}})
    assert queued(bad_name) == 0 and not lake.exists("runs"), "a config error runs nothing"


NO_GX_SCRIPT = """
import json, sys
from queuelake.config import load
from queuelake.lake.engines import open_lake
from queuelake.context import open_database
from queuelake.pipeline.publish.run import publish
from queuelake.spark import get_spark
cfg = load(sys.argv[1])
spark = get_spark(cfg.spark)
summary = publish(cfg, open_database(cfg), spark, open_lake(cfg.lake, spark))
print(json.dumps({"status": summary["status"], "published": summary["published"],
                  "gx": "great_expectations" in sys.modules}))
"""


def test_without_expectations_great_expectations_is_never_imported(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    lake_root = tmp_path / "lake"
    cfg = config(fresh_pg_uri, lake_root)
    prepare(cfg, spark, rows([1.0, -2.0]))
    conf = tmp_path / "publish.yaml"
    conf.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
                "lake": {"root": str(lake_root), "engine": "delta-rs"},
                "spark": {"master": "local[1]", "conf": {"spark.sql.shuffle.partitions": "1"}},
                "publish": {"endpoint": "Lakehouse", "outputs": ["outbound_totals"]},
            }
        )
    )
    env = {**os.environ, "QUEUELAKE_CONNECTION": fresh_pg_uri}
    proc = subprocess.run(
        [sys.executable, "-c", NO_GX_SCRIPT, str(conf)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last == {"status": "ok", "published": 2, "gx": False}
    assert queued(cfg) == 2


def test_an_expectation_on_a_column_the_table_lacks_says_so_in_the_error(
    fresh_pg_uri: str, tmp_path: Path, spark
) -> None:
    """An expectation naming a column the outbound table does not have failed the round with its name
    alone; why was said only inside the stored GX result (a review). The error says it now."""
    typo = {"expect_column_values_to_not_be_null": {"column": "totl"}}
    cfg = config(fresh_pg_uri, tmp_path / "lake", {"outbound_totals": [typo]})
    lake = prepare(cfg, spark, rows([0.0, 5.0]))
    out = publish(cfg, spark, lake)["outputs"][0]
    assert out["status"] == "blocked" and queued(cfg) == 0, out
    assert "expect_column_values_to_not_be_null(totl) could not be evaluated: " in out["error"], out["error"]
    assert "totl" in out["error"].split("could not be evaluated: ", 1)[1], out["error"]

"""User expectations on the journal rows a transform reads: real PostgreSQL, Spark, Delta and GX.

A failing suite blocks the transform's increment (nothing written, its checkpoint stays, GX's details
in the summary, ``runs`` and ``expectation_results``); once the suite passes, the increment is
transformed exactly once.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.errors import ConfigError
from queuelake.lake.engines import open_lake
from queuelake.lake.reading import read_table
from queuelake.pipeline.transform import transform
from queuelake.transport import db, installer
from queuelake.transport.table_refs import queue_ref

from tests.helpers.stages import drain


def config(uri: str, lake_root: Path, expectations: list | None):
    return from_dict(
        {
            "transport": {"connection": uri},
            "lake": {"root": str(lake_root), "engine": "delta-rs"},
            "drain": {"queues": ["Sales"], "batch_size": 100},
            "transforms": [
                {
                    "name": "customer_totals",
                    "function": "queuelake.commands.demo.orders:customer_totals",
                    "output": "outbound_customer_totals",
                    "expectations": expectations,
                }
            ],
        },
        env={},
    )


def test_a_failing_journal_suite_blocks_the_transform_until_it_passes(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    lake_root = tmp_path / "lake"
    # the business rule: every journal row has a conversation; "at most 100 orders an increment" fails
    too_strict = [
        {"expect_column_values_to_not_be_null": {"column": "conversation_id"}},
        {"expect_table_row_count_to_be_between": {"min_value": 1, "max_value": 100}},
    ]
    cfg = config(fresh_pg_uri, lake_root, too_strict)
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        traffic.seed(conn, queue_ref("Sales", cfg.transport), traffic.order_events(250, seed=3))
    lake = open_lake(cfg.lake, spark)
    assert drain(cfg, lake)["landed"] == 250

    blocked = transform(cfg, spark, lake)
    [out] = blocked["transforms"]
    assert blocked["status"] == "failed" and out["status"] == "blocked", blocked
    assert out["expectations"] == 2 and out["rows_out"] == 0
    [failed] = out["failed_expectations"]
    assert failed["expectation_type"] == "expect_table_row_count_to_be_between" and failed["observed_value"] == 250
    assert "expect_table_row_count_to_be_between" in out["error"]
    assert not lake.exists("outbound_customer_totals"), "a blocked increment writes nothing"
    assert transform(cfg, spark, lake)["transforms"][0]["status"] == "blocked", "still blocked: same increment"

    fixed = config(fresh_pg_uri, lake_root, [too_strict[0]])
    done = transform(fixed, spark, lake)
    [out] = done["transforms"]
    assert done["status"] == "ok" and out["rows_in"] == 250 and out["expectations"] == 1, done
    assert transform(fixed, spark, lake)["transforms"][0]["rows_in"] == 0, "the increment is transformed once"

    results = read_table(str(lake_root / "expectation_results")).to_pylist()
    assert [r["success"] for r in sorted(results, key=lambda r: r["validated_at"])] == [False, False, True]
    assert {r["output"] for r in results} == {"messages:customer_totals"}
    assert json.loads(results[0]["result"])["results"], "GX's own validation result is kept"
    runs = [r for r in read_table(str(lake_root / "runs")).to_pylist() if r["command"] == "transform"]
    blocked_runs = [r for r in runs if r["status"] == "blocked"]
    assert len(blocked_runs) == 2 and "expect_table_row_count" in blocked_runs[0]["failed_expectations"]


def test_journal_suite_mistakes_are_config_errors_naming_the_transform(fresh_pg_uri: str, tmp_path: Path, spark):
    lake_root = tmp_path / "lake"
    cfg = config(fresh_pg_uri, lake_root, [{"expect_column_values_to_be_purple": {"column": "body"}}])
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        traffic.seed(conn, queue_ref("Sales", cfg.transport), traffic.order_events(5, seed=1))
    lake = open_lake(cfg.lake, spark)
    drain(cfg, lake)
    with pytest.raises(ConfigError, match=r"transforms\.customer_totals\.expectations: unknown expectation"):
        transform(cfg, spark, lake)
    with pytest.raises(ConfigError, match="transforms.customer_totals.expectations: give a suite"):
        config(fresh_pg_uri, lake_root, [])

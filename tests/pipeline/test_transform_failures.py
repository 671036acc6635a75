"""A transform whose Spark job fails: it fails alone, the next transform still runs, and its increment
is read again by the next run (real PostgreSQL, Spark, Delta)."""

from __future__ import annotations

from pathlib import Path

from queuelake import stopping
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.lake.engines import open_lake
from queuelake.pipeline.transform import transform
from queuelake.transport import db, installer
from queuelake.transport.table_refs import queue_ref

from tests.helpers.stages import drain


def test_a_transform_whose_spark_job_fails_fails_alone(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """A user's UDF raising on one message raised out of ``transform`` (only the project's own errors
    were caught): the transforms after it never ran, nor did ``run``'s publish (found by a review)."""
    settings = {
        "transport": {"connection": fresh_pg_uri},
        "lake": {"root": str(tmp_path / "lake"), "engine": "delta-rs"},
        "drain": {"queues": ["Sales"], "batch_size": 100},
        "transforms": [
            {"name": "poisoned", "function": "tests.helpers.transforms:poisoned", "output": "t_poisoned"},
            {"name": "seqs", "function": "tests.helpers.transforms:seqs", "output": "t_seqs"},
        ],
    }
    cfg = from_dict(settings, env={})
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        traffic.seed(conn, queue_ref("Sales", cfg.transport), traffic.order_events(20, seed=5))
    lake = open_lake(cfg.lake, spark)
    assert drain(cfg, lake)["landed"] == 20

    out = transform(cfg, spark, lake)
    by_name = {t["transform"]: t for t in out["transforms"]}
    assert out["status"] == "failed"
    assert by_name["poisoned"]["status"] == "failed"
    assert "cannot handle the message at seq 7" in by_name["poisoned"]["error"]
    assert by_name["seqs"]["status"] == "ok" and by_name["seqs"]["rows_out"] == 20
    assert not lake.exists("t_poisoned") or lake.read_arrow("t_poisoned").num_rows == 0
    # the failed one's increment is still its own: the next run reads it again (and fails again)
    again = {t["transform"]: t for t in transform(cfg, spark, lake)["transforms"]}
    assert again["poisoned"]["status"] == "failed" and again["seqs"]["rows_in"] == 0

    # a stop signal, then a transform failing on its own: the command is interrupted (exit 143), the
    # failure named; the transforms after it are skipped (it said "failed", exit 1: a review)
    stopped = {"name": "stopped", "function": "tests.helpers.transforms:stopped_then_broken", "output": "t_stopped"}
    cfg = from_dict({**settings, "transforms": [stopped, *settings["transforms"]]}, env={})
    try:
        out = transform(cfg, spark, lake)
    finally:
        stopping.reset()
    assert out["status"] == "interrupted", out
    assert out["failed_transforms"] == ["stopped"] and out["skipped"] == ["poisoned", "seqs"], out
    assert "broken after the stop signal" in out["transforms"][0]["error"]
    # the transforms the stop left have their runs rows (a stop while Spark started left none: a review)
    runs = [r for r in lake.read_arrow("runs").to_pylist() if r["run_id"] == out["run_id"]]
    assert sorted((r["table"], r["status"]) for r in runs) == [
        ("t_poisoned", "interrupted"),
        ("t_seqs", "interrupted"),
        ("t_stopped", "failed"),
    ], runs

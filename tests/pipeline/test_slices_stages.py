"""bodies and transform take a large increment a slice at a time (``spark.slice_rows``), each slice
committed: the same rows land as in one go, each once; a run killed after a slice resumes at the next
(issue 57: a first backlog of 5M journal rows ran the default local Spark out of memory). Real
PostgreSQL, real drain, real Spark, real Delta tables."""

from __future__ import annotations

from pathlib import Path

import pytest
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.errors import ConfigError
from queuelake.lake.engines import open_lake
from queuelake.pipeline import transform as transform_mod
from queuelake.pipeline.bodies import run as bodies_run
from queuelake.transport import db, installer
from queuelake.transport.table_refs import queue_ref

from tests.helpers.stages import drain

ORDERS = "body_sales_messages_events_orderplaced"
OUTPUT = "outbound_customer_totals"


def _config(uri: str, root: Path, slice_rows: int):
    return from_dict(
        {
            "transport": {"connection": uri},
            "lake": {"root": str(root), "engine": "delta-rs"},
            "spark": {"slice_rows": slice_rows},
            "drain": {"queues": ["Sales"], "batch_size": 50, "workers_per_queue": 1},
            "transforms": [
                {
                    "name": "customer_totals",
                    "function": "queuelake.commands.demo.orders:customer_totals",
                    "output": OUTPUT,
                    "destinations": ["Billing"],
                }
            ],
        },
        env={},
    )


def _drained_orders(uri: str, tmp_path: Path, spark):
    """360 orders drained into a journal of 100-row slices: the config and the lake."""
    cfg = _config(uri, tmp_path / "lake", 100)
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=["Billing"]))
        traffic.seed(conn, queue_ref("Sales", cfg.transport), traffic.order_events(360, seed=3))
        conn.commit()
    lake = open_lake(cfg.lake, spark)
    assert drain(cfg, lake)["landed"] == 360
    return cfg, lake


def _crash_on_append(monkeypatch: pytest.MonkeyPatch, lake, n: int) -> None:  # type: ignore[no-untyped-def]
    """The driver dies in the ``n``-th typed-table append of the run (``monkeypatch.undo`` ends it)."""
    real = type(lake).append_dataframe
    calls = {"n": 0}

    def crash_on_the_nth(self, table: str, df, app_id: str, version: int) -> bool:  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == n:
            raise OSError("the driver died here")
        return real(self, table, df, app_id, version)

    monkeypatch.setattr(type(lake), "append_dataframe", crash_on_the_nth)


@pytest.mark.slow
def test_slices_land_every_row_once_and_a_failed_slice_resumes(
    fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg, lake = _drained_orders(fresh_pg_uri, tmp_path, spark)
    upto = lake.table_version("messages")
    assert upto is not None and len(lake.slices("messages", None, upto, 100)) >= 4

    # a crash in the third slice: the first two are committed, their rows written once
    _crash_on_append(monkeypatch, lake, 3)
    failed = bodies_run.bodies(cfg, spark, lake)
    assert failed["status"] == "failed" and failed["slices"] == 3, failed
    assert lake.read_arrow("body_increments").num_rows == 2  # two slices committed
    partial = lake.read_arrow(ORDERS, columns=["message_id"]).column("message_id").to_pylist()
    assert 0 < len(partial) < 360 and len(partial) == len(set(partial))
    monkeypatch.undo()

    again = bodies_run.bodies(cfg, spark, lake)
    assert again["status"] == "ok" and again["slices"] >= 2 and again["journal_version"] == upto, again
    ids = lake.read_arrow(ORDERS, columns=["message_id"]).column("message_id").to_pylist()
    assert len(ids) == 360 == len(set(ids))  # every order once
    assert again["rows_read"] + failed["rows_read"] - 100 <= 360  # the failed slice read again, no more
    assert bodies_run.bodies(cfg, spark, lake).get("note") == "nothing new"

    done = transform_mod.transform(cfg, spark, lake)
    (one,) = done["transforms"]
    assert one["status"] == "ok" and one["rows_in"] == 360 and one["slices"] >= 4, one
    assert lake.last_version(OUTPUT, transform_mod.checkpoint_app_id("customer_totals")) == upto
    assert transform_mod.transform(cfg, spark, lake)["transforms"][0].get("note") == "nothing new"


@pytest.mark.slow
def test_a_first_run_after_an_erase_and_a_compaction_takes_slices_and_resumes(
    fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stages' first run on a journal an erase and a ``maintain`` (compaction, vacuum) rewrote: it
    took the whole journal in one slice (a review: 4.8M rows, the memory and the Ctrl-C of the backlog).
    It now takes slices read by batch id from the compacted files, every kept row once, and a run
    stopped by a failure in a slice resumes by the usual increments from the slices it committed."""
    from queuelake.pipeline.store.erase import erase

    cfg, lake = _drained_orders(fresh_pg_uri, tmp_path, spark)
    journal = lake.read_arrow("messages", columns=["message_id"]).column("message_id").to_pylist()
    erased = sorted(journal)[:5]
    listed = ", ".join(f"'{m}'" for m in erased)
    assert erase(cfg, lake, f"message_id IN ({listed})")["tables"]["messages"]["rows"] == 5
    lake.maintain("messages", retention_hours=0)  # compacted, and the files before it vacuumed
    upto = lake.table_version("messages")
    assert upto is not None and len(lake.slices("messages", None, upto, 100)) >= 3

    _crash_on_append(monkeypatch, lake, 2)
    failed = bodies_run.bodies(cfg, spark, lake)
    assert failed["status"] == "failed" and failed["slices"] == 2, failed
    monkeypatch.undo()
    again = bodies_run.bodies(cfg, spark, lake)
    assert again["status"] == "ok" and again["journal_version"] == upto, again
    ids = lake.read_arrow(ORDERS, columns=["message_id"]).column("message_id").to_pylist()
    assert sorted(ids) == sorted(set(journal) - set(erased))  # every kept order once, no erased one

    done = transform_mod.transform(cfg, spark, lake)
    (one,) = done["transforms"]
    assert one["status"] == "ok" and one["rows_in"] == 355 and one["slices"] >= 3, one


@pytest.mark.slow
def test_new_rows_a_compaction_merged_with_rows_read_before_are_taken_in_slices(
    fresh_pg_uri: str, tmp_path: Path, spark
) -> None:
    """bodies and a transform read 360 orders; 360 more are drained, then a ``maintain`` (compaction,
    vacuum) merges old and new rows into one file and an erase removes one new order: the next run took
    the new rows in one slice (a review: 5M rows, the backlog's memory). It takes them in slices by batch
    id, each new order once, no old one again, the erased one never."""
    from queuelake.pipeline.store.erase import erase

    cfg, lake = _drained_orders(fresh_pg_uri, tmp_path, spark)
    assert bodies_run.bodies(cfg, spark, lake)["status"] == "ok"
    assert transform_mod.transform(cfg, spark, lake)["transforms"][0]["rows_in"] == 360
    old = set(lake.read_arrow("messages", columns=["message_id"]).column("message_id").to_pylist())
    with db.connect(cfg.transport) as conn:
        traffic.seed(conn, queue_ref("Sales", cfg.transport), traffic.order_events(360, seed=4))
        conn.commit()
    assert drain(cfg, lake)["landed"] == 360
    new = set(lake.read_arrow("messages", columns=["message_id"]).column("message_id").to_pylist()) - old
    lake.maintain("messages", retention_hours=0)
    gone = sorted(new)[0]
    assert erase(cfg, lake, f"message_id = '{gone}'")["tables"]["messages"]["rows"] == 1

    again = bodies_run.bodies(cfg, spark, lake)
    assert again["status"] == "ok" and again["slices"] >= 3 and again["rows_read"] == 359, again
    ids = lake.read_arrow(ORDERS, columns=["message_id"]).column("message_id").to_pylist()
    assert len(ids) == len(set(ids)) and set(ids) == (old | new) - {gone}
    (one,) = transform_mod.transform(cfg, spark, lake)["transforms"]
    assert one["status"] == "ok" and one["rows_in"] == 359 and one["slices"] >= 3, one


@pytest.mark.slow
def test_a_slice_whose_own_job_fails_is_recorded_with_the_slices_before_it(
    fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slice's own Spark job failing (the samples' job ran out of memory in a review's first backlog)
    ended the command with no ``runs`` row, and its summary did not name the slices committed before."""
    from queuelake.pipeline.bodies import schema_plan

    cfg, lake = _drained_orders(fresh_pg_uri, tmp_path, spark)
    real, calls = schema_plan.samples, {"n": 0}

    def broken_on_the_second(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("the samples' job died here")
        return real(*args, **kwargs)

    monkeypatch.setattr(schema_plan, "samples", broken_on_the_second)
    failed = bodies_run.bodies(cfg, spark, lake)
    assert failed["status"] == "failed" and failed["slices"] == 2, failed
    assert failed["error"] == "RuntimeError: the samples' job died here" and failed["journal_version"] is not None
    assert lake.read_arrow("body_increments").num_rows == 1  # the first slice stays committed
    runs = [r for r in lake.read_arrow("runs").to_pylist() if r["run_id"] == failed["run_id"]]
    assert {(r["table"], r["status"]) for r in runs} >= {("body_increments", "failed"), (ORDERS, "ok")}, runs


@pytest.mark.slow
def test_a_stop_now_inside_a_slice_keeps_the_slices_before_it_in_the_summary_and_runs(
    fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second signal inside a slice ended ``bodies`` with "interrupted" alone: no counts and no
    ``runs`` row for the slices committed before it (a review). They now go with the stop."""
    from queuelake import stopping
    from queuelake.pipeline.bodies import schema_plan

    cfg, lake = _drained_orders(fresh_pg_uri, tmp_path, spark)
    real, calls = schema_plan.samples, {"n": 0}

    def stopped_on_the_second(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 2:
            raise stopping.Interrupted("stopped by signal SIGTERM")
        return real(*args, **kwargs)

    monkeypatch.setattr(schema_plan, "samples", stopped_on_the_second)
    with pytest.raises(stopping.Interrupted) as stopped:
        bodies_run.bodies(cfg, spark, lake)
    done = stopping.done_before(stopped.value)["bodies"]
    assert done["status"] == "interrupted" and done["slices"] == 1 and done["rows_written"] > 0, done
    assert lake.read_arrow("body_increments").num_rows == 1  # the first slice stays committed
    runs = [r for r in lake.read_arrow("runs").to_pylist() if r["run_id"] == done["run_id"]]
    assert {(ORDERS, "ok"), ("body_increments", "interrupted")} <= {(r["table"], r["status"]) for r in runs}, runs


@pytest.mark.slow
def test_a_transform_stopped_between_slices_says_so_with_the_slices_it_did(
    fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop asked after a transform's first slice: the command said "interrupted" while the transform's
    own entry said "ok" with every slice (a review). It says interrupted, the slices done and left; the
    next run takes the rest, each row once."""
    from queuelake import stopping

    cfg, lake = _drained_orders(fresh_pg_uri, tmp_path, spark)
    real = transform_mod._transform_slice

    def stop_after_it(*args, **kwargs):  # type: ignore[no-untyped-def]
        out = real(*args, **kwargs)
        stopping.request()
        return out

    monkeypatch.setattr(transform_mod, "_transform_slice", stop_after_it)
    try:
        done = transform_mod.transform(cfg, spark, lake)
    finally:
        stopping.reset()
        monkeypatch.undo()
    (one,) = done["transforms"]
    assert done["status"] == "interrupted" and "failed_transforms" not in done, done
    assert one["status"] == "interrupted" and one["slices"] == 1 and one["slices_left"] >= 3, one
    again = transform_mod.transform(cfg, spark, lake)
    (rest,) = again["transforms"]
    assert again["status"] == "ok" and rest["rows_in"] + one["rows_in"] == 360, (one, rest)


def test_slice_rows_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="spark.slice_rows"):
        _config("x", tmp_path, 0)


@pytest.mark.slow
def test_a_transform_after_an_erase_of_old_and_new_rows_reads_each_new_row_once(
    fresh_pg_uri: str, tmp_path: Path, spark
) -> None:
    """An erase whose delete rewrites a file the transform read and a new one writes their kept rows into
    one file; the transform read that file whole and counted the earlier rows again (found by a review).
    It now reads the increment's batches only: each new row once, the erased one not at all."""
    from queuelake.pipeline.store.erase import erase

    sql = tmp_path / "ids.sql"
    sql.write_text("SELECT message_id, seq FROM new_messages", encoding="utf-8")
    cfg = from_dict(
        {
            "transport": {"connection": fresh_pg_uri},
            "lake": {"root": str(tmp_path / "lake"), "engine": "delta-rs"},
            "drain": {"queues": ["Sales"], "batch_size": 500, "workers_per_queue": 1},
            "transforms": [{"name": "ids", "sql": str(sql), "output": "seen_ids"}],
        },
        env={},
    )
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        traffic.seed(conn, queue_ref("Sales", cfg.transport), traffic.order_events(40, seed=4))
        conn.commit()
    lake = open_lake(cfg.lake, spark)
    assert drain(cfg, lake)["landed"] == 40
    first = transform_mod.transform(cfg, spark, lake)["transforms"][0]
    assert first["status"] == "ok" and first["rows_in"] == 40, first
    with db.connect(cfg.transport) as conn:
        traffic.seed(conn, queue_ref("Sales", cfg.transport), traffic.order_events(30, seed=5))
        conn.commit()
    assert drain(cfg, lake)["landed"] == 30
    journal = lake.read_arrow("messages", columns=["message_id", "seq"]).sort_by("seq").to_pylist()
    old, new = journal[0]["message_id"], journal[-1]["message_id"]
    erase(cfg, lake, f"message_id IN ('{old}', '{new}')")
    version = lake.table_version("messages")
    read = lake.last_version("seen_ids", transform_mod.checkpoint_app_id("ids"))
    assert lake.added_batches("messages", read, version), "the erase did not mix old and new rows"

    second = transform_mod.transform(cfg, spark, lake)["transforms"][0]
    assert second["status"] == "ok" and second["rows_in"] == 29, second
    ids = lake.read_arrow("seen_ids", columns=["message_id"]).column("message_id").to_pylist()
    # the first run's 40 (an output is the user's table: erase leaves it), then the 29 new ones kept
    assert len(ids) == len(set(ids)) == 40 + 29 and new not in ids


@pytest.mark.slow
def test_bodies_after_an_erase_of_old_and_new_rows_record_each_unparsed_row_once(
    fresh_pg_uri: str, tmp_path: Path, spark
) -> None:
    """As the transform above: bodies read the file the erase rewrote whole, and appended the earlier
    rows' unparsed records again (the typed rows were deduplicated by message id, the unparsed ones
    only against this increment's: found by a review). It reads the increment's batches only."""
    import uuid

    from queuelake.nsb import headers as hdr
    from queuelake.pipeline.store.erase import erase
    from queuelake.transport.queues import OutgoingMessage

    def message(i: int, body: bytes) -> OutgoingMessage:
        headers = {
            hdr.MESSAGE_ID: str(uuid.UUID(int=i + 1)),
            hdr.ENCLOSED_MESSAGE_TYPES: "Shop.Ordered, Shop",
            hdr.CONTENT_TYPE: "application/json",
            hdr.MESSAGE_INTENT: "Send",
        }
        return OutgoingMessage(hdr.encode(headers), body, id=str(uuid.UUID(int=i + 1)))

    cfg = from_dict(
        {
            "transport": {"connection": fresh_pg_uri},
            "lake": {"root": str(tmp_path / "lake"), "engine": "delta-rs"},
            "drain": {"queues": ["Sales"], "batch_size": 500, "workers_per_queue": 1},
        },
        env={},
    )
    sales = queue_ref("Sales", cfg.transport)
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        traffic.seed(conn, sales, [message(i, b"not json" if i % 4 == 0 else b'{"X": 1}') for i in range(40)])
        conn.commit()
    lake = open_lake(cfg.lake, spark)
    assert drain(cfg, lake)["landed"] == 40
    first = bodies_run.bodies(cfg, spark, lake)
    assert first["status"] == "ok" and first["unparsed"] == 10, first
    with db.connect(cfg.transport) as conn:
        traffic.seed(conn, sales, [message(100 + i, b'{"X": 2}') for i in range(30)])
        conn.commit()
    assert drain(cfg, lake)["landed"] == 30
    journal = lake.read_arrow("messages", columns=["message_id", "seq"]).sort_by("seq").to_pylist()
    old, new = journal[1]["message_id"], journal[-1]["message_id"]  # a parsed old row, a new one
    erase(cfg, lake, f"message_id IN ('{old}', '{new}')")
    read = bodies_run.checkpoint(lake)
    assert lake.added_batches("messages", read, lake.table_version("messages")), "the erase did not mix rows"

    second = bodies_run.bodies(cfg, spark, lake)
    assert second["status"] == "ok" and second["rows_read"] == 29 and second["unparsed"] == 0, second
    unparsed = lake.read_arrow("body_unparsed", columns=["queue", "id"]).to_pylist()
    assert len(unparsed) == len({(r["queue"], r["id"]) for r in unparsed}) == 10

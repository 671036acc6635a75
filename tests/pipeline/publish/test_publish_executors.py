"""Publishing from Spark executors: real PostgreSQL, a real local Spark (its Python workers killed for
real), real Delta tables. The promise is the driver's: each row reaches each destination once."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest
from queuelake.lake.engines import open_lake
from queuelake.lake.reading import read_table
from queuelake.pipeline.publish.rounds import Round, parse_round
from queuelake.transport import db, ledger
from queuelake.transport.table_refs import bridge_ref

from tests.helpers.publish import KILL_SCRIPT, config, drain_all, row, setup_db, subscribe, write_outbound
from tests.helpers.stages import publish

EVENT = "Big.Event"


def outbound(lake, name: str, files: int, per_file: int) -> tuple[set[str], set[str]]:
    """``files`` appends (a file, one row group each) of Sends to Target and events; returns the keys."""
    sends, events = set(), set()
    for f in range(files):
        rows = []
        for i in range(per_file):
            key = f"k{f}-{i}"
            if i % 2:
                rows.append(row(key, "Send", "Target", "Big.Command"))
                sends.add(key)
            else:
                rows.append(row(key, message_type=EVENT))
                events.add(key)
        write_outbound(lake, name, rows, version=f + 1)
    return sends, events


def ledger_keys(cfg, output: str) -> list[str]:
    with db.connect(cfg.transport) as conn:
        ref = bridge_ref(cfg.transport.ledger_table, cfg.transport)
        return [k for k in ledger.batch_keys(conn, ref, f"Lakehouse/{output}", output) if not k.startswith("table:")]


def assert_exactly_once(cfg, sends: set[str], events: set[str], subscribers: tuple[str, ...] = ("Sub1", "Sub2")):
    for queue, want in (("Target", sends), *((s, events) for s in subscribers)):
        got = [orjson.loads(r.body)["key"] for r in drain_all(cfg, queue)]
        dupes = [k for k, n in Counter(got).items() if n > 1]
        assert not dupes, f"{queue}: {len(dupes)} key(s) twice, e.g. {dupes[:3]}"
        assert set(got) == want, f"{queue}: {len(want - set(got))} missing"


def set_worker_kill(spark, spec: str | None) -> None:
    """Python workers get the SparkContext's environment: a new spec starts new workers with it."""
    if spec is None:
        spark.sparkContext.environment.pop("QUEUELAKE_TEST_KILL_AT", None)
    else:
        spark.sparkContext.environment["QUEUELAKE_TEST_KILL_AT"] = spec


def test_batch_keys_carry_the_layout() -> None:
    for rnd in (Round(None, 3, 500), Round(3, 9, 7, "g")):
        assert parse_round(rnd.key(4, 12)) == (rnd, 4, 12)
    assert Round(3, 9, 7, "g").key(0, 2) == "3-9:0/2@7g"


def test_killed_tasks_leave_the_rest_to_the_next_run(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """Workers SIGKILLed before and after a batch's commit: the run fails, the next one sends the rest;
    every copy once, every undeliverable copy recorded once, every batch key in the row-group layout."""
    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_x"], [], batch_size=40, executors_from_rows=1)
    setup_db(cfg, ["Target", "Sub1", "Sub2"])
    for queue in ("Sub1", "Sub2", "Gone"):  # Gone has no table: its copies are undeliverable
        subscribe(cfg, queue, queue, EVENT)
    lake = open_lake(cfg.lake, spark)
    sends, events = outbound(lake, "outbound_x", files=4, per_file=200)  # 4 units of 5 batches
    try:
        for spec in ("after_publish_commit:2", "before_publish_commit:3"):
            set_worker_kill(spark, spec)
            killed = publish(cfg, spark, lake)
            out = killed["outputs"][0]
            assert killed["status"] == "failed" and "publish task failed" in out["error"], out
            assert out["batches"] > 0 and out["published"] == 40 * out["batches"], "what went, from the ledger"
            assert out["copies"] >= out["published"], out  # each row's copies too (were 0)
        done_before = set(ledger_keys(cfg, "outbound_x"))
        sent_before = len(done_before)
        assert 0 < sent_before < 20, sent_before
    finally:
        set_worker_kill(spark, None)
    subscribe(cfg, "Gone2", "Gone2", EVENT)  # the routes change before the round is finished
    final = publish(cfg, spark, lake)
    out = final["outputs"][0]
    assert final["status"] == "ok", out
    # a task of a failed job may finish its batch after the failure is seen (Spark stops it within 2 s)
    assert out["batches_skipped"] >= sent_before and out["batches"] == 20 - out["batches_skipped"]
    keys = ledger_keys(cfg, "outbound_x")
    assert len(keys) == len(set(keys)) == 20 and all(k.endswith("@40g") for k in keys), keys[:3]
    assert_exactly_once(cfg, sends, events)
    lost = read_table(str(tmp_path / "lake" / "outbound_x_undeliverable")).to_pylist()
    gone = [r for r in lost if r["destination"] == "Gone"]
    assert sorted(r["key"] for r in gone) == sorted(events), "each undeliverable copy recorded once"
    assert all("does not exist" in r["reason"] for r in lost)
    # the new subscriber's copies: recorded for the batches sent after it subscribed, and only those
    gone2 = [r for r in lost if r["destination"] == "Gone2"]
    assert 0 < len(gone2) < len(events) and len(gone) + len(gone2) == len(lost)
    assert not {r["batch_key"] for r in gone2} & done_before
    again = publish(cfg, spark, lake)
    assert again["published"] == 0 and not drain_all(cfg, "Target")


def test_a_subscriber_table_refusing_copies_never_blocks_the_others(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """From executors as from the driver: a subscriber table whose CHECK constraint refuses every copy
    (the catalog cannot tell beforehand) failed every task's batches, on every run, and the valid
    subscribers got nothing. Now the driver makes it undeliverable for the run, records each of its
    copies, and sends those batches again: every other copy once, every refused one recorded once."""
    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_x"], [], batch_size=40, executors_from_rows=1)
    setup_db(cfg, ["Target", "Sub1", "Sub2", "Checked"])
    with db.connect(cfg.transport) as conn:
        conn.raw.execute('ALTER TABLE "public"."Checked" ADD CONSTRAINT "no_bodies" CHECK (body IS NULL)')
        conn.commit()
    for queue in ("Sub1", "Sub2", "Checked"):
        subscribe(cfg, queue, queue, EVENT)
    lake = open_lake(cfg.lake, spark)
    sends, events = outbound(lake, "outbound_x", files=3, per_file=120)  # 3 units of 3 batches
    out = publish(cfg, spark, lake)["outputs"][0]
    assert out["status"] == "ok" and out["failed_batches"] == [], out
    assert out["batches"] == 9 and out["published"] == 360 and out["undeliverable"] == len(events), out
    assert_exactly_once(cfg, sends, events)
    lost = read_table(str(tmp_path / "lake" / "outbound_x_undeliverable")).to_pylist()
    assert sorted(r["key"] for r in lost) == sorted(events) and {r["destination"] for r in lost} == {"Checked"}
    assert all("no_bodies" in r["reason"] for r in lost), lost[0]
    again = publish(cfg, spark, lake)["outputs"][0]
    assert again["published"] == 0 and again["undeliverable"] == 0, again


def test_a_subscriber_table_dropped_during_the_run_is_logged_as_dropped(
    fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """From Spark tasks, a subscriber table dropped after the run looked it up (an endpoint taken down) was
    recorded as dropped, and the log said it "refused the copies sent to it" (a review). The log says it
    is gone, as the record does and as the driver's path says; the others get each copy once."""
    from queuelake.pipeline.publish import executors

    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_x"], [], batch_size=40, executors_from_rows=1)
    setup_db(cfg, ["Target", "Sub1", "Sub2", "Leaving"])
    for queue in ("Sub1", "Sub2", "Leaving"):
        subscribe(cfg, queue, queue, EVENT)
    real = executors.send_units

    def send_units(session, job, units):  # type: ignore[no-untyped-def]
        with db.connect(cfg.transport) as other:  # routed to, then its endpoint takes it away
            other.raw.execute('DROP TABLE IF EXISTS "public"."Leaving"')
            other.commit()
        return real(session, job, units)

    monkeypatch.setattr(executors, "send_units", send_units)
    caplog.set_level(logging.INFO, logger="queuelake")
    lake = open_lake(cfg.lake, spark)
    sends, events = outbound(lake, "outbound_x", files=2, per_file=80)
    out = publish(cfg, spark, lake)["outputs"][0]
    assert out["status"] == "ok" and out["failed_batches"] == [] and out["undeliverable"] == len(events), out
    assert_exactly_once(cfg, sends, events)
    lost = read_table(str(tmp_path / "lake" / "outbound_x_undeliverable")).to_pylist()
    assert {r["destination"] for r in lost} == {"Leaving"} and len(lost) == len(events), lost[:2]
    assert all(r["reason"].startswith("the table was dropped during the run") for r in lost), lost[0]
    said = [r.getMessage() for r in caplog.records if "sending its batches again without it" in r.getMessage()]
    assert len(said) == 1 and "is gone (dropped during the run)" in said[0], said
    assert not [r for r in caplog.records if "refused the copies" in r.getMessage()], said


def _refusing(fresh_pg_uri: str, tmp_path: Path, ddl: list[str]):
    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_x"], [], batch_size=40, executors_from_rows=1)
    setup_db(cfg, ["Target", "Sub1", "Sub2", "Checked"])
    with db.connect(cfg.transport) as conn:
        for statement in ddl:
            conn.raw.execute(statement)
        conn.commit()
    for queue in ("Sub1", "Sub2", "Checked"):
        subscribe(cfg, queue, queue, EVENT)
    return cfg


def test_a_stop_asked_while_spark_tasks_publish_starts_no_second_pass(
    fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refused table's batches are sent again by a second Spark job; a stop asked while the first ran
    (a run's first SIGTERM) started it anyway, as replay did before (a review). Now the output ends
    "interrupted" and the next publish sends those batches."""
    from queuelake import stopping
    from queuelake.pipeline.publish import executors

    cfg = _refusing(
        fresh_pg_uri, tmp_path, ['ALTER TABLE "public"."Checked" ADD CONSTRAINT "no_bodies" CHECK (body IS NULL)']
    )
    lake = open_lake(cfg.lake, spark)
    sends, events = outbound(lake, "outbound_x", files=3, per_file=120)
    real, passes = executors.send_units, []

    def send_units(session, job, units):  # type: ignore[no-untyped-def]
        passes.append(len(units))
        outcomes = real(session, job, units)
        stopping.request()  # the scheduler's SIGTERM, while the first Spark job ran
        return outcomes

    monkeypatch.setattr(executors, "send_units", send_units)
    try:
        out = publish(cfg, spark, lake)["outputs"][0]
    finally:
        stopping.reset()
    assert passes == [3] and out["status"] == "interrupted", (passes, out)
    monkeypatch.undo()
    again = publish(cfg, spark, lake)["outputs"][0]
    assert again["status"] == "ok" and again["undeliverable"] == len(events), again
    assert_exactly_once(cfg, sends, events)


def test_a_deferred_foreign_key_refuses_its_copies_from_spark_tasks(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """A constraint deferred to COMMIT is checked per row in the tasks too (``SET CONSTRAINTS ALL
    IMMEDIATE``), so the refusal names its table and is handled as any other (a review: only the
    driver's path had a test)."""
    cfg = _refusing(
        fresh_pg_uri,
        tmp_path,
        [
            'CREATE TABLE "public"."tenants" (id uuid PRIMARY KEY)',
            'ALTER TABLE "public"."Checked" ADD CONSTRAINT "known_id" FOREIGN KEY (id) '
            'REFERENCES "public"."tenants" (id) DEFERRABLE INITIALLY DEFERRED',
        ],
    )
    lake = open_lake(cfg.lake, spark)
    sends, events = outbound(lake, "outbound_x", files=3, per_file=120)
    out = publish(cfg, spark, lake)["outputs"][0]
    assert out["status"] == "ok" and out["undeliverable"] == len(events), out
    assert_exactly_once(cfg, sends, events)
    lost = read_table(str(tmp_path / "lake" / "outbound_x_undeliverable")).to_pylist()
    assert all("known_id" in r["reason"] for r in lost), lost[0]


def _conf_file(tmp_path: Path, lake_root: Path, from_rows: int | None, batch_size: int) -> Path:
    conf = tmp_path / "publish.json"
    conf.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
                "lake": {"root": str(lake_root), "engine": "delta-rs"},
                "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "2"}},
                "publish": {
                    "endpoint": "Lakehouse",
                    "outputs": ["outbound_x"],
                    "batch_size": batch_size,
                    "executors_from_rows": from_rows,
                },
            }
        )
    )
    return conf


@pytest.mark.parametrize("started_on", ["driver", "executors"])
def test_a_round_resumes_in_the_layout_it_started_in(fresh_pg_uri: str, tmp_path: Path, spark, started_on: str) -> None:
    """A round half sent from the driver (the process killed) finishes from the driver even when the
    threshold now says executors, and the reverse: batch k means the same rows in both runs."""
    lake_root = tmp_path / "lake"
    first, then = (None, 1) if started_on == "driver" else (1, None)
    cfg = config(fresh_pg_uri, lake_root, ["outbound_x"], [], batch_size=30, executors_from_rows=then)
    setup_db(cfg, ["Target", "Sub1", "Sub2"])
    subscribe(cfg, "Sub1", "Sub1", EVENT)
    subscribe(cfg, "Sub2", "Sub2", EVENT)
    lake = open_lake(cfg.lake, spark)
    sends, events = outbound(lake, "outbound_x", files=3, per_file=100)  # batches differ by layout
    env = {**os.environ, "QUEUELAKE_CONNECTION": fresh_pg_uri, "QUEUELAKE_TEST_KILL_AT": "after_publish_commit:2"}
    proc = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT, str(_conf_file(tmp_path, lake_root, first, 30))],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    # the driver process dies at its hook; on executors the worker dies and the run reports it
    assert proc.returncode == (-9 if started_on == "driver" else 0), proc.stderr[-2000:]
    started = ledger_keys(cfg, "outbound_x")
    assert started, "some batches were sent before the kill"
    layout = "g" if started_on == "executors" else ""
    final = publish(cfg, spark, lake)
    assert final["status"] == "ok", final
    keys = ledger_keys(cfg, "outbound_x")
    assert all(parse_round(k)[0].layout == layout for k in keys), keys
    assert_exactly_once(cfg, sends, events)


@pytest.mark.slow
def test_exactly_once_from_executors_under_sigkill(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """The whole process group (driver, JVM, Python workers) SIGKILLed at random instants, as a
    scheduler stops a task; then one clean run. Each row reaches each destination once."""
    lake_root = tmp_path / "lake"
    # 60,000 rows in 240 batches: the tasks send a batch in a few ms, and the kills must not outrun
    # the round (with 60 batches of 500, one kill came 50 batches after its goal and the round ended)
    batch_size, total = 250, 240
    cfg = config(fresh_pg_uri, lake_root, ["outbound_x"], [], batch_size=batch_size, executors_from_rows=1)
    setup_db(cfg, ["Target", "Sub1", "Sub2"])
    subscribe(cfg, "Sub1", "Sub1", EVENT)
    subscribe(cfg, "Sub2", "Sub2", EVENT)
    lake = open_lake(cfg.lake, spark)
    sends, events = outbound(lake, "outbound_x", files=6, per_file=10_000)
    conf = _conf_file(tmp_path, lake_root, 1, batch_size)
    env = {**os.environ, "QUEUELAKE_CONNECTION": fresh_pg_uri}
    rng = random.Random(11)
    kills = attempt = 0
    seen = []  # batches in the ledger after each kill
    # until 8 kills landed: a run that ends by itself (it got through before its kill) is not one
    while kills < 8 and attempt < 16:
        attempt += 1
        before = len(ledger_keys(cfg, "outbound_x"))
        if before >= total - 6:
            break  # too little left for another kill mid-round
        proc = subprocess.Popen(
            [sys.executable, "-c", KILL_SCRIPT, str(conf)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        if attempt % 4 == 1:  # while Spark starts, plans or routes; or, on a machine that got that far
            # sooner, as the first batch lands (a quiet machine sent the whole round within 8 s, so no
            # kill landed and the test ran out of rounds)
            deadline = time.monotonic() + rng.uniform(1.0, 8.0)
            while proc.poll() is None and time.monotonic() < deadline and len(ledger_keys(cfg, "outbound_x")) <= before:
                time.sleep(0.02)
        else:  # while tasks send: once this run's first batch is committed, anywhere in the next ones
            while proc.poll() is None and len(ledger_keys(cfg, "outbound_x")) <= before:
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.2))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
        time.sleep(0.5)  # the group is gone; PostgreSQL has aborted its open transactions
        seen.append(len(ledger_keys(cfg, "outbound_x")))
    assert kills >= 6, f"only {kills} kills landed in {attempt} runs: batches sent after each {seen}"
    assert sum(0 < n < total for n in seen) >= 4, f"too few kills mid-round: batches sent after each {seen}"
    final = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT, str(conf)], env=env, capture_output=True, text=True, timeout=900
    )
    assert final.returncode == 0 and final.stdout.strip().endswith("ok"), final.stderr[-3000:]
    keys = ledger_keys(cfg, "outbound_x")
    assert len(keys) == len(set(keys)) == total and all(k.endswith("g") for k in keys)
    assert_exactly_once(cfg, sends, events)


def test_a_stop_asked_while_spark_tasks_send_cancels_them(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """A first SIGTERM while Spark tasks sent a round let them send it to its end (a review: 56 batches,
    two minutes after the signal): the tasks never see the command's stop. They are cancelled now, the
    batch in hand rolled back; the output ends "interrupted" with what the ledger holds, and the next
    publish sends the rest, every copy once."""
    import threading

    from queuelake import stopping

    cfg = config(fresh_pg_uri, tmp_path / "lake", ["outbound_x"], [], batch_size=10, executors_from_rows=1)
    setup_db(cfg, ["Target", "Sub1", "Sub2"])
    with db.connect(cfg.transport) as conn:  # each batch's COPY into Target takes 0.2 s
        conn.raw.execute(
            "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_sleep(0.2); RETURN NULL; END $$"
        )
        conn.raw.execute(
            'CREATE TRIGGER slow AFTER INSERT ON "public"."Target" FOR EACH STATEMENT EXECUTE FUNCTION slow()'
        )
        conn.commit()
    for queue in ("Sub1", "Sub2"):
        subscribe(cfg, queue, queue, EVENT)
    lake = open_lake(cfg.lake, spark)
    sends, events = outbound(lake, "outbound_x", files=1, per_file=400)  # one row group: one task, 40 batches

    def stop_after_the_first_batches() -> None:
        deadline = time.monotonic() + 120
        while len(ledger_keys(cfg, "outbound_x")) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        stopping.request()  # the scheduler's SIGTERM

    asking = threading.Thread(target=stop_after_the_first_batches, daemon=True)
    asking.start()
    try:
        out = publish(cfg, spark, lake)["outputs"][0]
    finally:
        asking.join()
        stopping.reset()
    sent = len(ledger_keys(cfg, "outbound_x"))
    assert out["status"] == "interrupted" and 3 <= sent < 40, (sent, out)
    assert out["batches"] == sent and out["published"] == 10 * sent, ("what went, from the ledger", out)
    assert out["rows"] == out["published"], ("the rows handled, as the driver counts them; it said 0", out)
    again = publish(cfg, spark, lake)["outputs"][0]
    assert again["status"] == "ok" and again["batches"] == 40 - sent, again
    assert_exactly_once(cfg, sends, events)

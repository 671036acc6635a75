"""Months on a schedule, played by ``test_schedule`` (delta-rs) and ``test_schedule_jvm`` (delta-spark):
two test files, so that two xdist workers play them at once (each takes minutes).

Each round is what cron or Airflow does every 15 minutes: the system's endpoints send (``schedule_system``:
four body types, one written by XmlSerializer and by JSON serializers, audit copies, failures), then a new
``queuelake run`` process drains, types the bodies, transforms and publishes. Between rounds an operator's
commands, each a new process too: ``find`` and ``conversation`` on earlier rounds' rows, a retry of one
round's failures (``replay``), ``erase`` of a conversation, and ``maintain`` with retention rules. So every
reader runs after every writer: find, conversation, replay, bodies, transform and publish read files that
erase, retention and compaction rewrote.

End to end: every row sent is in the journal exactly once (but the erased conversations'), every retried
message came back once, each body type's table holds each message once with the XML and JSON rows in the
same columns, and every outbound row was published once. A round's time is printed (and written to
``$QUEUELAKE_SCHEDULE_REPORT``), never asserted (timings belong to ``bench/``); what keeps a round from
growing with the lake is asserted instead: each round's bodies read exactly the rows that round landed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from queuelake.commands.demo import traffic
from queuelake.commands.demo.orders import DISCOUNT_QUEUE
from queuelake.config import from_dict
from queuelake.lake.engines import open_lake
from queuelake.spark import JARS_ENV
from queuelake.transport import db, installer, subscriptions
from queuelake.transport.table_refs import bridge_ref, queue_ref

from tests.helpers.cli import run_cli
from tests.helpers.jvm import delta_jars
from tests.helpers.schedule_system import ORDER_PLACED, SHIP_ORDER, Sent, round_traffic

ROUNDS = int(os.environ.get("QUEUELAKE_SCHEDULE_ROUNDS", "12"))  # at least 12 in CI (issue 57)
ORDERS_PER_ROUND = 40
SUBSCRIBER = "Reporting"
TOTALS_TOPIC = "Lakehouse.Events.CustomerTotalsUpdated"


def _config(root: Path, engine: str) -> dict[str, Any]:
    return {
        "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
        "lake": {
            "root": str(root),
            "engine": engine,
            "retention": {"rules": [{"queue": "audit", "days": 3650}, {"outcome": "expired", "days": 1}]},
        },
        "spark": {"master": "local[1]", "conf": {"spark.sql.shuffle.partitions": "1"}},
        "drain": {"queues": ["Sales", "audit", "error"], "batch_size": 100},
        "transforms": [
            {
                "name": "customer_totals",
                "function": "queuelake.commands.demo.orders:customer_totals",
                "output": "outbound_customer_totals",
                "destinations": [DISCOUNT_QUEUE],
            }
        ],
        "publish": {"endpoint": "Lakehouse", "outputs": ["outbound_customer_totals"], "batch_size": 500},
    }


class Operator:
    """Runs ``queuelake`` commands as new processes, the way a scheduler and a person at a shell do."""

    def __init__(self, uri: str, conf: Path, cwd: Path, jars: str | None) -> None:
        self.env = {**os.environ, "QUEUELAKE_CONNECTION": uri}
        if jars:  # the JVM engine: Delta's jars on the class path
            self.env[JARS_ENV] = jars
        self.conf, self.cwd = conf, cwd
        self.spent: dict[str, float] = {}  # seconds per command, for the round-time report

    def __call__(self, *args: str, ok: bool = True) -> tuple[dict[str, Any], str, float]:
        started = time.monotonic()
        proc = run_cli([args[0], "-c", str(self.conf), *args[1:]], env=self.env, cwd=self.cwd, timeout=900)
        seconds = time.monotonic() - started
        if args[0] != "run":
            self.spent[args[0]] = self.spent.get(args[0], 0.0) + seconds
        lines = proc.stdout.strip().splitlines()
        summary = json.loads(lines[-1]) if lines else {}
        if ok:
            assert proc.returncode == 0 and summary.get("status") == "ok", (args, summary, proc.stderr[-4000:])
        return summary, proc.stdout, seconds


def play(fresh_pg_uri: str, tmp_path: Path, engine: str) -> None:
    """Twelve rounds (``ROUNDS``) of the system and its operator on ``engine``; asserts end to end."""
    jars = None
    if engine == "delta-spark":
        found, why = delta_jars()
        if not found:
            if os.environ.get("QUEUELAKE_REQUIRE_DELTA_JVM", "") not in ("", "0"):
                pytest.fail(f"QUEUELAKE_REQUIRE_DELTA_JVM is set: {why}")
            pytest.skip(why)
        jars = ",".join(found)
    root = tmp_path / "lake"
    conf = tmp_path / "job.yaml"
    conf.write_text(json.dumps(_config(root, engine)), encoding="utf-8")
    cfg = from_dict({**_config(root, engine), "transport": {"connection": fresh_pg_uri}}, env={})
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=[DISCOUNT_QUEUE, SUBSCRIBER]))
        subscriptions.subscribe(
            conn, bridge_ref(cfg.transport.subscription_table, cfg.transport), SUBSCRIBER, SUBSCRIBER, TOTALS_TOPIC
        )
        conn.commit()
    run = Operator(fresh_pg_uri, conf, tmp_path, jars)
    sent = Sent()
    erased: set[str] = set()  # conversations
    retried = 0
    published = 0
    times: list[float] = []
    for round_no in range(1, ROUNDS + 1):
        with db.connect(cfg.transport) as conn:
            for queue, messages in round_traffic(round_no, ORDERS_PER_ROUND, sent).items():
                traffic.seed(conn, queue_ref(queue, cfg.transport), messages)
        summary, _, seconds = run("run")
        times.append(seconds)
        run.spent["run"] = run.spent.get("run", 0.0) + seconds
        for step in ("drain", "bodies", "transform", "publish"):  # the rest of a run: its process and Spark starting
            key = f"run: {step}"
            run.spent[key] = run.spent.get(key, 0.0) + summary.get(step, {}).get("step_seconds", 0.0)
        drained = summary["drain"]
        bodies = summary["bodies"]
        # the rows this round landed, failed copies too (``bodies.include_failed``: a message that only
        # failed is typed from its error copy; one that also has its send's copy is typed once, from that)
        new_rows = sum(q["landed"] for q in drained["queues"])
        assert bodies["rows_read"] == new_rows, (round_no, bodies, drained)
        published += sum(o.get("published", 0) for o in summary["publish"].get("outputs", []))

        # the operator between rounds, each command a process of its own
        some_order, its_conversation = list(sent.orders.items())[(round_no * 7) % len(sent.orders)]
        if its_conversation not in erased:
            found, out, _ = run("find", "--message-id", some_order, "--json")
            assert found["found"] >= 1 and some_order in out, (round_no, found)
            drawn, _, _ = run("conversation", its_conversation, "--out", str(tmp_path / "c.svg"))
            assert drawn["messages"] >= 1, drawn
        if round_no % 3 == 1:  # retry this round's failures back to their FailedQ
            replayed, _, _ = run("replay", "--where", f"exception_message = 'round-{round_no}'")
            assert replayed["rows_sent"] == sent.failed[round_no], (round_no, replayed)
            retried += replayed["rows_sent"]
        if round_no % 6 == 2:  # a customer asks to be forgotten: one earlier conversation goes
            conversation = list(sent.orders.values())[round_no]
            gone, _, _ = run("erase", "--where", f"conversation_id = '{conversation}'")
            assert gone["tables"]["messages"]["rows"] >= 1, gone
            erased.add(conversation)
            after, _, _ = run("find", "--conversation-id", conversation, "--json", ok=False)
            assert after.get("found", 0) == 0, after
        if round_no % 4 == 0 and round_no < ROUNDS:  # after each erase: compaction and vacuum rewrite what it left
            run("maintain")  # not after the last round: no later round would read what it rewrote
    print(f"\n{engine}: run seconds per round " + " ".join(f"{s:.1f}" for s in times))
    print(f"{engine}: seconds per command " + json.dumps({k: round(v, 1) for k, v in run.spent.items()}))
    if len(times) >= 7:  # reported, not asserted: the last 3 runs against rounds 2-4 (issue 57 asks <= 1.2)
        ratio = statistics.median(times[-3:]) / statistics.median(times[1:4])
        print(f"{engine}: last 3 runs / runs 2-4 = {ratio:.2f}")
        report = os.environ.get("QUEUELAKE_SCHEDULE_REPORT")
        if report:  # a file to read the figures from when xdist keeps the tests' output
            line = {"engine": engine, "runs": [round(t, 1) for t in times], "ratio": round(ratio, 2)}
            with open(report, "a", encoding="utf-8") as out:
                out.write(json.dumps({**line, "per_command": {k: round(v, 1) for k, v in run.spent.items()}}) + "\n")

    lake = open_lake(dataclasses.replace(cfg.lake, engine="delta-rs"))  # reads either engine's tables, no Spark
    journal = lake.read_arrow("messages", columns=["queue", "id", "message_id", "conversation_id", "outcome"])
    by_queue: dict[str, list[str]] = {}
    for row in journal.to_pylist():
        by_queue.setdefault(row["queue"].split(".")[-1].strip('"'), []).append(row["id"])
    for queue, rows in sent.rows.items():
        kept = {row_id for row_id, conversation in rows.items() if conversation not in erased}
        landed = by_queue.get(queue, [])
        assert len(landed) == len(set(landed)), f"{queue}: a row twice"
        assert kept <= set(landed), f"{queue}: {len(kept - set(landed))} row(s) sent never landed"
    retried_back = len(by_queue["Sales"]) - sum(1 for c in sent.rows["Sales"].values() if c not in erased)
    assert 0 < retried_back <= retried  # retries landed once each (some belonged to erased conversations)
    assert not ({r["conversation_id"] for r in journal.to_pylist()} & erased)

    # each type's table: each message once, XML and JSON rows in the same columns
    typed = {name: lake.read_arrow(name) for name in lake.tables() if name.startswith("body_")}
    ships = typed["body_shop_messages_commands_shiporder"]
    assert ships.schema.field("Lines").type.value_type.field("Qty").type == "int64", ships.schema
    ship_ids = ships.column("message_id").to_pylist()
    assert len(ship_ids) == len(set(ship_ids))
    expected_ships = {m for m, t in sent.types.items() if t == SHIP_ORDER} - _erased_ids(sent, erased)
    assert set(ship_ids) == expected_ships
    orders = typed["body_sales_messages_events_orderplaced"].column("message_id").to_pylist()
    assert len(orders) == len(set(orders)) and set(orders) == {
        m for m, t in sent.types.items() if t == ORDER_PLACED
    } - _erased_ids(sent, erased)

    with psycopg.connect(fresh_pg_uri) as conn:
        waiting = {
            q: conn.execute(f'SELECT count(*) FROM "public"."{q}"').fetchone()[0] for q in (DISCOUNT_QUEUE, SUBSCRIBER)
        }
    outbound = lake.read_arrow("outbound_customer_totals", columns=["key", "intent"])
    assert waiting[DISCOUNT_QUEUE] == sum(1 for i in outbound.column("intent").to_pylist() if i == "Send")
    assert waiting[SUBSCRIBER] == sum(1 for i in outbound.column("intent").to_pylist() if i == "Publish")
    assert published == waiting[DISCOUNT_QUEUE] + waiting[SUBSCRIBER]


def _erased_ids(sent: Sent, erased: set[str]) -> set[str]:
    return {m for m, conversation in sent.orders.items() if conversation in erased} | {
        row_id for row_id, conversation in sent.rows["Sales"].items() if conversation in erased
    }

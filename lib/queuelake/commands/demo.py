"""``queuelake demo``: the embedded default end to end, on a laptop, in a couple of minutes.

A throwaway PostgreSQL (pgserver), local Spark and ``./lake``. It installs an NServiceBus topology
(Sales, Billing, Shipping endpoints; audit and error queues; subscriptions), seeds traffic with
expired, malformed and failed messages, runs drain, transform and publish, and prints a report.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import tempfile
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from queuelake.config import Config, from_dict
from queuelake.context import connect
from queuelake.examples import traffic
from queuelake.lake.reading import read_table
from queuelake.report import log
from queuelake.transport import headers as hdr
from queuelake.transport import installer, subscriptions
from queuelake.transport.queues import OutgoingMessage
from queuelake.transport.tables import bridge_ref, queue_ref

DRAINED = ["Sales", "audit", "error"]
ENDPOINTS = ["Sales", "Billing", "Shipping"]


def demo_config(workdir: Path, pg_dir: Path) -> Config:
    return from_dict(
        {
            "transport": {"dialect": "postgresql", "driver": "psycopg", "embedded": str(pg_dir)},
            "lake": {"root": str(workdir / "lake"), "engine": "auto"},
            "spark": {"master": "local[2]"},
            "drain": {"queues": DRAINED, "batch_size": 2000, "workers_per_queue": 2},
            "transforms": [
                {
                    "name": "customer_totals",
                    "function": "queuelake.examples.orders:customer_totals",
                    "output": "outbound_customer_totals",
                }
            ],
            "publish": {"endpoint": "Lakehouse", "outputs": ["outbound_customer_totals"], "batch_size": 5000},
        },
        env={},
    )


def seed_traffic(cfg: Config, per_queue: int) -> dict[str, Counter[str]]:
    """What we put in, by queue and by expected outcome, so the report can be checked against it."""
    expected: dict[str, Counter[str]] = {q: Counter() for q in DRAINED}
    start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=2)
    events = list(traffic.order_events(per_queue, seed=2026, start=start))
    sales: list[OutgoingMessage] = list(events)
    expected["Sales"]["landed"] += len(events)
    for i in range(max(per_queue // 50, 3)):  # expired: TTBR already past when drained
        h = traffic.order_headers(str(uuid.uuid4()), start, intent="Send")
        sales.append(OutgoingMessage(hdr.encode(h), b'{"stale": true}', id=str(uuid.uuid4()), ttbr_ms=-1000 * (i + 1)))
        expected["Sales"]["expired"] += 1
    for raw in traffic.MALFORMED_HEADERS.values():  # malformed: quarantined with the raw text
        sales.append(OutgoingMessage(raw, b"{}", id=str(uuid.uuid4())))
        expected["Sales"]["quarantined"] += 1
    audit = [
        traffic.audit_copy(m, "Billing", start + dt.timedelta(seconds=i), 20 + (i * 37) % 900)
        for i, m in enumerate(events[: per_queue // 2])
    ]
    expected["audit"]["landed"] += len(audit)
    failures = [
        ("System.TimeoutException", "The payment gateway did not answer in time", "Billing"),
        ("System.InvalidOperationException", "Card declined", "Billing"),
        ("Shipping.AddressNotFoundException", "No such street in Rotterdam", "Shipping"),
    ]
    error = []
    for i, m in enumerate(events[: max(per_queue // 20, 3)]):
        exc, text, queue = failures[i % len(failures)]
        error.append(traffic.failed_copy(m, queue, exc, text, start + dt.timedelta(minutes=i)))
    expected["error"]["landed"] += len(error)
    with connect(cfg, "queuelake-demo-seed") as conn:
        for name, messages in (("Sales", sales), ("audit", audit), ("error", error)):
            traffic.seed(conn, queue_ref(name, cfg.transport), messages)
    return expected


def install_topology(cfg: Config) -> None:
    with connect(cfg, "queuelake-demo-install") as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=ENDPOINTS, delayed_endpoints=ENDPOINTS))
        table = bridge_ref(cfg.transport.subscription_table, cfg.transport)
        for address, endpoint, topic in [
            ("Billing", "Billing", "Sales.Messages.Events.OrderPlaced"),
            ("Shipping", "Shipping", "Sales.Messages.Events.OrderPlaced"),
            ("Shipping", "Shipping", "Lakehouse.Events.ICustomerEvent"),
            ("Billing", "Billing", "Lakehouse.Events.CustomerTotalsUpdated"),
        ]:
            subscriptions.subscribe(conn, table, address, endpoint, topic)
        conn.commit()


def journal_counts(lake_root: Path) -> dict[str, dict[str, int]]:
    table = read_table(str(lake_root / "messages"), columns=["queue", "outcome"])
    out: dict[str, dict[str, int]] = {}
    for row in table.group_by(["queue", "outcome"]).aggregate([("outcome", "count")]).to_pylist():
        out.setdefault(row["queue"], {})[row["outcome"]] = row["outcome_count"]
    return out


def delivered(cfg: Config) -> dict[str, dict[str, int]]:
    """What sits in the endpoints' queues now, by message type (read without receiving)."""
    out: dict[str, dict[str, int]] = {}
    with connect(cfg, "queuelake-demo-report") as conn:
        for name in ("Billing", "Shipping"):
            ref = queue_ref(name, cfg.transport)
            rows = conn.raw.execute(f"SELECT headers FROM {ref.qualified}").fetchall()
            counts: Counter[str] = Counter()
            for (raw,) in rows:
                d = hdr.decode(raw)
                counts[f"{d.message_intent} {d.message_type}"] += 1
            out[ref.canonical] = dict(counts)
        conn.rollback()
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from queuelake.commands.pipeline import lake_for
    from queuelake.pipeline.drain import drain
    from queuelake.pipeline.publish import publish
    from queuelake.pipeline.transform import transform
    from queuelake.spark import get_spark

    workdir = Path(args.workdir).resolve()
    lake_root = workdir / "lake"
    if lake_root.exists():
        shutil.rmtree(lake_root)  # the demo's own lake: start clean so counts match the seed
    pg_dir = Path(tempfile.mkdtemp(prefix="queuelake-demo-pg-"))
    try:
        cfg = demo_config(workdir, pg_dir)
        log.info("demo: starting a throwaway PostgreSQL in %s", pg_dir)
        install_topology(cfg)
        expected = seed_traffic(cfg, args.messages)
        spark = get_spark(cfg.spark)
        lake = lake_for(cfg, spark)
        drained = drain(cfg, lake)
        transformed = transform(cfg, spark, lake)
        published = publish(cfg, spark, lake)
        counts = journal_counts(lake_root)
        to_whom = delivered(cfg)
        report = _report(counts, to_whom, lake_root, lake.name, drained, transformed, published)
        print(report)
        status = "ok" if all(s["status"] == "ok" for s in (drained, transformed, published)) else "failed"
        return {
            "status": status,
            "lake": str(lake_root),
            "engine": lake.name,
            "expected": {q: dict(c) for q, c in expected.items()},
            "journal": counts,
            "published": {"rows": published["published"], "copies": published["copies"], "to": to_whom},
        }
    finally:
        from queuelake import context

        for server in context._servers.values():
            server.cleanup()  # type: ignore[attr-defined]
        context._servers.clear()
        shutil.rmtree(pg_dir, ignore_errors=True)


def _report(counts, to_whom, lake_root: Path, engine: str, drained, transformed, published) -> str:
    lines = ["", "queuelake demo", "=" * 60, "", "Drained into the journal (queue: outcome counts)"]
    for queue, outcomes in sorted(counts.items()):
        text = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
        lines.append(f"  {queue:<24} {text}")
    lines.append(f"  total {drained['dequeued']} messages at {sum(q['rate'] for q in drained['queues']):.0f} msg/s")
    lines += ["", "Transforms"]
    for t in transformed["transforms"]:
        lines.append(
            f"  {t['transform']}: {t.get('rows_in', 0)} new landed rows in, "
            f"{t.get('rows_out', 0)} rows out -> {t['output']}"
        )
    lines += [
        "",
        f"Published: {published['published']} rows as {published['copies']} messages, {published['rejected']} rejected",
    ]
    for queue, types in to_whom.items():
        for kind, n in sorted(types.items()):
            lines.append(f"  {n:>5} x {kind:<60} -> {queue}")
    lines += ["", f"Lake tables ({engine}) under {lake_root}:"]
    for p in sorted(lake_root.iterdir()):
        if (p / "_delta_log").is_dir():
            lines.append(f"  {p}")
    lines += ["", "Open notebooks/journal_overview.py with QUEUELAKE_LAKE_ROOT=" + str(lake_root), ""]
    return "\n".join(lines)

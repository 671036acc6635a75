"""An outbound table, a publish config and the queue database around it, for the publish tests."""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow as pa
from queuelake.config import from_dict
from queuelake.transport import db, installer, queues, subscriptions
from queuelake.transport.table_refs import bridge_ref, queue_ref

OUTBOUND = pa.schema(
    [
        ("key", pa.string()),
        ("message_type", pa.string()),
        ("intent", pa.string()),
        ("destination", pa.string()),
        ("body", pa.binary()),
        ("headers", pa.map_(pa.string(), pa.string())),
        ("ttbr_ms", pa.int64()),
        ("deliver_at", pa.timestamp("us", tz="UTC")),
        ("correlation_id", pa.string()),
        ("conversation_id", pa.string()),
    ]
)
BASE = "Lakehouse.Events.ICustomerEvent"
CONCRETE = "Lakehouse.Events.CustomerTotalsUpdated"


def config(uri: str, lake_root: Path, outputs: list[str], queues_: list[str], **publish: object):
    return from_dict(
        {
            "transport": {"connection": uri},
            "lake": {"root": str(lake_root), "engine": "delta-rs"},
            "drain": {"queues": queues_, "batch_size": 500},
            "transforms": [
                {
                    "name": "customer_totals",
                    "function": "queuelake.commands.demo.orders:customer_totals",
                    "output": outputs[0],
                }
            ],
            "publish": {"endpoint": "Lakehouse", "outputs": outputs, **publish},
        },
        env={},
    )


def setup_db(cfg, extra: list[str]) -> None:
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=extra, delayed_endpoints=["Billing"]))


def subscribe(cfg, address: str, endpoint: str, topic: str) -> None:
    with db.connect(cfg.transport) as conn:
        subscriptions.subscribe(conn, bridge_ref("SubscriptionRouting", cfg.transport), address, endpoint, topic)
        conn.commit()


def drain_all(cfg, name: str) -> list[queues.ReceivedRow]:
    ref = queue_ref(name, cfg.transport)
    out: list[queues.ReceivedRow] = []
    with db.connect(cfg.transport) as conn:
        while True:
            rows = queues.receive_batch(conn, ref, 10_000)
            conn.commit()
            if not rows:
                return out
            out.extend(rows)


def write_outbound(lake, name: str, rows: list[dict], version: int = 1) -> None:
    lake.append(name, pa.Table.from_pylist(rows, schema=OUTBOUND), f"test/{name}", version)


def row(
    key: str, intent: str = "Publish", destination: str | None = None, message_type: str | None = None, **kw
) -> dict:
    return {
        "key": key,
        "message_type": message_type or f"{CONCRETE}, Lakehouse.Events;{BASE}, Lakehouse.Events",
        "intent": intent,
        "destination": destination,
        "body": kw.pop("body", orjson.dumps({"key": key})),
        "headers": kw.pop("headers", None),
        "ttbr_ms": kw.pop("ttbr_ms", None),
        "deliver_at": kw.pop("deliver_at", None),
        "correlation_id": None,
        "conversation_id": None,
    }


KILL_SCRIPT = """
import sys
from queuelake.config import load
from queuelake.lake.engines import open_lake
from queuelake.context import open_database
from queuelake.pipeline.publish.run import publish
from queuelake.spark import get_spark
cfg = load(sys.argv[1])
spark = get_spark(cfg.spark)
print(publish(cfg, open_database(cfg), spark, open_lake(cfg.lake, spark))["status"])
"""

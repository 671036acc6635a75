"""A slice of large bodies through ``queuelake bodies`` on the default driver (1 GB): memory follows
Spark's batches and the samples' bytes, not the slice's rows. A review's first backlog (bodies of 2.9 KB on average, one
in 2,000 of 200 KB) ran the default 1 GB driver out of memory in every run: the slice was cached in
memory and 5,000 bodies of each type were collected as samples, whatever their size. Real delta-rs
journal, the real command in a new process with its own JVM."""

from __future__ import annotations

import datetime as dt
import json
import random
import subprocess  # noqa: F401  (the command runs as its own process, with its own JVM)
import uuid
from pathlib import Path

import pyarrow as pa
from queuelake.lake.delta_rs.engine import DeltaRsEngine
from queuelake.lake.record_tables import MESSAGES

from tests.helpers import journal_rows
from tests.helpers.cli import run_cli

TYPE = "Sales.Messages.Events.OrderPlaced, Sales.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null"
T0 = dt.datetime(2026, 11, 1, 9, 0, tzinfo=dt.timezone.utc)
BODY_BYTES = 100_000
_WORDS = "order customer shipment invoice pallet warehouse harbour crate label customs route depot".split()


def _orders(rng: random.Random, text: str, start: int, count: int) -> pa.Table:
    """``count`` OrderPlaced journal rows with bodies of about ``BODY_BYTES``."""
    ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(count)]
    rows = journal_rows.batch("Sales", range(start, start + count), T0, message_ids=ids)
    bodies = []
    for i in range(count):
        at = rng.randrange(len(text) - BODY_BYTES)
        body = {"OrderId": f"order-{start + i}", "Total": rng.randint(1, 900) / 4, "Notes": text[at : at + BODY_BYTES]}
        bodies.append(json.dumps(body).encode())
    columns = {
        "body": pa.array(bodies, pa.binary()),
        "message_type": pa.array([TYPE] * count, pa.string()),
        "content_type": pa.array(["application/json"] * count, pa.string()),
        "time_sent": pa.array([T0 + dt.timedelta(seconds=start + i) for i in range(count)], pa.timestamp("us", "UTC")),
    }
    for name, values in columns.items():
        index = rows.schema.get_field_index(name)
        rows = rows.set_column(index, rows.schema.field(index), values.cast(rows.schema.field(index).type))
    return rows


def test_a_slice_of_100_kb_bodies_is_read_on_the_default_driver(tmp_path: Path, fresh_pg_uri: str) -> None:
    rng = random.Random(41)
    text = " ".join(rng.choice(_WORDS) for _ in range(60_000))
    lake = DeltaRsEngine(str(tmp_path / "lake"))
    for part in range(6):  # 6,000 rows, 600 MB of bodies, one slice: most of the driver's whole heap
        journal_rows.append(lake, _orders(rng, text, part * 1000, 1000))
    assert lake.read_arrow(MESSAGES.name, columns=["seq"]).num_rows == 6000
    config = tmp_path / "queuelake.json"
    config.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
                "lake": {"root": str(tmp_path / "lake"), "engine": "delta-rs"},
            }
        )
    )
    result = run_cli(["bodies", "-c", str(config)], fresh_pg_uri, cwd=tmp_path)
    assert result.returncode == 0, result
    summary = result.summary
    assert summary["status"] == "ok" and summary["rows_read"] == 6000 and summary["rows_written"] == 6000, summary
    assert "Spark batches of" in result.stderr  # the batches were sized for the bodies
    typed = DeltaRsEngine(str(tmp_path / "lake")).read_arrow("body_sales_messages_events_orderplaced")
    assert typed.num_rows == 6000 and "notes" in [c.lower() for c in typed.column_names]

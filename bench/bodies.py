"""Benchmark: typed body tables from a journal of --types message types against a hand-written Spark
job that is given each type's schema, in one run, and the bodies step's fixed cost.

A journal of --rows messages (round robin over --types types, each its own JSON contract: strings,
whole and fractional numbers, a date-time, an array, a nested object on every other type) is written
straight into a temp lake with the journal engine (no database: this measures the bodies stage), in
commits of --commit-rows, as drains leave it.

bodies: ``queuelake.pipeline.bodies.run.bodies`` over the whole journal: the plan in Arrow, the
sampled inference (``bodies.sample_rows``), one table per type created, parsed and appended with its
application transaction, ``body_schema_changes``, ``body_increments``, runs rows.
hand: what a data engineer writes without it, given the schema of each type (the very schemas the
bodies stage inferred, so the same columns are written): the journal read once and cached, then per
type ``from_json`` with that schema and an append to its own Delta table, through the same lake port.

Both in one Spark session (started and timed once, then warmed by a count of the journal); hand runs
twice after bodies, into two sets of tables, and the faster run counts. Then the fixed costs: bodies
with nothing new in the journal (log lookups), and on an increment of one message (a whole
increment's machinery for one row).
Ends with one JSON line.

    python bench/bodies.py [--rows 1000000] [--types 20] [--commit-rows 20000] [--engine delta-rs]

--engine delta-spark needs the Delta jars on the session's classpath, as the tests get them:
``QUEUELAKE_DELTA_JARS=jvm/jars python bench/bodies.py --engine delta-spark``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
import pyarrow as pa
from queuelake.config import from_dict
from queuelake.lake.engines import journal_engine, open_lake
from queuelake.lake.stage_tables import BODY_IDENTITY
from queuelake.pipeline.bodies.run import bodies
from queuelake.pipeline.journal.build import build_batch
from queuelake.pipeline.journal.schema import MESSAGES, MESSAGES_SCHEMA
from queuelake.report import setup_logging
from queuelake.spark import get_spark
from queuelake.transport.queues import RECEIVED_SCHEMA

START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


def type_name(k: int) -> str:
    return f"Bench.Contracts.Event{k:02d}"


def body(k: int, i: int, rng: random.Random) -> bytes:
    doc: dict[str, object] = {
        "Id": f"e{k}-{i}",
        "Amount": round(rng.random() * 1000, 2) + 0.01,
        "Count": rng.randrange(1, 100),
        "At": (START + dt.timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "Tags": [f"t{rng.randrange(5)}" for _ in range(rng.randrange(1, 4))],
    }
    for j in range(3 + k % 5):
        doc[f"Field{k}_{j}"] = f"v{rng.randrange(1000)}" if j % 2 else rng.randrange(10**6)
    if k % 2 == 0:
        doc["Address"] = {"Street": f"street {rng.randrange(100)}", "City": rng.choice(["Oslo", "Lyon"]), "No": i}
    return json.dumps(doc).encode()


def headers(k: int, i: int) -> str:
    message_id = str(uuid.UUID(int=random.Random(i * 100 + k).getrandbits(128), version=4))
    sent = START + dt.timedelta(milliseconds=i * 10)
    return json.dumps(
        {
            "NServiceBus.MessageId": message_id,
            "NServiceBus.MessageIntent": "Publish",
            "NServiceBus.ConversationId": message_id,
            "NServiceBus.OriginatingEndpoint": f"Endpoint{k % 4}",
            "NServiceBus.ContentType": "application/json",
            "NServiceBus.EnclosedMessageTypes": f"{type_name(k)}, Bench.Contracts, Version=1.0.0.0",
            "NServiceBus.TimeSent": sent.strftime("%Y-%m-%d %H:%M:%S:%f Z"),
        }
    )


def write_journal(lake, rows: int, types: int, commit_rows: int, first: int = 0) -> float:
    t0 = time.perf_counter()
    journal = journal_engine(lake)
    if not journal.exists(MESSAGES):
        journal.create_table(MESSAGES, MESSAGES_SCHEMA)
    version = journal.table_version(MESSAGES) or 0
    rng = random.Random(first)
    i = first
    while i < first + rows:
        n = min(commit_rows, first + rows - i)
        chunk = range(i, i + n)
        received = pa.Table.from_pydict(
            {
                "id": [str(uuid.uuid4()) for _ in chunk],
                "seq": [j + 1 for j in chunk],
                "expired": [False] * n,
                "expires": [None] * n,
                "raw_expires": [None] * n,
                "headers": [headers(j % types, j) for j in chunk],
                "body": [body(j % types, j, rng) for j in chunk],
            },
            schema=RECEIVED_SCHEMA,
        )
        version += 1
        table, _ = build_batch(received, "Sales", f"bench:{version}", dt.datetime.now(dt.timezone.utc))
        journal.append(MESSAGES, table, "queuelake.drain/bench/0", version)
        i += n
    return time.perf_counter() - t0


def hand_job(spark, lake, schemas: dict[str, object], version: int, prefix: str) -> float:
    """Per type, the Spark job a person writes given its schema: from_json and an append."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    journal = lake.read(MESSAGES).where(F.col("outcome") == "landed")
    journal = journal.select(
        *[c for c in BODY_IDENTITY.names if c not in ("message_type", "type_version")],
        F.col("enclosed_message_types")[0].alias("message_type"),
        F.decode(F.col("body"), "UTF-8").alias("text"),
    ).persist(StorageLevel.MEMORY_AND_DISK)
    for full, schema in schemas.items():
        typed = (
            journal.where(F.col("message_type") == full)
            .withColumn("p", F.from_json("text", schema))  # type: ignore[arg-type]
            .withColumn("type_version", F.lit("1.0.0.0"))
            .select(*BODY_IDENTITY.names, "p.*")
        )
        name = prefix + full.split(",")[0].rsplit(".", 1)[-1].lower()
        lake.append_dataframe(name, typed, "hand", version)
    journal.unpersist()
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--types", type=int, default=20)
    parser.add_argument("--commit-rows", type=int, default=20_000)
    parser.add_argument("--engine", default="delta-rs", choices=["delta-rs", "delta-spark"])
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    setup_logging(logging.INFO if args.verbose else logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="queuelake-bench-bodies-"))
    cfg = from_dict(
        {"transport": {"connection": "postgresql://unused/none"}, "lake": {"root": str(work), "engine": args.engine}},
        env={},
    )
    t0 = time.perf_counter()
    spark = get_spark(cfg.spark)
    session_s = time.perf_counter() - t0
    lake = open_lake(cfg.lake, spark)
    journal_s = write_journal(lake, args.rows, args.types, args.commit_rows)
    print(f"journal of {args.rows:,} rows written in {journal_s:.1f}s; Spark session {session_s:.1f}s", file=sys.stderr)
    upto = lake.table_version(MESSAGES) or 0
    assert lake.read(MESSAGES).count() == args.rows  # the session's first read: neither side's

    t0 = time.perf_counter()
    summary = bodies(cfg, spark, lake)
    bodies_s = time.perf_counter() - t0
    assert summary["status"] == "ok" and summary["rows_written"] == args.rows, summary
    tables = {t["type_name"]: t["table"] for t in summary["tables"]}
    assert len(tables) == args.types, tables
    identity = set(BODY_IDENTITY.names)
    from pyspark.sql.types import StructType

    schemas = {
        f"{name}, Bench.Contracts, Version=1.0.0.0": StructType(
            [f for f in lake.read(table).schema.fields if f.name not in identity]
        )
        for name, table in tables.items()
    }
    hand_s = min(hand_job(spark, lake, schemas, upto, "hand_"), hand_job(spark, lake, schemas, upto, "hand2_"))

    t0 = time.perf_counter()
    idle = bodies(cfg, spark, lake)
    idle_s = time.perf_counter() - t0
    assert idle.get("note") == "nothing new", idle
    write_journal(lake, 1, args.types, 1, first=args.rows)
    t0 = time.perf_counter()
    one = bodies(cfg, spark, lake)
    one_s = time.perf_counter() - t0
    assert one["status"] == "ok" and one["rows_written"] == 1, one
    print(
        f"bodies {bodies_s:.2f}s ({args.rows / bodies_s:,.0f} rows/s), hand-written job {hand_s:.2f}s "
        f"({args.rows / hand_s:,.0f} rows/s): bodies at {hand_s / bodies_s:.2f} x its rate; "
        f"fixed cost: nothing new {idle_s:.2f}s, a one-row increment {one_s:.2f}s",
        file=sys.stderr,
    )
    print(
        json.dumps(
            {
                "rows": args.rows,
                "types": args.types,
                "engine": lake.name,
                "spark_session_seconds": round(session_s, 2),
                "bodies_seconds": round(bodies_s, 2),
                "hand_seconds": round(hand_s, 2),
                "rate_ratio": round(hand_s / bodies_s, 3),
                "idle_seconds": round(idle_s, 3),
                "one_row_increment_seconds": round(one_s, 2),
            }
        )
    )
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

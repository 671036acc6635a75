"""Benchmark: one transform increment against the plain Spark job that does the same work, in one run.

A journal of --rows order events (``traffic.order_events``, decoded by the drain's own builder) is
written straight into a temp lake with the journal engine (no database: this measures the transform
alone), in commits of --commit-rows, as drains leave it.

raw: the same transform function (the demo's ``customer_totals``) over the same journal files, read
by Spark with the journal's schema and written as plain Parquet with ``df.write.parquet``: the Spark
job with nothing around it.
transform: ``queuelake.pipeline.transform.transform`` of the whole increment into its Delta output
(increment from the log, the write with its application transaction, runs rows).

Both run in the same Spark session, started (and timed) once before either; raw runs before and
after the transform and the faster of its two runs counts (the first read of a session is slower). Prints both times and
raw/transform (1.0 means no overhead), and ends with one JSON line.

    python bench/transform.py [--rows 1000000] [--commit-rows 10000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
import pyarrow as pa
from queuelake.commands.demo import traffic
from queuelake.commands.demo.orders import customer_totals
from queuelake.config import from_dict
from queuelake.lake.engines import journal_engine, open_lake
from queuelake.pipeline.bodies.reader import BodyTables
from queuelake.pipeline.bodies.run import bodies
from queuelake.pipeline.journal.build import build_batch
from queuelake.pipeline.journal.schema import MESSAGES, MESSAGES_SCHEMA
from queuelake.pipeline.transform import new_landed, transform
from queuelake.report import setup_logging
from queuelake.spark import get_spark
from queuelake.transport.queues import RECEIVED_SCHEMA


def write_journal(lake, rows: int, commit_rows: int) -> float:
    t0 = time.perf_counter()
    journal = journal_engine(lake)
    journal.create_table(MESSAGES, MESSAGES_SCHEMA)
    events = traffic.order_events(rows, seed=42)
    version = 0
    seq = 0
    while seq < rows:
        chunk = [next(events) for _ in range(min(commit_rows, rows - seq))]
        received = pa.Table.from_pydict(
            {
                "id": [str(uuid.uuid4()) for _ in chunk],
                "seq": list(range(seq + 1, seq + len(chunk) + 1)),
                "expired": [False] * len(chunk),
                "expires": [None] * len(chunk),
                "raw_expires": [None] * len(chunk),
                "headers": [m.headers for m in chunk],
                "body": [m.body for m in chunk],
            },
            schema=RECEIVED_SCHEMA,
        )
        version += 1
        table, _ = build_batch(received, "Sales", f"bench:{version}", dt.datetime.now(dt.timezone.utc))
        journal.append(MESSAGES, table, "queuelake.drain/bench/0", version)
        seq += len(chunk)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--commit-rows", type=int, default=10_000)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    setup_logging(logging.INFO if args.verbose else logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="queuelake-bench-transform-"))
    cfg = from_dict(
        {
            "transport": {"connection": "postgresql://unused/none"},
            "lake": {"root": str(work / "lake"), "engine": "delta-rs"},
            "transforms": [
                {
                    "name": "customer_totals",
                    "function": "queuelake.commands.demo.orders:customer_totals",
                    "output": "outbound_customer_totals",
                    "destinations": ["Billing"],
                }
            ],
        },
        env={},
    )
    t0 = time.perf_counter()
    spark = get_spark(cfg.spark)
    session_s = time.perf_counter() - t0
    lake = open_lake(cfg.lake, spark)
    journal_s = write_journal(lake, args.rows, args.commit_rows)
    print(f"journal of {args.rows:,} rows written in {journal_s:.1f}s; Spark session {session_s:.1f}s", file=sys.stderr)

    upto = lake.table_version(MESSAGES)
    # the example reads the typed OrderPlaced table: built first, so that both sides below read it
    assert bodies(cfg, spark, lake)["status"] == "ok"
    typed = BodyTables(cfg, spark, lake)

    def raw() -> float:
        t0 = time.perf_counter()
        out = customer_totals(new_landed(spark, lake, None, upto), bodies=typed)
        out.write.mode("overwrite").parquet(str(work / "raw"))
        return time.perf_counter() - t0

    first_raw_s = raw()  # the session's first read of the journal pays for warming up: not the transform's
    t0 = time.perf_counter()
    summary = transform(cfg, spark, lake)
    transform_s = time.perf_counter() - t0
    raw_s = min(first_raw_s, raw())
    (result,) = summary["transforms"]
    assert summary["status"] == "ok" and result["rows_in"] == args.rows, summary
    raw_rows = spark.read.parquet(str(work / "raw")).count()
    assert result["rows_out"] == raw_rows, (result, raw_rows)
    print(
        f"raw Spark job {raw_s:.2f}s, transform {transform_s:.2f}s, ratio raw/transform {raw_s / transform_s:.3f}",
        file=sys.stderr,
    )
    print(
        json.dumps(
            {
                "rows": args.rows,
                "commits": (args.rows + args.commit_rows - 1) // args.commit_rows,
                "rows_out": result["rows_out"],
                "spark_session_seconds": round(session_s, 2),
                "raw_seconds": round(raw_s, 2),
                "transform_seconds": round(transform_s, 2),
                "ratio": round(raw_s / transform_s, 3),
            }
        )
    )
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

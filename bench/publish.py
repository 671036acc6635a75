"""Benchmark: publish end to end against a raw COPY of the same rows into the same table, in one run.

raw: the messages publish would send (same headers size, same bodies), COPY'd by psycopg into the
queue table in chunks of the publish batch size, one transaction per chunk.
publish: an outbound table of N Send rows in the lake, published to that queue with
``queuelake.pipeline.publish`` (increment from the log, the Spark row checks of the outbound contract,
batches with their ledger rows; no user expectations configured, so no great-expectations).

    python bench/publish.py [--rows 1000000] [--batch-size 5000] [--modes driver,executors] [--repeat N]
                            [--raw-binary] [--dsn URI]

Each mode publishes the same round again (the queue emptied and the ledger forgotten in between):
``driver`` streams the round through the driver, ``executors`` sends it from Spark tasks, one per
Parquet row group (what rounds of ``publish.executors_from_rows`` rows or more do). Prints the raw
rate and, per mode, its rate and ratio (target >= 0.6).

--raw-binary: a stricter raw limit as well, the same COPY in binary format (``FORMAT BINARY``, what
publish itself sends: bodies as bytes, not hex-escaped text), built the same way; each mode's ratio
against it is printed beside the main one.
--repeat N: N rounds of (raw, every mode), summed up as medians per mode: on 2 shared cores one
20,000-row round takes under a second and the raw alone moves by a third between runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
import orjson
import psycopg
import pyarrow as pa
from queuelake.config import from_dict
from queuelake.lake.engines import open_lake
from queuelake.nsb import headers as hdr
from queuelake.pipeline.publish.run import publish
from queuelake.report import setup_logging
from queuelake.spark import get_spark
from queuelake.transport import db, installer, queues
from queuelake.transport.embedded import start_embedded
from queuelake.transport.tables import bridge_ref, queue_ref

TARGET = 0.6
TYPE = "Billing.Messages.Commands.ApplyLoyaltyDiscount, Billing.Messages, Version=1.0.0.0"


def body(i: int) -> bytes:
    return orjson.dumps({"CustomerId": f"customer-{i}", "DiscountPercent": 10, "Notes": "x" * 900})


def outbound(rows: int, chunk: int = 100_000):
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        yield pa.table(
            {
                "key": [f"discount:{i}" for i in range(start, start + n)],
                "message_type": [TYPE] * n,
                "intent": ["Send"] * n,
                "destination": ["Bench"] * n,
                "body": [body(i) for i in range(start, start + n)],
            }
        )


def raw_copy(uri: str, qualified: str, rows: int, batch: int, binary: bool = False) -> float:
    """The raw limit: each message built as cheaply as Python allows (fixed headers, fresh ids) and
    COPY'd in chunks of the batch size, one transaction per chunk. ``binary``: the binary format."""
    headers = {
        hdr.MESSAGE_ID: "",
        hdr.MESSAGE_INTENT: "Send",
        hdr.ENCLOSED_MESSAGE_TYPES: TYPE,
        hdr.CONTENT_TYPE: "application/json",
        hdr.TIME_SENT: "2026-11-21 10:00:00:000000 Z",
        hdr.CONVERSATION_ID: "",
        hdr.CORRELATION_ID: "",
        hdr.ORIGINATING_ENDPOINT: "Lakehouse",
        hdr.ORIGINATING_MACHINE: "bench",
        hdr.VERSION: "9.2.0",
    }
    statement = f"COPY {qualified} (id, expires, headers, body) FROM STDIN" + (" (FORMAT BINARY)" if binary else "")
    t0 = time.perf_counter()
    with psycopg.connect(uri) as conn:
        for start in range(0, rows, batch):
            with conn.cursor() as cur, cur.copy(statement) as copy:
                if binary:
                    copy.set_types(queues.COPY_TYPES)  # the columns and types publish sends
                for i in range(start, min(start + batch, rows)):
                    mid = str(uuid.uuid4())
                    h = {**headers, hdr.MESSAGE_ID: mid, hdr.CONVERSATION_ID: mid, hdr.CORRELATION_ID: mid}
                    row_id = uuid.uuid4() if binary else str(uuid.uuid4())
                    copy.write_row((row_id, None, orjson.dumps(h).decode(), body(i)))
            conn.commit()
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=5000)
    parser.add_argument("--modes", default="driver,executors", help="comma-separated: driver, executors")
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--repeat", type=int, default=1, help="rounds of (raw, every mode); medians reported")
    parser.add_argument("--raw-binary", action="store_true", help="also measure the raw COPY in binary format")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    setup_logging(logging.INFO if args.verbose else logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="queuelake-bench-publish-"))
    try:
        return run(args, work)
    finally:  # a 1M-row round leaves gigabytes of lake and database behind
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path) -> int:
    server = None
    uri = args.dsn
    if uri is None:
        server = start_embedded(work / "pg")
        uri = server.get_uri("postgres")
    cfg = from_dict(
        {
            "transport": {"connection": uri},
            "lake": {"root": str(work / "lake"), "engine": "delta-rs"},
            "publish": {"endpoint": "Lakehouse", "outputs": ["outbound_bench"], "batch_size": args.batch_size},
        },
        env={},
    )
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=["Bench"]))
    ref = queue_ref("Bench", cfg.transport)
    spark = get_spark(cfg.spark)
    lake = open_lake(cfg.lake, spark)
    for version, chunk in enumerate(outbound(args.rows), start=1):
        lake.append("outbound_bench", chunk, "bench", version)
    ledger_ref = bridge_ref(cfg.transport.ledger_table, cfg.transport)

    def reset() -> None:
        """Empty the queue and forget the ledger: the next run sends the same round again."""
        with psycopg.connect(uri, autocommit=True) as c:
            c.execute(f"TRUNCATE {ref.qualified}")
            c.execute(f"DELETE FROM {ledger_ref.qualified}")
            c.execute(f"VACUUM ANALYZE {ref.qualified}")

    def raw(binary: bool) -> float:
        seconds = raw_copy(uri, ref.qualified, args.rows, args.batch_size, binary)
        reset()
        return args.rows / seconds

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    runs: list[dict] = []
    for _ in range(args.repeat):
        run: dict = {"raw_rows_per_s": raw(False)}
        if args.raw_binary:
            run["raw_binary_rows_per_s"] = raw(True)
        for mode in modes:
            cfg.publish.executors_from_rows = 1 if mode == "executors" else None
            t0 = time.perf_counter()
            summary = publish(cfg, spark, lake)
            publish_s = time.perf_counter() - t0
            assert summary["status"] == "ok" and summary["copies"] == args.rows, summary
            with psycopg.connect(uri) as c:
                assert c.execute(f"SELECT count(*) FROM {ref.qualified}").fetchone()[0] == args.rows
            reset()
            rate = args.rows / publish_s
            ratio = round(rate / run["raw_rows_per_s"], 3)
            run[mode] = {"seconds": round(publish_s, 2), "rows_per_s": round(rate), "ratio": ratio}
            if args.raw_binary:
                run[mode]["ratio_vs_raw_binary"] = round(rate / run["raw_binary_rows_per_s"], 3)
        runs.append(run)
        print(json.dumps({k: round(v) if isinstance(v, float) else v for k, v in run.items()}), file=sys.stderr)

    report: dict = {"rows": args.rows, "batch_size": args.batch_size, "repeat": args.repeat}
    report["raw_rows_per_s"] = round(statistics.median(r["raw_rows_per_s"] for r in runs))
    if args.raw_binary:
        report["raw_binary_rows_per_s"] = round(statistics.median(r["raw_binary_rows_per_s"] for r in runs))
    for mode in modes:
        ratios = sorted(r[mode]["ratio"] for r in runs)
        report[mode] = {
            "rows_per_s": round(statistics.median(r[mode]["rows_per_s"] for r in runs)),
            "ratio": round(statistics.median(ratios), 3),  # the median ratio (one run: that run's)
            "ratios": ratios,
            "runs_at_target": sum(x >= TARGET for x in ratios),
        }
        if args.raw_binary:
            report[mode]["ratio_vs_raw_binary"] = round(
                statistics.median(r[mode]["ratio_vs_raw_binary"] for r in runs), 3
            )
    report["target"] = TARGET
    print(json.dumps(report))
    spark.stop()
    if server is not None:
        server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

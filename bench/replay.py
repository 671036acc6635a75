"""Benchmark: retry N failed messages from the journal back to their queues, against a raw COPY of the
same rows into the same tables, in one run.

Set-up (not timed): N failed copies of OrderPlaced events (~700 B headers, ~1 KB bodies) in the error
queue, half failed in Billing, half in Shipping, drained into the journal.
raw: the same header texts and bodies COPY'd by psycopg into Billing and Shipping, one transaction per
batch of ``--batch-size`` rows (only the COPY and the commit are timed; the rows are built beforehand).
replay: ``queuelake.pipeline.replay`` with ``--where "exception_type = '...'"``: the selection in Spark
(the session is already up), destinations checked, headers rewritten as a ServiceControl retry, a COPY
per destination and a ledger row per batch, one transaction per batch.

    python bench/replay.py [--rows 250000] [--batch-size 5000] [--dsn URI]

Prints both rates, their ratio (target >= 0.6) and one JSON line.
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
import psycopg
from queuelake.config import from_dict
from queuelake.examples import traffic
from queuelake.lake.engines import open_lake
from queuelake.pipeline.drain import drain
from queuelake.pipeline.replay.replayer import ReplayOptions, replay
from queuelake.report import setup_logging
from queuelake.spark import get_spark
from queuelake.transport import db, installer
from queuelake.transport.embedded import start_embedded
from queuelake.transport.tables import queue_ref

EXCEPTION = "System.TimeoutException"
WHEN = dt.datetime(2026, 11, 2, 8, 30, tzinfo=dt.timezone.utc)


def failed_messages(rows: int):
    """(queue it failed in, the error-queue message), the same sequence every call."""
    for i, m in enumerate(traffic.order_events(rows, seed=42)):
        queue = "Billing" if i % 2 else "Shipping"
        yield queue, traffic.failed_copy(m, queue, EXCEPTION, "timed out", WHEN)


def raw_copy(uri: str, tables: dict[str, str], rows: int, batch: int) -> float:
    """Seconds spent in COPY + commit of the same rows into the same tables, a batch per transaction."""
    spent = 0.0
    gen = failed_messages(rows)
    with psycopg.connect(uri) as conn:
        for start in range(0, rows, batch):
            chunk: dict[str, list[tuple]] = {}
            for _, (queue, m) in zip(range(start, min(start + batch, rows)), gen):
                chunk.setdefault(queue, []).append((str(uuid.uuid4()), None, m.headers, m.body))
            t0 = time.perf_counter()
            for queue, items in chunk.items():
                sql = f"COPY {tables[queue]} (id, expires, headers, body) FROM STDIN"
                with conn.cursor() as cur, cur.copy(sql) as copy:
                    for item in items:
                        copy.write_row(item)
            conn.commit()
            spent += time.perf_counter() - t0
    return spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=250_000)
    parser.add_argument("--batch-size", type=int, default=5000)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    setup_logging(logging.INFO if args.verbose else logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="queuelake-bench-replay-"))
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
            "drain": {"queues": ["error"], "batch_size": 10_000},
        },
        env={},
    )
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=["Billing", "Shipping"]))
        error = queue_ref("error", cfg.transport)
        traffic.seed(conn, error, (m for _, m in failed_messages(args.rows)))
    t0 = time.perf_counter()
    drained = drain(cfg, open_lake(cfg.lake))
    drain_s = time.perf_counter() - t0
    assert drained["landed"] == args.rows, drained
    tables = {q: queue_ref(q, cfg.transport).qualified for q in ("Billing", "Shipping")}
    spark = get_spark(cfg.spark)
    lake = open_lake(cfg.lake, spark)

    raw_s = raw_copy(uri, tables, args.rows, args.batch_size)
    with psycopg.connect(uri, autocommit=True) as c:
        for qualified in tables.values():
            c.execute(f"TRUNCATE {qualified}")
            c.execute(f"VACUUM ANALYZE {qualified}")

    options = ReplayOptions(predicate=f"exception_type = '{EXCEPTION}'", batch_size=args.batch_size)
    t0 = time.perf_counter()
    summary = replay(cfg, spark, lake, options)
    replay_s = time.perf_counter() - t0
    assert summary["status"] == "ok" and summary["rows_sent"] == args.rows, summary
    with psycopg.connect(uri) as c:
        total = sum(c.execute(f"SELECT count(*) FROM {q}").fetchone()[0] for q in tables.values())
    assert total == args.rows, total

    raw_rate, replay_rate = args.rows / raw_s, args.rows / replay_s
    print(f"raw COPY: {args.rows} rows in {raw_s:.2f}s ({raw_rate:,.0f} rows/s)", file=sys.stderr)
    print(
        f"replay:   {args.rows} rows in {replay_s:.2f}s ({replay_rate:,.0f} rows/s; sending alone "
        f"{summary['seconds_sending']:.2f}s); ratio {replay_rate / raw_rate:.2f} (target 0.6)",
        file=sys.stderr,
    )
    print(
        json.dumps(
            {
                "rows": args.rows,
                "batch_size": args.batch_size,
                "drain_seconds": round(drain_s, 2),
                "raw_copy_seconds": round(raw_s, 2),
                "raw_rows_per_s": round(raw_rate),
                "replay_seconds": round(replay_s, 2),
                "replay_sending_seconds": summary["seconds_sending"],
                "replay_rows_per_s": round(replay_rate),
                "ratio": round(replay_rate / raw_rate, 3),
                "target": 0.6,
            }
        )
    )
    spark.stop()
    if server is not None:
        server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: the drain end to end against the raw limit, in one run, on the same rows.

raw limit: a plain batched ``DELETE ... RETURNING`` (SKIP LOCKED, k rows per statement, binary
protocol, rows fetched and dropped) with as many connections as the drain has workers.
drain: ``queuelake drain`` of the same rows (re-seeded identically) into a fresh lake.

    python bench/drain.py [--messages 1000000] [--batch-size 10000] [--workers 2] [--dsn URI]

Without --dsn it starts an embedded PostgreSQL. Prints both rates and their ratio (target >= 0.6).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg
from queuelake.config import from_dict
from queuelake.examples import traffic
from queuelake.lake.port import open_lake
from queuelake.pipeline.drain import drain
from queuelake.report import setup_logging
from queuelake.transport import db, installer
from queuelake.transport.embedded import start_embedded
from queuelake.transport.tables import queue_ref


def seed(cfg, count: int) -> float:
    ref = queue_ref("Bench", cfg.transport)
    t0 = time.perf_counter()
    with db.connect(cfg.transport) as conn:
        traffic.seed(conn, ref, traffic.order_events(count, seed=42), chunk=50_000)
    with psycopg.connect(cfg.transport.connection, autocommit=True) as c:
        c.execute(f"VACUUM ANALYZE {ref.qualified}")
    return time.perf_counter() - t0


def raw_drain(uri: str, qualified: str, batch: int, connections: int) -> tuple[int, float]:
    sql = (
        f"DELETE FROM {qualified} AS q USING (SELECT seq FROM {qualified} ORDER BY seq LIMIT {batch} "
        f"FOR UPDATE SKIP LOCKED) AS c WHERE q.seq = c.seq "
        "RETURNING q.id, q.seq, (q.expires IS NOT NULL AND q.expires <= (now() AT TIME ZONE 'UTC')), "
        "q.expires, q.headers, q.body"
    )
    counts = [0] * connections

    def run(i: int) -> None:
        with psycopg.connect(uri) as conn:
            while True:
                with conn.cursor(binary=True) as cur:
                    cur.execute(sql)
                    rows = cur.fetchall()
                conn.commit()
                if not rows:
                    return
                counts[i] += len(rows)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts), time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    setup_logging(logging.INFO if args.verbose else logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="queuelake-bench-"))
    server = None
    uri = args.dsn
    if uri is None:
        server = start_embedded(work / "pg")
        uri = server.get_uri("postgres")
    cfg = from_dict(
        {
            "transport": {"connection": uri},
            "lake": {"root": str(work / "lake"), "engine": "delta-rs"},
            "drain": {"queues": ["Bench"], "batch_size": args.batch_size, "workers_per_queue": args.workers},
        },
        env={},
    )
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
    ref = queue_ref("Bench", cfg.transport)

    seed_s = seed(cfg, args.messages)
    print(f"seeded {args.messages:,} messages in {seed_s:.1f}s", file=sys.stderr)
    raw_n, raw_s = raw_drain(uri, ref.qualified, args.batch_size, args.workers)
    assert raw_n == args.messages, raw_n

    seed(cfg, args.messages)
    t0 = time.perf_counter()
    summary = drain(cfg, open_lake(cfg.lake))
    drain_s = time.perf_counter() - t0
    assert summary["dequeued"] == args.messages, summary

    raw_rate = raw_n / raw_s
    drain_rate = summary["dequeued"] / drain_s
    result = {
        "messages": args.messages,
        "batch_size": args.batch_size,
        "connections": args.workers,
        "raw_seconds": round(raw_s, 2),
        "raw_msgs_per_s": round(raw_rate),
        "drain_seconds": round(drain_s, 2),
        "drain_msgs_per_s": round(drain_rate),
        "ratio": round(drain_rate / raw_rate, 3),
        "target": 0.6,
    }
    print(json.dumps(result))
    shutil.rmtree(work / "lake", ignore_errors=True)
    if server is not None:
        server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: a whole system in one drain (issue 32). Many queues against one queue of the same rows.

Two states of the same server, each seeded with identical rows (``traffic.order_events``):
- many: --queues queue tables (default 500) of --per-queue messages each (default 1,000);
- one: a single queue table of queues x per-queue messages (default 500,000).

Each is drained by the whole command, ``queuelake drain -c <config>``, in a new process as a
scheduler runs it (fixed cost included: interpreter, imports, connections, the depth estimate), into
a fresh lake, with the default ``drain.max_connections`` (24). Reported for each: seconds, msg/s, the
command's peak memory, its summary's journal commits and largest group commit, its
``peak_connections``, and the connections to the database seen at peak from outside
(``pg_stat_activity``, polled every 10 ms) beside the bound. Then the ratio many / one (target >= 0.8).

    python bench/queues.py [--queues 500] [--per-queue 1000] [--repeat 1] [--dsn URI]

Without --dsn (or QUEUELAKE_BENCH_PG_DSN) it starts an embedded PostgreSQL (pgserver). With one, it
creates tables ``public."ql_bench_q<i>"`` and ``public."ql_bench_one"`` there and drops them after.
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
import psycopg
from _commands import queuelake
from _receive import checkpoint
from queuelake.config import from_dict
from queuelake.examples import traffic
from queuelake.transport import db, installer
from queuelake.transport.embedded import start_embedded
from queuelake.transport.tables import queue_ref

TARGET = 0.8


class PeakConnections:
    """The most connections to the database (other than this poller's) seen while a command runs."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> PeakConnections:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        with psycopg.connect(self.uri, autocommit=True) as conn:
            while not self._stop.is_set():
                (count,) = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()
                self.peak = max(self.peak, count)
                time.sleep(0.01)


def write_config(path: Path, uri: str, lake: Path, queues: list[str]) -> Path:
    path.write_text(
        json.dumps(
            {
                "transport": {"connection": uri},
                "lake": {"root": str(lake), "engine": "delta-rs"},
                "drain": {"queues": queues},
            }
        )
    )
    return path


def seed(uri: str, names: list[str], per_queue: int, seed_base: int) -> float:
    """Create the tables (if missing) and seed each with ``per_queue`` messages; seconds spent."""
    t0 = time.perf_counter()
    cfg = from_dict({"transport": {"connection": uri}, "drain": {"queues": names}}, env={})
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        for i, name in enumerate(names):
            traffic.seed(
                conn, queue_ref(name, cfg.transport), traffic.order_events(per_queue, seed=seed_base + i), chunk=50_000
            )
    with psycopg.connect(uri, autocommit=True) as c:
        c.execute("VACUUM ANALYZE")
    checkpoint(uri)
    return time.perf_counter() - t0


def measure(uri: str, work: Path, names: list[str], rows: int) -> dict[str, Any]:
    lake = work / "lake"
    shutil.rmtree(lake, ignore_errors=True)
    conf = write_config(work / "drain.json", uri, lake, names)
    with PeakConnections(uri) as watch:
        ran = queuelake(["drain", "-c", str(conf)])
    summary = ran.summary
    if summary.get("dequeued") != rows:
        raise SystemExit(f"the drain took {summary.get('dequeued')} of {rows} rows: {summary.get('status')}")
    shutil.rmtree(lake, ignore_errors=True)
    return {
        "queues": len(names),
        "rows": rows,
        "seconds": round(ran.seconds, 2),
        "msgs_per_s": round(rows / ran.seconds),
        "peak_rss_mb": ran.peak_rss_mb,
        "journal_commits": summary["journal_commits"],
        "largest_group": summary["largest_group"],
        "peak_connections_reported": summary["peak_connections"],
        "peak_connections_seen": watch.peak,
        "max_connections": 24,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=500)
    parser.add_argument("--per-queue", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=1, help="pairs of runs; medians")
    parser.add_argument("--dsn", default=os.environ.get("QUEUELAKE_BENCH_PG_DSN"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="queuelake-bench-queues-"))
    server = None
    uri = args.dsn
    if uri is None:
        server = start_embedded(work / "pg")
        uri = server.get_uri("postgres")
    many = [f"ql_bench_q{i:04d}" for i in range(args.queues)]
    one = ["ql_bench_one"]
    rows = args.queues * args.per_queue
    runs: list[dict[str, Any]] = []
    try:
        for r in range(args.repeat):
            pair: dict[str, Any] = {}
            for label in ("many", "one") if r % 2 == 0 else ("one", "many"):
                names = many if label == "many" else one
                per_queue = args.per_queue if label == "many" else rows
                seeded = seed(uri, names, per_queue, 1000 * r)
                pair[label] = measure(uri, work, names, rows)
                pair[label]["seed_seconds"] = round(seeded, 1)
                print(
                    f"{label}: {pair[label]['queues']} queue(s), {rows:,} rows in {pair[label]['seconds']} s "
                    f"({pair[label]['msgs_per_s']:,} msg/s), {pair[label]['journal_commits']} journal commits "
                    f"(largest group {pair[label]['largest_group']}), connections at peak "
                    f"{pair[label]['peak_connections_seen']} seen / {pair[label]['peak_connections_reported']} "
                    f"reported, bound 24, peak RSS {pair[label]['peak_rss_mb']} MB",
                    flush=True,
                )
            pair["ratio"] = round(pair["many"]["msgs_per_s"] / pair["one"]["msgs_per_s"], 3)
            print(f"many / one: {pair['ratio']} (target >= {TARGET})", flush=True)
            runs.append(pair)
        with psycopg.connect(uri, autocommit=True) as c:
            for name in [*many, *one]:
                c.execute(f'DROP TABLE IF EXISTS public."{name}"')
    finally:
        if server is not None:
            server.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "queues": args.queues,
        "per_queue": args.per_queue,
        "rows": rows,
        "runs": runs,
        "ratio_median": statistics.median(p["ratio"] for p in runs),
        "target": TARGET,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

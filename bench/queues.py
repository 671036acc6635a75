"""Benchmark: a whole system in one drain (issue 32). Many queues against one queue of the same rows,
with the drain on the driver and on Spark executors.

Two states of the same server, each seeded with identical rows (``traffic.order_events``):
- many: --queues queue tables (default 500) of --per-queue messages each (default 1,000);
- one: a single queue table of queues x per-queue messages (default 500,000).

Each is drained by the whole command, ``queuelake drain -c <config>``, in a new process as a
scheduler runs it (fixed cost included: interpreter, imports, connections, the depth estimate, and
with executors the Spark session's start), into a fresh lake, with the default
``drain.max_connections`` (24), in each mode of --on:
- driver: ``drain.on: driver``, every queue's workers threads of the command's process;
- processes: ``drain.on: processes``, the queues' workers in local processes the command spawns (as
  many as the machine's cores); their memory is not in the command's peak RSS;
- executors: ``drain.on: executors`` against a Spark standalone cluster the bench starts for this
  mode's runs from the installed pyspark (``tests/pipeline/standalone.py``: a master and two workers
  of 1 core / 1 GB, executors of 768 MB running this tree's ``lib``) and stops after them, also on a
  failure or a SIGTERM (its start is reported, not counted in the commands' seconds).

Reported for each: seconds, msg/s, the command's peak memory (the driver's Python process; not the
JVM, not the executors), its summary's journal commits and largest group commit, its
``peak_connections`` (on executors the plan's bound: the driver cannot count the tasks'), and the
connections to the database seen at peak from outside (``pg_stat_activity``, polled every 10 ms; every
connection to the database counts, the executors' included), with who held them at that moment (by
``application_name``; ADBC's set none), beside the bound. Before each command the bench waits until
the database has no connection left (a previous run's executors may still be closing theirs). Then
the ratio many / one per mode (target >= 0.8), and for processes and executors their many queues
against the one queue on the driver (the fastest way to drain one queue).

    python bench/queues.py [--queues 500] [--per-queue 1000] [--on all|driver,processes,executors]
                           [--repeat 1] [--dsn URI]

Without --dsn (or QUEUELAKE_BENCH_PG_DSN) it starts an embedded PostgreSQL (pgserver). With one, it
creates tables ``public."ql_bench_q<i>"`` and ``public."ql_bench_one"`` there and drops them after.
Ends with one JSON line: ``{"modes": {"driver": {"runs": [...], "ratio_median": ...}, "executors": ...}}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
import psycopg
from _commands import ROOT, queuelake
from _receive import checkpoint
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.transport import db, installer
from queuelake.transport.activity import PeakConnections
from queuelake.transport.embedded import start_embedded
from queuelake.transport.table_refs import queue_ref

TARGET = 0.8
MODES = ("driver", "processes", "executors")
CLUSTER_WORKERS = 2  # of 1 core each: what tests/pipeline/standalone.py starts
MAX_CONNECTIONS = from_dict({}, env={}).drain.max_connections  # the default the bench keeps


@contextlib.contextmanager
def standalone(wanted: bool) -> Iterator[tuple[str | None, float]]:
    """The master of a standalone cluster started for the run (and seconds to start it), stopped
    when the block ends however it ends; ``(None, 0)`` when no mode needs one."""
    if not wanted:
        yield None, 0.0
        return
    # the tests' cluster, one copy of the code: they import it as tests.pipeline.standalone
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    from tests.pipeline.standalone import standalone_cluster

    started = time.perf_counter()
    with contextlib.contextmanager(standalone_cluster)(workers=CLUSTER_WORKERS) as cluster:
        yield cluster.master, time.perf_counter() - started


def settings(uri: str, lake: Path, queues: list[str], mode: str, master: str | None) -> dict[str, Any]:
    """The drain's config in ``mode``: on executors, those of the cluster at ``master``."""
    config: dict[str, Any] = {
        "transport": {"connection": uri},
        "lake": {"root": str(lake), "engine": "delta-rs"},
        "drain": {"queues": queues, "on": mode},
    }
    if master is not None:
        config["spark"] = {
            "master": master,
            "app_name": "queuelake-bench-queues",
            "conf": {
                "spark.executor.memory": "768m",
                "spark.executor.cores": "1",
                "spark.cores.max": str(CLUSTER_WORKERS),
                # the executors' Python is the driver's (queuelake sets PYSPARK_PYTHON); this tree's
                # queuelake reaches it through their environment (the daemons are started without one)
                "spark.executorEnv.PYTHONPATH": str(ROOT / "lib"),
            },
        }
    return config


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


def others(uri: str) -> int:
    """Connections to the database other than the one asking."""
    with psycopg.connect(uri, autocommit=True) as c:
        row = c.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


def settle(uri: str, timeout: float = 60) -> int:
    """Wait (up to ``timeout`` s) until nothing else is connected to the database, so that what the
    next command's poller sees is that command's; returns what was still connected."""
    deadline = time.monotonic() + timeout
    while (left := others(uri)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def measure(uri: str, work: Path, names: list[str], rows: int, mode: str, master: str | None) -> dict[str, Any]:
    lake = work / "lake"
    shutil.rmtree(lake, ignore_errors=True)
    conf = work / "drain.json"
    conf.write_text(json.dumps(settings(uri, lake, names, mode, master)))
    before = settle(uri)
    with PeakConnections(uri) as watch:
        ran = queuelake(["drain", "-c", str(conf)])
    summary = ran.summary
    if summary.get("dequeued") != rows:
        raise SystemExit(f"the drain took {summary.get('dequeued')} of {rows} rows: {summary.get('status')}")
    if summary.get("on", "driver") != mode:
        raise SystemExit(f"the drain ran on {summary.get('on', 'driver')}, not on {mode}")
    shutil.rmtree(lake, ignore_errors=True)
    return {
        "queues": len(names),
        "rows": rows,
        "seconds": round(ran.seconds, 2),
        "msgs_per_s": round(rows / ran.seconds),
        "peak_rss_mb": round(ran.peak_rss_mb, 1) if ran.peak_rss_mb is not None else None,
        "journal_commits": summary["journal_commits"],
        "largest_group": summary["largest_group"],
        "sessions_opened": summary.get("sessions_opened"),  # on the driver: kept from queue to queue
        "peak_connections_reported": summary["peak_connections"],
        "peak_connections_seen": watch.peak,
        "seen_at_peak_by_application": watch.at_peak,
        "connections_before": before,
        "max_connections": MAX_CONNECTIONS,
    }


def describe(mode: str, label: str, run: dict[str, Any]) -> str:
    held = ", ".join(f"{name} {n}" for name, n in run["seen_at_peak_by_application"].items())
    # on executors (or processes) the command counts no sessions: its figure is the plan's bound
    opened = f"{run['sessions_opened']} sessions opened, " if run["sessions_opened"] is not None else ""
    reported = "reported" if mode == "driver" else "planned"
    return (
        f"{mode} {label}: {run['queues']} queue(s), {run['rows']:,} rows in {run['seconds']} s "
        f"({run['msgs_per_s']:,} msg/s), {run['journal_commits']} journal commits "
        f"(largest group {run['largest_group']}), {opened}"
        f"connections at peak {run['peak_connections_seen']} seen "
        f"({held}) / {run['peak_connections_reported']} {reported}, bound {run['max_connections']}, "
        f"peak RSS {run['peak_rss_mb']} MB"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=500)
    parser.add_argument("--per-queue", type=int, default=1000)
    parser.add_argument("--on", default="all", help=f"where the drain runs: all, or some of {','.join(MODES)}")
    parser.add_argument("--repeat", type=int, default=1, help="pairs of runs per mode; medians")
    parser.add_argument("--dsn", default=os.environ.get("QUEUELAKE_BENCH_PG_DSN"))
    args = parser.parse_args()
    modes = list(MODES) if args.on == "all" else [m for m in MODES if m in args.on.split(",")]
    if not modes or not set(args.on.split(",")) <= {*MODES, "all"}:
        parser.error(f"--on takes all, or a comma-separated list of {', '.join(MODES)}")
    # a SIGTERM unwinds like a failure: the cluster's daemons (own sessions) are stopped, not orphaned
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    work = Path(tempfile.mkdtemp(prefix="queuelake-bench-queues-"))
    server = None
    uri = args.dsn
    many = [f"ql_bench_q{i:04d}" for i in range(args.queues)]
    one = ["ql_bench_one"]
    rows = args.queues * args.per_queue
    results: dict[str, dict[str, Any]] = {}
    cluster_seconds = 0.0
    try:
        if uri is None:
            server = start_embedded(work / "pg")
            uri = server.get_uri("postgres")
        for mode in modes:
            # the cluster only for its mode: its idle daemons are not in the driver's figures
            with standalone(mode == "executors") as (master, started):
                cluster_seconds += started
                runs: list[dict[str, Any]] = []
                for r in range(args.repeat):
                    pair: dict[str, Any] = {}
                    for label in ("many", "one") if r % 2 == 0 else ("one", "many"):
                        names = many if label == "many" else one
                        per_queue = args.per_queue if label == "many" else rows
                        seeded = seed(uri, names, per_queue, 1000 * r)
                        pair[label] = measure(uri, work, names, rows, mode, master)
                        pair[label]["seed_seconds"] = round(seeded, 1)
                        print(describe(mode, label, pair[label]), flush=True)
                    pair["ratio"] = round(pair["many"]["msgs_per_s"] / pair["one"]["msgs_per_s"], 3)
                    print(f"{mode}: many / one {pair['ratio']} (target >= {TARGET})", flush=True)
                    runs.append(pair)
            results[mode] = {"runs": runs, "ratio_median": statistics.median(p["ratio"] for p in runs)}
            if mode != "driver" and "driver" in results:
                # against the one queue on the driver (the fastest way to drain one queue)
                ones = [p["one"]["msgs_per_s"] for p in results["driver"]["runs"]]
                versus = statistics.median(p["many"]["msgs_per_s"] for p in runs) / statistics.median(ones)
                results[mode]["many_vs_driver_one"] = round(versus, 3)
                print(f"{mode}: many (median) / one on the driver (median) {versus:.3f}", flush=True)
    finally:
        if uri is not None:
            with contextlib.suppress(psycopg.Error), psycopg.connect(uri, autocommit=True) as c:
                for name in [*many, *one]:
                    c.execute(f'DROP TABLE IF EXISTS public."{name}"')
        if server is not None:
            server.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "queues": args.queues,
        "per_queue": args.per_queue,
        "rows": rows,
        "max_connections": MAX_CONNECTIONS,
        "target": TARGET,
        "modes": results,
        "cluster": {"workers": CLUSTER_WORKERS, "cores": CLUSTER_WORKERS, "start_seconds": round(cluster_seconds, 1)}
        if "executors" in modes
        else None,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

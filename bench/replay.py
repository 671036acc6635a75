"""Benchmark: retry N failed messages from the journal back to their queues, as whole commands, against
a raw binary COPY of the same rows into the same tables, in one run.

Set-up (not timed): N failed copies of OrderPlaced events (~700 B headers, ~1 KB bodies) in the error
queue, half failed in Billing, half in Shipping, drained into the journal.
raw: the rows a replay writes (one replay run first, not timed), dumped by the server in the replay's
batches and COPY'd back into Billing and Shipping from those bytes, in text and in binary format, one
transaction per batch of ``--batch-size`` rows (``bench/_raw.py``); only the COPY and the commit are
timed. The faster format is the raw limit.
replay: ``queuelake replay --where "exception_type = '...'"`` run as a command (a new process, as a
scheduler runs it; its fixed cost included): the selection, destinations checked, headers rewritten as
a ServiceControl retry, a COPY per destination and a ledger row per batch, one transaction per batch.
Its JSON summary's ``seconds_by_step`` says where the time went.
fixed costs, whole commands on the same lake: an empty replay (a predicate matching nothing), a dry run
of all N, an empty replay whose predicate only Spark evaluates, and a bare Spark start for reference.

    python bench/replay.py [--rows 100000] [--batch-size 5000] [--repeat 3] [--modes driver,executors] [--dsn URI]

--modes: ``driver`` sends every batch from the command's own process; ``executors`` from Spark tasks
(``replay.executors_from_rows: 1``; the command then starts Spark, its start counted).

--repeat N: the replay command is run N times (the queues emptied in between) and the median run is
reported: on 2 shared cores one run moves by a fifth between runs.

Prints the raw rate, the replay's rate per row (rows over the command's time less the empty replay's)
and as a whole command, their ratios to raw (target >= 0.6 per row), the steps and the fixed costs,
then one JSON line.
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
from pathlib import Path

import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
import psycopg
import yaml
from _commands import queuelake, spark_start
from _raw import FORMATS, dump, load
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.context import open_database
from queuelake.lake.engines import open_lake
from queuelake.pipeline.drain.run import drain
from queuelake.report import setup_logging
from queuelake.transport import db, installer
from queuelake.transport.embedded import start_embedded
from queuelake.transport.table_refs import queue_ref

EXCEPTION = "System.TimeoutException"
WHEN = dt.datetime(2026, 11, 2, 8, 30, tzinfo=dt.timezone.utc)
ROOT = Path(__file__).resolve().parents[1]
MODES = {"driver": None, "executors": 1}  # replay.executors_from_rows


def failed_messages(rows: int):
    """(queue it failed in, the error-queue message), the same sequence every call."""
    for i, m in enumerate(traffic.order_events(rows, seed=42)):
        queue = "Billing" if i % 2 else "Shipping"
        yield queue, traffic.failed_copy(m, queue, EXCEPTION, "timed out", WHEN)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=5000)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--repeat", type=int, default=3, help="replay commands run; the median one is reported")
    parser.add_argument("--modes", default="driver,executors", help="comma-separated: driver, executors")
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
    settings = {
        "transport": {"connection": uri},
        "lake": {"root": str(work / "lake"), "engine": "delta-rs"},
        "drain": {"queues": ["error"], "batch_size": 10_000},
    }
    config_file = work / "queuelake.yaml"
    config_file.write_text(yaml.safe_dump(settings))
    cfg = from_dict(settings, env={})
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=["Billing", "Shipping"]))
        error = queue_ref("error", cfg.transport)
        traffic.seed(conn, error, (m for _, m in failed_messages(args.rows)))
    t0 = time.perf_counter()
    drained = drain(cfg, open_database(cfg), open_lake(cfg.lake))
    drain_s = time.perf_counter() - t0
    assert drained["landed"] == args.rows, drained
    tables = {q: queue_ref(q, cfg.transport).qualified for q in ("Billing", "Shipping")}

    def empty_queues() -> None:
        with psycopg.connect(uri, autocommit=True) as c:
            for qualified in tables.values():
                c.execute(f"TRUNCATE {qualified}")
                c.execute(f"VACUUM ANALYZE {qualified}")

    base = ["replay", "-c", str(config_file)]
    where = f"exception_type = '{EXCEPTION}'"
    # the raw limit loads the rows a replay writes: one replay (not timed) writes them, the server
    # dumps them in the replay's batches (half a batch per queue), then each format loads them back
    primer = queuelake([*base, "--where", where, "--batch-size", str(args.batch_size)])
    assert primer.summary["status"] == "ok" and primer.summary["rows_sent"] == args.rows, primer.summary
    rows = dump(uri, list(tables.values()), max(args.batch_size // len(tables), 1), work / "raw")
    raw_by_format = {}
    for fmt in FORMATS:
        empty_queues()
        raw_by_format[fmt] = load(uri, rows, fmt)
    empty_queues()
    raw_s = min(raw_by_format.values())
    empty_run = queuelake([*base, "--where", "exception_type = 'No.Such.Exception'"])
    empty_s, empty = empty_run.seconds, empty_run.summary
    assert empty["status"] == "ok" and empty["matched"] == 0 and empty["selected_by"] == "arrow", empty
    dry_run = queuelake([*base, "--where", f"exception_type = '{EXCEPTION}'", "--dry-run"])
    dry_s, dry = dry_run.seconds, dry_run.summary
    assert dry["selected"] == args.rows, dry
    spark_empty_run = queuelake([*base, "--where", "lower(exception_type) = 'no.such.exception'"])
    spark_empty_s, spark_empty = spark_empty_run.seconds, spark_empty_run.summary
    assert spark_empty["matched"] == 0 and spark_empty["selected_by"] == "spark", spark_empty
    spark_s = spark_start()

    raw_rate = args.rows / raw_s
    out = sys.stderr
    for fmt, seconds in raw_by_format.items():
        print(f"raw {fmt} COPY: {args.rows} rows in {seconds:.2f}s ({args.rows / seconds:,.0f} rows/s)", file=out)
    modes: dict[str, dict] = {}
    for mode in args.modes.split(","):
        # the mode is the config's replay.executors_from_rows: never (driver) or from the first row
        config_file.write_text(yaml.safe_dump({**settings, "replay": {"executors_from_rows": MODES[mode]}}))
        runs = []
        for _ in range(args.repeat):  # the same retry again, as a new replay: the queues emptied first
            with psycopg.connect(uri, autocommit=True) as c:
                for qualified in tables.values():
                    c.execute(f"TRUNCATE {qualified}")
            ran = queuelake([*base, "--where", where, "--batch-size", str(args.batch_size)])
            assert ran.summary["status"] == "ok" and ran.summary["rows_sent"] == args.rows, ran.summary
            with psycopg.connect(uri) as c:
                total = sum(c.execute(f"SELECT count(*) FROM {q}").fetchone()[0] for q in tables.values())
            assert total == args.rows, total
            runs.append(ran)
        median = sorted(runs, key=lambda r: r.seconds)[len(runs) // 2]
        replay_s, summary = median.seconds, median.summary
        per_row_rate = args.rows / max(replay_s - empty_s, 1e-9)
        whole_rate = args.rows / replay_s
        steps = summary["seconds_by_step"]
        spread = sorted(r.seconds for r in runs)
        print(
            f"replay, {mode}: {args.rows} rows in {replay_s:.2f}s (median of {len(runs)}, range "
            f"{spread[0]:.2f}-{spread[-1]:.2f}s), of which the empty replay's {empty_s:.2f}s: "
            f"{per_row_rate:,.0f} rows/s per row, ratio {per_row_rate / raw_rate:.2f} (target 0.6); "
            f"as a whole command {whole_rate:,.0f} rows/s, ratio {whole_rate / raw_rate:.2f}",
            file=out,
        )
        print("  steps (s): " + ", ".join(f"{k} {v:.2f}" for k, v in steps.items()), file=out)
        peak = max(r.peak_rss_mb or 0 for r in runs)
        print(f"  peak memory of the command's process: {peak:,.0f} MB", file=out)
        modes[mode] = {
            "command_seconds": round(replay_s, 2),
            "command_seconds_all": [round(r.seconds, 2) for r in runs],
            "peak_rss_mb": round(peak),
            "seconds_by_step": steps,
            "rows_per_s": round(per_row_rate),
            "ratio": round(per_row_rate / raw_rate, 3),
            "whole_command_rows_per_s": round(whole_rate),
            "whole_command_ratio": round(whole_rate / raw_rate, 3),
            "whole_command_ratio_range": [round(args.rows / s / raw_rate, 3) for s in (spread[-1], spread[0])],
        }
    print(
        f"fixed costs (whole commands, s): empty replay {empty_s:.2f}; dry run of all {args.rows} {dry_s:.2f}; "
        f"empty replay with a predicate only Spark evaluates {spark_empty_s:.2f}; a bare Spark start {spark_s:.2f}; "
        f"peak memory (MB): empty replay {empty_run.peak_rss_mb or 0:,.0f}, "
        f"dry run of all {dry_run.peak_rss_mb or 0:,.0f}",
        file=out,
    )
    print(
        json.dumps(
            {
                "rows": args.rows,
                "batch_size": args.batch_size,
                "drain_seconds": round(drain_s, 2),
                "raw_binary_copy_seconds": round(raw_by_format["binary"], 2),
                "raw_text_copy_seconds": round(raw_by_format["text"], 2),
                "raw_rows_per_s": round(raw_rate),  # the faster format
                "modes": modes,
                "target": 0.6,
                "fixed_seconds": {
                    "empty_replay": round(empty_s, 2),
                    "dry_run_all": round(dry_s, 2),
                    "empty_replay_spark_predicate": round(spark_empty_s, 2),
                    "bare_spark_start": round(spark_s, 2),
                },
                "peak_rss_mb": {
                    "empty_replay": round(empty_run.peak_rss_mb or 0),
                    "dry_run_all": round(dry_run.peak_rss_mb or 0),
                },
            }
        )
    )
    if server is not None:
        server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

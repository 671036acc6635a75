"""``queuelake health``: endpoint health from the audit trail, in the lake and as OpenMetrics gauges.

Why: ServicePulse shows throughput and processing times only for what ServiceControl still holds, its
daily throughput per endpoint is a long-open request (ServicePulse #941), and queue lengths reach
Prometheus only through it (ServiceControl #4192). The journal already holds every audit and error
copy, with their processing times decoded, and every drain records the backlog it left. This command
brings ``endpoint_health`` (per endpoint, message type and hour or day: processed, failed, retries,
processing and critical time p50/p95/p99) and ``endpoint_daily`` (per endpoint and day: the licence
review's table) up to the journal's current version, recomputing only the days new journal versions
touch (``pipeline/health/run.py``), without Spark.

stdout: the daily throughput per endpoint of the last ``--days`` days as a table, then the JSON summary.
``--metrics FILE`` writes the current gauges (the latest hour, the latest day, each queue's depth as
its latest drain left it) as OpenMetrics text; ``--metrics -`` prints them on stdout instead of the
table, and the summary goes to stderr, so that stdout is the exposition alone.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from queuelake.commands.command import Command


def _days(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--days must be a whole number of days, at least 1 (got {text!r})")
    return value


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics",
        metavar="FILE",
        help="write the current gauges as OpenMetrics text to FILE (`-`: stdout, and the summary to stderr)",
    )
    parser.add_argument("--days", type=_days, default=7, help="days of daily throughput shown (default 7)")


def _metrics_on_stdout(args: argparse.Namespace) -> bool:
    return getattr(args, "metrics", None) == "-"


def health(args: argparse.Namespace) -> dict[str, Any]:
    from queuelake import config as config_mod
    from queuelake.commands import output_files
    from queuelake.commands.sessions import require_lake_root
    from queuelake.lake.engines import without_spark
    from queuelake.pipeline.health import depth, metrics, show
    from queuelake.pipeline.health.run import read_daily, read_latest, update
    from queuelake.report import log

    metrics_file = None if args.metrics in (None, "-") else output_files.checked("--metrics", args.metrics)
    cfg = config_mod.load(args.config)
    require_lake_root(cfg)
    lake = without_spark(cfg.lake)  # Arrow on the driver, no Spark, as find
    result = update(lake)
    log.info(
        "health: %d day(s) recomputed from %d audit/error copies: %d endpoint_health row(s), %d endpoint_daily row(s)",
        len(result.days),
        result.copies,
        result.hourly_rows,
        result.daily_rows,
    )
    hours, latest_day = read_latest(lake)
    current = depth.current_depth(lake)
    out: dict[str, Any] = result.summary()
    if args.metrics is not None:
        text = metrics.render(hours, latest_day, current)
        if metrics_file is None:
            sys.stdout.write(text)
        else:
            output_files.write_whole(metrics_file, text)  # a textfile collector never reads half of it
            log.info("health: gauges written to %s", args.metrics)
        out["metrics"] = args.metrics
    if args.metrics != "-":
        for line in show.daily_lines(read_daily(lake, args.days)):
            sys.stdout.write(line + "\n")
    out["endpoints"] = sorted(set(latest_day["endpoint"].to_pylist()))
    out["queues"] = {q: d for q, d in zip(current["queue"].to_pylist(), current["depth"].to_pylist())}
    return out


COMMAND = Command(
    name="health",
    help="endpoint health from the audit trail: per-hour and per-day throughput, times, failures, retries; gauges",
    run=health,
    arguments=arguments,
    summary_on_stderr=_metrics_on_stdout,
)

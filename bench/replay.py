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

--repeat N: the replay command is run N times (the queues emptied in between), each run paired with a
raw load of both formats measured next to it (the pair's order alternating): each run's ratio is to its
own raw load, and the medians and ranges are reported. On 2 shared cores a run, and the raw load too,
moves by a fifth to a third between minutes.

CPU: each run's command (its process, ``_cpu.CpuMeter(children=True)``) and the binary raw load are
metered with the server's own CPU meanwhile; their medians, and the floor they set, are printed: the
command's CPU (its own and the server's) over the machine's cores is the least time it can take, and
raw over that floor the best whole ratio it can reach without spending less CPU; with the empty
replay's time counted whole (nothing reaches the server before the command has started), the bound
it meets in practice.

Prints a table (per mode the command's seconds, its ratio to raw as a whole command and per row, less
the empty replay's seconds: medians and ranges; the raw rates per format), the median run's steps and
the fixed costs, then one JSON line. The target (issue 60) is >= 0.6 as a whole command.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _pin
import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
import psycopg
import yaml
from _commands import Ran, queuelake, spark_start
from _cpu import CpuMeter, floor
from _raw import FORMATS, dump, load
from _receive import checkpoint
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.context import open_database
from queuelake.lake.engines import open_lake
from queuelake.lake.record_tables import REPLAY_LINEAGE
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
    postmaster = _pin.postmaster(uri)  # the server's own CPU, where it is a process of this machine

    def empty_queues() -> None:
        """The queues emptied, and a checkpoint: no leg pays for the pages the one before it wrote."""
        with psycopg.connect(uri, autocommit=True) as c:
            for qualified in tables.values():
                c.execute(f"TRUNCATE {qualified}")
                c.execute(f"VACUUM ANALYZE {qualified}")
        checkpoint(uri)

    base = ["replay", "-c", str(config_file)]
    where = f"exception_type = '{EXCEPTION}'"
    # the raw limit loads the rows a replay writes: one replay (not timed) writes them, the server
    # dumps them in the replay's batches (half a batch per queue), then each format loads them back
    primer = queuelake([*base, "--where", where, "--batch-size", str(args.batch_size)])
    assert primer.summary["status"] == "ok" and primer.summary["rows_sent"] == args.rows, primer.summary
    rows = dump(uri, list(tables.values()), max(args.batch_size // len(tables), 1), work / "raw")
    empty_queues()
    with CpuMeter(children=True) as empty_meter:  # the command's start: what overlaps nothing
        empty_run = queuelake([*base, "--where", "exception_type = 'No.Such.Exception'"])
    start = (empty_run.seconds, empty_meter.figures["client_cpu_s"])
    empty_s, empty = empty_run.seconds, empty_run.summary
    assert empty["status"] == "ok" and empty["matched"] == 0 and empty["selected_by"] == "arrow", empty
    dry_run = queuelake([*base, "--where", f"exception_type = '{EXCEPTION}'", "--dry-run"])
    dry_s, dry = dry_run.seconds, dry_run.summary
    assert dry["selected"] == args.rows, dry
    spark_empty_run = queuelake([*base, "--where", "lower(exception_type) = 'no.such.exception'"])
    spark_empty_s, spark_empty = spark_empty_run.seconds, spark_empty_run.summary
    assert spark_empty["matched"] == 0 and spark_empty["selected_by"] == "spark", spark_empty
    spark_s = spark_start()

    def raw_load() -> tuple[dict[str, float], dict[str, Any]]:
        """Both formats' seconds, the queues emptied before each and after; the binary load's CPU."""
        seconds = {}
        for fmt in FORMATS:
            empty_queues()
            with CpuMeter(postmaster) as meter:
                seconds[fmt] = load(uri, rows, fmt)
            if fmt == "binary":
                cpu = meter.figures
        empty_queues()
        return seconds, cpu

    def replay_once() -> tuple[Ran, dict[str, Any]]:
        """The retry as a first retry of these failures: the queues emptied, and the lineage of the runs
        before forgotten (with it, each run would also say that earlier replays sent them and have not
        failed again, ``already_replayed``: a rerun's check, not what a retry of new failures costs)."""
        empty_queues()
        shutil.rmtree(work / "lake" / REPLAY_LINEAGE.name, ignore_errors=True)
        with CpuMeter(postmaster, children=True) as meter:  # the command's process, and the server meanwhile
            ran = queuelake([*base, "--where", where, "--batch-size", str(args.batch_size)])
        assert ran.summary["status"] == "ok" and ran.summary["rows_sent"] == args.rows, ran.summary
        assert ran.summary["already_replayed"] == 0, ran.summary
        with psycopg.connect(uri) as c:
            total = sum(c.execute(f"SELECT count(*) FROM {q}").fetchone()[0] for q in tables.values())
        assert total == args.rows, total
        return ran, meter.figures

    # each repeat pairs a replay with a raw load of its own, measured next to it, the pair's order
    # alternating (``bench/drain.py`` does the same): on 2 shared cores the raw load itself moves by a
    # third between minutes, and one raw load for every repeat made a slow or fast minute the result
    raws: list[dict[str, float]] = []
    modes: dict[str, dict] = {}
    for mode in args.modes.split(","):
        # the mode is the config's replay.executors_from_rows: never (driver) or from the first row
        config_file.write_text(yaml.safe_dump({**settings, "replay": {"executors_from_rows": MODES[mode]}}))
        pairs: list[tuple[Ran, float]] = []
        cpus: list[dict[str, Any]] = []
        for k in range(args.repeat):  # the same retry again, as a new replay: the queues emptied first
            if k % 2:
                raw, raw_cpu = raw_load()
                ran, cpu = replay_once()
            else:
                ran, cpu = replay_once()
                raw, raw_cpu = raw_load()
            raws.append(raw)
            pairs.append((ran, min(raw.values())))
            cpus.append({"command": cpu, "raw_binary": raw_cpu, "floor": floor(cpu, min(raw.values()), start)})
        modes[mode] = figures(args.rows, pairs, empty_s) | {"cpu": cpus}

    raw_by_format = {fmt: statistics.median(r[fmt] for r in raws) for fmt in FORMATS}
    raw_rate = args.rows / min(raw_by_format.values())
    out = sys.stderr
    print(table(args.rows, raws, modes), file=out)
    for mode, figure in modes.items():
        print(
            f"  {mode} steps of the median run (s): "
            + ", ".join(f"{k} {v:.2f}" for k, v in figure["seconds_by_step"].items()),
            file=out,
        )
        said = cpu_line(figure["cpu"])
        if said:
            print(f"  {mode} {said}", file=out)
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
                "repeat": args.repeat,
                "drain_seconds": round(drain_s, 2),
                "raw_binary_copy_seconds": round(raw_by_format["binary"], 2),
                "raw_text_copy_seconds": round(raw_by_format["text"], 2),
                "raw_rows_per_s": round(raw_rate),  # the faster format's median
                "raw_rows_per_s_range": [
                    round(args.rows / max(min(r.values()) for r in raws)),
                    round(args.rows / min(min(r.values()) for r in raws)),
                ],
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


def figures(rows: int, pairs: list[tuple[Ran, float]], empty_s: float) -> dict[str, Any]:
    """A mode's figures over its repeats: each run's ratio to the raw load measured beside it (as a
    whole command, and per row: less the empty replay's seconds), their medians and ranges, the median
    run's steps, the peak memory of any run."""
    whole = sorted(raw_s / ran.seconds for ran, raw_s in pairs)
    per_row = sorted(raw_s / max(ran.seconds - empty_s, 1e-9) for ran, raw_s in pairs)
    runs = sorted((ran for ran, _ in pairs), key=lambda ran: ran.seconds)
    median = runs[len(runs) // 2]
    return {
        "command_seconds": round(median.seconds, 2),
        "command_seconds_all": [round(ran.seconds, 2) for ran, _ in pairs],
        "peak_rss_mb": round(max(ran.peak_rss_mb or 0 for ran, _ in pairs)),
        "seconds_by_step": median.summary["seconds_by_step"],
        "rows_per_s": round(rows / max(median.seconds - empty_s, 1e-9)),
        "ratio": round(statistics.median(per_row), 3),
        "ratio_range": [round(per_row[0], 3), round(per_row[-1], 3)],
        "whole_command_rows_per_s": round(rows / median.seconds),
        "whole_command_ratio": round(statistics.median(whole), 3),
        "whole_command_ratio_range": [round(whole[0], 3), round(whole[-1], 3)],
        "whole_command_ratios": [round(raw_s / ran.seconds, 3) for ran, raw_s in pairs],
    }


def cpu_line(cpus: list[dict[str, Any]]) -> str | None:
    """The runs' CPU (medians) and the floor it sets: the best whole ratio the machine's cores allow
    the command, spending the CPU it spends (``_cpu.floor``); None without the server's own CPU."""
    floors = [c["floor"] for c in cpus if c["floor"] is not None]
    if not floors:
        return None

    def median(values: list[float]) -> float:
        return statistics.median(values)

    return (
        f"CPU (s, medians): the command {median([c['command']['client_cpu_s'] for c in cpus]):.2f} + the server "
        f"{median([c['command']['server_cpu_s'] for c in cpus]):.2f} meanwhile; the raw binary load "
        f"{median([c['raw_binary']['client_cpu_s'] for c in cpus]):.2f} + "
        f"{median([c['raw_binary']['server_cpu_s'] for c in cpus]):.2f}; on {floors[0]['cores']} core(s) the "
        f"command cannot end before {median([f['floor_s'] for f in floors]):.2f} s: the best whole ratio its CPU "
        f"allows is {median([f['best_ratio'] for f in floors]):.2f} "
        f"[{min(f['best_ratio'] for f in floors):.2f}-{max(f['best_ratio'] for f in floors):.2f}]; with its start "
        f"(an empty replay) overlapping nothing, {median([f['floor_with_start_s'] for f in floors]):.2f} s and "
        f"{median([f['best_ratio_with_start'] for f in floors]):.2f} "
        f"[{min(f['best_ratio_with_start'] for f in floors):.2f}-{max(f['best_ratio_with_start'] for f in floors):.2f}]"
    )


def table(rows: int, raws: list[dict[str, float]], modes: dict[str, dict]) -> str:
    """Per mode the whole command's seconds and its ratio to the raw load beside it, medians and
    ranges; the raw loads' rates per format."""
    lines = [
        f"{'replay of ' + format(rows, ',') + ' rows':28} {'seconds median [range]':>24} "
        f"{'whole ratio median [range]':>28} {'per-row ratio':>20} {'peak MB':>8}"
    ]
    for mode, f in modes.items():
        seconds = (
            f"{f['command_seconds']:.2f} [{min(f['command_seconds_all']):.2f}-{max(f['command_seconds_all']):.2f}]"
        )
        whole = (
            f"{f['whole_command_ratio']:.2f} [{f['whole_command_ratio_range'][0]:.2f}-"
            f"{f['whole_command_ratio_range'][1]:.2f}]"
        )
        per_row = f"{f['ratio']:.3g} [{f['ratio_range'][0]:.3g}-{f['ratio_range'][1]:.3g}]"  # tiny runs: below empty
        lines.append(f"{mode:28} {seconds:>24} {whole:>28} {per_row:>20} {f['peak_rss_mb']:>8}")
    for fmt in FORMATS:
        rates = sorted(rows / r[fmt] for r in raws)
        lines.append(
            f"{'raw COPY ' + fmt + ' (rows/s)':28} "
            f"{f'{statistics.median(rates):,.0f} [{rates[0]:,.0f}-{rates[-1]:,.0f}]':>24}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

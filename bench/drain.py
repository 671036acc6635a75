"""Benchmark: the drain end to end against the raw limit, in one run, on a fresh and a churned table.

Two table states, each built twice from identical rows (``traffic.order_events``, seed 42), once
for the raw limit and once for the drain:
- fresh: a new queue table, seeded, ``VACUUM ANALYZE``d;
- churned: the table of issue 10. Seeded with --dead other rows, all deleted, ``ANALYZE``d (so
  ``reltuples = 0`` while the pages remain; checked), then seeded with the rows: the planner believes
  the table empty and the --dead deleted rows sit, unvacuumed, at the head of the seq index.
Autovacuum is off on the bench table, so both consumers meet exactly the same state.

raw limit: the receive's own statement (sql/postgresql/receive_batch.sql, the batched
``DELETE ... RETURNING`` with SKIP LOCKED), k = --batch-size rows per statement, binary protocol,
rows fetched and discarded, one commit per statement, on as many psycopg connections as the drain
has workers, nothing else (no session settings).
drain: ``queuelake.pipeline.drain.run.drain`` (delta-rs engine) of the same rows into a fresh temp lake.
If the drain logs ``timing <step> <seconds> ...`` lines at DEBUG, each step's share of the summed
thread time is printed too: receive, build, stage and claim on the worker thread; delta and clear on
the run's journal committer thread (group commits), which overlaps them with the next batch's
receive. The same lines carry the worker thread's own CPU seconds for receive, build and stage+claim.

CPU: for each consumer the CPU this process spent (the client) and, on Linux, the machine's busy and
stolen CPU seconds over the run (``/proc/stat``): busy minus client is the server, plus anything else
running. Their medians over --repeat runs say how much more CPU the drain spends per row than the
raw limit; with the machine's cores near fully busy, that, not waiting, bounds the ratio. Where the
server is a process of this machine, ``server_cpu_s`` is its own CPU (its processes', ended backends
included), which a loaded machine's busy time does not tell apart from other work.

Set-up: ``setup_seconds`` is the drain's time before its first receive (the depth estimate, claims,
journal table, sessions); ``raw_first_receive_seconds`` the raw leg's slowest first statement. On a
churned table both hold the one walk over the dead index entries at the seq index's head (the
drain's depth estimate, ``peek``, steps over them before its workers start; the raw leg's first
receives do), so the two are compared, not the set-up alone.

    python bench/drain.py [--rows 200000] [--batch-size 10000] [--workers 2] [--dead N] [--repeat N] [--dsn URI] [--pin]

--raw-copy: also measures a stricter raw limit, the same statement wrapped in
``COPY (...) TO STDOUT (FORMAT binary)`` with its batch size written in, the bytes read and dropped
unparsed (no Python object per value): the streaming transfer the drain's ADBC receive uses. Each
table is then built a third time; its ratio is printed beside the main one.

--journal-files N: each drain lands in a journal that already holds N data files (one commit, then a
checkpoint), as a journal does between two runs of ``maintain``; the default is a fresh lake. The
drain commits once per batch, and deltalake's work per commit grows with the files the table holds.

--pin: the database on a CPU of its own (``_pin.py``): every PostgreSQL server process (the postmaster
and its children, so every backend opened later) on the second CPU, every thread of this bench (the
raw leg's connections, the drain's workers, anything they start) on the first, for both consumers
alike; the affinity is read back after each leg and the JSON says the pinning (``pinning``). Where
the platform cannot pin, the bench says why and runs unpinned.

--repeat N: N pairs of runs per table, their order alternating, summed up as the median ratio, its
spread, the runs at the target and the ratio of the median rates (the raw limit is the noisier one).

Without --dsn (or QUEUELAKE_BENCH_PG_DSN) it starts an embedded PostgreSQL (pgserver). With one,
it drops and recreates the table ``public."queuelake_bench_drain"`` there. Prints msg/s of both
consumers and the ratio drain/raw for each table (target >= 0.6), and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import _pin
import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
import psycopg
from _cpu import CpuMeter
from _history import journal_with_files
from _receive import checkpoint, raw_copy_drain, raw_drain, recreate
from queuelake.commands.demo import traffic
from queuelake.config import Config, from_dict
from queuelake.context import open_database
from queuelake.lake.engines import open_lake
from queuelake.pipeline.drain.receive import receive_driver
from queuelake.pipeline.drain.run import drain
from queuelake.report import log, setup_logging
from queuelake.transport import db
from queuelake.transport.database import QueueDatabase
from queuelake.transport.embedded import start_embedded
from queuelake.transport.table_refs import TableRef, queue_ref

QUEUE = "queuelake_bench_drain"
TARGET = 0.6


class StepTimes(logging.Handler):
    """Sums the drain's DEBUG ``timing <step> <seconds> <step> <seconds> ...`` lines."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu_seconds: dict[str, float] = defaultdict(float)  # the worker thread's CPU per step
        self.batches = 0
        self.started: float | None = None  # the drain's start (set by full_drain)
        self.setup_seconds: float | None = None

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if not message.startswith("timing "):
            return
        words = message.split()[1:]
        wall, cpu = (words[: words.index("cpu")], words[words.index("cpu") + 1 :]) if "cpu" in words else (words, [])
        for into, pairs in ((self.seconds, wall), (self.cpu_seconds, cpu)):
            for name, value in zip(pairs[0::2], pairs[1::2]):
                try:
                    into[name] += float(value)
                except ValueError:
                    continue
        if words and words[0] == "receive":  # the worker's line; the committer's (delta, clear) overlaps it
            if self.batches == 0 and self.started is not None:
                # the first batch's end less its steps: when its receive began, the run's set-up
                # (estimate, claims, journal table, sessions) done
                first = sum(float(v) for v in wall[1::2])
                self.setup_seconds = time.perf_counter() - self.started - first
            self.batches += 1

    def reset(self) -> None:
        self.seconds.clear()
        self.cpu_seconds.clear()
        self.batches = 0
        self.started = time.perf_counter()
        self.setup_seconds = None

    def figures(self) -> dict[str, Any]:
        total = sum(self.seconds.values())
        return {
            "batches": self.batches,
            "setup_seconds": round(self.setup_seconds, 3) if self.setup_seconds is not None else None,
            "steps": {
                name: {"worker_seconds": round(s, 3), "share": round(s / total, 3) if total else None}
                for name, s in self.seconds.items()
            },
            "worker_cpu_seconds": {name: round(s, 3) for name, s in self.cpu_seconds.items()},
        }


def rel_stats(uri: str, ref: TableRef) -> tuple[float, int]:
    with psycopg.connect(uri, autocommit=True) as c:
        row = c.execute(
            "SELECT reltuples, relpages FROM pg_class WHERE oid = %s::regclass", (ref.qualified,)
        ).fetchone()
    return float(row[0]), int(row[1])


def build(cfg: Config, uri: str, ref: TableRef, rows: int, churned: bool, dead: int) -> float:
    """(Re)create the bench table in the wanted state; seconds spent."""
    t0 = time.perf_counter()
    recreate(cfg, uri, ref)
    if churned:
        with db.connect(cfg.transport) as conn:
            traffic.seed(conn, ref, traffic.order_events(dead, seed=41), chunk=50_000)
        with psycopg.connect(uri, autocommit=True) as c:
            c.execute(f"DELETE FROM {ref.qualified}")
            c.execute(f"ANALYZE {ref.qualified}")
    with db.connect(cfg.transport) as conn:
        traffic.seed(conn, ref, traffic.order_events(rows, seed=42), chunk=50_000)
    if churned:
        reltuples, relpages = rel_stats(uri, ref)
        if not (reltuples == 0 and relpages > 0):
            raise SystemExit(f"churned table is not churned: reltuples={reltuples}, relpages={relpages}")
    else:
        with psycopg.connect(uri, autocommit=True) as c:
            c.execute(f"VACUUM ANALYZE {ref.qualified}")
    checkpoint(uri)
    return time.perf_counter() - t0


def journal_with_history(cfg: Config, files: int) -> None:
    """A fresh lake whose journal already holds ``files`` data files (``_history.journal_with_files``):
    the state of a journal that has drained for a while since its last ``maintain``. Not measured:
    done before the drain's meter. Built once per bench run beside the lake (10,000 files take a minute
    and a half) and copied for each drain, which lands in the copy."""
    shutil.rmtree(cfg.lake.root, ignore_errors=True)
    if not files:
        return
    template = Path(f"{cfg.lake.root}.history-{files}")
    if not template.exists():
        print(f"building a journal of {files} files (once per run)", file=sys.stderr)
        journal_with_files(f"{template}.partial", files)
        Path(f"{template}.partial").rename(template)
    shutil.copytree(template, cfg.lake.root)


def journal_file_count(cfg: Config) -> int:
    """The data files of the journal a drain is about to land in (0: no journal yet)."""
    from deltalake import DeltaTable

    path = Path(cfg.lake.root) / "messages"
    return len(DeltaTable(str(path)).file_uris()) if (path / "_delta_log").exists() else 0


def full_drain(cfg: Config, steps: StepTimes, history_files: int = 0) -> tuple[int, float, dict[str, Any]]:
    """The drain of the queue into a fresh lake (or one whose journal holds ``history_files`` files,
    made before this is called)."""
    if not history_files:
        shutil.rmtree(cfg.lake.root, ignore_errors=True)
    steps.reset()
    t0 = time.perf_counter()
    summary = drain(cfg, open_database(cfg), open_lake(cfg.lake), queue_names=[QUEUE])
    seconds = time.perf_counter() - t0
    if summary["status"] != "ok":
        raise SystemExit(f"drain failed: {summary}")
    shutil.rmtree(cfg.lake.root, ignore_errors=True)
    return summary["dequeued"], seconds, steps.figures()


def measure(
    cfg: Config,
    uri: str,
    ref: TableRef,
    args: argparse.Namespace,
    churned: bool,
    steps: StepTimes,
    drain_first: bool = False,
) -> dict:
    label = "churned" if churned else "fresh"
    cpu: dict[str, dict[str, Any]] = {}
    history: dict[str, int] = {}
    firsts: list[float] = []  # the raw leg's first statement per connection

    def raw() -> tuple[int, float]:
        seed_s = build(cfg, uri, ref, args.rows, churned, args.dead)
        print(f"[{label}] table built in {seed_s:.1f}s", file=sys.stderr)
        with CpuMeter(args.postmaster) as meter:
            raw_n, raw_s = raw_drain(uri, ref, args.batch_size, args.workers, firsts)
        if args.pinning is not None:
            _pin.check(uri, args.pinning)
        if raw_n != args.rows:
            raise SystemExit(f"[{label}] raw received {raw_n} of {args.rows}")
        cpu["raw"] = meter.figures
        return raw_n, raw_s

    def raw_copy() -> tuple[int, float]:
        build(cfg, uri, ref, args.rows, churned, args.dead)
        n, seconds = raw_copy_drain(uri, ref, args.batch_size, args.workers)
        if n != args.rows:
            raise SystemExit(f"[{label}] raw COPY received {n} of {args.rows}")
        return n, seconds

    def ours() -> tuple[int, float, dict[str, Any]]:
        build(cfg, uri, ref, args.rows, churned, args.dead)
        journal_with_history(cfg, args.journal_files)
        history["files"] = journal_file_count(cfg)
        with CpuMeter(args.postmaster) as meter:
            drain_n, drain_s, timing = full_drain(cfg, steps, args.journal_files)
        if args.pinning is not None:
            _pin.check(uri, args.pinning)
        cpu["drain"] = meter.figures
        if drain_n != args.rows:
            raise SystemExit(f"[{label}] drain dequeued {drain_n} of {args.rows}")
        return drain_n, drain_s, timing

    if drain_first:
        drain_n, drain_s, timing = ours()
        raw_n, raw_s = raw()
    else:
        raw_n, raw_s = raw()
        drain_n, drain_s, timing = ours()

    raw_rate, drain_rate = raw_n / raw_s, drain_n / drain_s
    out = {
        "raw_seconds": round(raw_s, 2),
        "raw_msgs_per_s": round(raw_rate),
        "drain_seconds": round(drain_s, 2),
        "drain_msgs_per_s": round(drain_rate),
        "ratio": round(drain_rate / raw_rate, 3),
        "cpu": cpu,
        "journal_files_at_start": history["files"],
        # the raw leg's slowest first statement: on a churned table it steps over the dead index
        # entries, which the drain does in its set-up (the depth estimate), before its first receive
        "raw_first_receive_seconds": round(max(firsts), 3) if firsts else None,
        **timing,
    }
    print(
        f"[{label}] raw {raw_rate:,.0f} msg/s ({raw_s:.2f}s), drain {drain_rate:,.0f} msg/s ({drain_s:.2f}s), "
        f"ratio drain/raw {out['ratio']:.3f}",
        file=sys.stderr,
    )
    if args.raw_copy:
        copy_n, copy_s = raw_copy()
        out["raw_copy_msgs_per_s"] = round(copy_n / copy_s)
        out["ratio_vs_raw_copy"] = round(drain_rate / (copy_n / copy_s), 3)
        print(
            f"[{label}] raw COPY {copy_n / copy_s:,.0f} msg/s ({copy_s:.2f}s), "
            f"ratio drain/raw COPY {out['ratio_vs_raw_copy']:.3f}",
            file=sys.stderr,
        )
    if "machine_busy_cpu_s" in cpu["raw"] and "machine_busy_cpu_s" in cpu["drain"]:
        print(
            f"[{label}] CPU seconds per {args.rows:,} rows (client + server and other; busy share of the "
            f"cores; stolen): "
            + "; ".join(
                f"{who} {c['client_cpu_s']:.2f} + {c['server_and_other_cpu_s']:.2f} "
                f"({c['machine_busy_share']:.0%}; steal {c['steal_cpu_s']:.2f})"
                for who, c in cpu.items()
            ),
            file=sys.stderr,
        )
    if "server_cpu_s" in cpu["raw"] and "server_cpu_s" in cpu["drain"]:
        print(
            f"[{label}] the server's own CPU: raw {cpu['raw']['server_cpu_s']:.2f}s, "
            f"drain {cpu['drain']['server_cpu_s']:.2f}s",
            file=sys.stderr,
        )
    if timing["batches"]:
        shares = ", ".join(
            f"{name} {v['share']:.0%} ({v['worker_seconds']:.2f}s)" for name, v in timing["steps"].items()
        )
        print(
            f"[{label}] drain steps over {timing['batches']} batches: {shares}; "
            f"set-up before the first receive {timing['setup_seconds']:.2f}s "
            f"(the raw leg's first receive {out['raw_first_receive_seconds']:.2f}s)",
            file=sys.stderr,
        )
        if timing["worker_cpu_seconds"]:
            worked = ", ".join(f"{name} {s:.2f}s" for name, s in timing["worker_cpu_seconds"].items())
            print(f"[{label}] drain workers' own CPU: {worked}", file=sys.stderr)
    return out


def measure_repeated(
    cfg: Config, uri: str, ref: TableRef, args: argparse.Namespace, churned: bool, steps: StepTimes
) -> dict:
    """``--repeat`` pairs of runs, the order alternating (raw first, then the drain first) so that a
    machine getting faster or slower over the minutes weighs on both. On a small shared machine the
    raw limit alone moves by a third between runs: the median and the spread say more than one run."""
    if args.repeat == 1:
        return measure(cfg, uri, ref, args, churned, steps)
    label = "churned" if churned else "fresh"
    runs = [measure(cfg, uri, ref, args, churned, steps, drain_first=i % 2 == 1) for i in range(args.repeat)]
    ratios = sorted(r["ratio"] for r in runs)
    raw_median = statistics.median(r["raw_msgs_per_s"] for r in runs)
    drain_median = statistics.median(r["drain_msgs_per_s"] for r in runs)
    out = {
        "runs": runs,
        "ratio_median": round(statistics.median(ratios), 3),
        "ratio_min": ratios[0],
        "ratio_max": ratios[-1],
        "runs_at_target": sum(r >= TARGET for r in ratios),
        "raw_msgs_per_s_median": round(raw_median),
        "drain_msgs_per_s_median": round(drain_median),
        "ratio_of_medians": round(drain_median / raw_median, 3),
    }
    for who in ("raw", "drain"):
        figures = [r["cpu"][who] for r in runs]
        out[f"{who}_cpu_median"] = {
            key: statistics.median(f[key] for f in figures)
            for key in figures[0]
            if all(f.get(key) is not None for f in figures)
        }
    setups = [r["setup_seconds"] for r in runs if r.get("setup_seconds") is not None]
    out["drain_setup_seconds_median"] = round(statistics.median(setups), 3) if setups else None
    raw_busy, drain_busy = (out[f"{w}_cpu_median"].get("machine_busy_cpu_s") for w in ("raw", "drain"))
    if raw_busy and drain_busy:
        out["drain_cpu_per_raw_cpu"] = round(drain_busy / raw_busy, 2)
    if args.raw_copy:
        out["ratio_vs_raw_copy_median"] = round(statistics.median(r["ratio_vs_raw_copy"] for r in runs), 3)
        out["raw_copy_msgs_per_s_median"] = round(statistics.median(r["raw_copy_msgs_per_s"] for r in runs))
    print(
        f"[{label}] {args.repeat} runs: ratio median {out['ratio_median']:.3f} "
        f"({out['ratio_min']:.3f}-{out['ratio_max']:.3f}), {out['runs_at_target']} at >= {TARGET}; "
        f"median raw {raw_median:,.0f} msg/s, median drain {drain_median:,.0f} msg/s "
        f"(ratio of medians {out['ratio_of_medians']:.3f})",
        file=sys.stderr,
    )
    if "drain_cpu_per_raw_cpu" in out:
        print(
            f"[{label}] median machine CPU: raw {raw_busy:.2f}s, drain {drain_busy:.2f}s "
            f"({out['drain_cpu_per_raw_cpu']:.2f}x)",
            file=sys.stderr,
        )
    raw_server, drain_server = (out[f"{w}_cpu_median"].get("server_cpu_s") for w in ("raw", "drain"))
    if raw_server and drain_server:
        print(
            f"[{label}] median server's own CPU: raw {raw_server:.2f}s, drain {drain_server:.2f}s; "
            f"median drain set-up before its first receive {out['drain_setup_seconds_median']}s",
            file=sys.stderr,
        )
    if args.raw_copy:
        print(
            f"[{label}] against the raw COPY: ratio median {out['ratio_vs_raw_copy_median']:.3f}, "
            f"median raw COPY {out['raw_copy_msgs_per_s_median']:,} msg/s",
            file=sys.stderr,
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--dead", type=int, default=None, help="rows deleted before the refill (default: --rows)")
    parser.add_argument("--dsn", default=os.environ.get("QUEUELAKE_BENCH_PG_DSN"))
    parser.add_argument("--repeat", type=int, default=1, help="pairs of runs per table; medians and spread")
    parser.add_argument("--raw-copy", action="store_true", help="also the stricter raw limit through COPY")
    parser.add_argument("--verbose", action="store_true", help="the drain's INFO lines on stderr")
    parser.add_argument(
        "--journal-files",
        type=int,
        default=0,
        help="the drain lands in a journal already holding this many files (default: a fresh lake)",
    )
    parser.add_argument("--pin", action="store_true", help="the server on one CPU, this bench on another")
    args = parser.parse_args()
    args.dead = args.rows if args.dead is None else args.dead
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    setup_logging(logging.INFO if args.verbose else logging.WARNING)
    for handler in log.handlers:  # the console keeps its level; the logger passes DEBUG to ours
        handler.setLevel(logging.INFO if args.verbose else logging.WARNING)
    steps = StepTimes()
    log.addHandler(steps)
    log.setLevel(logging.DEBUG)

    work = Path(tempfile.mkdtemp(prefix="queuelake-bench-"))
    server = None
    uri = args.dsn
    if uri is None:
        server = start_embedded(work / "pg")
        uri = server.get_uri("postgres")
    args.pinning = None
    try:
        args.postmaster = _pin.postmaster(uri)  # the server's own CPU is measured where it is local
        pinning = _pin.unpinned()
        if args.pin:
            pinned = _pin.pin(uri)
            pinning = pinned.figures()
            if pinned.pinned:
                args.pinning = pinned
                print(
                    f"pinned: server (postmaster {pinned.postmaster} and its children) on CPU "
                    f"{pinned.server_cpu}, this bench on CPU {pinned.client_cpu}",
                    file=sys.stderr,
                )
            else:
                print(f"--pin: running unpinned: {pinned.reason}", file=sys.stderr)
        cfg = from_dict(
            {
                "transport": {"connection": uri},
                "lake": {"root": str(work / "lake"), "engine": "delta-rs"},
                "drain": {"queues": [QUEUE], "batch_size": args.batch_size, "workers_per_queue": args.workers},
            },
            env={},
        )
        ref = queue_ref(QUEUE, cfg.transport)
        with psycopg.connect(uri, autocommit=True) as c:
            version = c.execute("SHOW server_version").fetchone()[0]
        result: dict[str, Any] = {
            "rows": args.rows,
            "batch_size": args.batch_size,
            "workers": args.workers,
            "dead_rows_churned": args.dead,
            "journal_files_before": args.journal_files,
            "receive_driver": receive_driver(QueueDatabase(cfg.transport), cfg.drain),
            "server_version": version,
            "embedded": server is not None,
        }
        # warm-up, not measured: the first drain of a process pays one-time costs (imports, the lake
        # table's creation, first Delta commit) that are not a property of either table
        build(cfg, uri, ref, min(args.rows, args.batch_size), False, 0)
        full_drain(cfg, steps)
        for churned in (False, True):
            result["churned" if churned else "fresh"] = measure_repeated(cfg, uri, ref, args, churned, steps)
        result["target"] = TARGET
        if args.pinning is not None:
            pinning = args.pinning.figures()  # with the checks made after every leg
        result["pinning"] = pinning
        with psycopg.connect(uri, autocommit=True) as c:
            c.execute(f"DROP TABLE IF EXISTS {ref.qualified}")
    finally:
        if args.pinning is not None:
            _pin.restore(args.pinning)
        if server is not None:
            server.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

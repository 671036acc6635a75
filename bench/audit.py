"""Benchmark: draining an audit queue at ServiceControl's benchmark sizes (13 KB and 66 KB bodies).

ServiceControl 3.0.0's documented audit ingestion, on 16 vCPU, 64 GB RAM and a dedicated 2x7500 IOPS
disk: 140 msg/s for 13 KB messages and 80 msg/s for 66 KB ones. This bench drains the same message
sizes from a PostgreSQL-transport queue table named ``audit`` into a fresh temp lake, on this machine.

Rows: ``sized_audits.audit_events`` (seed 42): audit copies of PlaceOrder commands, with the headers
NServiceBus writes on an audit copy (MessageId, ConversationId, RelatedTo, EnclosedMessageTypes,
Originating/Processing Endpoint and Machine, host ids, TimeSent and ProcessingStarted/Ended in the
28-character wire form, ContentType application/json, Version, trace context; ~1.2 KB) and JSON
bodies of the given size: orders with addresses, payment and catalogue line items. Their
compression ratio (zlib level 6 and snappy, each body alone) is printed: it should be what real JSON
gives (gzip ~3-6x), since a padded body would make the lake look cheap and random bytes dear.

For each body size, each table state built anew (dropped, installed, seeded by binary COPY,
``VACUUM ANALYZE``d, autovacuum off):
- raw: the receive statement alone (``bench/_receive.py``, as ``bench/drain.py`` measures the raw
  limit), same batch size and connections as the drain, rows fetched and discarded;
- drain: ``queuelake.pipeline.drain.run.drain`` (delta-rs) in this process, into a fresh lake;
- command: ``queuelake drain`` as a new process (imports, connections, the lake's creation included),
  its peak resident memory read from the process itself (``bench/_commands.py``).
msg/s and MB/s (message bytes: headers plus body) of each, the ratio drain/raw, the whole command's,
and ServiceControl's figure for context.

Memory: the drain holds a batch per worker (received, built and staged as Parquet) and has no byte
bound: ``drain.batch_size`` counts rows (default 10,000, which at 66 KB is ~670 MB a batch). The
bench's batch is therefore chosen by bytes (``--batch-mb`` per batch, a row count per size), and
two more command runs check that memory follows the batch and not the backlog:
- half: the same batch size on half the rows (peak about the same if bounded by the batch);
- default batch: ``drain.batch_size`` left at its default, on the same rows (the peak a deployment
  that does not set it meets; with fewer rows than the default a batch is the whole queue). Its
  outcome is reported, not required: a batch that takes one worker longer than
  ``drain.settle_seconds`` (5) to receive, build, stage and claim leaves its sibling's receive
  finding the rows locked, and the sibling reports them as held by other sessions (status
  ``incomplete``, exit 1) although its own drain lands them all.

    python bench/audit.py [--sizes 13,66] [--rows 20000,5000] [--batch-mb 64] [--workers 2] [--repeat N] [--dsn URI]

--repeat N: N rounds of raw, drain and command per size (the order of raw and drain alternating);
medians reported. Without --dsn it starts an embedded PostgreSQL (pgserver); with one, it DROPS and
recreates the table ``public."audit"`` there. Ends with one JSON line.
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
import zlib
from pathlib import Path
from typing import Any

import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
import psycopg
import pyarrow as pa
import yaml
from _commands import Ran, queuelake
from _receive import checkpoint, raw_drain, recreate
from queuelake.commands.demo import sized_audits, traffic
from queuelake.config import Config, from_dict
from queuelake.config_sections import DrainConfig
from queuelake.context import open_database
from queuelake.lake.engines import open_lake
from queuelake.pipeline.drain.receive import receive_driver
from queuelake.pipeline.drain.run import drain
from queuelake.report import setup_logging
from queuelake.transport import db
from queuelake.transport.database import QueueDatabase
from queuelake.transport.embedded import start_embedded
from queuelake.transport.queues import OutgoingMessage
from queuelake.transport.table_refs import TableRef, queue_ref

QUEUE = "audit"
KIB = 1024
MB = 1_000_000
# ServiceControl 3.0.0, audit message processing throughput (16 vCPU, 64 GB RAM, 2x7500 IOPS disk)
SERVICECONTROL_MSGS_PER_S = {13: 140, 66: 80}
COMPRESSION_SAMPLE = 500  # bodies compressed one by one for the ratio


def compression(messages: list[OutgoingMessage]) -> dict[str, float]:
    """Body bytes over compressed bytes, each body compressed alone (as a message store would)."""
    bodies = [m.body or b"" for m in messages[:COMPRESSION_SAMPLE]]
    raw = sum(len(b) for b in bodies)
    return {
        "zlib6": round(raw / sum(len(zlib.compress(b, 6)) for b in bodies), 2),
        "snappy": round(raw / sum(pa.compress(b, "snappy").size for b in bodies), 2),
    }


def build(cfg: Config, uri: str, ref: TableRef, messages: list[OutgoingMessage]) -> float:
    """The queue table anew, holding ``messages``; seconds spent."""
    t0 = time.perf_counter()
    recreate(cfg, uri, ref)
    with db.connect(cfg.transport) as conn:
        traffic.seed(conn, ref, messages, chunk=2_000)  # ~25-130 MB per COPY at these sizes
    with psycopg.connect(uri, autocommit=True) as c:
        c.execute(f"VACUUM ANALYZE {ref.qualified}")
    checkpoint(uri)
    return time.perf_counter() - t0


def lake_bytes(root: Path) -> int:
    """Bytes of the lake's data files (sizes only: nothing is read)."""
    return sum(p.stat().st_size for p in root.rglob("*.parquet"))


def config_for(work: Path, uri: str, batch_size: int | None, workers: int) -> dict[str, Any]:
    drain_settings: dict[str, Any] = {"queues": [QUEUE], "workers_per_queue": workers}
    if batch_size is not None:
        drain_settings["batch_size"] = batch_size
    return {
        "transport": {"connection": uri},
        "lake": {"root": str(work / "lake"), "engine": "delta-rs"},
        "drain": drain_settings,
    }


def run_command(work: Path, settings: dict[str, Any], rows: int, check: bool = True) -> Ran:
    """``queuelake drain`` into a fresh lake as a new process; it must drain all ``rows`` (unless not
    ``check``: then its outcome is returned as it is, to be reported)."""
    shutil.rmtree(work / "lake", ignore_errors=True)
    config_file = work / "queuelake.yaml"
    config_file.write_text(yaml.safe_dump(settings))
    ran = queuelake(["drain", "-c", str(config_file)], check)
    if check and (ran.summary.get("status") != "ok" or ran.summary.get("dequeued") != rows):
        raise SystemExit(f"queuelake drain did not drain {rows} rows: {ran.summary}")
    return ran


def rows_left(uri: str, ref: TableRef) -> int:
    with psycopg.connect(uri, autocommit=True) as c:
        return int(c.execute(f"SELECT count(*) FROM {ref.qualified}").fetchone()[0])


def measure_size(
    kib: int, rows: int, args: argparse.Namespace, work: Path, uri: str, idle: Ran, out: Any
) -> dict[str, Any]:
    t0 = time.perf_counter()
    messages = list(sized_audits.audit_events(rows, kib * KIB, seed=42))
    made_s = time.perf_counter() - t0
    body_bytes = sum(len(m.body or b"") for m in messages)
    message_bytes = body_bytes + sum(len(m.headers.encode()) for m in messages)
    per_message = message_bytes / rows
    batch = args.batch_size or max(100, round(args.batch_mb * MB / per_message))
    ratios = compression(messages)
    label = f"[{kib} KB]"
    print(
        f"{label} {rows:,} audit copies, {message_bytes / MB:,.0f} MB ({per_message / KIB:.1f} KiB each, "
        f"headers {(message_bytes - body_bytes) / rows:,.0f} B), made in {made_s:.1f}s; bodies compress "
        f"{ratios['zlib6']:.2f}x (zlib 6), {ratios['snappy']:.2f}x (snappy); batch {batch:,} rows "
        f"({batch * per_message / MB:,.0f} MB), {args.workers} workers",
        file=out,
    )
    settings = config_for(work, uri, batch, args.workers)
    cfg = from_dict(settings, env={})
    ref = queue_ref(QUEUE, cfg.transport)

    def raw() -> float:
        build(cfg, uri, ref, messages)
        n, seconds = raw_drain(uri, ref, batch, args.workers)
        if n != rows:
            raise SystemExit(f"{label} raw received {n} of {rows}")
        return seconds

    def ours() -> tuple[float, int]:
        build(cfg, uri, ref, messages)
        shutil.rmtree(cfg.lake.root, ignore_errors=True)
        t = time.perf_counter()
        summary = drain(cfg, open_database(cfg), open_lake(cfg.lake), queue_names=[QUEUE])
        seconds = time.perf_counter() - t
        if summary["status"] != "ok" or summary["dequeued"] != rows:
            raise SystemExit(f"{label} drain did not drain {rows} rows: {summary}")
        stored = lake_bytes(Path(cfg.lake.root))
        shutil.rmtree(cfg.lake.root, ignore_errors=True)
        return seconds, stored

    runs: list[dict[str, Any]] = []
    stored = 0  # the lake's Parquet bytes after the last in-process drain
    for i in range(args.repeat):
        if i % 2:
            drain_s, stored = ours()
            raw_s = raw()
        else:
            raw_s = raw()
            drain_s, stored = ours()
        build(cfg, uri, ref, messages)
        command = run_command(work, settings, rows)
        # the drain's own seconds, as the command's summary reports them (from its lock to its last batch)
        reported = max((q.get("seconds", 0.0) for q in command.summary.get("queues", [])), default=0.0)
        runs.append(
            {
                "raw_s": raw_s,
                "drain_s": drain_s,
                "command_s": command.seconds,
                "command_drain_s": reported,
                "peak": command.peak_rss_mb,
            }
        )
        print(
            f"{label} run {i + 1}: raw {rows / raw_s:,.0f} msg/s, drain {rows / drain_s:,.0f} msg/s "
            f"(ratio {raw_s / drain_s:.2f}), command {command.seconds:.1f}s (its drain {reported:.1f}s), "
            f"peak RSS {command.peak_rss_mb or 0:,.0f} MB",
            file=out,
        )

    # memory: the same batch on half the rows, then the drain's default batch size on all of them
    half_rows = rows // 2
    build(cfg, uri, ref, messages[:half_rows])
    half = run_command(work, settings, half_rows)
    default_batch = DrainConfig().batch_size
    build(cfg, uri, ref, messages)
    # not checked: at these sizes one batch can outlast drain.settle_seconds (see the docstring)
    default = run_command(work, config_for(work, uri, None, args.workers), rows, check=False)
    default_left = rows_left(uri, ref)
    with psycopg.connect(uri, autocommit=True) as c:
        c.execute(f"DROP TABLE IF EXISTS {ref.qualified}")

    raw_s = statistics.median(r["raw_s"] for r in runs)
    drain_s = statistics.median(r["drain_s"] for r in runs)
    command_s = statistics.median(r["command_s"] for r in runs)
    command_drain_s = statistics.median(r["command_drain_s"] for r in runs)
    peak = max(r["peak"] or 0 for r in runs)
    idle_peak = idle.peak_rss_mb or 0
    batch_mb = batch * per_message / MB
    in_flight_mb = min(args.workers * batch, rows) * per_message / MB
    default_batch_mb = min(default_batch, rows) * per_message / MB
    sc = SERVICECONTROL_MSGS_PER_S.get(kib)
    less_idle = rows / (command_s - idle.seconds) if command_s > idle.seconds else None
    result: dict[str, Any] = {
        "body_kib": kib,
        "rows": rows,
        "message_bytes_avg": round(per_message),
        "header_bytes_avg": round((message_bytes - body_bytes) / rows),
        "queue_mb": round(message_bytes / MB, 1),
        "body_compression": ratios,
        "lake_mb": round(stored / MB, 1),
        "lake_compression": round(message_bytes / stored, 2) if stored else None,
        "batch_size": batch,
        "batch_mb": round(batch_mb, 1),
        "raw_msgs_per_s": round(rows / raw_s),
        "raw_mb_per_s": round(message_bytes / MB / raw_s, 1),
        "drain_msgs_per_s": round(rows / drain_s),
        "drain_mb_per_s": round(message_bytes / MB / drain_s, 1),
        "ratio": round(raw_s / drain_s, 3),
        "command_seconds": round(command_s, 2),
        "command_drain_seconds": round(command_drain_s, 2),
        "command_drain_msgs_per_s": round(rows / command_drain_s) if command_drain_s else None,
        "command_msgs_per_s": round(rows / command_s),
        "command_mb_per_s": round(message_bytes / MB / command_s, 1),
        "command_ratio": round(raw_s / command_s, 3),
        # the command less an idle drain's whole time (start, imports, connections, the lake's set-up)
        "command_msgs_per_s_less_idle": round(less_idle) if less_idle else None,
        "servicecontrol_msgs_per_s": sc,
        "runs": [{k: round(v, 2) if v is not None else None for k, v in r.items()} for r in runs],
        "peak_rss_mb": round(peak),
        "peak_above_idle_mb": round(peak - idle_peak),
        "peak_above_idle_per_in_flight_mb": round((peak - idle_peak) / in_flight_mb, 2),
        "half_rows_peak_rss_mb": round(half.peak_rss_mb or 0),
        "default_batch_size": default_batch,
        "default_batch_mb": round(default_batch_mb, 1),
        "default_batch_peak_rss_mb": round(default.peak_rss_mb or 0),
        "default_batch_command_seconds": round(default.seconds, 2),
        "default_batch_exit_code": default.exit_code,
        "default_batch_status": default.summary.get("status"),
        "default_batch_landed": default.summary.get("landed"),
        "default_batch_held_by_others": sum(q.get("held_by_others", 0) for q in default.summary.get("queues", [])),
        "default_batch_rows_left_in_queue": default_left,
    }
    print(
        f"{label} raw {result['raw_msgs_per_s']:,} msg/s ({result['raw_mb_per_s']} MB/s); drain "
        f"{result['drain_msgs_per_s']:,} msg/s ({result['drain_mb_per_s']} MB/s), ratio drain/raw "
        f"{result['ratio']:.2f}; whole command {command_s:.1f}s (its drain {command_drain_s:.1f}s): "
        f"{result['command_msgs_per_s']:,} msg/s "
        f"({result['command_mb_per_s']} MB/s), ratio {result['command_ratio']:.2f}, less an idle drain's "
        f"{idle.seconds:.1f}s {f'{less_idle:,.0f}' if less_idle else '-'} msg/s"
        + (f"; ServiceControl documents {sc} msg/s on 16 vCPU" if sc else ""),
        file=out,
    )
    print(
        f"{label} lake: {result['lake_mb']:,} MB of Parquet for {result['queue_mb']:,} MB of messages "
        f"({result['lake_compression']}x)",
        file=out,
    )
    print(
        f"{label} peak RSS of `queuelake drain`: {peak:,.0f} MB ({peak - idle_peak:,.0f} MB above an idle drain's "
        f"{idle_peak:,.0f}; {result['peak_above_idle_per_in_flight_mb']}x the {in_flight_mb:,.0f} MB of "
        f"{args.workers} batches); half the rows {result['half_rows_peak_rss_mb']:,} MB; at the default "
        f"drain.batch_size {default_batch:,} ({default_batch_mb:,.0f} MB a batch here, no byte bound) "
        f"{result['default_batch_peak_rss_mb']:,} MB",
        file=out,
    )
    if default.exit_code or result["default_batch_status"] != "ok":
        print(
            f"{label} at the default drain.batch_size the command exited {default.exit_code}, status "
            f"{result['default_batch_status']}: it landed {result['default_batch_landed']} rows and reported "
            f"{result['default_batch_held_by_others']} held by other sessions, while {default_left} are left "
            f"in the queue (a sibling worker's receive found them locked by the other worker's batch for "
            f"longer than drain.settle_seconds)",
            file=out,
        )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="13,66", help="body sizes in KiB, comma-separated")
    parser.add_argument("--rows", default="20000,5000", help="rows per size (one value: the same for all)")
    parser.add_argument("--batch-mb", type=float, default=64.0, help="MB of messages per batch (rows per size)")
    parser.add_argument("--batch-size", type=int, default=None, help="rows per batch for every size instead")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="rounds per size; medians")
    parser.add_argument("--dsn", default=os.environ.get("QUEUELAKE_BENCH_PG_DSN"))
    parser.add_argument("--verbose", action="store_true", help="the drain's INFO lines on stderr")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = [int(r) for r in args.rows.split(",")]
    if len(rows) == 1:
        rows *= len(sizes)
    if len(rows) != len(sizes) or min(rows) < 2 or args.repeat < 1:
        parser.error("--rows: one value, or one per size, each at least 2; --repeat at least 1")
    setup_logging(logging.INFO if args.verbose else logging.WARNING)
    out = sys.stderr

    work = Path(tempfile.mkdtemp(prefix="queuelake-bench-audit-"))
    server = None
    uri = args.dsn
    try:
        if uri is None:
            server = start_embedded(work / "pg")
            uri = server.get_uri("postgres")
        settings = config_for(work, uri, None, args.workers)
        cfg = from_dict(settings, env={})
        ref = queue_ref(QUEUE, cfg.transport)
        with psycopg.connect(uri, autocommit=True) as c:
            version = c.execute("SHOW server_version").fetchone()[0]
        # warm-up, not measured (imports, the first lake's creation), then an idle command: the
        # fixed cost and the memory of a drain with nothing to do
        warm = list(sized_audits.audit_events(200, sizes[0] * KIB, seed=1))
        build(cfg, uri, ref, warm)
        drain(cfg, open_database(cfg), open_lake(cfg.lake), queue_names=[QUEUE])
        recreate(cfg, uri, ref)
        idle = run_command(work, settings, 0)
        print(
            f"idle `queuelake drain` (empty queue): {idle.seconds:.2f}s, peak RSS {idle.peak_rss_mb or 0:,.0f} MB",
            file=out,
        )
        result: dict[str, Any] = {
            "sizes_kib": sizes,
            "workers": args.workers,
            "repeat": args.repeat,
            "receive_driver": receive_driver(QueueDatabase(cfg.transport), cfg.drain),
            "server_version": version,
            "embedded": server is not None,
            "cpus": os.cpu_count(),
            "idle_command_seconds": round(idle.seconds, 2),
            "idle_peak_rss_mb": round(idle.peak_rss_mb or 0),
            "results": [measure_size(k, n, args, work, uri, idle, out) for k, n in zip(sizes, rows)],
        }
    finally:
        if server is not None:
            server.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

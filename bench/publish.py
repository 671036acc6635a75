"""Benchmark: ``queuelake publish`` as a whole command against the fastest raw COPY of the same rows
into the same tables, in one run.

Two cases (issue 60):
- send (``--subscribers 0``, the default): an outbound table of --rows Send rows to one queue;
- fan-out (``--subscribers K``): --rows events (intent Publish), each sent to the K queues
  subscribed to its type: rows x K copies.

publish: ``queuelake publish -c <config>`` in a new process, as a scheduler runs it (interpreter,
imports, connections, Spark's start when it starts one: its fixed cost included), once per mode:
``driver`` streams the round through the command's process, ``executors`` sends it from Spark tasks,
one per Parquet row group (``publish.executors_from_rows: 1``). Between runs the queues are emptied
and the ledger forgotten, so each run sends the same round again. An idle publish (nothing new)
gives the command's fixed cost without a round.
raw: the very rows the first publish wrote, dumped by the server in batches of --batch-size rows per
queue, then COPY'd back from those bytes in text and in binary format, a batch per transaction (every
queue's COPY in it, as publish sends a batch); only the COPY and the commit are timed
(``bench/_raw.py`` says why). The faster of the two formats is the raw limit.

    python bench/publish.py [--rows 300000] [--subscribers 0] [--batch-size 5000]
                            [--modes driver,executors] [--repeat N] [--dsn URI]

Prints, per repeat, a line of figures to stderr, then one JSON line: the raw rates (copies/s) per
format and the fastest, and per mode the median whole-command rate, its ratio to the fastest raw
(target >= 0.6) and to each format, every run's ratio, the command's peak memory (its Python
process; not the JVM, not the executors), and the round's own seconds from the command's summary
(``publish_seconds``: what is left once the command has started, Spark's session included) with
its ratio to the fastest raw. ``rows_per_s`` and the ratios count copies (messages written): in the
send case one per row. --raw-binary is accepted for older callers; both formats are always
measured.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
import orjson
import psycopg
import pyarrow as pa
import yaml
from _commands import Ran, queuelake
from _raw import Dump, dump, load
from queuelake.config import from_dict
from queuelake.lake.engines import open_lake
from queuelake.report import setup_logging
from queuelake.transport import db, installer, subscriptions
from queuelake.transport.embedded import start_embedded
from queuelake.transport.table_refs import bridge_ref, queue_ref

TARGET = 0.6
SEND_TYPE = "Billing.Messages.Commands.ApplyLoyaltyDiscount, Billing.Messages, Version=1.0.0.0"
EVENT = "Lakehouse.Events.CustomerScored"
EVENT_TYPE = f"{EVENT}, Lakehouse.Events, Version=1.0.0.0"
MODES = {"driver": None, "executors": 1}  # publish.executors_from_rows
OUTPUT = "outbound_bench"


def body(i: int) -> bytes:
    return orjson.dumps({"CustomerId": f"customer-{i}", "DiscountPercent": 10, "Notes": "x" * 900})


def outbound(rows: int, subscribers: int, chunk: int = 100_000):
    """The outbound table's rows, ``chunk`` at a time: Send rows to ``Bench``, or events."""
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        send = subscribers == 0
        yield pa.table(
            {
                "key": [f"discount:{i}" for i in range(start, start + n)],
                "message_type": [SEND_TYPE if send else EVENT_TYPE] * n,
                "intent": ["Send" if send else "Publish"] * n,
                "destination": ["Bench" if send else None] * n,
                "body": [body(i) for i in range(start, start + n)],
            },
            schema=pa.schema(
                [
                    ("key", pa.string()),
                    ("message_type", pa.string()),
                    ("intent", pa.string()),
                    ("destination", pa.string()),
                    ("body", pa.binary()),
                ]
            ),
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--subscribers", type=int, default=0, help="0: Send rows; K: events to K subscribers")
    parser.add_argument("--batch-size", type=int, default=5000)
    parser.add_argument("--modes", default="driver,executors", help="comma-separated: driver, executors")
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--repeat", type=int, default=1, help="rounds of (every mode, raw); medians reported")
    parser.add_argument("--raw-binary", action="store_true", help="(always on) both raw formats are measured")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    setup_logging(logging.INFO if args.verbose else logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="queuelake-bench-publish-"))
    try:
        return run(args, work)
    finally:  # a 1M-row round leaves gigabytes of lake and database behind
        shutil.rmtree(work, ignore_errors=True)


def queue_names(subscribers: int) -> list[str]:
    return ["Bench"] if subscribers == 0 else [f"Subscriber{i}" for i in range(1, subscribers + 1)]


def set_up(args: argparse.Namespace, work: Path, uri: str) -> tuple[dict[str, Any], list[str], str]:
    """The queues, subscriptions and outbound table; returns (settings, queue tables, ledger table)."""
    settings: dict[str, Any] = {
        "transport": {"connection": uri},
        "lake": {"root": str(work / "lake"), "engine": "delta-rs"},
        "publish": {"endpoint": "Lakehouse", "outputs": [OUTPUT], "batch_size": args.batch_size},
    }
    cfg = from_dict(settings, env={})
    names = queue_names(args.subscribers)
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=names))
        routing = bridge_ref(cfg.transport.subscription_table, cfg.transport)
        for name in names if args.subscribers else []:
            subscriptions.subscribe(conn, routing, name, name, EVENT)
        conn.commit()
    lake = open_lake(cfg.lake)  # delta-rs: the bench itself starts no JVM
    for version, chunk in enumerate(outbound(args.rows, args.subscribers), start=1):
        lake.append(OUTPUT, chunk, "bench", version)
    tables = [queue_ref(name, cfg.transport).qualified for name in names]
    return settings, tables, bridge_ref(cfg.transport.ledger_table, cfg.transport).qualified


def reset(uri: str, tables: list[str], ledger: str | None) -> None:
    """Empty the queues (and forget the ledger): the next run sends the same round again."""
    with psycopg.connect(uri, autocommit=True) as c:
        for table in tables:
            c.execute(f"TRUNCATE {table}")
        if ledger is not None:
            c.execute(f"DELETE FROM {ledger}")
        for table in tables:
            c.execute(f"VACUUM ANALYZE {table}")


def count(uri: str, tables: list[str]) -> int:
    with psycopg.connect(uri) as c:
        return sum(int(c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in tables)  # type: ignore[index]


def run(args: argparse.Namespace, work: Path) -> int:
    server = None
    uri = args.dsn
    if uri is None:
        server = start_embedded(work / "pg")
        uri = server.get_uri("postgres")
    settings, tables, ledger = set_up(args, work, uri)
    copies = args.rows * max(args.subscribers, 1)
    config_file = work / "queuelake.yaml"
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    rows: Dump | None = None
    idle: Ran | None = None
    runs: list[dict[str, Any]] = []
    for _ in range(args.repeat):
        figures: dict[str, Any] = {}
        for mode in modes:
            publish_settings = {**settings["publish"], "executors_from_rows": MODES[mode]}
            config_file.write_text(yaml.safe_dump({**settings, "publish": publish_settings}))
            ran = queuelake(["publish", "-c", str(config_file)])
            assert ran.summary["status"] == "ok" and ran.summary["copies"] == copies, ran.summary
            assert count(uri, tables) == copies
            if rows is None:  # the raw limit loads what publish wrote
                rows = dump(uri, tables, args.batch_size, work / "raw")
            if idle is None:  # nothing new: the command's fixed cost
                idle = queuelake(["publish", "-c", str(config_file)])
                assert idle.summary["status"] == "ok" and idle.summary["copies"] == 0, idle.summary
            reset(uri, tables, ledger)
            inside = sum(float(o["seconds"]) for o in ran.summary["outputs"])
            figures[mode] = {"seconds": ran.seconds, "publish_seconds": inside, "peak_rss_mb": ran.peak_rss_mb or 0.0}
        assert rows is not None
        for fmt in ("text", "binary"):
            seconds = load(uri, rows, fmt)
            assert count(uri, tables) == copies
            reset(uri, tables, None)
            figures[f"raw_{fmt}"] = copies / seconds
        runs.append(figures)
        line = {k: (round(v) if isinstance(v, float) else v) for k, v in figures.items()}
        print(json.dumps(line), file=sys.stderr)
    assert idle is not None
    print(json.dumps(report(args, copies, runs, modes, idle)))
    if server is not None:
        server.cleanup()
    return 0


def _fastest(run: dict[str, Any]) -> float:
    """A repeat's raw limit: the faster of its two formats."""
    return max(run["raw_text"], run["raw_binary"])


def report(
    args: argparse.Namespace, copies: int, runs: list[dict[str, Any]], modes: list[str], idle: Ran
) -> dict[str, Any]:
    """Medians over the repeats; each run's ratio against the fastest raw of its own repeat."""
    out: dict[str, Any] = {
        "rows": args.rows,
        "subscribers": args.subscribers,
        "copies": copies,
        "batch_size": args.batch_size,
        "repeat": args.repeat,
        "raw_rows_per_s": round(statistics.median(r["raw_text"] for r in runs)),  # text COPY
        "raw_binary_rows_per_s": round(statistics.median(r["raw_binary"] for r in runs)),
        "raw_fastest_rows_per_s": round(statistics.median(_fastest(r) for r in runs)),
        "idle_command_seconds": round(idle.seconds, 2),
        "idle_command_peak_rss_mb": round(idle.peak_rss_mb or 0),
    }
    for mode in modes:
        rates = [copies / r[mode]["seconds"] for r in runs]
        ratios = sorted(round(rate / _fastest(r), 3) for rate, r in zip(rates, runs))
        out[mode] = {
            "command_seconds": round(statistics.median(r[mode]["seconds"] for r in runs), 2),
            "command_seconds_all": [round(r[mode]["seconds"], 2) for r in runs],
            "rows_per_s": round(statistics.median(rates)),  # copies per second of the whole command
            "ratio": round(statistics.median(ratios), 3),  # against the fastest raw
            "ratios": ratios,
            "ratio_vs_raw_text": round(statistics.median(x / r["raw_text"] for x, r in zip(rates, runs)), 3),
            "ratio_vs_raw_binary": round(statistics.median(x / r["raw_binary"] for x, r in zip(rates, runs)), 3),
            "runs_at_target": sum(x >= TARGET for x in ratios),
            "peak_rss_mb": round(max(r[mode]["peak_rss_mb"] for r in runs)),
            # the round itself, as the summary times it: once the command and its Spark session started
            "publish_seconds": round(statistics.median(r[mode]["publish_seconds"] for r in runs), 2),
            "publish_ratio": round(
                statistics.median(copies / r[mode]["publish_seconds"] / _fastest(r) for r in runs), 3
            ),
        }
    out["target"] = TARGET
    return out


if __name__ == "__main__":
    sys.exit(main())

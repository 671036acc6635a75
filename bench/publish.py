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
raw: the very rows an untimed first publish wrote (its rows checked, below), dumped by the server
in batches of --batch-size rows per queue, then COPY'd back from those bytes in text and in binary
format, a batch per transaction (every queue's COPY in it, as publish sends a batch); only the COPY
and the commit are timed (``bench/_raw.py`` says why). The faster of the two formats is the raw
limit.

    python bench/publish.py [--rows 300000] [--subscribers 0] [--batch-size 5000]
                            [--modes driver,executors] [--driver psycopg,pyodbc] [--repeat N]
                            [--dsn URI]

Prints, per repeat, a line of figures to stderr, then one JSON line: the raw rates (copies/s) per
format and the fastest, and per mode the median whole-command rate, its ratio to the fastest raw
(target >= 0.6) and to each format, every run's ratio, the command's peak memory (its Python
process; not the JVM, not the executors), and the round's own seconds from the command's summary
(``publish_seconds``: what is left once the command has started, Spark's session included) with
its ratio to the fastest raw. ``rows_per_s`` and the ratios count copies (messages written): in the
send case one per row. --raw-binary is accepted for older callers; both formats are always
measured.

drivers (``--driver``, comma-separated; default the configured default, psycopg): each driver
publishes the same round against the same raw limit of its repeat. ``pyodbc`` goes through psqlodbc
(the ODBC string of the same database) twice: as PostgreSQL configures it (array binding off,
``executemany`` row by row) and as SQL Server configures it (``fast_executemany``, variant
``pyodbc+array_binding``). The product has no setting for the latter; the bench's own launcher
switches the PostgreSQL dialect's ``odbc_array_binding`` on inside the command's process only
(``ARRAY_BINDING``), so the executors mode, whose Spark workers it does not reach, is not run under
it. A variant that fails is reported with its error, not stopped on. After every run the rows that
arrived are checked: their count, their row ids (distinct), their MessageIds (distinct, and the same
as every other run's: uuid5 of the key and queue), and their bodies (the outbound bodies, byte for
byte). A final table on stderr gives, per variant and mode, the medians and ranges.

CPU: each run's command (its process and what it waited for) is metered with the server's own CPU
meanwhile (``_cpu.CpuMeter``), the raw loads too; their medians and the floor they set are printed
under each mode: (command + server CPU) / cores is the least time the command can take on this
machine, and raw over it the best whole ratio it can reach without spending less CPU (``cpu``); with
the idle publish's time counted whole (nothing reaches the server before the command has started),
the bound it meets in practice.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import _pin
import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
import orjson
import psycopg
import pyarrow as pa
import yaml
from _commands import QUEUELAKE, Ran, queuelake
from _commands import run as run_command
from _cpu import CpuMeter, floor
from _raw import Dump, dump, load
from _receive import checkpoint
from queuelake.config import from_dict
from queuelake.config_sections import TransportConfig
from queuelake.dialects.dialect import POSTGRESQL
from queuelake.lake.engines import open_lake
from queuelake.report import setup_logging
from queuelake.transport import db, drivers, installer, subscriptions
from queuelake.transport.embedded import odbc_from_uri, start_embedded
from queuelake.transport.table_refs import bridge_ref, queue_ref

TARGET = 0.6
SEND_TYPE = "Billing.Messages.Commands.ApplyLoyaltyDiscount, Billing.Messages, Version=1.0.0.0"
EVENT = "Lakehouse.Events.CustomerScored"
EVENT_TYPE = f"{EVENT}, Lakehouse.Events, Version=1.0.0.0"
MODES = {"driver": None, "executors": 1}  # publish.executors_from_rows
OUTPUT = "outbound_bench"
DEFAULT_DRIVER = TransportConfig.driver  # what a config without transport.driver sends with
# The bench's hook for array binding on PostgreSQL (no product setting has it: the dialect decides,
# SQL Server on, PostgreSQL off): run before the command's module, in the command's process, it gives
# the PostgreSQL dialect SQL Server's ``odbc_array_binding``; ``Connection.executemany`` then sets
# pyodbc's ``fast_executemany``. Nothing else of the dialect changes.
ARRAY_BINDING = (
    "import dataclasses, importlib\n"
    "rules = importlib.import_module('queuelake.dialects.dialect')\n"
    "rules.DIALECTS['postgresql'] = dataclasses.replace(rules.POSTGRESQL, odbc_array_binding=True)\n"
)


@dataclasses.dataclass(frozen=True)
class Variant:
    """A driver the command sends with, and whether pyodbc binds arrays (``fast_executemany``)."""

    driver: str
    array_binding: bool = False

    @property
    def label(self) -> str:
        return f"{self.driver}+array_binding" if self.array_binding else self.driver

    def connection(self, uri: str) -> str:
        """The database's connection string as this driver takes it (psqlodbc's for pyodbc)."""
        return odbc_from_uri(uri) if drivers.driver(self.driver).connection_string == "odbc" else uri

    def runs(self, mode: str) -> bool:
        """The hook reaches the command's process, not the executors' Spark workers."""
        return not (self.array_binding and mode != "driver")


def variants(names: str) -> list[Variant]:
    """``--driver``'s drivers; a driver that can bind arrays (pyodbc) twice, off then on."""
    out: list[Variant] = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        if name not in POSTGRESQL.drivers:
            raise SystemExit(f"--driver {name!r}: use {', '.join(POSTGRESQL.drivers)}")
        out.append(Variant(name))
        if drivers.driver(name).odbc_array_binding:
            out.append(Variant(name, array_binding=True))
    return out


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
    parser.add_argument(
        "--driver",
        default=DEFAULT_DRIVER,
        help=f"comma-separated: {', '.join(POSTGRESQL.drivers)}; pyodbc runs with array binding off and on",
    )
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
    """Empty the queues (and forget the ledger): the next run sends the same round again. Then a
    checkpoint: each leg writes 300-600 MB of WAL, and without it the checkpoint those writes call
    for lands in whichever leg comes next (its buffers written beside that leg's COPY)."""
    with psycopg.connect(uri, autocommit=True) as c:
        for table in tables:
            c.execute(f"TRUNCATE {table}")
        if ledger is not None:
            c.execute(f"DELETE FROM {ledger}")
        for table in tables:
            c.execute(f"VACUUM ANALYZE {table}")
    checkpoint(uri)


def count(uri: str, tables: list[str]) -> int:
    with psycopg.connect(uri) as c:
        return sum(int(c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in tables)  # type: ignore[index]


def arrived(uri: str, tables: list[str], ledger: str) -> dict[str, Any]:
    """What a run left in the queues: rows, distinct row ids (fresh uuids, drawn by the sender) and
    MessageIds (headers' ``NServiceBus.MessageId``: uuid5 of the key and queue, the same in every
    run), a digest of the MessageIds and one of the bodies (each body's md5, sorted), the bodies'
    bytes; and the ledger's rows (a failed batch has none)."""
    union = " UNION ALL ".join(
        f"SELECT id, CAST(headers AS jsonb) ->> 'NServiceBus.MessageId' AS message_id, body FROM {t}" for t in tables
    )
    query = (
        "SELECT count(*), count(DISTINCT id), count(DISTINCT message_id), "
        "md5(coalesce(string_agg(message_id, ',' ORDER BY message_id COLLATE \"C\"), '')), "
        "md5(coalesce(string_agg(md5(body), ',' ORDER BY md5(body) COLLATE \"C\"), '')), "
        f"coalesce(sum(octet_length(body)), 0) FROM ({union}) r"
    )
    with psycopg.connect(uri) as c:
        n, ids, message_ids, id_digest, body_digest, body_bytes = c.execute(query).fetchone()  # type: ignore[misc]
        batches = f"SELECT count(*) FROM {ledger} WHERE batch_key NOT LIKE 'table:%'"  # its batches' rows
        ledger_rows = c.execute(batches).fetchone()[0]  # type: ignore[index]
    return {
        "rows": n,
        "distinct_ids": ids,
        "distinct_message_ids": message_ids,
        "message_ids_digest": id_digest,
        "bodies_digest": body_digest,
        "body_bytes": int(body_bytes),
        "ledger_rows": ledger_rows,
    }


def sent_bodies(rows: int, subscribers: int) -> tuple[str, int]:
    """The digest and bytes ``arrived`` must find: every outbound body, once per copy."""
    copies = max(subscribers, 1)
    digests = sorted(hashlib.md5(body(i)).hexdigest() for i in range(rows) for _ in range(copies))
    return hashlib.md5(",".join(digests).encode()).hexdigest(), copies * sum(len(body(i)) for i in range(rows))


def check(found: dict[str, Any], copies: int, bodies: tuple[str, int], ids: str | None) -> dict[str, Any]:
    """A run's rows against what was sent: ``ok`` when every copy arrived once (distinct row ids and
    MessageIds), with the MessageIds every other run wrote (``ids`` None: the first complete run,
    the reference) and the bodies as sent."""
    out = {
        "rows": found["rows"],
        "distinct_ids": found["distinct_ids"],
        "distinct_message_ids": found["distinct_message_ids"],
        "message_ids_as_other_runs": ids is None or found["message_ids_digest"] == ids,
        "bodies_as_sent": (found["bodies_digest"], found["body_bytes"]) == bodies,
        "ledger_rows": found["ledger_rows"],
    }
    every_copy_once = found["rows"] == found["distinct_ids"] == found["distinct_message_ids"] == copies
    out["ok"] = bool(every_copy_once and out["message_ids_as_other_runs"] and out["bodies_as_sent"])
    return out


def publish(config_file: Path, variant: Variant) -> Ran:
    """``queuelake publish``; under array binding through the bench's launcher with ``ARRAY_BINDING``
    first, and allowed to fail (its failure is a figure too)."""
    argv = ["publish", "-c", str(config_file)]
    if not variant.array_binding:
        return queuelake(argv)
    python, flag, launcher = QUEUELAKE
    return run_command([python, flag, ARRAY_BINDING + launcher, *argv], check=False)


def failure(ran: Ran) -> str | None:
    """Why a publish failed (its summary's error, or its exit code), None when it did not."""
    errors = [o.get("error") for o in ran.summary.get("outputs", []) if o.get("error")]
    if ran.exit_code == 0 and ran.summary.get("status") == "ok" and not errors:
        return None
    error = errors[0] if errors else ran.summary.get("error")
    return f"exit {ran.exit_code}: {error or 'no summary'}"


def prime(
    args: argparse.Namespace,
    settings: dict[str, Any],
    config_file: Path,
    uri: str,
    tables: list[str],
    ledger: str,
    expected: tuple[int, tuple[str, int]],
    folder: Path,
) -> tuple[str, Dump]:
    """An untimed publish of the round (psycopg, on the driver), checked, its rows dumped for the raw
    limit, then the queues reset: the MessageIds every timed run must write, and the raw rows.

    Why: the first rows a new server takes cost it more than any later: it makes its WAL files (2 -> 33
    segments for 300,000 rows; 1.3 s more of its own CPU in a measured run), where later legs recycle
    them (a checkpoint after each, ``reset``). The first timed leg was always a publish, so that cost
    fell on a publish and never on a raw load. ``bench/replay.py`` primes the same way."""
    copies, bodies = expected
    config_file.write_text(
        yaml.safe_dump({**settings, "publish": {**settings["publish"], "executors_from_rows": None}})
    )
    primer = queuelake(["publish", "-c", str(config_file)])
    found = arrived(uri, tables, ledger)
    checked = check(found, copies, bodies, None)
    assert primer.summary.get("status") == "ok" and checked["ok"], (primer.summary, checked)
    rows = dump(uri, tables, args.batch_size, folder)
    reset(uri, tables, ledger)
    return found["message_ids_digest"], rows


def run(args: argparse.Namespace, work: Path) -> int:
    server = None
    uri = args.dsn
    if uri is None:
        server = start_embedded(work / "pg")
        uri = server.get_uri("postgres")
    settings, tables, ledger = set_up(args, work, uri)
    copies = args.rows * max(args.subscribers, 1)
    bodies = sent_bodies(args.rows, args.subscribers)
    config_file = work / "queuelake.yaml"
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    chosen = variants(args.driver)
    idle: Ran | None = None
    start: tuple[float, float] | None = None  # the idle publish's (seconds, CPU seconds)
    idle_driver = ""
    runs: list[dict[str, Any]] = []
    postmaster = _pin.postmaster(uri)  # the server's own CPU, where it is a process of this machine
    ids, rows = prime(args, settings, config_file, uri, tables, ledger, (copies, bodies), work / "raw")
    for _ in range(args.repeat):
        figures: dict[str, Any] = {}
        for variant in chosen:
            transport = {**settings["transport"], "driver": variant.driver, "connection": variant.connection(uri)}
            for mode in filter(variant.runs, modes):
                publish_settings = {**settings["publish"], "executors_from_rows": MODES[mode]}
                config_file.write_text(
                    yaml.safe_dump({**settings, "transport": transport, "publish": publish_settings})
                )
                with CpuMeter(postmaster, children=True) as meter:  # the command's process, and the server
                    ran = publish(config_file, variant)
                found = arrived(uri, tables, ledger)
                checked = check(found, copies, bodies, ids)
                error = failure(ran)
                if error is None:
                    assert ran.summary["copies"] == copies, ran.summary
                    assert checked["ok"] or variant.array_binding, (variant.label, mode, checked)
                if idle is None and error is None:  # nothing new: the command's fixed cost
                    with CpuMeter(children=True) as idle_meter:  # the command's start: what overlaps nothing
                        idle = queuelake(["publish", "-c", str(config_file)])
                    start = (idle.seconds, idle_meter.figures["client_cpu_s"])
                    assert idle.summary["status"] == "ok" and idle.summary["copies"] == 0, idle.summary
                    idle_driver = variant.label
                reset(uri, tables, ledger)
                inside = sum(float(o["seconds"]) for o in ran.summary.get("outputs", []))
                figures[f"{variant.label}/{mode}"] = {
                    "seconds": ran.seconds,
                    "publish_seconds": inside,
                    "peak_rss_mb": ran.peak_rss_mb or 0.0,
                    "error": error,
                    "check": checked,
                    "cpu": meter.figures,
                }
        for fmt in ("text", "binary"):
            with CpuMeter(postmaster) as meter:
                seconds = load(uri, rows, fmt)
            figures[f"raw_{fmt}_cpu"] = meter.figures
            assert count(uri, tables) == copies
            reset(uri, tables, None)
            figures[f"raw_{fmt}"] = copies / seconds
        runs.append(figures)
        line = {k: (round(v) if isinstance(v, float) else v) for k, v in figures.items() if not k.endswith("_cpu")}
        print(json.dumps(line, default=str), file=sys.stderr)
    assert idle is not None
    out = report(args, copies, runs, modes, chosen, idle, start)
    out["idle_command_driver"] = idle_driver
    print(table(out, chosen, modes), file=sys.stderr)
    print(json.dumps(out))
    if server is not None:
        server.cleanup()
    return 0


def _fastest(run: dict[str, Any]) -> float:
    """A repeat's raw limit: the faster of its two formats."""
    return max(run["raw_text"], run["raw_binary"])


def summary(
    copies: int, runs: list[dict[str, Any]], key: str, start: tuple[float, float] | None = None
) -> dict[str, Any]:
    """One variant and mode over the repeats: medians of its complete runs, each run's ratio against
    the fastest raw of its own repeat; a run that failed or mis-sent counts in ``failed_runs`` with
    its error and what arrived."""
    bad = [r for r in runs if r[key]["error"] is not None or not r[key]["check"]["ok"]]
    good = [r for r in runs if r not in bad]
    out: dict[str, Any] = {"runs": len(runs), "failed_runs": len(bad)}
    # a command that said ok and left wrong rows: the finding to look for first
    out["silently_mis_sent"] = sum(r[key]["error"] is None for r in bad)
    if bad:
        out["errors"] = sorted({r[key]["error"] or "exit 0, rows mis-sent" for r in bad})
        out["arrived"] = [r[key]["check"] for r in bad]
    out["checks_ok"] = sum(r[key]["check"]["ok"] for r in runs)
    if not good:
        return out
    rates = [copies / r[key]["seconds"] for r in good]
    ratios = sorted(round(rate / _fastest(r), 3) for rate, r in zip(rates, good))
    out |= {
        "command_seconds": round(statistics.median(r[key]["seconds"] for r in good), 2),
        "command_seconds_all": [round(r[key]["seconds"], 2) for r in good],
        "rows_per_s": round(statistics.median(rates)),  # copies per second of the whole command
        "rows_per_s_range": [round(min(rates)), round(max(rates))],
        "ratio": round(statistics.median(ratios), 3),  # against the fastest raw
        "ratios": ratios,
        "ratio_vs_raw_text": round(statistics.median(x / r["raw_text"] for x, r in zip(rates, good)), 3),
        "ratio_vs_raw_binary": round(statistics.median(x / r["raw_binary"] for x, r in zip(rates, good)), 3),
        "runs_at_target": sum(x >= TARGET for x in ratios),
        "peak_rss_mb": round(max(r[key]["peak_rss_mb"] for r in good)),
        # the round itself, as the summary times it: once the command and its Spark session started
        "publish_seconds": round(statistics.median(r[key]["publish_seconds"] for r in good), 2),
        "publish_ratio": round(statistics.median(copies / r[key]["publish_seconds"] / _fastest(r) for r in good), 3),
    }
    floors = [f for r in good if (f := floor(r[key]["cpu"], copies / _fastest(r), start)) is not None]
    if floors:  # the best whole ratio the command's CPU allows on this machine's cores (``_cpu.floor``)
        out["cpu"] = {
            "command_cpu_s": round(statistics.median(r[key]["cpu"]["client_cpu_s"] for r in good), 2),
            "server_cpu_s": round(statistics.median(r[key]["cpu"]["server_cpu_s"] for r in good), 2),
            "raw_binary_server_cpu_s": round(statistics.median(r["raw_binary_cpu"]["server_cpu_s"] for r in good), 2),
            "cores": floors[0]["cores"],
            "floor_s": round(statistics.median(f["floor_s"] for f in floors), 2),
            "best_ratio": round(statistics.median(f["best_ratio"] for f in floors), 3),
            "best_ratio_range": [min(f["best_ratio"] for f in floors), max(f["best_ratio"] for f in floors)],
        }
        if start is not None:  # the idle publish's time overlapping nothing
            with_start = [f["best_ratio_with_start"] for f in floors]
            out["cpu"] |= {
                "floor_with_start_s": round(statistics.median(f["floor_with_start_s"] for f in floors), 2),
                "best_ratio_with_start": round(statistics.median(with_start), 3),
                "best_ratio_with_start_range": [min(with_start), max(with_start)],
            }
    return out


def report(
    args: argparse.Namespace,
    copies: int,
    runs: list[dict[str, Any]],
    modes: list[str],
    chosen: list[Variant],
    idle: Ran,
    start: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """Medians over the repeats. The default driver's modes at the top (as before ``--driver``), and
    every variant's under ``drivers``: ``{label: {driver, array_binding, modes: {mode: figures}}}``."""
    raw = {fmt: [r[f"raw_{fmt}"] for r in runs] for fmt in ("text", "binary")}
    out: dict[str, Any] = {
        "rows": args.rows,
        "subscribers": args.subscribers,
        "copies": copies,
        "batch_size": args.batch_size,
        "repeat": args.repeat,
        "raw_rows_per_s": round(statistics.median(raw["text"])),  # text COPY
        "raw_binary_rows_per_s": round(statistics.median(raw["binary"])),
        "raw_fastest_rows_per_s": round(statistics.median(_fastest(r) for r in runs)),
        "raw_range": {fmt: [round(min(v)), round(max(v))] for fmt, v in raw.items()},
        "idle_command_seconds": round(idle.seconds, 2),
        "idle_command_peak_rss_mb": round(idle.peak_rss_mb or 0),
        "drivers": {},
    }
    for variant in chosen:
        figures = {
            mode: summary(copies, runs, f"{variant.label}/{mode}", start) for mode in filter(variant.runs, modes)
        }
        out["drivers"][variant.label] = {
            "driver": variant.driver,
            "array_binding": variant.array_binding,
            "modes": figures,
        }
        if variant == Variant(DEFAULT_DRIVER):
            out |= figures
    out["target"] = TARGET
    return out


def table(out: dict[str, Any], chosen: list[Variant], modes: list[str]) -> str:
    """The report as a table: per variant and mode the median and range of the whole command's rate
    and of its ratio to the fastest raw, its peak memory, and how many runs' rows checked out."""
    lines = [
        f"{'variant / mode':32} {'copies/s median [range]':>26} {'ratio median [range]':>22} "
        f"{'peak MB':>8} {'rows ok':>8}"
    ]
    for variant in chosen:
        for mode in filter(variant.runs, modes):
            s = out["drivers"][variant.label]["modes"][mode]
            name = f"{variant.label} / {mode}"
            ok = f"{s['checks_ok']}/{s['runs']}"
            if "rows_per_s" not in s:
                lines.append(f"{name:32} {'failed: ' + s['errors'][0]}  rows ok {ok}")
                continue
            low, high = s["rows_per_s_range"]
            rate = f"{s['rows_per_s']:,} [{low:,}-{high:,}]"
            ratio = f"{s['ratio']:.2f} [{s['ratios'][0]:.2f}-{s['ratios'][-1]:.2f}]"
            lines.append(f"{name:32} {rate:>26} {ratio:>22} {s['peak_rss_mb']:>8} {ok:>8}")
            if "cpu" in s:
                c = s["cpu"]
                lines.append(
                    f"  CPU (s, medians): the command {c['command_cpu_s']:.2f} + the server {c['server_cpu_s']:.2f} "
                    f"meanwhile (the raw binary load's server {c['raw_binary_server_cpu_s']:.2f}); on {c['cores']} "
                    f"core(s) it cannot end before {c['floor_s']:.2f} s: the best whole ratio its CPU allows is "
                    f"{c['best_ratio']:.2f} [{c['best_ratio_range'][0]:.2f}-{c['best_ratio_range'][1]:.2f}]"
                    + (
                        f"; with its start (an idle publish) overlapping nothing, {c['floor_with_start_s']:.2f} s "
                        f"and {c['best_ratio_with_start']:.2f} [{c['best_ratio_with_start_range'][0]:.2f}-"
                        f"{c['best_ratio_with_start_range'][1]:.2f}]"
                        if "floor_with_start_s" in c
                        else ""
                    )
                )
    for fmt in ("text", "binary"):
        low, high = out["raw_range"][fmt]
        median = out["raw_rows_per_s"] if fmt == "text" else out["raw_binary_rows_per_s"]
        lines.append(f"{'raw COPY ' + fmt:32} {f'{median:,} [{low:,}-{high:,}]':>26}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

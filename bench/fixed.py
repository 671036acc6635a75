"""Benchmark: what each command costs when there is nothing to do, as whole commands, in one run.

A scheduler runs ``queuelake run`` (or each step) every few minutes, and most runs find nothing new:
the command's fixed part is then the whole of its cost. Set-up (not timed): an embedded PostgreSQL,
--rows order events in ``Sales``, one ``run`` that drains them, transforms them (the SQL transform
``messages_per_endpoint``) and publishes the result, so every table exists and every checkpoint is
current. Then each command is run as a new process, as a scheduler runs it, with nothing new
anywhere, and timed whole (interpreter, imports, config, database, lake, Spark if it starts one):

    status, drain, transform, publish, run, maintain, replay (a predicate matching nothing)

beside two floors: ``python -c "import queuelake.cli"`` and a bare local Spark session started and
stopped. The per-row costs are the other benches' (drain.py, transform.py, publish.py, replay.py).

    python bench/fixed.py [--rows 1000] [--repeat 3]

Prints one line per command (median seconds of --repeat runs) and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
from _commands import import_seconds, queuelake, spark_start
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.transport import db, installer, subscriptions
from queuelake.transport.embedded import start_embedded
from queuelake.transport.table_refs import bridge_ref, queue_ref

ROOT = Path(__file__).resolve().parents[1]
IDLE = {
    "status": ["status"],
    "drain": ["drain"],
    "transform": ["transform"],
    "publish": ["publish"],
    "run": ["run"],
    "maintain": ["maintain"],
    "replay": ["replay", "--where", "exception_type = 'No.Such.Exception'"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="queuelake-bench-fixed-"))
    try:
        return run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path) -> int:
    server = start_embedded(work / "pg")
    uri = server.get_uri("postgres")
    settings = {
        "transport": {"connection": uri},
        "lake": {"root": str(work / "lake"), "engine": "auto"},
        "drain": {"queues": ["Sales"], "batch_size": 10_000},
        "transforms": [
            {
                "name": "activity",
                "sql": str(ROOT / "sql/transforms/messages_per_endpoint.sql"),
                "output": "outbound_activity",
            }
        ],
        "publish": {"endpoint": "Lakehouse", "outputs": ["outbound_activity"]},
    }
    config_file = work / "queuelake.yaml"
    config_file.write_text(json.dumps(settings))
    cfg = from_dict(settings, env={})
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=["Monitoring"]))
        routing = bridge_ref("SubscriptionRouting", cfg.transport)
        subscriptions.subscribe(conn, routing, "Monitoring", "Monitoring", "Lakehouse.Events.EndpointActivity")
        conn.commit()
        traffic.seed(conn, queue_ref("Sales", cfg.transport), traffic.order_events(args.rows, seed=4))
    first = queuelake(["run", "-c", str(config_file)]).summary
    assert first["status"] == "ok" and first["drain"]["landed"] == args.rows, first

    seconds: dict[str, float] = {}
    for name, command in IDLE.items():
        runs = []
        for _ in range(args.repeat):
            ran = queuelake([*command, "-c", str(config_file)])
            assert ran.summary.get("status", "ok") == "ok", (name, ran.summary)
            runs.append(ran.seconds)
        seconds[name] = round(statistics.median(runs), 2)
        print(f"{name:>10}: {seconds[name]:6.2f} s with nothing to do", file=sys.stderr)
    imports, spark = import_seconds(), spark_start()
    print(f"floors: import queuelake.cli {imports:.2f} s; a bare Spark start {spark:.2f} s", file=sys.stderr)
    print(
        json.dumps(
            {
                "rows": args.rows,
                "repeat": args.repeat,
                "idle_seconds": seconds,
                "import_seconds": round(imports, 2),
                "bare_spark_start_seconds": round(spark, 2),
            }
        )
    )
    server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

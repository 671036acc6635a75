"""Benchmark: CPU per Delta commit of the drain's staged files as the journal's log grows.

A drain commits once per batch (``DeltaRsEngine.commit_staged``), and deltalake loads the table and
commits by replaying the JSON log from the last checkpoint: the cost of a commit grows with the
commits since that checkpoint. This runs --commits commits of one staged file each (--rows journal
rows) into two tables of the same schema in the same run:

- default: checkpoint every 100 commits (Delta's default, a table made outside queuelake);
- queuelake: the interval ``DeltaRsEngine.create_table`` sets (``CHECKPOINT_INTERVAL``).

It prints the mean process CPU per commit per --every commits, and the ratio queuelake/default over
the whole run (lower is better), and ends with one JSON line.

    python bench/commits.py [--commits 300] [--every 50] [--rows 100]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import resource
import shutil
import sys
import tempfile
from pathlib import Path

import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
import pyarrow as pa
from deltalake import DeltaTable
from queuelake.lake.arrow_types import lake_schema
from queuelake.lake.delta_rs.engine import CHECKPOINT_INTERVAL, DeltaRsEngine
from queuelake.pipeline.journal.build import build_batch
from queuelake.pipeline.journal.schema import MESSAGES_SCHEMA
from queuelake.transport.queues import RECEIVED_SCHEMA


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def journal_rows(n: int) -> pa.Table:
    now = dt.datetime.now(dt.timezone.utc)
    headers = (
        '{"NServiceBus.MessageId":"m-%d","NServiceBus.MessageIntent":"Send",'
        '"NServiceBus.TimeSent":"2026-11-01 00:00:00:000000 Z"}'
    )
    received = pa.table(
        {
            "id": [f"00000000-0000-0000-0000-{i:012d}" for i in range(n)],
            "seq": list(range(n)),
            "expired": [False] * n,
            "expires": [None] * n,
            "raw_expires": [None] * n,
            "headers": [headers % i for i in range(n)],
            "body": [b'{"OrderId": 1}'] * n,
        },
        schema=RECEIVED_SCHEMA,
    )
    table, _ = build_batch(received, "bench", "bench:1", now)
    return table


def run(engine: DeltaRsEngine, table: str, rows: pa.Table, commits: int, every: int) -> list[float]:
    means, spent = [], 0.0
    for version in range(1, commits + 1):
        staged = engine.stage(table, rows)
        t0 = cpu_seconds()
        engine.commit_staged(table, staged, "queuelake.bench/commits", version)
        spent += cpu_seconds() - t0
        if version % every == 0:
            means.append(spent / every)
            spent = 0.0
    return means


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--rows", type=int, default=100)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="queuelake-bench-commits-"))
    try:
        engine = DeltaRsEngine(str(work))
        rows = journal_rows(args.rows)
        DeltaTable.create(engine.path("default_interval"), lake_schema(MESSAGES_SCHEMA))  # no queuelake settings
        engine.create_table("queuelake_interval", MESSAGES_SCHEMA)
        result: dict[str, object] = {"commits": args.commits, "every": args.every, "interval": CHECKPOINT_INTERVAL}
        for name in ("default_interval", "queuelake_interval"):
            means = run(engine, name, rows, args.commits, args.every)
            result[name] = [round(m * 1000, 1) for m in means]
            print(f"{name}: mean CPU ms per commit, per {args.every} commits: {result[name]}", file=sys.stderr)
        default, ours = result["default_interval"], result["queuelake_interval"]
        result["ratio"] = round(sum(ours) / sum(default), 3)  # type: ignore[arg-type]
        print(f"queuelake/default CPU per commit: {result['ratio']:.3f}", file=sys.stderr)
        print(json.dumps(result))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

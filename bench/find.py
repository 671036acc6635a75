"""Benchmark: ``queuelake find`` against a full scan of the journal, as whole commands, before and after
``queuelake maintain``.

Set-up (timed apart): a journal of ``--rows`` rows built by ``_journal.py`` (realistic ids and
conversations, ~200 B bodies; see there) landed through the lake port in batches of ``--batch-size``
as the drain lands them, so the layout is the drain's: one file per batch.

Timed, each a new process (interpreter start and imports included), median of ``--repeat``:
- ``queuelake find --message-id`` of a message with a failed copy and a retry;
- ``queuelake find --conversation-id`` of the largest conversation (~300 messages, ~560 rows);
- ``queuelake find --message-id`` of an id the journal does not hold;
- full scans for the same message: the whole journal read as Arrow through the port and filtered
  (``pyarrow``), and unless ``--no-spark`` a Spark ``filter`` on the journal's DataFrame, collected
  (Spark's start included: that is what the question cost before).
Then ``queuelake maintain`` (timed), and the find commands again.

    python bench/find.py [--rows 1000000] [--batch-size 10000] [--repeat 3] [--no-spark] [--workdir DIR] [--keep]

Prints the figures and ends with one JSON line. Needs about 270 MB of disk per million rows.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _journal
import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
import numpy as np
from _commands import queuelake, run
from queuelake.config_sections import LakeConfig
from queuelake.lake.engines import open_lake

FULL_ARROW = """
import sys
import pyarrow.compute as pc
from queuelake.config_sections import LakeConfig
from queuelake.lake.engines import open_lake
lake = open_lake(LakeConfig(root=sys.argv[1], engine="delta-rs"))
rows = lake.read_arrow("messages")
found = rows.filter(pc.equal(rows.column("message_id"), sys.argv[2]))
print('{"found": %d}' % found.num_rows)
"""
FULL_SPARK = """
import sys
from pyspark.sql import functions as F
from queuelake.config_sections import LakeConfig, SparkConfig
from queuelake.lake.engines import open_lake
from queuelake.spark import get_spark
spark = get_spark(SparkConfig(master="local[2]"))
lake = open_lake(LakeConfig(root=sys.argv[1], engine="delta-rs"), spark)
found = lake.read("messages").filter(F.col("message_id") == sys.argv[2]).collect()
print('{"found": %d}' % len(found))
spark.stop()
"""


def targets(plan: _journal.Skeleton) -> dict[str, str]:
    """A message with a failed copy (and a retry where there is one), the largest conversation."""
    retried = plan.message[plan.kind == 3]
    message = int(retried[0]) if len(retried) else int(plan.message[plan.kind == 2][0])
    conversation = int(np.bincount(plan.conversation).argmax())
    return {
        "message_id": _journal.guids(np.array([message]), 1)[0].as_py(),
        "conversation_id": _journal.guids(np.array([conversation]), 2)[0].as_py(),
        "unknown": "80000000-0000-4000-8000-000000000000",  # inside every file's range: no file pruned by it
    }


def timed(argv_for: list[str], repeat: int, command: bool = True) -> dict:
    runs = [(queuelake(argv_for) if command else run(argv_for)) for _ in range(repeat)]
    seconds = [r.seconds for r in runs]
    median = sorted(runs, key=lambda r: r.seconds)[len(runs) // 2]
    return {"seconds": statistics.median(seconds), "all": [round(s, 3) for s in seconds], "summary": median.summary}


def finds(conf: Path, ids: dict[str, str], repeat: int) -> dict[str, dict]:
    out = {}
    for name, flag, value in (
        ("message", "--message-id", ids["message_id"]),
        ("conversation", "--conversation-id", ids["conversation_id"]),
        ("unknown", "--message-id", ids["unknown"]),
    ):
        result = timed(["find", "-c", str(conf), flag, value, "--json"], repeat)
        s = result["summary"]
        out[name] = {
            "seconds": round(result["seconds"], 3),
            "all": result["all"],
            "found": s["found"],
            "find_seconds": s["find_seconds"],
            "files": s["files"],
            "files_pruned": s["files_pruned"],
            "files_read": s["files_read"],
        }
        print(
            f"  find {name:<12} {result['seconds']:6.2f} s whole command ({s['find_seconds']:.2f} s lookup), "
            f"{s['found']} row(s); {s['files']} files, {s['files_pruned']} pruned, {s['files_read']} read whole",
            flush=True,
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark full scan")
    parser.add_argument("--workdir", default=None, help="where the lake goes (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the lake")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="queuelake-find-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        return bench(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def bench(args: argparse.Namespace, work: Path) -> int:
    root = work / "lake"
    conf = work / "find.yaml"
    conf.write_text(json.dumps({"lake": {"root": str(root), "engine": "delta-rs"}}))
    lake = open_lake(LakeConfig(root=str(root), engine="delta-rs"))
    started = time.perf_counter()
    for _ in _journal.build(lake, args.rows, args.batch_size):
        pass
    build_seconds = time.perf_counter() - started
    plan = _journal.build.last  # type: ignore[attr-defined]
    ids = targets(plan)
    files = lake.lookup("messages", "message_id", [ids["unknown"]]).files
    size = sum(p.stat().st_size for p in (root / "messages").glob("*.parquet"))
    built = f"{args.rows:,} rows, {files} files, {size / 1e6:.0f} MB, built in {build_seconds:.1f} s"
    print(f"journal: {built}", flush=True)

    print("before maintain:", flush=True)
    before = finds(conf, ids, args.repeat)
    full: dict[str, dict] = {}
    arrow = timed([sys.executable, "-c", FULL_ARROW, str(root), ids["message_id"]], args.repeat, command=False)
    full["arrow"] = {"seconds": round(arrow["seconds"], 3), "all": arrow["all"], "found": arrow["summary"]["found"]}
    print(f"  full scan, pyarrow read of the whole journal: {arrow['seconds']:6.2f} s", flush=True)
    if not args.no_spark:
        spark = timed([sys.executable, "-c", FULL_SPARK, str(root), ids["message_id"]], args.repeat, command=False)
        full["spark"] = {"seconds": round(spark["seconds"], 3), "all": spark["all"], "found": spark["summary"]["found"]}
        print(f"  full scan, Spark filter (its start included):  {spark['seconds']:6.2f} s", flush=True)

    maintained = queuelake(["maintain", "-c", str(conf)])
    figures = maintained.summary["tables"]["messages"]
    print(
        f"maintain: {maintained.seconds:.1f} s, files {figures['files_before']} -> {figures['files_after']}", flush=True
    )
    print("after maintain:", flush=True)
    after = finds(conf, ids, args.repeat)

    result = {
        "rows": args.rows,
        "batch_size": args.batch_size,
        "files": files,
        "journal_mb": round(size / 1e6, 1),
        "body_bytes": "~200",
        "build_seconds": round(build_seconds, 1),
        "targets": ids,
        "find_before_maintain": before,
        "full_scan": full,
        "maintain_seconds": round(maintained.seconds, 1),
        "maintain_files": [figures["files_before"], figures["files_after"]],
        "find_after_maintain": after,
        "speedup_vs_arrow_full_scan": round(full["arrow"]["seconds"] / before["message"]["seconds"], 1),
    }
    if "spark" in full:
        result["speedup_vs_spark_full_scan"] = round(full["spark"]["seconds"] / before["message"]["seconds"], 1)
    for name in ("message", "conversation"):
        assert before[name]["found"] == after[name]["found"] > 0, (name, before[name], after[name])
    assert full["arrow"]["found"] == before["message"]["found"]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

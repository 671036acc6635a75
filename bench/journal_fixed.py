"""Benchmark: a drain run's fixed journal costs on a journal of --files files, against deltalake's own.

Every drain run opens the journal and ends it, whatever it drains; on a journal of many files these
fixed costs were most of the gap between a drain into a fresh lake and one into a journal of 10,000
files (issue 32). queuelake reads a local log's head instead of loading the table (``lake/delta_rs/log_head.py``)
and writes a run's checkpoint from the last one and the appends since (``lake/delta_rs/checkpoint.py``). The
raw limit is deltalake doing the same work, in the same run, on the same journal:

- open: ``DeltaRsEngine`` + ``create_table``'s check + the staged schema + an app id's version
  (queuelake) against ``DeltaTable(path)`` + its schema + ``transaction_version`` (deltalake);
- end: after --commits group commits of one file each (not measured), ``finish_staged``, which
  checkpoints the newest version (queuelake), against ``create_checkpoint`` of the same version on a
  copy of the same log (deltalake). The bench stops if the checkpoint is not ``checkpoint.py``'s.

Each repeat works on a fresh copy of the journal's log (the data files stay in the source: neither step
reads them); the first repeat is a warm-up, not counted. Prints
the median CPU seconds (the whole process, every thread) and wall seconds of each, their ratio
queuelake/deltalake (lower is better), and ends with one JSON line.

    python bench/journal_fixed.py [--files 10000] [--commits 12] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
import pyarrow as pa
import pyarrow.parquet as pq
from _history import journal_with_files
from deltalake import DeltaTable
from queuelake.lake.delta_rs.checkpoint import checkpoint_name
from queuelake.lake.delta_rs.engine import DeltaRsEngine
from queuelake.pipeline.journal.schema import MESSAGES, MESSAGES_SCHEMA


def metered(work: Callable[[], object]) -> tuple[float, float]:
    """(CPU seconds of the process, wall seconds) of ``work()``."""
    cpu, wall = time.process_time(), time.perf_counter()
    work()
    return time.process_time() - cpu, time.perf_counter() - wall


def open_ours(root: Path) -> DeltaRsEngine:
    lake = DeltaRsEngine(str(root))
    lake.create_table(MESSAGES, MESSAGES_SCHEMA)
    lake.staged_schema(MESSAGES)
    lake.staged_version(MESSAGES, "queuelake.drain/bench/0")
    return lake


def open_deltalake(path: Path) -> None:
    table = DeltaTable(str(path))
    table.schema()
    table.transaction_version("queuelake.drain/bench/0")


def copy_log(table: Path, into: Path) -> Path:
    """A table of ``table``'s log alone: opening it and checkpointing it read the log, never the data
    files, so a repeat copies the log's files, not 10,000 data files (three copies of those took most of
    a 7.5-minute run)."""
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(table / "_delta_log", into / "_delta_log")
    return into


def one_repeat(source: Path, work: Path, commits: int, one: pa.Table) -> dict[str, dict[str, float]]:
    """Both opens, then ``commits`` group commits of ``one`` (a journal row), then both ends."""
    ours_root = work / "ours"
    copy_log(source / MESSAGES, ours_root / MESSAGES)
    figures: dict[str, dict[str, float]] = {}
    holder: list[DeltaRsEngine] = []
    figures["open_queuelake"] = dict(zip(("cpu_s", "wall_s"), metered(lambda: holder.append(open_ours(ours_root)))))
    figures["open_deltalake"] = dict(zip(("cpu_s", "wall_s"), metered(lambda: open_deltalake(source / MESSAGES))))
    lake = holder[0]
    for v in range(1, commits + 1):
        lake.commit_staged_group(MESSAGES, [(lake.stage(MESSAGES, one), f"queuelake.drain/bench/{v % 2}", v)])
    log_dir = ours_root / MESSAGES / "_delta_log"
    version = DeltaTable(str(ours_root / MESSAGES)).version()
    theirs = copy_log(ours_root / MESSAGES, work / "theirs" / MESSAGES)  # the same commits, before our checkpoint
    figures["end_queuelake"] = dict(zip(("cpu_s", "wall_s"), metered(lambda: lake.finish_staged(MESSAGES))))
    if not (log_dir / checkpoint_name(version)).exists():
        raise SystemExit(f"finish_staged wrote no checkpoint of version {version}: raise --commits")
    writer = pq.ParquetFile(log_dir / checkpoint_name(version)).metadata.created_by
    if not writer.startswith("parquet-cpp-arrow"):  # deltalake's parquet-rs: the fallback, not ours
        raise SystemExit(f"the checkpoint of version {version} is not checkpoint.py's (written by {writer})")
    figures["end_deltalake"] = dict(
        zip(("cpu_s", "wall_s"), metered(lambda: DeltaTable(str(theirs)).create_checkpoint()))
    )
    if not (theirs / "_delta_log" / checkpoint_name(version)).exists():
        raise SystemExit(f"deltalake wrote no checkpoint of version {version}")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--commits", type=int, default=12, help="group commits of the run before its end")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if args.repeat < 1 or args.files < 1:
        parser.error("--repeat and --files must be at least 1")
    work = Path(tempfile.mkdtemp(prefix="queuelake-bench-fixed-"))
    try:
        t0 = time.perf_counter()
        journal_with_files(str(work / "source"), args.files)
        print(f"a journal of {args.files:,} files built in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        # a row to commit, read once: a dataset of 10,000 files is slow to open, and not what is measured
        one = pq.read_table(next((work / "source" / MESSAGES).glob("*.parquet")))
        runs = []
        for i in range(args.repeat + 1):
            figures = one_repeat(work / "source", work, args.commits, one)
            if i:
                runs.append(figures)
                print(
                    f"[{i}/{args.repeat}] " + ", ".join(f"{k} {v['cpu_s']:.3f}s CPU" for k, v in figures.items()),
                    file=sys.stderr,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result: dict[str, Any] = {"files": args.files, "commits": args.commits, "repeat": args.repeat}
    for step in ("open", "end"):
        medians = {
            who: {k: round(statistics.median(r[f"{step}_{who}"][k] for r in runs), 4) for k in ("cpu_s", "wall_s")}
            for who in ("queuelake", "deltalake")
        }
        ratio = round(medians["queuelake"]["cpu_s"] / medians["deltalake"]["cpu_s"], 3)
        result[step] = {**medians, "cpu_ratio": ratio}
        print(
            f"{step}: queuelake {medians['queuelake']['cpu_s']:.3f}s CPU ({medians['queuelake']['wall_s']:.3f}s wall), "
            f"deltalake {medians['deltalake']['cpu_s']:.3f}s CPU ({medians['deltalake']['wall_s']:.3f}s wall); "
            f"ratio {ratio} (lower is better)"
        )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

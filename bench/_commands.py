"""Runs one command in a new process, as a scheduler would, and measures it whole: wall seconds from
the start of the process to its end (imports, connections, Spark's start when it needs one), its
JSON summary, and its peak memory.

Why one helper: each bench reports whole commands, fixed cost included, and the same measure must
mean the same thing in every bench.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}  # this tree's queuelake, as _tree gives the bench
QUEUELAKE = [sys.executable, "-m", "queuelake"]


@dataclass(frozen=True)
class Ran:
    seconds: float  # wall clock, the whole process
    summary: dict  # the last line of its stdout as JSON ({} when it printed none)
    peak_rss_mb: float  # the process's peak resident memory (its own, not a JVM it started)


def run(argv: list[str]) -> Ran:
    """Runs ``argv`` to its end; it must exit 0 (else the bench stops with its stderr's tail)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, stderr=err, env=ENV)
        _, status, usage = os.wait4(process.pid, 0)  # wait4: the rusage of this process alone
        seconds = time.perf_counter() - started
        process.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode(errors="replace")
    if code != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({code}):\n{stderr[-3000:]}")
    lines = stdout.strip().splitlines()
    return Ran(seconds, json.loads(lines[-1]) if lines else {}, usage.ru_maxrss / 1024)  # ru_maxrss: KiB


def queuelake(args: list[str]) -> Ran:
    """``queuelake <args>`` as a command."""
    return run([*QUEUELAKE, *args])


def spark_start() -> float:
    """Seconds for a bare local Spark session, started and stopped in a new process."""
    code = "from queuelake.config import SparkConfig; from queuelake.spark import get_spark; "
    return run([sys.executable, "-c", code + "get_spark(SparkConfig()).stop()"]).seconds


def import_seconds() -> float:
    """Seconds for a process that only imports queuelake's command line."""
    return run([sys.executable, "-c", "import queuelake.cli"]).seconds

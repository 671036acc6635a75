"""Runs one command in a new process, as a scheduler would, and measures it whole: wall seconds from
the start of the process to its end (imports, connections, Spark's start when it needs one), its
JSON summary, and its peak memory.

Why one helper: each bench reports whole commands, fixed cost included, and the same measure must
mean the same thing in every bench.

The peak memory is the process's own ``VmHWM``, read by the process as it exits. ``ru_maxrss`` (from
``wait4`` or ``getrusage``) would not do: Linux carries the high-water mark over ``exec``, so every
command would report at least the bench's own size when it was started.
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
# this tree's queuelake, as _tree gives the bench; with its compiled bytecode cached, as an installed
# package has it (pip compiles at install): an environment that sets PYTHONDONTWRITEBYTECODE (some
# containers and sandboxes do) made every command compile the modules changed since their cache was
# written, ~0.1 s of each command's start measured as if it were the command's
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPATH": str(ROOT / "lib")}
# ``python -m queuelake`` that writes its VmHWM (KiB) to $BENCH_PEAK_FILE as it exits
QUEUELAKE = [
    sys.executable,
    "-c",
    "import atexit, os, runpy, sys\n"
    "def peak():\n"
    "    with open('/proc/self/status') as f, open(os.environ['BENCH_PEAK_FILE'], 'w') as out:\n"
    "        out.write(next(line.split()[1] for line in f if line.startswith('VmHWM:')))\n"
    "atexit.register(peak)\n"
    "sys.argv[0] = 'queuelake'\n"
    "runpy.run_module('queuelake', run_name='__main__', alter_sys=True)\n",
]


@dataclass(frozen=True)
class Ran:
    seconds: float  # wall clock, the whole process
    summary: dict  # the last line of its stdout as JSON ({} when it printed none)
    peak_rss_mb: float | None  # a queuelake command's peak resident memory (its own, not a JVM it started)
    exit_code: int = 0


def run(argv: list[str], check: bool = True) -> Ran:
    """Runs ``argv`` to its end; it must exit 0 (else the bench stops with its stderr's tail), unless
    ``check`` is false: then its exit code is returned, for a bench that reports a failure as a finding."""
    with tempfile.TemporaryDirectory() as scratch:
        peak_file = Path(scratch) / "peak"
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, env={**ENV, "BENCH_PEAK_FILE": str(peak_file)})
        seconds = time.perf_counter() - started
        peak = int(peak_file.read_text()) / 1024 if peak_file.exists() else None
    if done.returncode != 0 and check:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    lines = done.stdout.strip().splitlines()
    return Ran(seconds, json.loads(lines[-1]) if lines else {}, peak, done.returncode)


def queuelake(args: list[str], check: bool = True) -> Ran:
    """``queuelake <args>`` as a command."""
    return run([*QUEUELAKE, *args], check)


def spark_start() -> float:
    """Seconds for a bare local Spark session, started and stopped in a new process."""
    code = "from queuelake.config_sections import SparkConfig; from queuelake.spark import get_spark; "
    return run([sys.executable, "-c", code + "get_spark(SparkConfig()).stop()"]).seconds


def import_seconds() -> float:
    """Seconds for a process that only imports queuelake's command line."""
    return run([sys.executable, "-c", "import queuelake.cli"]).seconds

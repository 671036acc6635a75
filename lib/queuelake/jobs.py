"""Shared body of the ``jobs/*.py`` spark-submit entry points and Databricks wheel tasks.

A job builds (or reuses) the Spark session first, so ``lake.engine: auto`` sees the Delta JVM
classes when spark-submit put them on the classpath, then runs the same code as the CLI.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence

from queuelake.stopping import end_now_if_calls_left_behind


def run_job(command: str, argv: Sequence[str] | None = None, end_now: bool = True) -> int:
    """Build the Spark session, then run the command; both under the CLI's handling of failures and
    SIGTERM, so every way out prints the JSON summary and exits non-zero. ``end_now``: a process of its
    own (spark-submit's job), which ends at once when a stop left a native call running
    (``end_now_if_calls_left_behind``); not in a platform's process (Databricks' wheel task)."""
    import argparse

    from queuelake import config as config_mod
    from queuelake.cli import main
    from queuelake.errors import QueuelakeError
    from queuelake.spark import get_spark
    from queuelake.spark_version import SparkVersionError

    def prepare(args: argparse.Namespace) -> None:
        if command == "demo":
            return
        try:
            get_spark(config_mod.load(args.config).spark)
        except SparkVersionError:
            raise  # refused before any queue is touched (a drain would run on the wrong Spark, then fail)
        except QueuelakeError:
            pass  # the command reports the config error in its JSON summary

    args = list(sys.argv[1:] if argv is None else argv)
    stop_with_parent()
    code = main([command, *args], prepare=prepare)
    if end_now:
        end_now_if_calls_left_behind(code)
    return code


PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent dies (Linux)


def stop_with_parent() -> None:
    """Under spark-submit (client mode) the job's Python is a child of spark-submit's JVM. Airflow's
    cancel of a SparkSubmitOperator task kills spark-submit alone (SIGKILL), and the job went on,
    orphaned: its drain ran on after the task had failed, beside the task's retry (found by a
    review). On Linux the kernel now sends this process ``stopping.PARENT_GONE`` when its parent
    dies, and the command stops at its next batch boundary, as on the scheduler's own first SIGTERM.
    Not SIGTERM itself: the kernel sends it once per thread of the dying JVM it passes through, and
    two SIGTERMs are "stop now" (a review: orphans stopped with no ``runs`` row, or hung). Elsewhere,
    or where prctl is refused, nothing changes."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    from queuelake import stopping

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(stopping.PARENT_GONE), 0, 0, 0) == 0:
            stopping.watch_parent()
    except (OSError, AttributeError):
        return


def _entry(command: str) -> int:
    """Console-script entry (Databricks python_wheel_task calls it and ignores return values):
    a failure must raise, or the platform reports the run as succeeded. The process is the platform's:
    it is not ended early (``run_job``'s ``end_now``)."""
    code = run_job(command, end_now=False)
    if code:
        raise SystemExit(code)
    return 0


def __getattr__(name: str) -> Callable[[], int]:
    """``queuelake.jobs.<job>``: the console script of each job command the registry declares
    (``setup.py`` points ``queuelake-<job>`` here)."""
    from queuelake.commands.registry import jobs

    for command in jobs():
        if command.function_name == name:
            return functools.partial(_entry, command.name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Shared body of the ``jobs/*.py`` spark-submit entry points and Databricks wheel tasks.

A job builds (or reuses) the Spark session first, so ``lake.engine: auto`` sees the Delta JVM
classes when spark-submit put them on the classpath, then runs the same code as the CLI.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def run_job(command: str, argv: Sequence[str] | None = None) -> int:
    from queuelake import config as config_mod
    from queuelake.cli import main
    from queuelake.config import DEFAULT_CONFIG
    from queuelake.spark import get_spark

    args = list(sys.argv[1:] if argv is None else argv)
    path = DEFAULT_CONFIG
    for i, arg in enumerate(args):
        if arg in ("-c", "--config") and i + 1 < len(args):
            path = args[i + 1]
    if command != "demo":
        get_spark(config_mod.load(path).spark)
    return main([command, *args])


def _entry(command: str) -> int:
    return run_job(command)


def drain() -> int:
    return _entry("drain")


def transform() -> int:
    return _entry("transform")


def publish() -> int:
    return _entry("publish")


def run() -> int:
    return _entry("run")


def maintain() -> int:
    return _entry("maintain")

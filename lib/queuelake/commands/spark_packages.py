"""``queuelake spark-packages``: the ``--packages`` value for spark-submit that matches the installed
pyspark: Delta for its Spark line (lib/queuelake/versions.py), and with ``--s3`` the hadoop-aws of the
Hadoop that pyspark ships (for ``s3a://``). Printed alone on the first line, so that

    spark-submit --packages "$(queuelake spark-packages | head -n 1)" jobs/run.py -c conf/job.yaml

works; the JSON summary follows as the last line, like every command's.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys
from typing import Any

from queuelake import versions
from queuelake.commands.command import Command
from queuelake.errors import ConfigError


def installed_pyspark() -> tuple[str, str]:
    """(version, folder) of the pyspark this Python imports."""
    try:
        import pyspark
    except ImportError as exc:
        raise ConfigError(f"pyspark is not installed (queuelake is built for {versions.PYSPARK_REQUIREMENT})") from exc
    return pyspark.__version__, os.path.dirname(pyspark.__file__)


def hadoop_version(pyspark_dir: str) -> str | None:
    """The Hadoop client version pyspark ships (pyspark/jars/hadoop-client-api-<v>.jar), if any."""
    for jar in sorted(glob.glob(os.path.join(pyspark_dir, "jars", "hadoop-client-api-*.jar"))):
        match = re.fullmatch(r"hadoop-client-api-(.+)\.jar", os.path.basename(jar))
        if match:
            return match.group(1)
    return None


def packages(pyspark_version: str, hadoop: str | None, s3: bool = False) -> list[str]:
    coordinates = [versions.delta_coordinate(pyspark_version)]
    if s3:
        if hadoop is None:
            raise ConfigError("--s3: cannot tell which Hadoop this pyspark ships (no jars/hadoop-client-api-*.jar)")
        coordinates.append(f"org.apache.hadoop:hadoop-aws:{hadoop}")
    return coordinates


def run(args: argparse.Namespace) -> dict[str, Any]:
    version, folder = installed_pyspark()
    hadoop = hadoop_version(folder)
    try:
        wanted = packages(version, hadoop, s3=getattr(args, "s3", False))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    value = ",".join(wanted)
    sys.stdout.write(value + "\n")
    sys.stdout.flush()
    from queuelake.spark import DELTA_CATALOG, DELTA_EXTENSION  # what turns the classes on: --conf each

    summary: dict[str, Any] = {
        "packages": value,
        "pyspark": version,
        "hadoop": hadoop,
        "conf": {"spark.sql.extensions": DELTA_EXTENSION, "spark.sql.catalog.spark_catalog": DELTA_CATALOG},
    }
    if versions.spark_line(version) != versions.SPARK_LINE:
        summary["warning"] = f"pyspark {version} is not the pinned {versions.PYSPARK_REQUIREMENT}"
    return summary


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--s3", action="store_true", help="add hadoop-aws, for s3a:// lake roots")


COMMAND = Command(
    name="spark-packages",
    help="print spark-submit --packages for this pyspark",
    run=run,
    arguments=_arguments,
    takes_config=False,
)

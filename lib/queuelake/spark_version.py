"""Refuse, at job start and in one line, a Spark that queuelake does not support.

Why: which ``spark-submit`` a scheduler runs is decided by its ``PATH``. Airflow's apache-spark provider
brings its own pyspark (4.3.0 seen), and with that environment first on ``PATH`` its Spark ran queuelake's
job: the drain landed its batches, then ``bodies`` failed with a bare ``AssertionError`` deep in the Python
data source. Spark lines differ in exactly such internals, and Delta's jars are built per line
(``versions.py``), so a job on another line must stop before it touches a queue, saying which Spark ran
it and which one queuelake wants, instead of failing halfway with a message about something else.

What is supported: the pinned pyspark requirement (``versions.PYSPARK_REQUIREMENT``), for the JVM's Spark
and for the pyspark the driver's Python imports (they differ when one environment's ``spark-submit`` runs
another's Python). On Databricks (``DATABRICKS_RUNTIME_VERSION`` set) the runtime brings its own Spark and
Delta, and the lines ``versions.DELTA_FOR_SPARK`` knows a Delta release for are supported (Databricks
Runtime 17.3 LTS is Spark 4.0, databricks.yml). ``QUEUELAKE_ALLOW_SPARK=<version>`` accepts that one exact
version anyway (a warning is logged): for a platform team trying a new Spark before queuelake pins it.
Standard library only (the comparison runs before Spark is asked anything).
"""

from __future__ import annotations

import logging
import os
import re
from typing import TYPE_CHECKING

from queuelake.errors import QueuelakeError
from queuelake.versions import DELTA_FOR_SPARK, PYSPARK_REQUIREMENT, spark_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ALLOW_ENV = "QUEUELAKE_ALLOW_SPARK"
DATABRICKS_ENV = "DATABRICKS_RUNTIME_VERSION"
_OPERATORS = ("==", ">=", "<=", "!=", ">", "<")


class SparkVersionError(QueuelakeError):
    """The Spark running the job is not one queuelake supports (``error_kind`` ``spark-version``)."""

    kind = "spark-version"


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: ``4.1.4`` -> (4, 1, 4), ``4.2.0.dev1`` -> (4, 2, 0),
    ``3.5.0-amzn-1`` -> (3, 5, 0). Pre-release and build tags are dropped: a ``4.2.0.dev1`` then counts
    as 4.2.0, outside ``<4.2`` as PEP 440 has it too."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", version)
    if not match:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(part) for part in match.group(1).split("."))


def _compare(left: tuple[int, ...], right: tuple[int, ...]) -> int:
    width = max(len(left), len(right))
    a, b = left + (0,) * (width - len(left)), right + (0,) * (width - len(right))
    return (a > b) - (a < b)


def specifiers(requirement: str = PYSPARK_REQUIREMENT) -> str:
    """``pyspark>=4.1.2,<4.2`` -> ``>=4.1.2,<4.2``: the version part of a pip requirement."""
    match = re.search(r"[<>=!]", requirement)
    return requirement[match.start() :].replace(" ", "") if match else ""


def satisfies(version: str, requirement: str = PYSPARK_REQUIREMENT) -> bool:
    """Whether ``version`` meets every clause of ``requirement`` (``>=4.1.2,<4.2``; a leading package
    name is ignored). Only the comparison operators pip's pins here use; ``==4.1.*`` is not handled."""
    have = release(version)
    for clause in filter(None, specifiers(requirement).split(",")):
        op = next(o for o in _OPERATORS if clause.startswith(o))
        order = _compare(have, release(clause[len(op) :]))
        ok = {
            "==": order == 0,
            "!=": order != 0,
            ">=": order >= 0,
            "<=": order <= 0,
            ">": order > 0,
            "<": order < 0,
        }[op]
        if not ok:
            return False
    return True


def supported_text(databricks: bool) -> str:
    """What queuelake supports, as the refusal names it."""
    text = f"Spark {specifiers()}"
    if databricks:
        text += " (or, on Databricks, the runtime's Spark " + " or ".join(f"{line}.x" for line in DELTA_FOR_SPARK) + ")"
    return text


def problem(
    jvm_version: str,
    pyspark_version: str,
    databricks: bool = False,
    allowed: str | None = None,
    requirement: str = PYSPARK_REQUIREMENT,
) -> str | None:
    """Why this Spark must not run the job (one line), or None when it may.

    ``jvm_version``: the Spark that runs (``spark.version``); ``pyspark_version``: the pyspark the driver's
    Python imported. Both must be supported, and on the same line (one environment's ``spark-submit`` with
    another's Python is how an unsupported Spark got in). ``allowed``: ``QUEUELAKE_ALLOW_SPARK``."""
    if (
        allowed
        and allowed.strip() in (jvm_version, pyspark_version)
        and spark_line(jvm_version) == spark_line(pyspark_version)
    ):
        return None

    def ok(version: str) -> bool:
        if databricks and spark_line(version) in DELTA_FOR_SPARK:
            return True
        return satisfies(version, requirement)

    if ok(jvm_version) and ok(pyspark_version) and spark_line(jvm_version) == spark_line(pyspark_version):
        return None
    running = f"Spark {jvm_version}" + (f" with pyspark {pyspark_version}" if pyspark_version != jvm_version else "")
    wanted = supported_text(databricks) if requirement == PYSPARK_REQUIREMENT else f"Spark {specifiers(requirement)}"
    fix = "run the spark-submit of queuelake's own environment (its bin first on PATH)"
    if spark_line(jvm_version) == spark_line(pyspark_version):
        fix += f", or set {ALLOW_ENV}={jvm_version} to try this one anyway"
    return f"{running} runs this job, but queuelake supports {wanted}: {fix}"


def check_spark(spark: SparkSession, requirement: str = PYSPARK_REQUIREMENT) -> None:
    """Raise ``SparkVersionError`` unless ``spark`` (and the pyspark this Python imports) is supported."""
    import pyspark

    allowed = os.environ.get(ALLOW_ENV)
    databricks = bool(os.environ.get(DATABRICKS_ENV))
    why = problem(spark.version, pyspark.__version__, databricks, allowed, requirement)
    if why:
        raise SparkVersionError(why)
    if allowed and not satisfies(spark.version, requirement) and not databricks:
        log.warning(
            "Spark %s is not one queuelake supports (%s); running anyway (%s)", spark.version, requirement, ALLOW_ENV
        )

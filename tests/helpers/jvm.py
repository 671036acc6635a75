"""The Delta Lake JVM jars the tests' Spark sessions use: those ``bash jvm/fetch-jars.sh`` put in ``jvm/jars``
(or QUEUELAKE_DELTA_JARS names), and the skip, or with QUEUELAKE_REQUIRE_DELTA_JVM=1 the failure, of a test
whose session lacks them. Nothing is downloaded here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
JARS_DIR = REPO / "jvm" / "jars"


def delta_jars() -> tuple[list[str], str]:
    """The local Delta jars for the installed pyspark, or ([], why there are none)."""
    import pyspark
    from queuelake.spark import JARS_ENV, local_jars
    from queuelake.versions import spark_line

    spec = os.environ.get(JARS_ENV) or str(JARS_DIR)
    jars = local_jars(spec)
    delta = [j for j in jars if os.path.basename(j).startswith("delta-spark_")]
    if not delta:
        return [], f"Delta JVM jars not on the classpath (none in {spec}; run: bash jvm/fetch-jars.sh)"
    line = spark_line(pyspark.__version__)
    if not all(os.path.basename(j).startswith(f"delta-spark_{line}_") for j in delta):
        names = ", ".join(os.path.basename(j) for j in delta)
        return [], f"Delta JVM jars not on the classpath ({names} in {spec} are not for pyspark {pyspark.__version__})"
    return jars, ""


def require_delta_jvm(spark) -> None:
    """Skip (or, with QUEUELAKE_REQUIRE_DELTA_JVM=1, fail) unless the session has the Delta JVM classes."""
    from queuelake.spark import has_delta_jvm

    if has_delta_jvm(spark):
        return
    reason = delta_jars()[1] or "Delta JVM jars not on the classpath"
    if os.environ.get("QUEUELAKE_REQUIRE_DELTA_JVM", "") not in ("", "0"):
        pytest.fail(f"QUEUELAKE_REQUIRE_DELTA_JVM is set: {reason}")
    pytest.skip(reason)

"""The Spark session: reuse the one spark-submit or Databricks made, else build a local one.

We never download jars at run time (no ``configure_spark_with_delta_pip``): on machines without the
Delta JVM package the lake falls back to the Rust engine instead.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from queuelake.config import SparkConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # pandas 3 + pyspark 4.1: the silent slow path can run out of memory; fail fast instead.
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
}


def get_spark(config: SparkConfig | None = None) -> SparkSession:
    """The active session if there is one, else one built from ``spark.master`` with the UI off."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    config = config or SparkConfig()
    os.environ.setdefault("PYSPARK_PYTHON", _python())
    builder = SparkSession.builder.master(config.master).appName(config.app_name)
    for key, value in {**_DEFAULT_CONF, **config.conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _python() -> str:
    import sys

    return sys.executable


def has_delta_jvm(spark: SparkSession) -> bool:
    """True when the Delta Lake JVM classes are on this session's classpath."""
    try:
        spark._jvm.java.lang.Class.forName("io.delta.sql.DeltaSparkSessionExtension")  # type: ignore[union-attr]
        return True
    except Exception:
        return False

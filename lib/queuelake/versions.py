"""The Spark line queuelake is built and tested on, and the Delta release that goes with it.

The one place for these versions: ``setup.py`` reads the pip requirements from here (it runs this
file without importing the package), ``jvm/pom.xml`` must name the same Delta version and Spark line
(a test checks it), and ``queuelake spark-packages`` derives the ``--packages`` coordinates from here
and from the pyspark that is installed.

Why these: from Delta 4.1 the JVM artifact for Spark 4.1 is ``io.delta:delta-spark_4.1_2.13`` (the
plain ``delta-spark_2.13`` follows Delta's default Spark, 4.2 from Delta 4.4); Delta 4.1.0 and 4.2.0
fail on Spark 4.1.2+, fixed in 4.3.0. 4.4.0 is the newest Delta that Maven Central serves for Spark 4.1
(PyPI also has a 4.4.1 of the Python package, with no matching jar), so the pip pin is the same 4.4.0.
Standard library only: this file must run before anything is installed.
"""

from __future__ import annotations

SPARK_LINE = "4.1"  # pyspark major.minor
SCALA_BINARY = "2.13"
DELTA_VERSION = "4.4.0"  # io.delta:delta-spark_<SPARK_LINE>_<SCALA_BINARY> on Maven Central, and pip's delta-spark

# 4.1.2 and later: the Spark 4.1 patch releases Delta 4.3+ is known to work with (tested on 4.1.4).
PYSPARK_REQUIREMENT = "pyspark>=4.1.2,<4.2"
DELTA_SPARK_REQUIREMENT = f"delta-spark=={DELTA_VERSION}"

# Delta releases for the other Spark lines a cluster may bring (Databricks 17.3 LTS: Spark 4.0), so
# that ``spark-packages`` prints something that works there too. Newest known good per line.
DELTA_FOR_SPARK: dict[str, str] = {"4.0": "4.0.1", SPARK_LINE: DELTA_VERSION}

# The Hadoop inside the pinned pyspark (pyspark/jars/hadoop-client-api-<v>.jar): hadoop-aws must be this
# exact version. jvm/pom.xml's hadoop.version (``fetch-jars.sh --s3``) names it; tests/lake/test_s3.py
# checks both against the installed pyspark. ``spark-packages --s3`` reads the installed jar instead.
HADOOP_VERSION = "3.4.2"


def spark_line(pyspark_version: str) -> str:
    """``4.1.4`` -> ``4.1`` (``4.1.0.dev1`` too)."""
    major, minor = pyspark_version.split(".")[:2]
    return f"{major}.{minor}"


def delta_coordinate(pyspark_version: str | None = None) -> str:
    """The Maven coordinate of Delta for a pyspark version (default: the pinned line)."""
    line = spark_line(pyspark_version) if pyspark_version else SPARK_LINE
    if line not in DELTA_FOR_SPARK:
        known = ", ".join(sorted(DELTA_FOR_SPARK))
        raise ValueError(f"no Delta release known for Spark {line} (known: {known}); queuelake pins {SPARK_LINE}")
    delta = DELTA_FOR_SPARK[line]
    # Delta 4.0.x has one artifact, for Spark 4.0; from Delta 4.1 the artifact names its Spark line.
    artifact = f"delta-spark_{SCALA_BINARY}" if line == "4.0" else f"delta-spark_{line}_{SCALA_BINARY}"
    return f"io.delta:{artifact}:{delta}"

"""Under spark-submit the driver's JVM runs before the job reads its config: ``spark.conf``'s
``spark.driver.memory`` (what the docs advise for a first backlog) did nothing there, and nothing said
so (a review, under Airflow). The job now warns, naming spark-submit's flag. The real spark-submit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from queuelake.spark import launch_settings_ignored

from tests.helpers.cli import cli_env

JOB = """
from queuelake.config_sections import SparkConfig
from queuelake.report import setup_logging
from queuelake.spark import get_spark
import logging
setup_logging(logging.INFO)
spark = get_spark(SparkConfig(conf={"spark.driver.memory": "3g", "spark.sql.shuffle.partitions": "3"}))
print("SHUFFLE", spark.conf.get("spark.sql.shuffle.partitions"))
spark.stop()
"""


def test_a_launch_setting_is_named_with_the_flag_that_sets_it() -> None:
    (line,) = launch_settings_ignored({"spark.driver.memory": "3g", "spark.executor.memory": "2g"}, {})
    assert line.startswith("spark.conf spark.driver.memory: '3g' has no effect under spark-submit")
    assert "--driver-memory" in line and "Spark's default" in line
    assert launch_settings_ignored({"spark.driver.memory": "3g"}, {"spark.driver.memory": "3g"}) == []
    assert launch_settings_ignored({"spark.driver.memory": "3G"}, {"spark.driver.memory": "3g"}) == []


def test_spark_submit_warns_of_a_driver_memory_it_cannot_take(tmp_path: Path) -> None:
    out = _spark_submit(tmp_path, JOB, "--master", "local[1]")
    assert "SHUFFLE 3" in out  # the settings a running JVM can take are taken
    assert "spark.conf spark.driver.memory: '3g' has no effect under spark-submit" in out, out[-3000:]
    assert "--driver-memory" in out
    assert os.environ.get("PYSPARK_GATEWAY_PORT") is None  # this process is not under spark-submit


def test_delta_parallelism_is_sized_on_a_cluster_too() -> None:
    """Delta's defaults (50 log partitions, VACUUM listing in stages of 10,000 tasks) were sized for local
    masters only: on a standalone master an erase of 20 rows ran 30,458 tasks (a review). A cluster takes
    its cores as the config says them, else ``CLUSTER_DELTA_PARALLELISM``; a setting given wins."""
    from queuelake import spark as spark_module

    def sized(conf: dict[str, str], master: str) -> tuple[str | None, str | None]:
        merged = spark_module.session_conf({"spark.jars": "/j/delta-spark_2.13-4.0.0.jar", **conf}, master=master)
        keys = ("spark.databricks.delta.snapshotPartitions", "spark.sql.sources.parallelPartitionDiscovery.parallelism")
        return merged.get(keys[0]), merged.get(keys[1])

    assert sized({}, "local[2]") == ("2", "2")
    default = str(spark_module.CLUSTER_DELTA_PARALLELISM)
    assert sized({}, "spark://master:7077") == (default, default)
    assert sized({"spark.cores.max": "6"}, "spark://master:7077") == ("6", "6")
    assert sized({"spark.databricks.delta.snapshotPartitions": "40"}, "yarn")[0] == "40"
    assert sized({"spark.cores.max": "512"}, "yarn") == ("50", "50")  # never past Delta's own default
    assert sized({"spark.cores.max": "\u00b2"}, "yarn") == (default, default)  # a digit int() refuses


DELTA_JOB = """
import os
from queuelake.config_sections import SparkConfig
from queuelake.spark import get_spark
os.environ.pop("QUEUELAKE_DELTA_JARS", None)  # Delta only as spark-submit was given it
spark = get_spark(SparkConfig())
for key in ("spark.sql.extensions", "spark.databricks.delta.snapshotPartitions"):
    print("SETTING", key, spark.conf.get(key, None))
spark.stop()
"""


def test_delta_given_to_spark_submit_is_turned_on_and_sized(tmp_path: Path) -> None:
    """Delta given to spark-submit (``--packages``, here ``--jars``: no download in a test) without its
    two settings: ``auto`` chose delta-spark, the drain ran, and ``bodies`` failed at its first table;
    with them, Delta's stages kept its 50 default tasks on a 4-core master (a review: the sizing looked
    at the config's ``spark.jars`` only). The job now turns Delta on and sizes it as for its own jars."""
    import pytest

    from tests.helpers.jvm import delta_jars

    jars, why = delta_jars()
    if not jars:
        pytest.skip(why)
    out = _spark_submit(tmp_path, DELTA_JOB, "--master", "local[3]", "--jars", ",".join(jars))
    assert "SETTING spark.sql.extensions io.delta.sql.DeltaSparkSessionExtension" in out, out[-3000:]
    assert "SETTING spark.databricks.delta.snapshotPartitions 3" in out, out[-3000:]


def _spark_submit(tmp_path: Path, job_text: str, *options: str) -> str:
    """The installed pyspark's real ``spark-submit`` running ``job_text`` with ``options``: its output,
    once it exited 0."""
    import pyspark

    job = tmp_path / "job.py"
    job.write_text(job_text, encoding="utf-8")
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = cli_env()
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    proc = subprocess.run(
        [str(spark_submit), *options, str(job)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    return out

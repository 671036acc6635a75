"""A local Spark session queuelake builds keeps its warehouse out of the current folder. Spark's default,
``./spark-warehouse``, is made the first time a statement goes through the session catalog: ``queuelake
demo --engine delta-spark`` left one in the user's folder (a review; ``test_demo_engines`` checks the demo).
The session's warehouse is now a folder of the process's own under the temporary folder, removed when the
process ends; a warehouse the config names is kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.cli import cli_env

JOB = """
import sys
from queuelake.config_sections import SparkConfig
from queuelake.spark import get_spark
conf = {"spark.sql.warehouse.dir": sys.argv[1]} if len(sys.argv) > 1 else {}
spark = get_spark(SparkConfig(master="local[1]", conf=conf))
spark.sql("CREATE SCHEMA IF NOT EXISTS queuelake_warehouse_check")  # through the session catalog
print("WAREHOUSE", spark.conf.get("spark.sql.warehouse.dir"))
print("SCHEMA", spark.sql("DESCRIBE SCHEMA queuelake_warehouse_check").where("info_name = 'Location'").first()[1])
spark.stop()
"""


def _run(cwd: Path, *args: str) -> dict[str, str]:
    proc = subprocess.run(
        [sys.executable, "-c", JOB, *args], cwd=cwd, env=cli_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("WAREHOUSE", "SCHEMA")))


def test_a_local_session_leaves_no_warehouse_in_the_current_folder(tmp_path: Path) -> None:
    cwd = tmp_path / "user"
    cwd.mkdir()
    said = _run(cwd)
    assert list(cwd.iterdir()) == [], list(cwd.iterdir())  # no spark-warehouse/ (nor anything else)
    warehouse = Path(said["WAREHOUSE"].removeprefix("file:"))
    assert warehouse.name.startswith("queuelake-spark-warehouse-") and not warehouse.is_relative_to(cwd)
    assert said["SCHEMA"].removeprefix("file:").startswith(str(warehouse))  # the schema went there
    assert not warehouse.exists()  # and went with the process

    # a warehouse the config names is the session's
    named = tmp_path / "named-warehouse"
    said = _run(cwd, str(named))
    assert Path(said["WAREHOUSE"].removeprefix("file:")) == named and (named / "queuelake_warehouse_check.db").is_dir()
    assert list(cwd.iterdir()) == []

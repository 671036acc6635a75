"""A Spark JVM that runs out of memory is said to have, in one line: the real JVM, in a process of its
own (it exits, 52). The error read ``ConnectionRefusedError: [Errno 111] Connection refused`` or
``Exception thrown in awaitResult`` (a review's first backlog on the default driver)."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.cli import cli_env

SCRIPT = """
from pyspark.sql import SparkSession
from queuelake.errors import describe
spark = (SparkSession.builder.master("local[1]").config("spark.driver.memory", "512m")
         .config("spark.ui.enabled", "false").getOrCreate())
try:
    # one task builds a 700 MB string (not foldable: on the executor): more than the whole heap
    spark.range(0, 1, 1, 1).selectExpr("length(repeat('x', 700000000 + CAST(id AS INT))) AS n").collect()
    print("NO ERROR")
except BaseException as exc:
    print("FIRST:", describe(exc))
    import time
    time.sleep(3)  # the JVM's exit after the error
    try:
        spark.range(1).count()  # the next call, as a command's next step makes
    except BaseException as later:
        print("LATER:", describe(later))
"""


def test_an_out_of_memory_jvm_is_said_to_have_run_out_of_memory() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=cli_env(), capture_output=True, text=True, timeout=300)
    said = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if line.startswith(("FIRST:", "LATER:")))
    assert "FIRST" in said, (proc.stdout, proc.stderr[-3000:])
    # the job's own error varies with timing (the JVM's line, ours once it has exited, or Spark's "cancelled
    # because SparkContext was shut down" when the context stopped first); the next call's is what is said
    # the next call finds the JVM gone (it exits 52 after an out-of-memory in a task)
    assert said.get("LATER", "").startswith("the Spark JVM ran out of memory (java.lang.OutOfMemoryError)"), said

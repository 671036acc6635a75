"""The tests' JVMs start as ``tests/helpers/jvm_flags.py`` says: Spark's launcher maps the class archive, and each
worker's long-lived session compiles fully (C1 is for the short-lived JVMs only)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import jvm_flags


@pytest.fixture(autouse=True)
def _flags_in_use() -> None:
    """Asked when the test runs, after conftest's ``_fast_tier_guard`` has set the flags (the first test that
    may start a JVM does): at collection they are not set yet. ``jvm_flags.use`` leaves a SPARK_SUBMIT_OPTS
    of the user's own as it is, and sets nothing then."""
    if "QUEUELAKE_TEST_JVM_LONG_LIVED" not in os.environ:
        pytest.skip("QUEUELAKE_TEST_JVM_FLAGS=0, or SPARK_SUBMIT_OPTS set")


def _spark_submit_version(options: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``spark-submit --version``: the launcher builds the driver's class path and options as for a job."""
    import pyspark

    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = {**os.environ, "SPARK_SUBMIT_OPTS": options}
    return subprocess.run([str(spark_submit), *args, "--version"], env=env, capture_output=True, text=True, timeout=120)


def test_spark_drivers_map_the_class_archive() -> None:
    options = os.environ.get("SPARK_SUBMIT_OPTS", "")
    archive = jvm_flags.archive_path()
    assert archive is not None and archive.exists(), "the first pytest run makes the archive"
    assert f"-XX:SharedArchiveFile={archive}" in options and jvm_flags.C1_ONLY in options
    # -Xshare:on: a JVM that cannot use the archive (another JDK's, another class path) exits instead
    mapped = _spark_submit_version(options + " -Xshare:on")
    assert mapped.returncode == 0, mapped.stdout + mapped.stderr
    assert "version" in mapped.stdout + mapped.stderr
    # the check above can fail: a class path ahead of Spark's (as the S3 tests' jars) does not match it
    refused = _spark_submit_version(options + " -Xshare:on", "--driver-class-path", str(jvm_flags.REPO / "jvm"))
    assert refused.returncode != 0 and "mismatch" in refused.stdout + refused.stderr, refused.stdout + refused.stderr


def test_the_session_fixture_compiles_fully(spark) -> None:
    arguments = list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert any(a.startswith("-XX:SharedArchiveFile=") for a in arguments), arguments
    assert jvm_flags.C1_ONLY not in arguments, arguments

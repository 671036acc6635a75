"""How the tests' JVMs start: from a class-data archive of Spark's classes, and, for the short-lived ones,
compiling with C1 only.

Why: the suite is CPU-bound on two cores, and dozens of its tests start Spark (CLI commands in subprocesses,
kill loops, the standalone cluster and its executors). On the test machine, a local session starting,
running a tiny query and stopping cost 33-35 s of machine CPU (20-23 s wall) by default; 21 s (12 s wall)
with the archive; 13 s (10.4 s wall) with the archive and C1 only.

- The archive: the JDK's dynamic class-data sharing (``-XX:ArchiveClassesAtExit``), the classes one session
  loaded, parsed and verified once, mapped by every later JVM. Made once per JDK, pyspark and jar set (73-75 s
  on the test machine), in ``jvm/class-archive/``, by the first pytest run; a JVM whose class path differs (a test
  that puts jars ahead of Spark's) silently starts without it (``-Xlog`` of cds off: its warning would go
  to the command's stdout, which the tests read).
- C1 only (``-XX:TieredStopAtLevel=1``): cheaper to start, slower to run. Not for the JVMs that live
  long and work hard: each xdist worker's in-process session (the ``spark`` fixture) and the notebooks'
  runner take ``long_lived`` options (the archive alone). Round 31 put every JVM on C1, and those
  in-process tests got slower than the start-ups got faster.

Through Spark's launcher variables (``SPARK_SUBMIT_OPTS`` for drivers, ``SPARK_DAEMON_JAVA_OPTS`` for the
standalone master and workers) and ``spark.executor.extraJavaOptions`` for executors, not
``JDK_JAVA_OPTIONS``, whose "Picked up" note on stderr the tests would read as noise. Test settings only:
a user's job is long-lived, and its machine's JDK is not the one the archive was made with.
QUEUELAKE_TEST_JVM_FLAGS=0 turns all of it off; variables a user already set are left as they are.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARCHIVE_DIR = REPO / "jvm" / "class-archive"
C1_ONLY = "-XX:TieredStopAtLevel=1"
QUIET_CDS = "-Xlog:cds=off,cds+dynamic=off"  # no "cds*": the launcher's words should hold no glob

# One local session as the tests use it: SQL, a shuffle, Parquet written and read, Arrow to Python.
_WORKLOAD = textwrap.dedent(
    """
    import sys, tempfile
    from queuelake.config_sections import SparkConfig
    from queuelake.spark import delta_conf, get_spark
    jars = sys.argv[1].split(",") if sys.argv[1] else []
    spark = get_spark(SparkConfig(master="local[2]", app_name="class-archive", conf=delta_conf(jars) if jars else {}))
    df = spark.sql("select id, id % 7 as k, cast(id as string) as s from range(5000)")
    df.groupBy("k").count().join(df, "k").orderBy("id").limit(10).toPandas()
    with tempfile.TemporaryDirectory() as folder:
        df.write.parquet(folder + "/p")
        spark.read.parquet(folder + "/p").where("k = 3").collect()
        if jars:
            df.write.format("delta").save(folder + "/d")
            spark.read.format("delta").load(folder + "/d").where("k = 3").collect()
    spark.stop()
    """
)


def enabled() -> bool:
    return os.environ.get("QUEUELAKE_TEST_JVM_FLAGS", "1") != "0"


def _java() -> str | None:
    """The java Spark's launcher runs (``spark-class``: $JAVA_HOME/bin/java, else the one on PATH)."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(found) if found and os.path.exists(found) else None


def archive_path() -> Path | None:
    """The archive for this JDK, pyspark and its jars (made or not); None without a java."""
    import pyspark

    java = _java()
    if java is None:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    key = "\n".join([java, str(os.stat(java).st_mtime_ns), pyspark.__version__, *sorted(os.listdir(jars))])
    return ARCHIVE_DIR / f"spark-{pyspark.__version__}-{hashlib.sha1(key.encode()).hexdigest()[:12]}.jsa"


def ensure_archive(delta_jars: list[str], say: Callable[[str], None] = print) -> Path | None:
    """The archive, made first if missing (once: other processes wait on a lock); None if it cannot be made,
    and the tests then run without it."""
    path = archive_path()
    if path is None:
        return None
    if path.exists():
        return path
    ARCHIVE_DIR.mkdir(parents=True, exist_ok=True)
    with open(ARCHIVE_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return path
        for stale in ARCHIVE_DIR.glob("*.jsa*"):  # another JDK's or pyspark's: never used again
            stale.unlink(missing_ok=True)
        partial = path.with_suffix(f".jsa.{os.getpid()}")
        say(f"tests: making the JVM class archive {path.relative_to(REPO)} (once per JDK and pyspark) ...")
        env = {**os.environ, "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={partial} {QUIET_CDS}"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "lib"), env.get("PYTHONPATH")]))
        proc = subprocess.run(
            [sys.executable, "-c", _WORKLOAD, ",".join(delta_jars)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ARCHIVE_DIR,
        )
        if proc.returncode != 0 or not partial.exists():
            partial.unlink(missing_ok=True)
            say(f"tests: no JVM class archive (exit {proc.returncode}): {proc.stderr[-500:]}")
            return None
        os.replace(partial, path)
    return path


def _options(archive: Path | None, c1: bool) -> str:
    flags = [f"-XX:SharedArchiveFile={archive}", QUIET_CDS] if archive else []
    return " ".join([C1_ONLY, *flags] if c1 else flags)


def use(delta_jars: list[str], say: Callable[[str], None] = print) -> None:
    """Sets the launcher variables for every JVM this process and its children start (short-lived: C1)."""
    if not enabled() or "SPARK_SUBMIT_OPTS" in os.environ:  # a user's own, or set by the xdist controller
        return
    archive = ensure_archive(delta_jars, say)
    os.environ["SPARK_SUBMIT_OPTS"] = _options(archive, c1=True)
    os.environ["QUEUELAKE_TEST_JVM_LONG_LIVED"] = _options(archive, c1=False)
    os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", _options(archive, c1=True))


def executor_options() -> str:
    """``spark.executor.extraJavaOptions`` for the standalone cluster's executors: as the drivers'."""
    return os.environ["SPARK_SUBMIT_OPTS"] if "QUEUELAKE_TEST_JVM_LONG_LIVED" in os.environ else ""


def long_lived_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a subprocess whose JVM lives long and works hard (the archive, no C1)."""
    if "QUEUELAKE_TEST_JVM_LONG_LIVED" in env:
        return {**env, "SPARK_SUBMIT_OPTS": env["QUEUELAKE_TEST_JVM_LONG_LIVED"]}
    return env


@contextlib.contextmanager
def long_lived() -> Iterator[None]:
    """Starts this process's own session (the ``spark`` fixture) as a long-lived JVM."""
    saved = os.environ.get("SPARK_SUBMIT_OPTS")
    if "QUEUELAKE_TEST_JVM_LONG_LIVED" in os.environ:
        os.environ["SPARK_SUBMIT_OPTS"] = os.environ["QUEUELAKE_TEST_JVM_LONG_LIVED"]
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("SPARK_SUBMIT_OPTS", None)
        else:
            os.environ["SPARK_SUBMIT_OPTS"] = saved

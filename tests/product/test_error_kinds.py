"""Every ``error_kind`` a command can report is in commands.md's table: a scheduler branches on it, and
two kinds (``pipeline``, ``spark-version``) were missing there (a review)."""

from __future__ import annotations

from pathlib import Path

from queuelake import errors, spark_version

COMMANDS_MD = Path(__file__).resolve().parents[2] / "docs" / "commands.md"


def _kinds(cls: type) -> set[str]:
    found = {cls.kind} if "kind" in vars(cls) else set()
    for sub in cls.__subclasses__():
        found |= _kinds(sub)
    return found


def test_every_error_kind_is_in_the_commands_table() -> None:
    assert spark_version.SparkVersionError.kind == "spark-version"  # imported: its class is a subclass
    kinds = _kinds(errors.QueuelakeError) - {"error"}  # the base's, never raised as such
    table = COMMANDS_MD.read_text(encoding="utf-8")
    missing = sorted(k for k in kinds | {"usage", "missing-dependency", "unexpected"} if f"`{k}`" not in table)
    assert missing == [], f"docs/commands.md's error_kind table lacks {missing}"


def test_a_database_drivers_own_error_is_the_queue_databases() -> None:
    """A lost connection raised by the driver itself, past our wrapping (a drain process's), said
    ``unexpected`` where the same loss in a thread said ``transport`` (a review)."""
    import psycopg

    assert errors.error_kind(psycopg.OperationalError("the connection is closed")) == "transport"
    assert errors.error_kind(ValueError("a bug")) == "unexpected"
    assert errors.error_kind(errors.LakeError("x")) == "lake"
    from deltalake.exceptions import DeltaError

    assert errors.error_kind(DeltaError("Failed to parse parquet: No space left on device")) == "lake"
    s3 = OSError("AWS Error UNKNOWN (HTTP status 503) during HeadObject operation: No response body.")
    assert errors.error_kind(s3) == "lake"
    # deltalake's own builtin OSError for an object store's failure (it was "unexpected": a review)
    kernel = OSError("Kernel error -> Generic S3 error\n \x1b[31m↳\x1b[0m Error performing GET http://s3/lake")
    assert errors.error_kind(kernel) == "lake"
    assert errors.error_kind(OSError("[Errno 2] No such file or directory: 'conf.yaml'")) == "unexpected"


def test_a_full_or_read_only_disk_is_the_lakes() -> None:
    """A lake on a full disk failed a drain with ``unexpected`` (a review, a small tmpfs): pyarrow says so in
    its text only, Python with an errno."""
    import errno

    full = OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")
    assert errors.error_kind(full) == "lake"
    assert errors.error_kind(OSError(errno.EROFS, "Read-only file system", "/lake/messages")) == "lake"
    assert errors.error_kind(OSError(errno.EDQUOT, "quota")) == "lake"
    assert errors.error_kind(OSError(errno.ENOENT, "No such file or directory")) == "unexpected"


def _answering(spark_error: type[BaseException], text: str) -> BaseException:
    """Spark's error of that class whose text is ``text``: theirs ask the JVM for it, here there is none."""
    answering = type(spark_error.__name__, (spark_error,), {"__str__": lambda self: text})
    return answering.__new__(answering)


def test_a_spark_jobs_failure_has_the_kind_of_its_tasks_error() -> None:
    """A publish task whose queue database was out of reach failed its Spark job; the job's error (a
    ``Py4JJavaError`` quoting the task's Python traceback) said ``unexpected`` (a review)."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import PythonException

    task_trace = (
        "org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times\n"
        'org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n  File "x.py", line 1\n'
        "queuelake.errors.TransportError: cannot connect to the queue database: connection refused\n"
    )
    assert errors.error_kind(_answering(Py4JJavaError, task_trace)) == "transport"
    # a chained traceback: the error raised is printed last, after the one it replaced (it said ``lake``)
    chained = task_trace.replace(
        "queuelake.errors.TransportError",
        "queuelake.errors.LakeError: lake table messages: read failed\n\nDuring handling of the above exception,"
        ' another exception occurred:\n\nTraceback (most recent call last):\n  File "x.py", line 2\n'
        "queuelake.errors.TransportError",
    )
    assert errors.error_kind(_answering(Py4JJavaError, chained)) == "transport"
    refused = _answering(
        PythonException, "An exception was thrown from the Python worker.\npsycopg.OperationalError: gone"
    )
    assert errors.error_kind(refused) == "transport"
    reset = (
        "java.net.SocketException: Connection reset (an error occurred while calling z:io.delta.tables.DeltaTable...)"
    )
    assert errors.error_kind(_answering(Py4JJavaError, reset)) == "lake"
    bug = _answering(PythonException, "ZeroDivisionError: division by zero")
    assert errors.error_kind(bug) == "unexpected"
    lake = _answering(PythonException, "queuelake.errors.LakeError: lake table messages: no space left")
    assert errors.error_kind(lake) == "lake"
    # a name of ours inside another error's message is the message's (it said ``config``: a review)
    named = _answering(PythonException, "Traceback:\nKeyError: \"column 'ConfigError' not found\"")
    assert errors.error_kind(named) == "unexpected"
    # a Python worker killed under its task (out of memory): the JVM read an EOF, not the lake (it said ``lake``)
    died = (
        "org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 0.0 failed 1 times: "
        "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)\n"
        "Caused by: java.io.EOFException\n\tat java.base/java.io.DataInputStream.readInt(DataInputStream.java:386)"
    )
    assert errors.error_kind(_answering(Py4JJavaError, died)) == "unexpected"
    # the object store's error in the data source's commit, in a Python worker (it said ``unexpected``)
    from pyspark.errors.exceptions.captured import AnalysisException

    commit = (
        "[PYTHON_DATA_SOURCE_ERROR] Failed to commit or abort Python data source write: Traceback (most recent "
        "call last):\nOSError: Generic S3 error: Error after 0 retries: Connection reset by peer (os error 104)"
    )
    assert errors.error_kind(_answering(AnalysisException, commit)) == "lake"


def test_a_failed_command_keeps_the_parts_it_had_done() -> None:
    """``run``'s drain landed 13,400 messages, a later write failed on a full disk, and the summary was
    the error alone (a review): the steps done before the failure stay in it."""
    import argparse

    from queuelake import stopping
    from queuelake.cli import _failure

    exc = errors.LakeError("lake table runs: cannot create it")
    stopping.partial(exc, {"drain": {"status": "ok", "landed": 13400}, "failed_steps": ["bodies"]})
    args = argparse.Namespace(command="run", debug=False, config=None)
    summary = _failure(args, exc)
    assert summary["drain"] == {"status": "ok", "landed": 13400} and summary["failed_steps"] == ["bodies"]
    assert summary["status"] == "failed" and summary["error_kind"] == "lake"


def test_a_missing_jvm_file_system_is_a_missing_dependency() -> None:
    """An s3a:// lake without hadoop-aws on Spark's class path failed ``run`` with ``error_kind`` ``lake``
    and Java's words alone (a review); it is a missing dependency, and the one-line error says which."""
    from py4j.protocol import Py4JJavaError

    text = (
        "An error occurred while calling o49.parquet.\n: java.lang.RuntimeException: "
        "java.lang.ClassNotFoundException: Class org.apache.hadoop.fs.s3a.S3AFileSystem not found\n\tat x.y(Z.java:1)"
    )
    error = _answering(Py4JJavaError, text)
    assert errors.error_kind(error) == "missing-dependency"
    assert errors.error_kind(_answering(Py4JJavaError, "java.lang.ClassNotFoundException: com.acme.Udf")) != (
        "missing-dependency"
    )

"""A failure the JVM raised reaches the JSON summary as one line: the Java exception's class and message
and the call it broke, never its stack (issue 57: an out-of-memory ``bodies`` put a Java stack trace in
the summary's ``error``). No JVM here: py4j's error is built as py4j builds it."""

from __future__ import annotations

import logging

from py4j.protocol import Py4JJavaError
from queuelake.errors import describe, jvm_line
from queuelake.report import setup_logging


class _JavaClass:
    def getName(self) -> str:  # noqa: N802 - the Java method's name
        return "java.lang.OutOfMemoryError"


class _JavaThrowable:
    def getClass(self) -> _JavaClass:  # noqa: N802
        return _JavaClass()

    def getMessage(self) -> str:  # noqa: N802
        return "Java heap space\n\tat org.apache.spark.Something.run(Something.scala:1)"

    def toString(self) -> str:  # noqa: N802 - py4j's __str__ asks the JVM for it
        return "java.lang.OutOfMemoryError: Java heap space\n\tat a.b(C.java:1)\n\tat d.e(F.java:2)"


def test_a_java_exception_is_one_line_with_its_class_message_and_call() -> None:
    exc = Py4JJavaError.__new__(Py4JJavaError)  # py4j's constructor needs a live JVM object
    exc.errmsg, exc.java_exception = "An error occurred while calling o249.unpersist.\n", _JavaThrowable()
    line = describe(exc)
    assert line == "java.lang.OutOfMemoryError: Java heap space (an error occurred while calling o249.unpersist)"
    assert "\n" not in line and " at " not in line


def test_a_python_workers_error_is_its_own_last_line() -> None:
    """A UDF raising in a Spark task reached the summary as pyspark's banner alone ("An exception was
    thrown from the Python worker. Please see the stack trace below."): the error itself was lost."""

    class PythonException(Exception):  # pyspark's needs a live JVM to be built and printed
        __module__ = "pyspark.errors.exceptions.captured"

        def getMessage(self) -> str:  # noqa: N802 - pyspark's method
            return str(self)

    text = (
        "\n  An exception was thrown from the Python worker. Please see the stack trace below.\n"
        'Traceback (most recent call last):\n  File "<stdin>", line 5, in check\n'
        "ValueError: cannot handle the message at seq 7\n"
        "\nJVM stacktrace:\norg.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        "\tat org.apache.spark.Task.run(Task.scala:1)\n"
    )
    exc = PythonException(text)
    assert describe(exc) == (
        "PythonException: ValueError: cannot handle the message at seq 7 (in a Spark task's Python worker)"
    )
    # a message of several lines keeps them all (it kept the last alone: a review), source lines not
    text = (
        'Traceback (most recent call last):\n  File "/w/udf.py", line 5, in check\n'
        '    raise ValueError(f"order {x} refused:\\n{why}")\n    ^^^^^^^^^^^^^^^^^\n'
        "ValueError: order 0 refused:\nCustomer Alice has no credit\n"
    )
    assert describe(PythonException(text)) == (
        "PythonException: ValueError: order 0 refused: Customer Alice has no credit (in a Spark task's Python worker)"
    )


def test_a_python_data_source_error_names_what_its_traceback_ends_with() -> None:
    """An AnalysisException carrying a Python data source's traceback said only its first line, which
    ends where the traceback starts (a review: a typed table's commit failed and nothing said why)."""

    class AnalysisException(Exception):
        __module__ = "pyspark.errors.exceptions.captured"

        def getMessage(self) -> str:  # noqa: N802 - pyspark's method
            return str(self)

    text = (
        "[PYTHON_DATA_SOURCE_ERROR] Failed to commit or abort Python data source write: Traceback (most recent "
        'call last):\n  File "/w/write.py", line 9, in commit\n    table.commit()\n'
        "OSError: Generic S3 error: Connection reset by peer (os error 104)\n"
        "\nJVM stacktrace:\norg.apache.spark.sql.AnalysisException: ...\n\tat org.apache.spark.X.run(X.scala:1)\n"
    )
    assert describe(AnalysisException(text)) == (
        "AnalysisException: [PYTHON_DATA_SOURCE_ERROR] Failed to commit or abort Python data source write: "
        "OSError: Generic S3 error: Connection reset by peer (os error 104)"
    )


def test_other_errors_are_not_taken_for_the_jvm() -> None:
    assert jvm_line(ValueError("x")) is None
    assert describe(ValueError("bad\n  at nothing")) == "ValueError: bad"


def test_a_rust_backtrace_is_left_out_of_the_one_line() -> None:
    """deltalake's error under RUST_BACKTRACE=1 went on with its frames into the summary (a review)."""

    class DeltaError(Exception):
        pass

    text = "Kernel error: Json error: Encountered unexpected 'g'\n\nStack backtrace:\n   0: <unknown>\n   1: clone3"
    assert describe(DeltaError(text)) == "DeltaError: Kernel error: Json error: Encountered unexpected 'g'"
    assert describe(DeltaError("a backtrace of this stack: no header")) == (
        "DeltaError: a backtrace of this stack: no header"
    )
    # delta-kernel's errors carry their frames with no header (a corrupt commit in the log)
    bare = "Kernel error: Json error: Encountered unexpected 'n'\n   0: <unknown>\n  12: start_thread\n     at ./x.c:4"
    assert describe(DeltaError(bare)) == "DeltaError: Kernel error: Json error: Encountered unexpected 'n'"


def test_pysparks_own_stack_logger_is_quiet_unless_debugging() -> None:
    spark_logger = logging.getLogger("SQLQueryContextLogger")
    setup_logging(logging.INFO)
    assert not spark_logger.isEnabledFor(logging.ERROR)
    setup_logging(logging.DEBUG)
    assert spark_logger.isEnabledFor(logging.ERROR)
    setup_logging(logging.INFO)


class _Wrapper(_JavaThrowable):
    """``Exception thrown in awaitResult``, the OutOfMemoryError its cause (as Spark wraps a task's)."""

    def __init__(self, cause: object) -> None:
        self._cause = cause

    def getClass(self) -> _JavaClass:  # noqa: N802
        named = _JavaClass()
        named.getName = lambda: "org.apache.spark.SparkException"  # type: ignore[method-assign]
        return named

    def getMessage(self) -> str:  # noqa: N802
        return "Exception thrown in awaitResult: "

    def getCause(self) -> object:  # noqa: N802
        return self._cause


def test_a_wrapped_java_exception_names_its_innermost_cause() -> None:
    """Spark wraps a task's failure; the error named the wrapper alone (a review: an out-of-memory read
    ``SparkException: Exception thrown in awaitResult:``)."""
    inner = _JavaThrowable()
    inner.getCause = lambda: None  # type: ignore[attr-defined]
    exc = Py4JJavaError.__new__(Py4JJavaError)
    exc.errmsg, exc.java_exception = "An error occurred while calling o382.getResult.\n", _Wrapper(inner)
    assert describe(exc) == (
        "org.apache.spark.SparkException: Exception thrown in awaitResult: (an error occurred while calling "
        "o382.getResult); caused by java.lang.OutOfMemoryError: Java heap space"
    )


def test_a_connection_py4j_lost_says_the_jvm_ended_and_why(monkeypatch) -> None:
    """The JVM gone (it ran out of memory and exited 52), py4j's next call was ``ConnectionRefusedError:
    [Errno 111] Connection refused``, and that was the error (a review)."""
    import sys
    import types

    namespace: dict = {"__name__": "py4j.clientserver"}
    exec(
        compile(
            "def call():\n    raise ConnectionRefusedError(111, 'Connection refused')\n",
            "/x/py4j/clientserver.py",
            "exec",
        ),
        namespace,
    )  # noqa: S102 - a frame in py4j's file
    try:
        namespace["call"]()
    except ConnectionRefusedError as exc:
        refused = exc

    class Ended:
        def __init__(self, code: int | None) -> None:
            self.code = code

        def wait(self, timeout: float) -> int:
            if self.code is None:
                raise TimeoutError("still running")  # as Popen.wait's TimeoutExpired
            return self.code

    def jvm(code: int | None) -> None:
        context = types.SimpleNamespace(_gateway=types.SimpleNamespace(proc=Ended(code)))
        monkeypatch.setitem(sys.modules, "pyspark", types.SimpleNamespace(SparkContext=context))

    jvm(52)
    assert describe(refused).startswith("the Spark JVM ran out of memory (java.lang.OutOfMemoryError) and ended")
    jvm(137)
    assert describe(refused).startswith("the Spark JVM ended (exit code 137)")
    jvm(None)
    assert describe(refused).startswith("the Spark JVM ended while")
    assert (
        describe(ConnectionRefusedError(111, "Connection refused"))
        == "ConnectionRefusedError: [Errno 111] Connection refused"
    )

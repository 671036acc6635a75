"""Exceptions users see. Each names what failed (queue, row, key) and why, never a secret.

One class per layer or stage, each with a ``kind``: the JSON summary of a failed command carries it as
``error_kind``, so a scheduler or a script can tell a bad config from an unreachable database from a
lake that refused a commit without reading the message. The CLI adds three kinds of its own for what
is not one of these: ``usage`` (the arguments did not parse, exit 2), ``missing-dependency`` (a Spark
command without pyspark or delta-spark installed) and ``unexpected`` (any other exception: a library's
error or a bug; the message names its type). Every failure but ``usage`` exits 1.
"""

from __future__ import annotations

import errno
import re


class QueuelakeError(Exception):
    """Base class: the CLI turns these into a clean message and a non-zero exit."""

    kind = "error"
    # True where the message was built with its foreign text (a driver's) already redacted: the CLI
    # then removes only distinctive secrets and password fields, and leaves the words of our own text
    # whole even when a short password is one of them (queuelake.redaction says why).
    redacted: bool = False


class ConfigError(QueuelakeError):
    """The configuration file is invalid: unknown key, missing variable, bad value."""

    kind = "config"


class ArgumentError(QueuelakeError, ValueError):
    """A command-line value is invalid where argparse cannot tell (replay's ``--where``, ``--limit``)."""

    kind = "arguments"


class AddressError(QueuelakeError, ValueError):
    """A queue address cannot be parsed or is not allowed (too long, empty)."""

    kind = "address"


class HeaderError(QueuelakeError, ValueError):
    """A Headers column cannot be decoded; the drain quarantines the row with this reason."""

    kind = "wire"


class TransportError(QueuelakeError):
    """The queue database refused something: missing table, bad connection, failed statement."""

    kind = "transport"
    missing_table = False  # the statement's table does not exist (the caller may say so once, its own way)
    table: str | None = None  # with missing_table: the table the statement named, as the caller named it
    lock_timeout = False  # the statement gave up waiting for a lock another session held


class RowsRefused(TransportError):
    """One table refused the rows sent to it for what they are, not for a passing condition: a CHECK or
    foreign key constraint, a trigger that raised, a row-level security policy, a value out of range
    (``Dialect.is_refusal``). Sending the same rows there again cannot succeed, so a publish sends that
    table's copies in parts from then on and holds back only the refused ones (``routing.send_isolating``;
    from Spark tasks, the table for the run) instead of failing every batch that has a copy for it."""

    def __init__(self, message: str, table: str | None) -> None:
        super().__init__(message)
        self.table = table  # the table's canonical name, as the send named it

    def __reduce__(self) -> tuple[type[RowsRefused], tuple[str, str | None]]:
        """Pickled with its table: it crosses process pools and Spark tasks (without, unpickling it
        failed, and the pool took its process for dead)."""
        return (type(self), (str(self), self.table))


class LakeError(QueuelakeError):
    """The Delta lake refused something: engine mismatch, missing table."""

    kind = "lake"


class QualityError(QueuelakeError):
    """An outbound table does not meet the contract that publishing needs (missing columns)."""

    kind = "quality"


class PipelineError(QueuelakeError):
    """A pipeline stage cannot go on; the subclasses say which stage."""

    kind = "pipeline"


class DrainError(PipelineError):
    """The drain cannot start or go on (no queues, a setting out of range)."""

    kind = "drain"


class PublishError(PipelineError):
    """Publishing cannot go on: a missing outbound table, a destination it must not send to."""

    kind = "publish"


class ReplayError(PipelineError):
    """A replay cannot go on: no journal, a replay id in another process, a plan that no longer fits."""

    kind = "replay"


class DemoError(QueuelakeError):
    """The demo refuses its work folder (not its own) or lacks what an engine needs."""

    kind = "demo"


def error_kind(exc: BaseException) -> str:
    """The ``error_kind`` a summary carries for ``exc``: its class's kind, ``unexpected`` for what is not
    one of ours (a bug, or a library's error that got through). A queue database driver's own error
    that got through is the queue database's: ``transport`` (a drain process's lost connection was
    ``unexpected`` where the same loss in a thread said ``transport``: a review)."""
    if isinstance(exc, QueuelakeError):
        return exc.kind
    library = type(exc).__module__.split(".")[0]
    if library in _DRIVERS:
        return "transport"
    spark = any(c.__module__.split(".")[0] in _SPARK_WRAPPERS for c in type(exc).__mro__)
    if spark and _MISSING_JVM_CLASS.search(str(exc)):
        return "missing-dependency"
    if spark and (raised := _raised_in_a_task(str(exc))) is not None:
        return raised
    if isinstance(exc, OSError) and _STORE_ERROR.search(str(exc)):  # pyarrow's S3 client's, deltalake's object store's
        return "lake"
    if isinstance(exc, OSError) and (exc.errno in _STORAGE_FULL or _STORAGE_FULL_TEXT.search(str(exc))):
        return "lake"  # a full or read-only disk under the lake (pyarrow's writes say so in text only)
    return "lake" if library in _LAKE_LIBRARIES or _is_delta_error(exc) else "unexpected"


# a class of the JVM's file systems for object storage not on Spark's class path: the jars are missing, not
# the lake at fault (a review: an s3a:// lake without hadoop-aws said "lake" and no more); the hint a
# one-line error carries (``describe``)
_MISSING_JVM_CLASS = re.compile(
    r"ClassNotFoundException: Class (org\.apache\.hadoop\.fs\.\w+\.\w+FileSystem) not found"
)
MISSING_JVM_CLASS_HINT = (
    "Spark's class path lacks the jars of this lake's file system (s3a://: hadoop-aws and its AWS SDK bundle; "
    "`queuelake spark-packages --s3` gives their --packages, docs/lake.md)"
)

# what an object store's error says in pyarrow's S3 client ("AWS Error ...") and in deltalake's builtin
# OSError ("Kernel error -> Generic S3 error", "Generic S3 error"): both were "unexpected" (a review)
_STORE_ERROR = re.compile(r"AWS Error|Generic \w+ error|Kernel error|object store", re.I)
# a disk full, read-only or over quota: the lake's writes (the files a drain stages, a step's outputs)
# failed so with ``unexpected`` (a review, a lake on a small tmpfs)
_STORAGE_FULL = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT})
_STORAGE_FULL_TEXT = re.compile(r"No space left on device|Read-only file system|Disk quota exceeded")
_DRIVERS = frozenset({"psycopg", "psycopg2", "pyodbc"})  # the queue database's drivers
_SPARK_WRAPPERS = frozenset({"py4j", "pyspark"})  # a Spark job's failure, a task's Python error in its text
# a traceback's last line, the error raised: ``queuelake.errors.TransportError: ...`` at a line's start (a
# class name inside a message, ``KeyError: "column 'ConfigError'"``, is the message's, not the error's)
_TASK_ERROR = re.compile(r"^\s*(?:[\w.]+\.)?(\w+(?:Error|Refused)):")
# a task's Python worker that died (killed, out of memory, a crash): its JVM side reads an EOF, which
# is not the lake's I/O
_WORKER_DIED = re.compile(r"Python worker exited unexpectedly|Python worker (?:was )?killed|EOFException.*PythonRunner")


def _raised_in_a_task(text: str) -> str | None:
    """The kind of the last of queuelake's errors (or a database driver's) a failed Spark job's text
    names, as its Python worker printed it: a publish task whose database was out of reach said
    ``unexpected`` (a review), though its error was a ``TransportError``. The last: in a chained
    traceback ("During handling of the above exception", ``raise ... from``) the error raised is
    printed after the one it replaced (the first said ``lake`` for a ``TransportError``: a review)."""
    kinds = {cls.__name__: cls.kind for cls in _error_classes(QueuelakeError)}
    for line in reversed(text.splitlines()):
        if any(f"{driver}." in line for driver in _DRIVERS) and "Error" in line:
            return "transport"
        match = _TASK_ERROR.match(line)
        if match is not None and match.group(1) in kinds:
            return kinds[match.group(1)]
    if _WORKER_DIED.search(text):  # no error of ours: ``unexpected``, as any other crash
        return None
    # the JVM's own I/O: Spark reaches only the lake (the queue database is Python's), and an S3A
    # connection reset under delta-spark's log read said ``unexpected`` (a review)
    # and the object store's error in a task's Python worker (the data source's commit: a reset commit
    # said ``unexpected``; a review)
    return "lake" if _JVM_IO.search(text) or _STORE_ERROR.search(text) else None


_JVM_IO = re.compile(
    r"java\.(?:net|io)\.\w*(?:Exception|Error)|org\.apache\.hadoop\.fs\.|AwsServiceException|S3Exception"
)


def _error_classes(cls: type[QueuelakeError]) -> list[type[QueuelakeError]]:
    return [cls, *(sub for child in cls.__subclasses__() for sub in _error_classes(child))]


_LAKE_LIBRARIES = frozenset({"deltalake"})


def _is_delta_error(exc: BaseException) -> bool:
    """deltalake's ``DeltaError`` (its class's module is ``_internal``, pyo3's): a full disk under a
    write said ``unexpected`` (a review)."""
    try:
        from deltalake.exceptions import DeltaError
    except ImportError:
        return False
    return isinstance(exc, DeltaError)


def is_panic(exc: BaseException) -> bool:
    """A Rust library's panic (deltalake's, through pyo3: ``PanicException``), a BaseException that no
    ``except Exception`` catches: a body nested too deep for serde_json ended ``bodies`` with a traceback
    and no JSON summary. It is a failure like any other."""
    return type(exc).__name__ == "PanicException"


def jvm_line(exc: BaseException) -> str | None:
    """One line for an error the JVM raised (a Java exception through py4j, or one pyspark captured):
    the Java exception's class and message, the call it broke, and no stack. None for any other error.

    Why: a Spark failure's text is the whole Java stack (131 lines for an ``OutOfMemoryError`` seen
    in a first backlog's ``bodies``), which made the JSON summary's ``error`` unreadable; the stack
    belongs in the log under ``--debug``."""
    gone = jvm_gone(exc)
    if gone is not None:
        return gone
    java = getattr(exc, "java_exception", None)  # py4j.protocol.Py4JJavaError
    if java is not None:
        try:
            name, message = str(java.getClass().getName()), java.getMessage()
        except Exception:  # noqa: BLE001 - the JVM may be gone (it ran out of memory): keep the first line
            name, message = type(exc).__name__, (str(exc).strip().splitlines() or [""])[0]
        call = getattr(exc, "errmsg", "").strip().rstrip(".:")  # "An error occurred while calling o249.unpersist"
        first = str(message).strip().splitlines()[0].strip() if message and str(message).strip() else ""
        text = f"{name}: {first}" if first else name
        text = f"{text} ({call[0].lower() + call[1:]})" if call else text
        return text + _root_cause(java, text)
    if type(exc).__module__.startswith("pyspark.errors") and hasattr(exc, "getMessage"):
        if type(exc).__name__ == "PythonException":  # a task's Python error: its own lines, not the banner
            raised = _python_error(str(exc).split("JVM stacktrace:")[0])
            if raised:
                return f"PythonException: {raised} (in a Spark task's Python worker)"
        message = str(exc).split("JVM stacktrace:")[0]
        first = (message.strip().splitlines() or [type(exc).__name__])[0]
        if first.rstrip().endswith("Traceback (most recent call last):"):
            # a Python data source's error, whose first line ends where its traceback starts: the error
            # the traceback ends with goes with it (a review: the summary said "Failed to commit or
            # abort Python data source write: Traceback (most recent call last):" and nothing more)
            raised = _python_error(message[message.index("Traceback (most recent call last):") :])
            first = first.rstrip()[: -len("Traceback (most recent call last):")].rstrip() + (
                f" {raised}" if raised else ""
            )
        text = f"{type(exc).__name__}: {first}"
        return text + _root_cause(getattr(exc, "_origin", None), text)
    return None


def _root_cause(java: object, said: str) -> str:
    """``"; caused by <class>: <message>"`` of the innermost cause of a Java exception (``getCause()``),
    when the line does not say it already; "" otherwise. Why: Spark wraps a task's failure (``Exception
    thrown in awaitResult``, ``Job aborted``), and the error named the wrapper only (a review: an
    out-of-memory's ``error`` never said so)."""
    if java is None:
        return ""
    try:
        cause, seen = java, 0
        while seen < 20:
            inner = cause.getCause()  # type: ignore[attr-defined]
            if inner is None:  # Throwable.getCause() is null, never the throwable itself
                break
            cause, seen = inner, seen + 1
        if seen == 0:
            return ""
        name, message = str(cause.getClass().getName()), cause.getMessage()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a JVM gone, or a proxy without these methods: the line stands
        return ""
    first = str(message).strip().splitlines()[0] if message and str(message).strip() else ""
    text = f"{name}: {first}" if first else name
    return "" if text in said or (first and first in said) else f"; caused by {text}"


# SparkExitCode.OOM: what the JVM exits with when a thread ran out of memory
_JVM_OUT_OF_MEMORY = 52


def jvm_gone(exc: BaseException) -> str | None:
    """One line when ``exc`` says the Spark JVM is gone (py4j's connection to it refused, reset or
    empty), with its exit code when this process started it: 52 is Spark's own for an
    ``OutOfMemoryError``. None for any other error. Why: the error read ``ConnectionRefusedError:
    [Errno 111] Connection refused`` after the JVM ran out of memory (a review)."""
    if not _is_dead_gateway(exc):
        return None
    code = _jvm_exit_code()
    if code == _JVM_OUT_OF_MEMORY:
        return (
            "the Spark JVM ran out of memory (java.lang.OutOfMemoryError) and ended: give the driver more "
            "(spark.driver.memory in spark.conf; spark-submit's --driver-memory) or take smaller slices "
            "(spark.slice_rows)"
        )
    import os

    if "PYSPARK_GATEWAY_PORT" in os.environ:  # spark-submit's JVM, this process's parent
        return "the Spark JVM ended while the command used it: spark-submit ended, or was killed"
    if code is not None and code < 0:
        return f"the Spark JVM was killed (signal {-code}) while the command used it"
    said = f" (exit code {code})" if code is not None else ""
    return f"the Spark JVM ended{said} while the command used it; unless it was killed, its log lines above say why"


def _is_dead_gateway(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        kind = type(current)
        if kind.__module__.startswith("py4j") and (
            kind.__name__ == "Py4JNetworkError"
            # never str() of a py4j error: a Py4JJavaError's asks the JVM
            or (kind.__name__ == "Py4JError" and "Answer from Java side is empty" in " ".join(map(str, current.args)))
        ):
            return True
        if isinstance(current, (ConnectionRefusedError, ConnectionResetError, BrokenPipeError)):
            modules = traceback_modules(current)
            if any(m.split(".")[0] in ("py4j", "pyspark") for m in modules):
                return True
        current = current.__cause__ or current.__context__
    return False


def traceback_modules(exc: BaseException) -> list[str]:
    """The modules of the frames ``exc`` passed through (their ``__name__``: not a path, in which a
    folder named like a package would match: a review)."""
    modules: list[str] = []
    tb = exc.__traceback__
    while tb is not None:
        modules.append(str(tb.tb_frame.f_globals.get("__name__", "")))
        tb = tb.tb_next
    return modules


def _jvm_exit_code() -> int | None:
    """The exit code of the Spark JVM this process started (local mode), or None: still running, or
    not ours (under spark-submit the JVM is this process's parent)."""
    import sys

    context = getattr(sys.modules.get("pyspark"), "SparkContext", None)
    proc = getattr(getattr(context, "_gateway", None), "proc", None)
    if proc is None:
        return None
    try:
        return proc.wait(timeout=2)  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001 - still running (then not gone for that reason), or not a Popen
        return None


def _python_error(text: str) -> str:
    """The error a Python traceback ends with, its lines joined: what follows the last frame (``File
    "..."`` and its indented source lines). A message of several lines kept only its last (a review:
    "Customer Alice has no credit", without "ValueError: order 0 refused:")."""
    lines = text.splitlines()
    frames = [i for i, line in enumerate(lines) if line[:1].isspace() and line.lstrip().startswith('File "')]
    if frames:
        rest = lines[frames[-1] + 1 :]
        while rest and (rest[0][:1].isspace() or not rest[0].strip()):  # the frame's source and ^^^ markers
            rest = rest[1:]
        return " ".join(line.strip() for line in rest if line.strip())
    raised = [line.strip() for line in lines if line.strip() and not line[0].isspace()]
    raised = [line for line in raised if not line.startswith(("Traceback", "An exception was thrown"))]
    return raised[-1] if raised else ""


MAX_ERROR_CHARS = 2000
# where a Rust library's error (deltalake's) goes on with its frames when RUST_BACKTRACE is set: the
# summary's error carried "0: <unknown> | ... clone3" (a review)
# a Rust backtrace (RUST_BACKTRACE set): its header, or its first frame where delta-kernel's errors have no
# header ("   0: <unknown>")
_RUST_BACKTRACE = re.compile(r"^\s*(?:stack backtrace:\s*|0: \S.*)$", re.I | re.M)
_FRAME = re.compile(r"^\s+(at |\.\.\. \d+ more|File \"|\^+$|~*\^+~*$)")


def describe(exc: BaseException) -> str:
    """One readable line: what failed and why, without stack frames (Java or Python)."""
    jvm = jvm_line(exc)
    if jvm is not None:
        if _MISSING_JVM_CLASS.search(jvm):
            jvm = f"{MISSING_JVM_CLASS_HINT}: {jvm}"
        return jvm if len(jvm) <= MAX_ERROR_CHARS else jvm[: MAX_ERROR_CHARS - 3] + "..."
    text = _RUST_BACKTRACE.split(str(exc), maxsplit=1)[0].strip()
    if not isinstance(exc, QueuelakeError):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    kept: list[str] = []
    in_frame = False
    for line in text.splitlines():
        if not line.strip() or line.strip().startswith(("Traceback (most recent call last)", "JVM stacktrace:")):
            continue
        if _FRAME.match(line):
            in_frame = line.lstrip().startswith('File "')
            continue
        if in_frame and line.startswith("    "):  # the source line under a Python frame
            continue
        in_frame = False
        kept.append(line.strip())
    out = " | ".join(kept) or type(exc).__name__
    return out if len(out) <= MAX_ERROR_CHARS else out[: MAX_ERROR_CHARS - 3] + "..."


# module -> the package that brings it, for the commands that need Spark: the base wheel leaves Spark to
# the runtime (Databricks brings its own), so without it they fail naming the extra, not with an ImportError
SPARK_MODULES = {"pyspark": "pyspark", "py4j": "pyspark", "delta": "delta-spark"}
SPARK_EXTRA = "pip install 'queuelake[spark]'"


def missing_spark(exc: BaseException) -> str | None:
    """The Spark package whose absence caused ``exc`` (itself, or its cause or context), if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModuleNotFoundError):
            package = SPARK_MODULES.get((current.name or "").split(".")[0])
            if package:
                return package
        current = current.__cause__ or current.__context__
    return None

"""Progress on stderr, one JSON summary object as the last line of stdout.

Schedulers (Airflow, Databricks) keep stdout; the summary is the machine-readable result of a run.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import orjson

log = logging.getLogger("queuelake")


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is now, not the one seen at set-up: a scheduler, a notebook
    or a test harness may swap (and close) streams between commands in one process. A write that
    fails anyway is dropped: logging's default would print a traceback of the exception being
    handled, whose source lines and messages may hold what the log line itself had redacted."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        pass


class JsonFormatter(logging.Formatter):
    """One JSON object per line (``time`` in UTC, ``level``, ``logger``, ``message``), for log
    collectors that parse lines: a multi-line message (a ``--debug`` traceback) stays one record."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": _ANSI.sub("", record.getMessage()),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class _TextFormatter(logging.Formatter):
    """The default: readable lines with UTC times (a job's log is compared with database and lake
    times, which are all UTC)."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(record.created)) + f",{int(record.msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        """Without terminal colour codes: deltalake's errors, quoted in a line, hold them (a review)."""
        text = super().format(record)
        return _ANSI.sub("", text) if "\x1b[" in text else text


LOG_FORMATS = ("text", "json")


def setup_logging(level: int = logging.INFO, fmt: str | None = None) -> None:
    """Log to stderr at ``level``; ``fmt`` (``text`` or ``json``) replaces the formatter when given.
    Called again (``--debug``, ``--log-format`` after parsing) it only lowers the level or swaps the
    formatter, so one process never gets two handlers (and doubled lines)."""
    # pyspark logs every error it captures from the JVM, whole Java stack included, as one JSON record
    # (its ``SQLQueryContextLogger``): a failed stage's error is ours to report once, in one line; the
    # stack is for --debug (issue 57: 131 lines of Java stack on stderr for one out-of-memory error)
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.DEBUG if level <= logging.DEBUG else logging.CRITICAL)
    if fmt is not None and fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {fmt!r}")
    formatter = JsonFormatter() if fmt == "json" else _TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    if log.handlers:
        if level < log.level:  # --debug after the first call
            log.setLevel(level)
        if fmt is not None:
            for handler in log.handlers:
                handler.setFormatter(formatter)
        return
    handler = _StderrHandler()
    handler.setFormatter(formatter)
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False


def _default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


# a terminal's colour codes and the "↳" lines deltalake's errors are made of (one error, several lines)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CONTINUED = re.compile(r"\s*\n\s*(?:↳\s*)?")


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` for a terminal's table: each control character as its escape (``\\n``, ``\\t``,
    ``\\x1b``). Why: header values are other programs' text, and an ESC in an exception message
    cleared the screen, a line break split a row of ``failures`` (a review)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def _plain(value: Any) -> Any:
    """``value`` with every text in it free of terminal colour codes: a summary is read by scripts and
    people, and deltalake's errors, quoted in parts' errors, held them (a review)."""
    if isinstance(value, str):
        return _CONTINUED.sub(" | ", _ANSI.sub("", value)).strip() if "\x1b[" in value else value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def emit_summary(summary: dict[str, Any], stream: TextIO | None = None) -> None:
    """Print the summary as one compact JSON line on stdout (the last line a command prints);
    ``stream`` is for the exception, ``install --print-sql``, whose stdout is SQL only."""
    out = sys.stdout if stream is None else stream
    out.write(orjson.dumps(_plain(summary), default=_default, option=orjson.OPT_NON_STR_KEYS).decode() + "\n")
    out.flush()


@contextmanager
def every(seconds: float, say: Callable[[float, threading.Event], None], name: str) -> Iterator[None]:
    """While the block runs, ``say(seconds so far, ended)`` every ``seconds`` in a thread of its own
    (``ended`` is set once the block has ended: a ``say`` that took a while checks it before logging).
    Nothing is said when the block ends sooner. What long waits say while they wait: Spark's jobs
    (``spark_progress.heartbeat``), a slow store (``lake.waiting``)."""
    ended = threading.Event()
    started = time.monotonic()

    def beat() -> None:
        while not ended.wait(seconds):
            say(time.monotonic() - started, ended)

    thread = threading.Thread(target=beat, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        ended.set()
        thread.join(timeout=1)

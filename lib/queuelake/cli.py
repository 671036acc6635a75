"""The ``queuelake`` command line: parse arguments, call the library, print the JSON summary.

Every command logs progress to stderr and prints one JSON object as the last line of stdout, however
it ends: 0 on success; 1 on failure (``"status": "failed"``, why, and its ``error_kind``, see
``queuelake.errors``; never a traceback unless ``--debug``, never the connection string), and also on a
drain that left rows other sessions held or a ``run`` (or a ``bodies`` or ``transform``) whose bodies or
transform step another process held the lock of (``"status": "incomplete"``); 2 when the arguments do not
parse; 143 when SIGTERM stopped it (``"status": "interrupted"``), 130 on Ctrl-C, 129 on a hang-up (SIGHUP:
the terminal closed). The graceful
commands (``drain``, ``run``, ...) take a first such signal as "stop at the next batch boundary" and a
second as "stop now"; the other commands stop at the first.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import itertools
import logging
import os
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from queuelake import __version__, kill_points, stopping
from queuelake.commands.command import Command
from queuelake.commands.registry import COMMANDS
from queuelake.config import DEFAULT_CONFIG
from queuelake.errors import SPARK_EXTRA, describe, error_kind, is_panic, missing_spark
from queuelake.report import LOG_FORMATS, JsonFormatter, emit_summary, log, setup_logging
from queuelake.status import Status
from queuelake.stopping import Interrupted

EXIT_FAILED, EXIT_INTERRUPTED, EXIT_SIGTERM = 1, 130, 128 + signal.SIGTERM
EXIT_PIPE_CLOSED = 128 + signal.SIGPIPE  # stdout's reader went away (``| head``): what git and the shell's tools exit


DESCRIPTION = (
    "queuelake: drains NServiceBus SQL Server and PostgreSQL transport queues into a Delta lake, types "
    "the message bodies, transforms in Spark and publishes results back as messages your endpoints handle."
)
EPILOG = (
    "Each command logs its steps to stderr and prints one JSON summary as the last line of stdout. Exit "
    "codes: 0 ok, 1 failed (see error and error_kind; a drain that left rows held by others too), 2 bad arguments, 130 "
    "Ctrl-C, 129 SIGHUP, 143 SIGTERM. A config file is named with -c (or QUEUELAKE_CONFIG)."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queuelake", description=DESCRIPTION, epilog=EPILOG)
    debug_help = "log debug messages, and the traceback of a failure"
    log_help = "stderr log lines as text (default) or one JSON object per line (time UTC, level, logger, message)"
    parser.add_argument("--version", action="version", version=f"queuelake {__version__}")
    parser.add_argument("--debug", action="store_true", help=debug_help)
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="text", help=log_help)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.help)
        # also accepted after the command; SUPPRESS keeps a global --debug from being reset
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
        p.add_argument("--log-format", choices=LOG_FORMATS, default=argparse.SUPPRESS, help=log_help)
        p.add_argument("--version", action="version", version=f"queuelake {__version__}")
        if command.takes_config:
            # None: conf/local.yaml when it exists, else the built-in local config (config.load)
            config_help = (
                f"config file (default: $QUEUELAKE_CONFIG, else {DEFAULT_CONFIG}, else the embedded demo's "
                "config where `queuelake demo` left its database)"
            )
            p.add_argument("-c", "--config", default=None, help=config_help)
        command.arguments(p)
    return parser


_ENDING = [False]  # True in the ``queuelake`` program itself, not in a caller of ``main`` (a test)


@contextlib.contextmanager
def _sigterm(command: str) -> Iterator[dict[str, Any]]:
    """While armed, SIGTERM (a scheduler's cancel), SIGINT (Ctrl-C) and SIGHUP (the terminal or ssh
    session closed; not under ``nohup``, which ignores it) ask loops to stop (stopping.request()) and,
    unless it is the first one for a graceful command, raise Interrupted in the main thread. Yields the
    arming switch and the signal received (``exit_code``: 143 for SIGTERM, 130 for SIGINT, 129 for
    SIGHUP, as shells report them).

    Why SIGINT too: Python's own Ctrl-C is a KeyboardInterrupt in the main thread only, which a drain's
    main thread (waiting on its workers) never saw: the workers drained the queues to the end, and the
    summary had no counts (issue 59). Now Ctrl-C stops at the next batch boundary with the full summary."""
    state: dict[str, Any] = {"armed": True, "signalled": False, "exit_code": EXIT_SIGTERM}
    if threading.current_thread() is not threading.main_thread():
        yield state  # signal handlers can only be set from the main thread
        return

    def handler(signum: int, frame: object) -> None:
        first = not state["signalled"]
        state["signalled"] = True
        state["exit_code"] = 128 + signum
        stopping.request()
        if not state["armed"]:
            return
        name = signal.Signals(signum).name
        if first and COMMANDS[command].graceful:
            log.warning("%s: %s stops at the next batch boundary (a second %s stops it now)", name, command, name)
            return
        waiting = stopping.only_at_boundary()
        if waiting is not None:  # nothing would stop sooner: the counts and runs rows are kept
            stopping.request_now()  # what can stop sooner and still count does (``stopping.request_now``)
            log.warning("%s again: %s stops at its next batch boundary all the same (%s)", name, command, waiting)
            return
        state["armed"] = False  # one Interrupted is enough; later signals only set the flag
        _cancel_spark_jobs()
        raise Interrupted(f"stopped by signal {name}")

    parent_gone_calls = itertools.count()

    def parent_gone(signum: int, frame: object) -> None:
        """The parent died (``jobs.stop_with_parent``): a first SIGTERM, once, however many times the
        kernel sends it (``next`` on a counter: one atomic step, so a handler run inside this one
        returns at once)."""
        if next(parent_gone_calls) or state["signalled"]:
            return
        log.warning("%s: the parent process (spark-submit) has ended", command)
        handler(signal.SIGTERM, frame)

    handlers: dict[int, Any] = {sig: handler for sig in stopping.stop_signals()}
    if stopping.parent_watched() and stopping.PARENT_GONE not in handlers:
        handlers[stopping.PARENT_GONE] = parent_gone
    previous = {sig: signal.signal(sig, chosen) for sig, chosen in handlers.items()}
    stopping.keep_handlers(handlers)  # put back after pyspark replaces them
    try:
        yield state
    finally:
        stopping.keep_handlers({})
        for sig, before in previous.items():
            # the program's end (``console``): a signal after the summary changes nothing; with the
            # defaults back, one arriving then killed the process, a signal's exit code under an "ok"
            # summary (a review)
            signal.signal(sig, signal.SIG_IGN if _ENDING[0] else before)


def _cancel_spark_jobs() -> None:
    """Stopping now: the running Spark jobs are cancelled, as pyspark's own Ctrl-C handler (which ours
    replaces, ``stopping.restore_handlers``) did, rather than left to run until the process exits. From
    a thread of its own: the handler runs on the main thread, whose Py4J connection may be in the middle
    of a call; a second call on it from the handler broke it ("reentrant call", a Py4J network error, the
    jobs left running: a review). Each thread has its own connection (pyspark's pinned threads)."""
    context = getattr(sys.modules.get("pyspark"), "SparkContext", None)
    active = getattr(context, "_active_spark_context", None)
    if active is None:
        return

    def cancel() -> None:
        with contextlib.suppress(Exception):  # a JVM already gone: nothing left to cancel
            active.cancelAllJobs()

    threading.Thread(target=cancel, name="queuelake-cancel", daemon=True).start()


_STAGES = ("drain", "bodies", "transform", "publish")  # the steps of ``run``, each a part of its summary


def _lift_error(summary: dict[str, Any]) -> None:
    """A failed summary's ``error`` and ``error_kind`` at the top, where a script looks: a command that
    failed in a part (a queue of a drain, a stage of ``run``, a table of ``bodies``) reports it inside;
    the first such part's error is lifted, its kind that part's own, else the stage it failed in."""

    def first(value: Any, stage: str) -> tuple[str, str] | None:
        if isinstance(value, dict):
            if value.get("status") in (Status.FAILED, Status.BLOCKED) and value.get("error"):
                # a step's failure without a kind of its own takes its failed part's: a run's bodies step
                # refused by another engine's table said "bodies" where its table said "lake" (a review)
                inner = None if value.get("error_kind") else first({k: v for k, v in value.items() if k != "error"}, "")
                return str(value["error"]), str(value.get("error_kind") or (inner and inner[1]) or stage)
            for key, inner in value.items():
                found = first(inner, key if key in _STAGES else stage)
                if found:
                    return found
        if isinstance(value, list):
            for inner in value:
                found = first(inner, stage)
                if found:
                    return found
        return None

    parts = {k: v for k, v in summary.items() if k not in ("error", "error_kind")}
    found = first(parts, str(summary.get("command")))
    # a part's result class may carry the keys unset (a replay's ``error_kind: null``): as absent
    if summary.get("error") is None and found:
        summary["error"] = found[0]
    if summary.get("error_kind") is None:
        summary["error_kind"] = found[1] if found else str(summary.get("command"))


def _secrets(args: argparse.Namespace) -> list[str]:
    """The connection strings an error message might quote: the environment's and the config's."""
    from queuelake.lake.storage import job_secrets

    path = getattr(args, "config", None)
    if hasattr(args, "config"):  # None: the default config, whose connection counts too
        try:
            from queuelake import config as config_mod

            loaded = config_mod.load(path)
            return job_secrets(loaded.transport.connection, loaded.lake.storage_options)
        except Exception:  # the config may be what failed; the environment's value still applies
            pass
    return job_secrets(None, None)


def _redact(text: str, secrets: list[str], words: bool = True) -> str:
    """``text`` without the secrets; ``words=False`` for an error already redacted where it was
    built (see ``queuelake.redaction.redact``)."""
    from queuelake.redaction import redact

    return redact(text, secrets, words)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace | int:
    given = list(sys.argv[1:] if argv is None else argv)
    said = io.StringIO()
    try:
        # under --log-format json, argparse's usage and error lines become one JSON log record: a log
        # collector parsing each stderr line as JSON met plain text (a review)
        with contextlib.redirect_stderr(said) if _json_logs(given) else contextlib.nullcontext():
            parser = build_parser()
            args, unknown = parser.parse_known_args(argv)
            if unknown:  # the command's usage, not the top level's list of every command (a review)
                commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
                commands.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
        return args
    except SystemExit as exc:  # --help (0) or a usage error (2, argparse printed why on stderr)
        code = exc.code if isinstance(exc.code, int) else 2
        if said.getvalue():
            lines = said.getvalue().strip().splitlines()
            record = logging.LogRecord("queuelake", logging.ERROR, __file__, 0, lines[-1], None, None)
            print(JsonFormatter().format(record), file=sys.stderr, flush=True)
        if code:
            words = [a for a in (sys.argv[1:] if argv is None else argv) if a in COMMANDS]
            command = words[0] if words else None
            emit_summary(
                {"command": command, "status": Status.FAILED, "error": "invalid arguments", "error_kind": "usage"}
            )
        return code


def _run(command: Command, args: argparse.Namespace) -> dict[str, Any]:
    """The command's own run; a command that writes no lake table reads each table's log once
    (``Command.reads_only``)."""
    if not command.reads_only:
        return command.run(args)
    from queuelake.lake.engines import loads_reused

    with loads_reused():
        return command.run(args)


def _stopped_by(state: dict[str, Any]) -> str:
    """What stopped a command that returned interrupted: the signal it received, else a stop asked."""
    if state.get("signalled"):
        with contextlib.suppress(ValueError):
            return f"stopped by signal {signal.Signals(state['exit_code'] - 128).name}"
    return "stopped as asked"


def _json_logs(argv: list[str]) -> bool:
    """Whether the command line asks for JSON log lines (read before argparse, whose errors it shapes)."""
    return any(a == "--log-format=json" or (a == "--log-format" and b == "json") for a, b in zip(argv, [*argv[1:], ""]))


def main(
    argv: Sequence[str] | None = None,
    prepare: Callable[[argparse.Namespace], None] | None = None,
) -> int:
    """Run one command; ``prepare`` (the spark-submit jobs build their Spark session there) runs
    first, with the same error handling."""
    setup_logging()
    parsed = _parse(argv)
    if isinstance(parsed, int):
        return parsed
    args = parsed
    setup_logging(logging.DEBUG if args.debug else logging.INFO, args.log_format)
    started = time.monotonic()
    stopping.reset()
    summary: dict[str, Any]
    with _sigterm(args.command) as sigterm:
        try:
            if prepare is not None:
                prepare(args)
            result = _run(COMMANDS[args.command], args)
            sigterm["armed"] = False
            summary = {"command": args.command, "status": Status(result.pop("status", Status.OK)), **result}
            if summary["status"] == Status.OK and stopping.requested():
                summary["status"] = Status.INTERRUPTED  # stopped early, at a batch boundary, by SIGTERM
            if summary["status"] == Status.INTERRUPTED and not summary.get("error"):
                # why, as a command stopped by an exception says it: ``run`` stopped between its steps said
                # nothing, in its summary or its log (a review)
                summary["error"] = _stopped_by(sigterm)
                log.warning("%s interrupted: %s", args.command, summary["error"])
            code = {Status.OK: 0, Status.INTERRUPTED: sigterm["exit_code"]}.get(summary["status"], EXIT_FAILED)
            if summary["status"] == Status.FAILED:
                _lift_error(summary)
        except Interrupted as exc:
            sigterm["armed"] = False
            log.warning("%s interrupted: %s", args.command, exc)
            summary = {
                "command": args.command,
                "status": Status.INTERRUPTED,
                **stopping.done_before(exc, args.command),
                "error": str(exc),
            }
            code = sigterm["exit_code"]
        except KeyboardInterrupt as exc:
            sigterm["armed"] = False
            summary = {"command": args.command, "status": Status.INTERRUPTED, **stopping.done_before(exc, args.command)}
            code = EXIT_INTERRUPTED
        except BrokenPipeError as exc:  # stdout's reader went away (``failures | head -1``): the output stops
            sigterm["armed"] = False
            if not reader_gone(sys.stdout):  # another pipe (a worker process's, a socket): a failure as any
                summary, code = _failure(args, exc), EXIT_FAILED
            else:
                log.info("%s: stdout was closed by its reader; the output stops here", args.command)
                _stdout_to_nowhere()
                return EXIT_PIPE_CLOSED
        except Exception as exc:
            sigterm["armed"] = False
            stopped = stopping.stop_within(exc)
            if stopped is not None:  # the second signal's stop, replaced on its way out (see stopping.stop_within)
                log.warning("%s interrupted: %s (then %s)", args.command, stopped, describe(exc))
                summary = {
                    "command": args.command,
                    "status": Status.INTERRUPTED,
                    **stopping.done_before(stopped, args.command),
                    "error": str(stopped),
                }
                code = sigterm["exit_code"] if isinstance(stopped, Interrupted) else EXIT_INTERRUPTED
            else:
                summary, code = _failure(args, exc), EXIT_FAILED
        except BaseException as exc:
            if not is_panic(exc):
                raise
            sigterm["armed"] = False
            summary, code = _failure(args, exc), EXIT_FAILED
        summary["seconds"] = round(time.monotonic() - started, 3)
        # install --print-sql: stdout is the command's own output alone (see Command.summary_on_stderr)
        on_stderr = COMMANDS[args.command].summary_on_stderr(args)
        try:
            emit_summary(summary, sys.stderr if on_stderr else sys.stdout)
        except OSError as exc:  # the work is done (its exit code stands); only its summary had no reader: a
            # closed pipe, or the terminal of an ssh session that dropped (EIO: a hang-up's 129 became 1, a review)
            log.warning("%s: stdout was closed by its reader (%s); the summary was not printed", args.command, exc)
            _stdout_to_nowhere()
    return code


def reader_gone(stream: Any) -> bool:
    """Whether ``stream``'s reader has gone: the pipe's read end closed, or the terminal hung up (poll's
    POLLERR or POLLHUP on its file). A BrokenPipeError names no file: it may come from another pipe."""
    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        events = poller.poll(0)
    except (AttributeError, OSError, ValueError):  # no file (a test's capture), or no poll here
        return False
    return any(event & (select.POLLERR | select.POLLHUP) for _, event in events)


def _stdout_to_nowhere() -> None:
    """stdout pointed at the null device: its reader is gone, and the interpreter's own flush at exit
    would raise BrokenPipeError again, with a traceback (a review: ``failures | head -1``)."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def console() -> int:
    """The ``queuelake`` program (its console script and ``python -m queuelake``): ``main``, then the
    process ends without the interpreter's final collections walking every object its imports made
    (pyarrow, pandas, pyspark): 0.15-0.2 s of every command, measured on a 300,000-row publish whose
    whole run is 3.7 s (issue 60). The objects still alive are left to the OS; atexit handlers (the
    embedded server's stop, Spark's) and the flushing of stdout and stderr still run. Not in ``main``,
    which tests call in their own long-lived process."""
    _ENDING[0] = True  # the process ends with the command: a stop signal after its summary is ignored
    code = main()
    kill_points.reached("program_ending")  # the summary out, the handlers gone: the tests' signals land here
    stopping.end_now_if_calls_left_behind(code, exit_handlers=True)  # a stop left a native call running: ends here
    gc.disable()
    gc.freeze()
    return code


def _failure(args: argparse.Namespace, exc: BaseException) -> dict[str, Any]:
    secrets = _secrets(args)
    # an error redacted where it was built (a driver's text inside our own) keeps its words
    error = _redact(describe(exc), secrets, words=not getattr(exc, "redacted", False))
    kind = error_kind(exc)
    # the parts a command had done before it failed (``run``'s steps: a drain that landed 13,400
    # messages then failed its runs rows said nothing of them; a review)
    done = stopping.done_before(exc, args.command)
    package = missing_spark(exc)
    if package:
        # ``run``'s step that needed it named: "run needs pyspark" did not say which of its steps did
        steps = done.get("failed_steps")
        needing = f"{args.command}'s {steps[-1]} step" if steps and isinstance(steps, list) else args.command
        error = f"{needing} needs {package}, which is not installed: {SPARK_EXTRA} ({error})"
        kind = "missing-dependency"
    if args.debug:
        trace = _redact("".join(traceback.format_exception(exc)), secrets)
        log.error("%s failed: %s\n%s", args.command, error, trace.rstrip())
    else:
        log.error("%s failed: %s (--debug shows the traceback)", args.command, error)
    return {"command": args.command, "status": Status.FAILED, **done, "error": error, "error_kind": kind}


if __name__ == "__main__":
    sys.exit(main())

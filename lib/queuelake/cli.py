"""The ``queuelake`` command line: parse arguments, call the library, print the JSON summary.

Every command logs progress to stderr and prints one JSON object as the last line of stdout; it
exits 0 on success and 1 on failure (the summary then says ``"status": "failed"`` and why).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Sequence
from typing import Any

from queuelake.config import DEFAULT_CONFIG
from queuelake.errors import QueuelakeError
from queuelake.report import emit_summary, log, setup_logging

# command -> (module:function, help). Functions take the parsed args and return the summary dict.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("queuelake.commands.demo:run", "run the embedded demo end to end"),
    "install": ("queuelake.commands.transport:install", "create missing queue and bridge tables"),
    "status": ("queuelake.commands.transport:status", "depth, oldest age and schema warnings per queue"),
    "drain": ("queuelake.commands.pipeline:drain", "drain queues into the lake"),
    "transform": ("queuelake.commands.pipeline:transform", "run the configured transforms incrementally"),
    "publish": ("queuelake.commands.pipeline:publish", "publish outbound tables to queues and subscribers"),
    "run": ("queuelake.commands.pipeline:run_all", "drain, transform, publish"),
    "purge-expired": ("queuelake.commands.transport:purge_expired", "purge expired rows in batches"),
    "maintain": ("queuelake.commands.pipeline:maintain", "compact and vacuum the lake tables"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queuelake", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        if name != "demo":
            p.add_argument("-c", "--config", default=DEFAULT_CONFIG, help=f"config file (default {DEFAULT_CONFIG})")
        if name == "install":
            p.add_argument("--print-sql", action="store_true", help="print the scripts instead of running them")
        if name in ("drain", "run"):
            p.add_argument("--queue", action="append", dest="queues", help="drain only this queue (repeatable)")
            p.add_argument("--max-messages", type=int, default=None)
            p.add_argument("--max-seconds", type=float, default=None)
        if name == "demo":
            p.add_argument("--workdir", default=".", help="where ./lake and the demo database go")
            p.add_argument("--messages", type=int, default=2000, help="messages to seed per business queue")
    return parser


def _resolve(target: str) -> Any:
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


def main(argv: Sequence[str] | None = None) -> int:
    setup_logging()
    args = build_parser().parse_args(argv)
    started = time.monotonic()
    try:
        summary = _resolve(COMMANDS[args.command][0])(args)
        summary = {"command": args.command, "status": summary.pop("status", "ok"), **summary}
        code = 0 if summary["status"] == "ok" else 1
    except QueuelakeError as exc:
        log.error("%s failed: %s", args.command, exc)
        summary, code = {"command": args.command, "status": "failed", "error": str(exc)}, 1
    except KeyboardInterrupt:
        summary, code = {"command": args.command, "status": "interrupted"}, 130
    summary["seconds"] = round(time.monotonic() - started, 3)
    emit_summary(summary)
    return code


if __name__ == "__main__":
    sys.exit(main())

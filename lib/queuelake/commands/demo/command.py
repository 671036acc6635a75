"""``queuelake demo``: the embedded default end to end (``end_to_end.py`` beside this module does it)."""

from __future__ import annotations

import argparse
from typing import Any

from queuelake.commands.argtypes import at_least_one
from queuelake.commands.command import Command


def demo(args: argparse.Namespace) -> dict[str, Any]:
    from queuelake.commands.demo.end_to_end import run

    return run(args)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workdir", default=".", help="where ./lake and the demo database go")
    parser.add_argument("--messages", type=at_least_one, default=2000, help="messages to seed per business queue")
    engines = ("auto", "delta-rs", "delta-spark")
    parser.add_argument("--engine", choices=engines, default="auto", help="lake engine")


COMMAND = Command(
    name="demo", help="run the embedded demo end to end", run=demo, arguments=_arguments, takes_config=False
)

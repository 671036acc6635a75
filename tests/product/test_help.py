"""``queuelake --help`` is for a user: it says what the tool does, and every option of every command has
help text (issue 59: the help opened with a developer's docstring; two drain options had none)."""

from __future__ import annotations

import argparse

from queuelake.cli import build_parser


def test_the_help_says_what_the_tool_does_and_every_option_is_explained() -> None:
    parser = build_parser()
    assert parser.description and "Delta lake" in parser.description and "``" not in parser.description
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    unexplained = [
        f"{name} {'/'.join(action.option_strings) or action.dest}"
        for name, sub in subparsers.choices.items()
        for action in sub._actions
        if not isinstance(action, argparse._HelpAction) and not action.help
    ]
    assert unexplained == []

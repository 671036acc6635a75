"""The command registry: every command declared once, in its own module, and read from there.

Why: a command used to be spread over seven places (issue 31); the registry makes it one module and
one line in ``commands/registry.py``. These checks keep it so: no command module left out of the
registry, none that pulls in a heavy library when the CLI builds its parser, and ``setup.py`` able to
read the registry before anything is installed (pip builds the wheel in an environment holding only
setuptools).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from queuelake import cli
from queuelake.commands.command import Command
from queuelake.commands.registry import COMMANDS

LIB = Path(__file__).resolve().parents[2] / "lib"
# modules of the commands package that are not commands: the declaration type, the table, the
# session helper the lake commands share
NOT_COMMANDS = {"__init__", "argtypes", "command", "output_files", "registry", "sessions"}


def _declared_in(command: Command) -> str:
    """Where a command must be declared: ``commands/<name>.py``, or ``commands/<name>/command.py`` for a
    command with parts of its own (the demo)."""
    package = LIB / "queuelake" / "commands" / command.function_name
    suffix = ".command" if (package / "command.py").is_file() else ""
    return f"queuelake.commands.{command.function_name}{suffix}"


def test_every_command_module_is_registered() -> None:
    folder = LIB / "queuelake" / "commands"
    modules = {p.stem for p in folder.glob("*.py")} - NOT_COMMANDS
    modules |= {p.parent.name for p in folder.glob("*/command.py")}  # a command's package
    registered = {c.run.__module__.split(".")[2] for c in COMMANDS.values()}
    assert modules == registered, "a command module is missing from commands/registry.py (or a stray one)"
    for name, command in COMMANDS.items():
        assert command.name == name and command.run.__module__ == _declared_in(command)


def test_the_registry_loads_with_the_standard_library_alone() -> None:
    """``python -S`` leaves site-packages off the path: importing the registry must still work (as
    setup.py does it), and load nothing but the standard library and these modules."""
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from queuelake.commands.registry import COMMANDS, console_scripts\n"
        "print(len(COMMANDS), len(console_scripts()))\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('queuelake'))))\n"
    )
    out = subprocess.run([sys.executable, "-S", "-c", probe, str(LIB)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    counts, loaded = out.stdout.splitlines()
    assert counts == f"{len(COMMANDS)} {1 + sum(c.job for c in COMMANDS.values())}"
    allowed = {"queuelake", "queuelake.commands", "queuelake.commands.command", "queuelake.commands.registry"}
    allowed |= {f"queuelake.commands.{c.function_name}" for c in COMMANDS.values()}
    allowed |= {_declared_in(c) for c in COMMANDS.values()}  # a command's package and its command.py
    allowed |= {"queuelake.errors", "queuelake.versions", "queuelake.commands.argtypes"}  # standard library only
    assert set(loaded.split()) <= allowed, set(loaded.split()) - allowed


def test_the_parser_offers_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args(["--help"])
    assert exited.value.code == 0
    listed = " ".join(capsys.readouterr().out.split())  # argparse wraps long help lines
    required = {
        "replay": ["--where", "true"],
        "erase": ["--where", "true"],
        "conversation": ["a-conversation-id"],
        "find": ["--message-id", "x"],
        "where": ["--message-id", "x"],
    }  # what they cannot do without
    for name, command in COMMANDS.items():
        assert f"{name} {command.help}" in listed
        args = cli.build_parser().parse_args([name, *required.get(name, [])])
        assert args.command == name and hasattr(args, "config") == command.takes_config


def test_graceful_commands_are_the_ones_that_stop_at_a_boundary() -> None:
    """The commands whose loops ask ``stopping.requested()`` between batches or slices: a first SIGTERM or
    Ctrl-C lets them finish the one in hand (tests/product/test_ctrl_c.py)."""
    graceful = sorted(name for name, c in COMMANDS.items() if c.graceful)
    assert graceful == ["bodies", "drain", "publish", "purge-expired", "replay", "run", "transform"]

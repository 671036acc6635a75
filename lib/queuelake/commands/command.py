"""What a command declares about itself, in the one module that implements it.

Why one declaration: a command used to be spread over seven places (the parser's ``if name ==``
chain, the dispatch table, the graceful-stop set, the job wrappers, ``jobs/*.py``, ``setup.py``'s
console scripts). Now its module declares a ``COMMAND`` and ``commands/registry.py`` lists the module;
the parser, the SIGTERM handling, ``jobs.py``, the console scripts and the checks on ``jobs/*.py``
all read it from there.

Command modules import only the standard library and ``queuelake.commands.command`` at module level
(their work imports inside the run function): the CLI imports every one to build its parser, and
``setup.py`` reads the registry before anything is installed. ``tests/product/test_commands.py``
holds them to it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Run = Callable[[argparse.Namespace], dict[str, Any]]


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of a command that takes none beyond the common ones."""


def never(args: argparse.Namespace) -> bool:
    return False


@dataclass(frozen=True)
class Command:
    """One ``queuelake`` command.

    ``run`` takes the parsed arguments and returns the JSON summary's fields (``status`` defaults to
    ``ok``). ``graceful``: the first SIGTERM asks it to stop at a batch boundary (``stopping``), the
    second stops it; other commands stop at the first. ``job``: it is also a spark-submit job
    (``jobs/<name>.py``) and a console script ``queuelake-<name>`` (Databricks ``python_wheel_task``).
    ``summary_on_stderr``: whether these arguments make stdout the command's own output alone (``install
    --print-sql`` prints a script a DBA pipes to a file), so the summary goes to stderr instead.
    ``reads_only``: it writes no lake table, so it reads each table's log once per version
    (``lake.storage.loads_reused``: on a throttling object store, the commands that read most).
    The ``runs`` columns a command fills are the runs table's contract and live with it, in
    ``lake/catalogue.py``'s ``RUNS_COLUMNS_BY_COMMAND`` (the lake and the pipelines check rows against it).
    """

    name: str
    help: str
    run: Run
    arguments: Callable[[argparse.ArgumentParser], None] = no_arguments
    takes_config: bool = True
    graceful: bool = False
    job: bool = False
    summary_on_stderr: Callable[[argparse.Namespace], bool] = never
    reads_only: bool = False

    @property
    def function_name(self) -> str:
        """Its name as a Python identifier: the ``queuelake.jobs`` function of a job."""
        return self.name.replace("-", "_")

"""Every ``queuelake`` command, from the one module that declares it (``commands/command.py``).

The CLI's parser and dispatch, the SIGTERM rule, ``queuelake.jobs``, the console scripts in
``setup.py`` and the check on ``jobs/*.py`` all read this table. Adding a command is writing its module
and naming it here. A command with parts of its own (the demo) is a package whose ``command.py``
declares it.
"""

from __future__ import annotations

from queuelake.commands import (
    bodies,
    conversation,
    drain,
    erase,
    failures,
    find,
    health,
    install,
    maintain,
    publish,
    purge_expired,
    replay,
    run,
    spark_packages,
    status,
    tables,
    transform,
    where,
)
from queuelake.commands.command import Command
from queuelake.commands.demo import command as demo

# in the order ``queuelake --help`` lists them
COMMANDS: dict[str, Command] = {
    module.COMMAND.name: module.COMMAND
    for module in (
        demo,
        install,
        status,
        drain,
        bodies,
        transform,
        publish,
        run,
        purge_expired,
        maintain,
        tables,
        conversation,
        find,
        where,
        health,
        failures,
        replay,
        erase,
        spark_packages,
    )
}


def jobs() -> list[Command]:
    """The commands that are also spark-submit jobs and console scripts."""
    return [command for command in COMMANDS.values() if command.job]


def console_scripts() -> list[str]:
    """``setup.py``'s console scripts: the CLI, and ``queuelake-<job>`` for each job (its
    ``queuelake.jobs`` function raises on failure, as a Databricks ``python_wheel_task`` needs)."""
    jobs_ = [f"queuelake-{c.name}=queuelake.jobs:{c.function_name}" for c in jobs()]
    return ["queuelake=queuelake.cli:console", *jobs_]

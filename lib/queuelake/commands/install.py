"""``queuelake install``: create the queue and bridge tables the config needs and lacks."""

from __future__ import annotations

import argparse
from typing import Any

from queuelake.commands.command import Command


def install(args: argparse.Namespace) -> dict[str, Any]:
    from queuelake import config as config_mod
    from queuelake.context import open_database
    from queuelake.report import log
    from queuelake.transport import installer

    cfg = config_mod.load(args.config)
    plan = installer.plan(cfg)  # the drained queues and the Send destinations it names
    if args.print_sql:
        # stdout holds the script alone (the CLI puts the summary on stderr), so that
        # `queuelake install --print-sql > install.sql` gives psql / sqlcmd a file they accept
        print(installer.script(cfg.transport.dialect, plan), flush=True)
        return {"printed": [ref.canonical for _, ref in plan.steps()]}
    with open_database(cfg).connect("queuelake-install") as conn:
        done = installer.install(conn, plan)
    log.info("install: %d table(s) in place (missing ones created): %s", len(done), ", ".join(done))
    return {"tables": done}


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--print-sql", action="store_true", help="print the scripts instead of running them")


def _print_sql(args: argparse.Namespace) -> bool:
    """``--print-sql``: stdout is the SQL script alone (``> install.sql`` for psql), so the summary
    goes to stderr, the one exception to "the summary is the last stdout line"."""
    return bool(getattr(args, "print_sql", False))


COMMAND = Command(
    name="install",
    help="create missing queue and bridge tables",
    run=install,
    arguments=_arguments,
    summary_on_stderr=_print_sql,
)

"""``queuelake tables``: what the lake holds, without Spark: each Delta table under ``lake.root`` with
its version, the engine that writes it, its data files, and what it is (from the table catalogue).

Why: an operator's first question about a lake ("is the journal there, which engine wrote it, how
many files does maintain face?") needed a notebook or a Spark shell.
"""

from __future__ import annotations

import argparse
import fnmatch
from typing import Any

from queuelake.commands.command import Command


def tables(args: argparse.Namespace) -> dict[str, Any]:
    import dataclasses

    from queuelake import config as config_mod
    from queuelake.lake import tables as catalogue
    from queuelake.lake.engines import open_lake
    from queuelake.report import log

    cfg = config_mod.load(args.config)
    lake = open_lake(dataclasses.replace(cfg.lake, engine="delta-rs"))  # reads the Delta log only
    found = []
    for name in lake.tables():
        version = lake.table_version(name)
        files = len(lake.added_files(name, None, version)) if version is not None else 0
        entry = {"table": name, "version": version, "engine": lake.written_by(name), "files": files}
        entry["about"] = next((t.about for t in catalogue.CATALOGUE if _names(t.name, name)), None)
        log.info("%s: version %s, %d data file(s), written by %s", name, version, files, entry["engine"] or "?")
        found.append(entry)
    if not found:
        log.info("tables: no lake tables under %s yet, nothing to show", cfg.lake.root)
    return {"root": str(cfg.lake.root), "tables": found}


def _names(pattern: str, name: str) -> bool:
    """Does a catalogue name (``outbound_{output}_rejected``: one per publish output) name this table?"""
    return fnmatch.fnmatchcase(name, pattern.replace("{output}", "*").replace("{type}", "*"))


COMMAND = Command(name="tables", help="list the lake's tables: version, engine, data files", run=tables)

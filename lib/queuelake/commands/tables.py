"""``queuelake tables``: what the lake holds, without Spark: each Delta table under ``lake.root`` with
its version, the engine that writes it, its data files, and what it is (from the table catalogue).

Why: an operator's first question about a lake ("is the journal there, which engine wrote it, how
many files does maintain face?") needed a notebook or a Spark shell.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
from typing import Any

from queuelake.commands.command import Command


def tables(args: argparse.Namespace) -> dict[str, Any]:
    from queuelake import config as config_mod
    from queuelake.commands.sessions import require_lake_root
    from queuelake.lake import catalogue
    from queuelake.lake.engines import without_spark
    from queuelake.report import log

    cfg = config_mod.load(args.config)
    require_lake_root(cfg)
    lake = without_spark(cfg.lake)  # reads the Delta log only
    found = []
    for name in lake.tables():
        version = lake.table_version(name)
        files = len(lake.added_files(name, None, version)) if version is not None else 0
        entry = {"table": name, "version": version, "engine": lake.written_by(name), "files": files}
        entry["about"] = about(name, catalogue.CATALOGUE, _outputs(cfg))
        log.info("%s: version %s, %d data file(s), written by %s", name, version, files, entry["engine"] or "?")
        found.append(entry)
    if not found:
        log.info("tables: no lake tables under %s yet, nothing to show", cfg.lake.root)
    return {"root": str(cfg.lake.root), "tables": found}


def _outputs(cfg: Any) -> set[str]:
    """The outbound tables the config names: what transforms write and publish reads."""
    return {t.output for t in cfg.transforms} | set(cfg.publish.outputs)


def about(name: str, catalogue: Any, outputs: set[str]) -> str:
    """What the table ``name`` is, from the catalogue: an exact name first, then the most specific
    pattern (``{output}_rejected`` before ``body_{type}``); a bare ``{output}`` only for a configured
    output. Why the order: the bare pattern names every table, and so it named the typed body tables and
    ``body_increments`` "what a transform produces" (issue 59)."""
    exact = next((t.about for t in catalogue if t.name == name), None)
    if exact:
        return exact
    patterns = sorted((t for t in catalogue if "{" in t.name), key=lambda t: -len(re.sub(r"\{\w+\}", "", t.name)))
    for table in patterns:
        if table.name == "{output}" and name not in outputs:
            continue
        if _names(table.name, name):
            return table.about
    return "not a table queuelake writes (or an outbound table no longer in the config)"


def _names(pattern: str, name: str) -> bool:
    """Does a catalogue name (``outbound_{output}_rejected``: one per publish output) name this table?"""
    return fnmatch.fnmatchcase(name, pattern.replace("{output}", "*").replace("{type}", "*"))


COMMAND = Command(
    name="tables", help="list the lake's tables: version, engine, data files", run=tables, reads_only=True
)

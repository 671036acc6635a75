"""Work a command has begun on the lake and not finished, recorded beside the tables so that the next
run finishes it: small JSON files under the lake root, ``_queuelake/pending/<kind>/<name>.json``.

Why: some commands change several tables in several commits and must end with a step that makes
the change final. ``erase`` deletes rows from the derived and typed tables and the journal, then
purges the removed files from storage; killed before the purge, the erased rows stayed readable by
time travel, and a second ``erase`` selected nothing (the journal rows were already gone), so it
never purged them. A record written before the first delete names the tables to purge; a command
that finds one does what it names, then clears it.

Not a Delta table: a record is written and cleared once per command, read only by the next one, and
a table's log would outlive it. ``list_tables`` never lists the folder (no ``_delta_log``).
"""

from __future__ import annotations

import json
from typing import Any

from queuelake.lake import storage

FOLDER = "_queuelake/pending"


def _where(root: str, kind: str) -> tuple[Any, str]:
    fs, base = storage.filesystem(root)
    return fs, f"{base}/{FOLDER}/{kind}"


def record(root: str, kind: str, name: str, payload: dict[str, Any]) -> None:
    """Record (or replace) the pending work ``name`` of ``kind``; durable when this returns."""
    fs, folder = _where(root, kind)
    fs.create_dir(folder, recursive=True)
    with fs.open_output_stream(f"{folder}/{name}.json") as out:
        out.write(json.dumps(payload, sort_keys=True).encode("utf-8"))


def recorded(root: str, kind: str) -> dict[str, dict[str, Any]]:
    """Every pending work of ``kind``, by name; {} when there is none."""
    from pyarrow import fs as pafs

    fs, folder = _where(root, kind)
    infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    found: dict[str, dict[str, Any]] = {}
    for info in sorted(infos, key=lambda i: i.path):
        if info.type != pafs.FileType.File or not info.base_name.endswith(".json"):
            continue
        with fs.open_input_stream(info.path) as stream:
            found[info.base_name[: -len(".json")]] = json.loads(stream.read().decode("utf-8"))
    return found


def clear(root: str, kind: str, name: str) -> None:
    """The pending work ``name`` done: its record removed (none left is fine)."""
    fs, folder = _where(root, kind)
    try:
        fs.delete_file(f"{folder}/{name}.json")
    except FileNotFoundError:
        pass

"""What a table gained between two versions: the data files its commits added.

Transform and publish consume tables incrementally. Delta's change data feed would need writer
protocol 4 (our tables stay at 1/2 so every engine can write them), so increments come from the
commit log itself: the ``add`` actions with ``dataChange: true`` of versions (after, upto]. A
compaction re-adds rows with ``dataChange: false`` and is rightly ignored. Works for tables written
by either engine: the log format is the same.
"""

from __future__ import annotations

import json
from urllib.parse import unquote

import pyarrow.fs as pafs
from deltalake import DeltaTable

from queuelake.errors import LakeError


def _fs(table_uri: str) -> tuple[pafs.FileSystem, str]:
    fs, path = pafs.FileSystem.from_uri(table_uri if "://" in table_uri else "file://" + table_uri)
    return fs, path.rstrip("/")


def _absolute(table_uri: str, path: str) -> str:
    if "://" in path:
        return path
    return table_uri.rstrip("/") + "/" + unquote(path)


def snapshot_files(table_uri: str, version: int) -> list[str]:
    """Every data file of the table as of a version, sorted (a stable order for batching)."""
    return sorted(DeltaTable(table_uri, version=version).file_uris())


def added_files(table_uri: str, after: int | None, upto: int) -> list[str]:
    """Data files added by versions (after, upto], sorted; ``after=None`` means the whole table."""
    if after is None:
        return snapshot_files(table_uri, upto)
    if after >= upto:
        return []
    fs, root = _fs(table_uri)
    added: list[str] = []
    for version in range(after + 1, upto + 1):
        log = f"{root}/_delta_log/{version:020d}.json"
        try:
            with fs.open_input_stream(log) as stream:
                text = stream.read().decode("utf-8")
        except FileNotFoundError:
            raise LakeError(
                f"{table_uri}: commit {version} is no longer in the Delta log (log retention); "
                "the increment cannot be computed. Run transform/publish more often than the log retention."
            ) from None
        for line in text.splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            add = action.get("add")
            if add and add.get("dataChange", True):
                added.append(_absolute(table_uri, add["path"]))
    return sorted(added)

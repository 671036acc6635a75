"""Which data files a table's log names: those it added and still holds, and those it removed whose
tombstones it still keeps (a checkpoint carries them until ``delta.deletedFileRetentionDuration``).

Why: a drain's claimed batch whose (app id, version) the journal already holds is left out of the
commit, as a batch that landed before (the committer's retry after a commit whose reply was lost, a
claim a killed drain left). That holds only if the log's commit added *this batch's* files: a second
writer committing the same version with files of its own would leave the batch's rows in files no
reader sees, and the claim cleared: lost without a word. ``StagedWrites.check_landed`` asks this
module on that rare path and fails loudly instead.

Read as ``log_head.py`` reads a log, through pyarrow so that object storage works too: the newest
checkpoint's ``add.path`` and ``remove.path`` columns (Parquet reads those pages alone) and every
commit file after it. None when the log is laid out otherwise (a V2 checkpoint, a part or a commit
file missing): the caller then cannot tell, and says so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from urllib.parse import unquote

from queuelake.lake.storage import filesystem, read_retrying

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")
_FILE_ACTIONS = (b'"add"', b'"remove"')


_INTERVAL = re.compile(r"^\s*interval\s+(\d+)\s+(second|minute|hour|day|week)s?\s*$", re.I)
_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}
DEFAULT_TOMBSTONE_SECONDS = 7 * 86400  # Delta's default delta.deletedFileRetentionDuration


def tombstone_seconds(configuration: Mapping[str, str | None]) -> float:
    """How long the table's log keeps a removed file's tombstone (``delta.deletedFileRetentionDuration``,
    e.g. ``interval 1 week``); Delta's default when unset or written otherwise."""
    match = _INTERVAL.match(configuration.get("delta.deletedFileRetentionDuration") or "")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()] if match else DEFAULT_TOMBSTONE_SECONDS


def named_files(table_uri: str, storage_options: dict[str, str] | None = None) -> set[str] | None:
    """Every data file path (relative to the table, decoded) the table's log names as of now, added or
    removed; None when the log is not laid out as this reads it (the module docstring)."""
    return read_retrying(lambda: _named_files(table_uri, storage_options), f"the Delta log of {table_uri}")


def _named_files(table_uri: str, storage_options: dict[str, str] | None) -> set[str] | None:
    from pyarrow import fs as pafs

    fs, base = filesystem(table_uri, storage_options)
    log_dir = f"{base}/_delta_log"
    commits: set[int] = set()
    checkpoints: dict[int, list[tuple[int, int, str]]] = {}  # version: (part, of, name); 0, 0 for one file
    for info in fs.get_file_info(pafs.FileSelector(log_dir, allow_not_found=True)):
        if commit := _COMMIT.match(info.base_name):
            commits.add(int(commit.group(1)))
        elif checkpoint := _CHECKPOINT.match(info.base_name):
            part, of = int(checkpoint.group(2) or 0), int(checkpoint.group(3) or 0)
            checkpoints.setdefault(int(checkpoint.group(1)), []).append((part, of, info.base_name))
    whole = {v: names for v, found in checkpoints.items() if (names := _whole_checkpoint(found))}
    start = max(whole, default=-1)
    newest = max(commits, default=start)
    if newest < 0 or any(v not in commits for v in range(start + 1, newest + 1)):
        return None  # no log, or a commit file after the checkpoint is gone: not a log this reads plainly
    named: set[str] = set()
    for name in whole.get(start, []):
        paths = _checkpoint_paths(fs, f"{log_dir}/{name}")
        if paths is None:
            return None
        named |= paths
    for version in range(start + 1, newest + 1):
        with fs.open_input_stream(f"{log_dir}/{version:020d}.json") as stream:
            text = bytes(stream.read())
        for line in text.splitlines():
            if any(key in line for key in _FILE_ACTIONS):
                action = json.loads(line)
                for kind in ("add", "remove"):
                    if kind in action:
                        named.add(unquote(action[kind]["path"]))
    return named


def _whole_checkpoint(found: list[tuple[int, int, str]]) -> list[str]:
    """The file names of a checkpoint written whole: its one file, or every part of one count."""
    for _part, of, name in found:
        if of == 0:
            return [name]
    for count in {of for _, of, _ in found}:
        names = {part: name for part, of, name in found if of == count}
        if set(names) == set(range(1, count + 1)):
            return [names[i] for i in range(1, count + 1)]
    return []


def _checkpoint_paths(fs, path: str) -> set[str] | None:  # noqa: ANN001 - a pyarrow FileSystem
    """The paths a checkpoint file adds and removes; None when its adds are in sidecar files (a V2
    checkpoint under a classic name), which this does not read."""
    import pyarrow.parquet as pq

    with fs.open_input_file(path) as f:
        parquet = pq.ParquetFile(f)
        if "sidecar" in parquet.schema_arrow.names:
            if parquet.read(columns=["sidecar.path"]).column("sidecar").drop_null():
                return None
        columns = parquet.read(columns=["add.path", "remove.path"])
    named: set[str] = set()
    for column in ("add", "remove"):
        for row in columns.column(column).drop_null().to_pylist():
            if row.get("path") is not None:
                named.add(unquote(row["path"]))
    return named

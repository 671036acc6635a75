"""What a writer needs of a local table's log, read without its file list: the newest version, the
metadata, the protocol and every app id's version.

Why: a deltalake load materialises every file's add action and stats. A drain needs none of them: it
checks the journal is its engine's (metadata), writes its staged files in the table's schema, asks its
workers' last versions and appends. At 10,000 journal files the load cost 0.10 to 0.19 s of CPU per
run (issue 32, ``bench/drain.py --journal-files``); this reads the last checkpoint's ``metaData``,
``protocol`` and ``txn`` columns alone (Parquet reads only those columns' pages) and the commit files
after it, in a few milliseconds.

The newest version comes from listing the log folder, as deltalake finds it, not from probing for
the next commit file: a commit file missing in the middle (log clean-up) must not pass for the end
of the log. Anything this does not read plainly (no log folder, a checkpoint in parts or of the V2
kind, a commit file missing after the checkpoint, an unreadable file, a protocol with table features)
returns None and the caller loads the table with deltalake.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

import pyarrow as pa

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_OTHER_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\..+\.parquet$|^(\d{20})\.checkpoint\..+\.json$")
_READ_KEYS = (b'"txn"', b'"metaData"', b'"protocol"')  # the actions a commit file is read for


@dataclass(frozen=True)
class LogHead:
    """A table's log as of ``version``: its metadata and protocol actions, as the Delta log holds
    them, and each app id's newest version."""

    version: int
    metadata: dict
    protocol: dict
    apps: dict[str, int] = field(default_factory=dict)

    @property
    def configuration(self) -> dict[str, str | None]:
        return dict(self.metadata.get("configuration") or {})

    @property
    def description(self) -> str | None:
        return self.metadata.get("description")

    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.get("partitionColumns") or [])

    @property
    def schema_string(self) -> str:
        return str(self.metadata["schemaString"])

    def arrow_schema(self) -> pa.Schema:
        from deltalake import Schema

        return pa.schema(Schema.from_json(self.schema_string).to_arrow())


def read_table_head(table_uri: str) -> LogHead | None:
    """``read_log_head`` of a table on the local disk; None for object storage (deltalake loads it)."""
    from queuelake.lake.storage import filesystem, is_s3

    if is_s3(table_uri):
        return None
    fs, base = filesystem(table_uri, {})
    if type(fs).__name__ != "LocalFileSystem":
        return None
    return read_log_head(f"{base}/_delta_log")


def read_log_head(log_dir: str) -> LogHead | None:
    """The head of the local log in ``log_dir``; None where the caller should load with deltalake
    (the module docstring)."""
    try:
        names = os.listdir(log_dir)
    except (FileNotFoundError, NotADirectoryError):
        return None
    commits = [int(m.group(1)) for m in map(_COMMIT.match, names) if m]
    if not commits:
        return None
    newest = max(commits)
    checkpoints = [int(m.group(1)) for m in map(_CHECKPOINT.match, names) if m and int(m.group(1)) <= newest]
    start = max(checkpoints, default=-1)
    if any(m and int(m.group(1) or m.group(2)) > start for m in map(_OTHER_CHECKPOINT.match, names)):
        return None  # a newer checkpoint of a kind this does not read
    try:
        metadata, protocol, apps = _from_checkpoint(log_dir, start)
        for version in range(start + 1, newest + 1):
            with open(os.path.join(log_dir, f"{version:020d}.json"), "rb") as f:
                text = f.read()
            for line in text.splitlines():
                if not any(key in line for key in _READ_KEYS):
                    continue
                action = json.loads(line)
                if "txn" in action:
                    txn = action["txn"]
                    apps[txn["appId"]] = max(int(txn["version"]), apps.get(txn["appId"], 0))
                elif "metaData" in action:
                    metadata = action["metaData"]
                elif "protocol" in action:
                    protocol = action["protocol"]
    except (OSError, ValueError, KeyError, TypeError, IndexError, pa.ArrowException):
        return None
    if metadata is None or protocol is None or not _plain(protocol):
        return None
    return LogHead(newest, metadata, protocol, apps)


def _plain(protocol: dict) -> bool:
    """A protocol without table features: with them a table may keep commits outside this folder
    (coordinated or catalog-managed commits) or need what this does not read; deltalake loads it."""
    return (
        int(protocol.get("minReaderVersion") or 1) <= 2
        and not protocol.get("readerFeatures")
        and not protocol.get("writerFeatures")
    )


def _from_checkpoint(log_dir: str, version: int) -> tuple[dict | None, dict | None, dict[str, int]]:
    """The metadata, protocol and app versions of the checkpoint of ``version`` (none: nothing)."""
    apps: dict[str, int] = {}
    if version < 0:
        return None, None, apps
    import pyarrow.parquet as pq

    path = os.path.join(log_dir, f"{version:020d}.checkpoint.parquet")
    table = pq.read_table(path, columns=["metaData", "protocol", "txn"], memory_map=True)
    metadata = table.column("metaData").drop_null().to_pylist()[0]
    metadata["configuration"] = dict(metadata.get("configuration") or [])
    protocol = table.column("protocol").drop_null().to_pylist()[0]
    for txn in table.column("txn").drop_null().to_pylist():
        apps[txn["appId"]] = max(int(txn["version"]), apps.get(txn["appId"], 0))
    return metadata, protocol, apps

"""A blind append's commit file in a local Delta log: its text, written put-if-absent, read back for
the app versions it carries, and the temporary files a killed writer left beside it.

Why apart from ``append_log.py``: these are the log's file format and the file system's guarantees (a
link fails when its name exists), with no state; ``AppendLog`` follows a table and decides what to
commit and when, and asks this module to write and read the files.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import time
import uuid
from typing import Any

from queuelake import __version__ as QUEUELAKE_VERSION
from queuelake.lake.delta_rs.checkpoint import TEMPORARY_PREFIX
from queuelake.lake.delta_rs.commits import WRITE_ID_KEY
from queuelake.lake.files import WrittenFile
from queuelake.report import log

# a temporary commit file this old was left by a killed writer (a live one links it within milliseconds)
STALE_TEMPORARY_SECONDS = 3600
_FOLLOWED_KEYS = (b'"txn"', b'"metaData"', b'"protocol"')  # the actions a commit file is read for


def commit_file_name(version: int) -> str:
    return f"{version:020d}.json"


def commit_text(
    todo: list[tuple[list[WrittenFile], str, int]], versions: dict[str, int], write_id: str, read_version: int
) -> bytes:
    """A blind append's commit file: its commit info (read at ``read_version``, carrying ``write_id``), an
    add action per file of every batch in ``todo``, and each app id's version in ``versions``."""
    now = int(time.time() * 1000)
    actions: list[dict[str, Any]] = [
        {
            "commitInfo": {
                "timestamp": now,
                "operation": "WRITE",
                "operationParameters": {"mode": "Append", "partitionBy": "[]"},
                "readVersion": read_version,
                "isBlindAppend": True,
                "engineInfo": f"queuelake/{QUEUELAKE_VERSION}",
                "clientVersion": f"queuelake-{QUEUELAKE_VERSION}",
                WRITE_ID_KEY: write_id,
            }
        }
    ]
    for files, _, _ in todo:
        for f in files:
            actions.append(
                {
                    "add": {
                        "path": f.path,
                        "partitionValues": {},
                        "size": f.size,
                        "modificationTime": f.modification_time,
                        "dataChange": True,
                        "stats": f.stats,
                    }
                }
            )
    actions.extend({"txn": {"appId": a, "version": v, "lastUpdated": now}} for a, v in versions.items())
    return "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions).encode()


def put_if_absent(log_dir: str, version: int, text: bytes) -> bool:
    """Write the commit file of ``version`` unless it exists: the whole file appears at once (a
    link to a complete, synced temporary file), or not at all."""
    target = f"{log_dir}/{commit_file_name(version)}"
    temporary = f"{log_dir}/_commit_{uuid.uuid4()}.json.tmp"
    try:
        with open(temporary, "wb") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.link(temporary, target)
        return True
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def sweep_temporaries(log_dir: str, table: str) -> None:
    """Remove the temporary commit files a killed writer left (a SIGKILL between writing one and
    linking it; deltalake's writers leave the same ``_commit_*.json.tmp``), and the checkpoints'
    (``checkpoint.TEMPORARY_PREFIX``). Readers ignore them,
    but nothing else removes them. Only files older than ``STALE_TEMPORARY_SECONDS``: a live
    writer links its file within milliseconds of writing it. A local log only (``log_dir`` a folder)."""
    cutoff = time.time() - STALE_TEMPORARY_SECONDS
    folder = glob.escape(log_dir)
    for path in [*glob.glob(f"{folder}/_commit_*.json.tmp"), *glob.glob(f"{folder}/{TEMPORARY_PREFIX}*.tmp")]:
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to remove
            if os.stat(path).st_mtime < cutoff:
                os.unlink(path)
                log.info("lake table %s: removed %s, left by a killed commit", table, os.path.basename(path))


def read_actions(text: bytes, apps: dict[str, int]) -> bool:
    """One commit file's app versions into ``apps`` (each app id's highest); True when it changes the
    table's metadata or protocol. Only the lines of those actions are parsed: a group's commit lists
    every file it adds."""
    changed = False
    for line in text.splitlines():
        if not any(key in line for key in _FOLLOWED_KEYS):
            continue  # add, remove, commitInfo
        action = json.loads(line)
        txn = action.get("txn")
        if txn is not None:
            apps[txn["appId"]] = max(int(txn["version"]), apps.get(txn["appId"], 0))
        elif "metaData" in action or "protocol" in action:
            changed = True
    return changed

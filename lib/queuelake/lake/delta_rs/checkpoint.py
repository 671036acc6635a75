"""A checkpoint written from the last one and the blind appends after it, for a local table's followed log.

Why: deltalake's ``create_checkpoint`` loads the table (the last checkpoint, then every commit after it,
every file's stats parsed) and writes the whole file list again. At 10,000 journal files that is 0.13 to
0.3 s of CPU at the end of each drain (round 27, py-spy), about the gap between the one-queue drain on a
fresh lake and on a journal of 10,000 files (issue 32). A run of the followed log (``append_log.py``)
adds files and app versions, nothing else. So the next checkpoint is the last one's rows, read as they
are with pyarrow (no JSON parsed), with the adds appended and each app id's newest version replacing its
old one: the same actions deltalake would reconcile, written in the last checkpoint's own schema, so
every reader that read the last one reads this one.

Only where that is the whole story; anything else returns False and deltalake writes the checkpoint:
- a local table whose last checkpoint is one file (no parts, no V2 checkpoint, no sidecars);
- every commit after it holds only ``commitInfo``, ``add`` (no deletion vector, no row tracking: such
  keys null or absent, as in deltalake's own appends) and ``txn`` actions: a remove (compaction,
  erasure), a schema or protocol change or domain metadata is reconciled by deltalake.

A checkpoint is an optimisation: a kill leaves at most a temporary file (the checkpoint and
``_last_checkpoint`` each appear whole, by rename), and readers that find no newer checkpoint replay the
commit files as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from queuelake import kill_points

_ADD_KEYS = frozenset({"path", "partitionValues", "size", "modificationTime", "dataChange", "stats", "tags"})
_ADD_NEEDED = _ADD_KEYS - {"tags"}
# a checkpoint's add columns that stay null for a blind append's files
_ADD_KNOWN = _ADD_KEYS | {"deletionVector", "baseRowId", "defaultRowCommitVersion", "clusteringProvider"}
_LAST_CHECKPOINT_KEYS = frozenset({"version", "size", "sizeInBytes", "numOfAddFiles"})
TEMPORARY_PREFIX = "_checkpoint_"  # a killed writer's leftovers, swept as the commits' are (``append_log``)


def checkpoint_name(version: int) -> str:
    return f"{version:020d}.checkpoint.parquet"


def write_appended_checkpoint(log_dir: str, version: int) -> bool:
    """Write the checkpoint of ``version`` of the table whose local log folder is ``log_dir`` from its
    last checkpoint and the commits after it; False, writing nothing, where this does not apply (the
    module docstring) and deltalake must."""
    last = _read_json(os.path.join(log_dir, "_last_checkpoint"))
    if not isinstance(last, dict) or not set(last) <= _LAST_CHECKPOINT_KEYS or "version" not in last:
        return False
    base = int(last["version"])
    if base >= version:
        return base == version  # already there
    previous = pq.read_table(os.path.join(log_dir, checkpoint_name(base)), memory_map=True)
    if "sidecar" in previous.schema.names and previous.column("sidecar").null_count < previous.num_rows:
        return False
    actions = _appended_actions(log_dir, base, version)
    if actions is None:
        return False
    table = _reconciled(previous, *actions)
    if table is None:
        return False
    _write_atomically(log_dir, checkpoint_name(version), lambda path: pq.write_table(table, path, compression="none"))
    kill_points.reached("checkpoint_step")  # the checkpoint in place, ``_last_checkpoint`` still the old one
    written = os.path.getsize(os.path.join(log_dir, checkpoint_name(version)))
    pointer = {
        "version": version,
        "size": table.num_rows,
        "sizeInBytes": written,
        "numOfAddFiles": table.num_rows - table.column("add").null_count,
    }
    _write_atomically(log_dir, "_last_checkpoint", lambda path: _write_bytes(path, json.dumps(pointer).encode()))
    return True


def _appended_actions(log_dir: str, base: int, version: int) -> tuple[list[dict], dict[str, dict]] | None:
    """The adds and each app id's newest ``txn`` of the commits ``base + 1 .. version``; None when one
    is missing or holds any other action."""
    adds: list[dict] = []
    txns: dict[str, dict] = {}
    for v in range(base + 1, version + 1):
        try:
            with open(os.path.join(log_dir, f"{v:020d}.json"), "rb") as f:
                text = f.read()
        except FileNotFoundError:
            return None
        for line in text.splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if len(action) != 1:
                return None
            ((kind, body),) = action.items()
            if kind == "add":
                adds.append(body)
            elif kind == "txn":
                if int(body["version"]) >= int(txns.get(body["appId"], {}).get("version", -1)):
                    txns[body["appId"]] = body
            elif kind != "commitInfo":
                return None
    return adds, txns


def _reconciled(previous: pa.Table, adds: list[dict], txns: dict[str, dict]) -> pa.Table | None:
    """The previous checkpoint's rows, the app ids given a newer version left out, then the adds and the
    newer versions, in the previous checkpoint's schema; None when that schema lacks a column needed."""
    schema = previous.schema
    if "add" not in schema.names or "txn" not in schema.names:
        return None
    add_fields = _fields(schema.field("add").type)
    txn_fields = _fields(schema.field("txn").type)
    if not _ADD_NEEDED <= add_fields <= _ADD_KNOWN:
        return None  # stats_parsed or partitionValues_parsed: columns this does not fill
    if not {"appId", "version"} <= txn_fields:
        return None
    if not all(_carried(a) <= _ADD_KEYS & add_fields for a in adds):
        return None  # a field this does not carry (a deletion vector, row tracking)
    kept = previous
    txn = previous.column("txn")
    if txns and txn.null_count < previous.num_rows:
        replaced = pc.is_in(pc.struct_field(txn, "appId"), value_set=pa.array(list(txns), pa.string()))
        kept = previous.filter(pc.invert(pc.fill_null(replaced, False)))
    rows: list[dict] = []
    for a in adds:
        row = {k: a.get(k) for k in add_fields}
        row["partitionValues"] = list((a.get("partitionValues") or {}).items())
        if "tags" in add_fields:
            row["tags"] = list(a["tags"].items()) if a.get("tags") else None
        rows.append({"add": row})
    for t in txns.values():
        rows.append({"txn": {k: t.get(k) for k in txn_fields}})
    added = pa.Table.from_pylist(rows, schema=schema)
    return pa.concat_tables([kept, added])


def _carried(add: dict) -> set[str]:
    """The keys of an add that say something: deltalake's own commits spell out ``"baseRowId": null``
    and the like, which is what a missing key says too."""
    return {k for k, v in add.items() if v is not None or k in _ADD_NEEDED}


def _fields(struct: pa.DataType) -> set[str]:
    return {struct.field(i).name for i in range(struct.num_fields)}


def _read_json(path: str) -> object:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (FileNotFoundError, ValueError):
        return None


def _write_bytes(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _write_atomically(log_dir: str, name: str, write) -> None:  # noqa: ANN001
    """``write(temporary path)``, synced, then renamed to ``name``: readers see the whole file or none."""
    temporary = os.path.join(log_dir, f"{TEMPORARY_PREFIX}{uuid.uuid4()}.tmp")
    try:
        write(temporary)
        with open(temporary, "rb+") as f:
            os.fsync(f.fileno())
        kill_points.reached("checkpoint_step")  # the kill tests' points: each file written, not yet renamed
        os.replace(temporary, os.path.join(log_dir, name))
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)

"""The journal rows whose ``message_id``, ``conversation_id`` or ``id`` is one of a few values, found
through ``message_keys`` when it exists: what ``find`` and ``where`` ask.

Why the answer never depends on the index: the index says where rows may be, the journal says what
they are. In three steps:

1. the index's files whose log statistics of ``key`` admit a value (after ``rewrite``: ~1 file per
   value; between rewrites, every increment file whose range admits it), of which the row groups
   holding the values are read: candidate journal rows ``(queue, seq)``;
2. the journal files (of its current version) the index does not cover: those not in the version the
   index was built up to (drained since, or re-written by a compaction or a delete since);
3. one journal lookup (``LakeEngine.lookup`` with ``Within``) over the files of step 2 and the files
   whose log statistics of ``(queue, seq)`` admit a candidate, which reads the asked column and keeps
   only rows holding a value: a row erased or retired since it was indexed is simply not there, and a
   stale candidate costs one file read.

Without an index (or one the journal's log can no longer be compared with), the journal lookup reads
the column of every file, as before. The figures say which way was taken and what was read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from queuelake.errors import LakeError
from queuelake.lake import record_tables
from queuelake.lake.engines import table_engine
from queuelake.lake.lookup import Lookup, Within
from queuelake.lake.port import LakeEngine
from queuelake.pipeline.key_index.build import KEYS, watermark
from queuelake.report import log

MESSAGES = record_tables.MESSAGES.name
# the index kinds holding the rows of a column: a row's ``id`` is indexed as ``id`` only where it differs
# from its message id, so the rows of an id are those of both kinds
_KINDS = {"message_id": ("message_id",), "conversation_id": ("conversation_id",), "id": ("id", "message_id")}


def journal_rows(lake: LakeEngine, column: str, values: Sequence[str]) -> tuple[Lookup, dict[str, Any]]:
    """The journal's (current version's) rows whose ``column`` holds one of ``values``, and what was
    read for them (``index``: whether the index was used, its files read and pruned, the candidates,
    the journal files it did not cover)."""
    if column not in _KINDS:
        raise ValueError(f"the journal's index holds no {column!r}")
    from queuelake.pipeline.store.erase import unfinished_erases

    version = lake.table_version(MESSAGES)
    indexed = watermark(lake)
    erasing = unfinished_erases(lake.root) if indexed is not None else []
    if erasing:  # its index deletes went first: the index may not name rows the journal still holds
        why = f"an erase has not finished ({', '.join(erasing)}): run an erase again to finish it"
        log.warning("the id index is not used: %s; the journal is read whole", why)
        return lake.lookup(MESSAGES, column, values, version=version), {"used": False, "why": why}
    if version is None or indexed is None:
        return lake.lookup(MESSAGES, column, values, version=version), {"used": False, "why": "no index yet"}
    if indexed > version:
        why = f"the index covers journal version {indexed}, beyond the journal's {version}"
        return lake.lookup(MESSAGES, column, values, version=version), {"used": False, "why": why}
    try:
        covered = {_name(uri) for uri in lake.added_files(MESSAGES, None, indexed)}
        current = {_name(uri) for uri in lake.added_files(MESSAGES, None, version)}
    except LakeError as exc:  # the log no longer holds the indexed version
        return lake.lookup(MESSAGES, column, values, version=version), {"used": False, "why": str(exc)}
    unindexed = frozenset(current - covered)
    found = table_engine(lake, KEYS).lookup(KEYS, "key", values)
    hits = found.rows.filter(pc.is_in(found.rows.column("kind"), value_set=pa.array(_KINDS[column], pa.string())))
    points = hits.select(["queue", "seq"]).group_by(["queue", "seq"]).aggregate([])
    within = Within(("queue", "seq"), tuple(zip(points["queue"].to_pylist(), points["seq"].to_pylist())), unindexed)
    result = lake.lookup(MESSAGES, column, values, version=version, within=within)
    return result, {
        "used": True,
        "journal_version_indexed": indexed,
        "index_files": found.files,
        "index_files_pruned": found.files_pruned,
        "index_files_read": found.files_matched,
        "candidates": points.num_rows,
        "unindexed_files": len(unindexed),
    }


def _name(uri: str) -> str:
    return unquote(uri).rsplit("/", 1)[-1]

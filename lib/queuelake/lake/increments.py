"""What a table gained between two versions: the data files its commits added.

Transform and publish consume tables incrementally. Delta's change data feed would need writer
protocol 4 (our tables stay at 1/2 so every engine can write them), so increments come from the
commit log itself: the ``add`` actions with ``dataChange: true`` of versions (after, upto]. A
compaction re-adds rows with ``dataChange: false`` and is rightly ignored; a delete (retention,
``erase``) re-adds the kept rows of the files it rewrote with ``dataChange: true``, and its commits
are skipped too: those rows were consumed when they first landed. Works for tables written
by either engine: the log format is the same.
"""

from __future__ import annotations

import json
from urllib.parse import unquote

from deltalake import DeltaTable

from queuelake.errors import LakeError
from queuelake.lake.deletes import DELETE_OPERATION
from queuelake.lake.reading import local_paths
from queuelake.lake.storage import filesystem, options_for


def _absolute(table_uri: str, path: str) -> str:
    if "://" in path:
        return path
    return table_uri.rstrip("/") + "/" + unquote(path)


def snapshot_files(table_uri: str, version: int, storage_options: dict[str, str] | None = None) -> list[str]:
    """Every data file of the table as of a version, sorted (a stable order for batching).
    ``storage_options`` default: those of the lake the table is in (registered by its engine)."""
    options = storage_options if storage_options is not None else options_for(table_uri)
    table = DeltaTable(table_uri, version=version, storage_options=dict(options) or None)
    return sorted(local_paths(table, table.file_uris()))


def slices(
    table_uri: str, after: int | None, upto: int, max_rows: int, storage_options: dict[str, str] | None = None
) -> list[tuple[int | None, int]]:
    """Versions (after, upto] cut into consecutive ranges ``(a, b]`` of at most ``max_rows`` new rows each
    (a single commit larger than that is a range of its own), counted from the commits' ``add`` stats.

    Why: a stage that takes an increment in one Spark job holds it all (the first backlog of 5M journal
    rows ran the default local Spark out of memory); taken a range at a time, each committed as an
    increment of its own, memory is bounded by ``max_rows`` and a killed run resumes at the next range.
    One range, the whole span, where the log cannot be cut: a whole table (``after=None``) whose history
    holds more than appends (a compaction or a delete: older files may be gone), a commit the log no
    longer has, or an add without row counts."""
    if after is not None and after >= upto:
        return []
    whole: list[tuple[int | None, int]] = [(after, upto)]
    fs, root = filesystem(table_uri, storage_options)
    root = root.rstrip("/")
    ranges: list[tuple[int | None, int]] = []
    start, rows = after, 0
    for version in range((after + 1) if after is not None else 0, upto + 1):
        try:
            with fs.open_input_stream(f"{root}/_delta_log/{version:020d}.json") as stream:
                actions = [json.loads(line) for line in stream.read().decode("utf-8").splitlines() if line.strip()]
        except FileNotFoundError:
            return whole
        if any((a.get("commitInfo") or {}).get("operation") == DELETE_OPERATION for a in actions):
            if after is None:
                return whole
            continue  # re-added rows are not new (see added_files)
        if after is None and any("remove" in a for a in actions):
            return whole
        added = 0
        for action in actions:
            add = action.get("add")
            if add and add.get("dataChange", True):
                count = json.loads(add.get("stats") or "{}").get("numRecords")
                if count is None:
                    return whole
                added += int(count)
        if rows and rows + added > max_rows:
            ranges.append((start, version - 1))
            start, rows = version - 1, 0
        rows += added
    ranges.append((start, upto))
    return ranges


def added_files(
    table_uri: str, after: int | None, upto: int, storage_options: dict[str, str] | None = None
) -> list[str]:
    """Data files added by versions (after, upto], sorted; ``after=None`` means the whole table.
    ``storage_options`` default: those of the lake the table is in (registered by its engine)."""
    if after is None:
        return snapshot_files(table_uri, upto, storage_options)
    if after >= upto:
        return []
    fs, root = filesystem(table_uri, storage_options)
    root = root.rstrip("/")
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
        actions = [json.loads(line) for line in text.splitlines() if line.strip()]
        if any((a.get("commitInfo") or {}).get("operation") == DELETE_OPERATION for a in actions):
            # a delete (retention, erase) re-adds the kept rows of the files it rewrote with
            # dataChange: true; they are not new rows, and a transform must not see them twice
            continue
        for action in actions:
            add = action.get("add")
            if add and add.get("dataChange", True):
                added.append(_absolute(table_uri, add["path"]))
    return sorted(added)

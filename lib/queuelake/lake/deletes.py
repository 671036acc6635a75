"""Rows leaving a table: counted, deleted by predicate, and their files purged (delta-rs).

Why a module of its own: retention (``maintain``) and ``queuelake erase`` remove journal rows, and
both need the same three things from the lake: how many rows and files a predicate reaches (a dry
run says so and changes nothing), a delete that commits beside a running drain, and afterwards the
removed files gone from storage. The pipelines hand a ``RowFilter`` to the port
(``LakeEngine.delete_rows`` ...); only this module turns it into deltalake calls.

What was measured on deltalake 1.6.6 (``tests/pipeline/store/test_retention.py`` keeps it true):
``DeltaTable.delete`` drops a file all of whose rows match without rewriting it (its add action is
removed, nothing is written: ``num_added_files`` 0, ``num_copied_rows`` 0); it still opens such a
file to evaluate the predicate on its columns (a whole-file delete of a file missing from storage
fails), which for ``drained_at`` is one small column. A file with some matching rows is rewritten
with the others (``num_added_files``, ``num_copied_rows``).

A filter may carry the keys it selects (``RowFilter.keys``, one column): deltalake then deletes by a
MERGE of the keys' table (``when_matched_delete``) rather than by the SQL text, whose IN list crashes
past ~20,000 values. Why: a retention removing 1.5M messages' typed rows took 300 deletes of 5,000
ids, each rewriting the files they were in (7 s each, 20-35 min a rule: a review); one MERGE joins
them all and rewrites each file once (150,000 ids: 4 s where 30 deletes took 100-117 s). Such a commit
is a MERGE in the log, marked as a delete (``DELETE_BY_KEYS``): ``is_delete`` tells readers of the log
(``increments.py``) that its files hold no new row.

Concurrency: the drain appends to the journal with ``create_write_transaction`` (blind appends with
an application transaction). A delete whose read predicate the appended files' statistics may
satisfy fails its commit with a conflict rather than miss them; it is retried from a fresh snapshot
(``_ATTEMPTS``). The rows a delete removes are exactly the rows that match in the snapshot it read
(``Deleted.read_version``): files appended after that snapshot are never touched, whatever they hold.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from queuelake.errors import LakeError
from queuelake.lake import storage
from queuelake.lake.delta_rs.commits import WRITE_ID_KEY, outcome_unknown
from queuelake.lake.reading import local_paths, parquet_format
from queuelake.stopping import interruptible

if TYPE_CHECKING:
    import pyarrow.dataset as ds
    from deltalake import DeltaTable, WriterProperties

_ATTEMPTS = 20
# values in one IN (or NOT IN) list of a DELETE's predicate: deltalake's DELETE crashes the process (a
# segfault, not an error) on a list of ~20,000-30,000, so callers naming more rows split them into several
# deletes (``pipeline/store``: erase's and retention's derived rows, the typed rows, the id index)
MAX_IN_LIST = 5_000
DELETE_OPERATION = "DELETE"  # the commitInfo operation of a delete (delta-rs and delta-spark alike)
MERGE_OPERATION = "MERGE"
# the commitInfo key a delete by keys (a MERGE that only deletes) carries, "true"
DELETE_BY_KEYS = "queuelake.delete_by_keys"


def is_delete(commit_info: dict[str, Any]) -> bool:
    """Whether a commit (its ``commitInfo``) is a delete: a DELETE, or a MERGE of ours that only deleted
    (its added files are the rewritten files' kept rows, no new row)."""
    operation = commit_info.get("operation")
    return operation == DELETE_OPERATION or (
        operation == MERGE_OPERATION and str(commit_info.get(DELETE_BY_KEYS)) == "true"
    )


@dataclass(frozen=True)
class RowFilter:
    """Which rows: the same condition as SQL text for the engine's DELETE (DataFusion's dialect:
    double-quoted identifiers, single-quoted text, times as UTC ISO text) and as a pyarrow expression
    (to count and list the rows without deleting). ``columns``: the columns it reads. ``keys``: for a
    filter selecting rows by one column's values, those values as a one-column table; an engine that
    deletes by keys (``LakeEngine.deletes_by_keys``) joins it and never runs ``sql``, which may then
    only describe the selection."""

    sql: str
    arrow: ds.Expression
    columns: tuple[str, ...]
    keys: pa.Table | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Reached:
    """What a filter reaches in one version: rows, and files (all of whose rows match: ``files_whole``;
    some: ``files_partial``, which a delete rewrites)."""

    rows: int
    files_whole: int
    files_partial: int
    version: int | None

    @property
    def files(self) -> int:
        return self.files_whole + self.files_partial


@dataclass(frozen=True)
class Deleted:
    """A delete's commit: rows removed, files that left the log, files written anew with the kept
    rows of partly matching files, the version it read (its rows are those matching there) and the
    version it made (None: nothing matched, no commit)."""

    rows: int
    files_removed: int
    files_rewritten: int
    read_version: int | None
    version: int | None
    attempts: int = 1


def reached(dt: DeltaTable | None, where: RowFilter) -> Reached:
    """Count what ``where`` reaches in ``dt``'s version, file by file, reading only its columns
    (row groups whose statistics exclude it are skipped unread)."""
    if dt is None:
        return Reached(0, 0, 0, None)
    rows = whole = partial = 0
    for _uri, records, fragment in _fragments(dt, where):
        matched = _filtered(fragment, where, list(where.columns)).num_rows
        if matched:
            rows += matched
            if matched == records:
                whole += 1
            else:
                partial += 1
    return Reached(rows, whole, partial, dt.version())


def matching(dt: DeltaTable | None, where: RowFilter, columns: list[str]) -> pa.Table:
    """The matching rows' ``columns`` in ``dt``'s version (for an erase's keys)."""
    if dt is None:
        return pa.schema([]).empty_table()
    schema = pa.schema(dt.schema().to_arrow())
    wanted = sorted(set(columns) | set(where.columns))
    parts = [_filtered(dataset, where, wanted).select(columns) for _, _, dataset in _fragments(dt, where, wanted)]
    if not parts:
        return pa.schema([schema.field(c) for c in columns]).empty_table()
    return pa.concat_tables(parts)


# rows a batch of ``matching_reduced`` holds: a journal row's headers are ~1-3 KB decoded
REDUCED_BATCH_ROWS = 16_384


def matching_reduced(
    dt: DeltaTable | None, where: RowFilter, columns: list[str], reduce: Callable[[pa.Table], pa.Table]
) -> pa.Table:
    """``reduce`` of the matching rows' ``columns``, applied batch by batch as the files are read, the
    results concatenated: memory holds one batch and what the reductions keep. For a reader that needs
    a wide column (the headers) only to derive a narrow one, over more rows than memory holds (``health``
    held a day's audit copies whole: 3 GB for a million)."""
    if dt is None:
        return reduce(pa.schema([]).empty_table())
    schema = pa.schema(dt.schema().to_arrow())
    wanted = sorted(set(columns) | set(where.columns))
    parts = [
        reduce(pa.Table.from_batches([batch]).select(columns))
        for _, _, dataset in _fragments(dt, where, wanted)
        for batch in _filtered_batches(dataset, where, wanted)
        if batch.num_rows
    ]
    if not parts:
        return reduce(pa.schema([schema.field(c) for c in columns]).empty_table())
    return pa.concat_tables(parts)


def _filtered_batches(dataset: Any, where: RowFilter, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """``_filtered``'s rows as batches of at most ``REDUCED_BATCH_ROWS`` (a file of ``string_view`` columns:
    read unfiltered and filtered batch by batch)."""
    what = "a file to read rows from"
    size = REDUCED_BATCH_ROWS
    try:
        batches = storage.batches_retrying(
            lambda: dataset.to_batches(columns=columns, filter=where.arrow, batch_size=size), what
        )
        first = next(batches, None)
    except pa.ArrowNotImplementedError:
        for batch in storage.batches_retrying(lambda: dataset.to_batches(columns=columns, batch_size=size), what):
            yield from pa.Table.from_batches([batch]).filter(where.arrow).to_batches()
        return
    if first is not None:
        yield first
        yield from batches


def _filtered(dataset: Any, where: RowFilter, columns: list[str]) -> pa.Table:
    """The file's rows matching ``where`` (its ``columns``). A file a delete rewrote (delta-rs 1.x)
    stores its text columns as ``string_view``, against which pyarrow cannot evaluate a ``string``
    literal on the row groups' statistics (``equal(string, string_view)`` has no kernel): such a file
    is read whole (its columns cast to the table's types) and filtered in memory."""
    what = "a file to delete rows from"
    try:
        return storage.read_retrying(lambda: dataset.to_table(columns=columns, filter=where.arrow), what)
    except pa.ArrowNotImplementedError:
        return storage.read_retrying(lambda: dataset.to_table(columns=columns), what).filter(where.arrow)


def _fragments(dt: DeltaTable, where: RowFilter, columns: list[str] | None = None) -> list[tuple[str, int, Any]]:
    """(uri, rows per the log, pyarrow fragment read with the table's schema) for each live file."""
    import pyarrow.dataset as ds

    actions = pa.table(dt.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return []
    uris = local_paths(dt, dt.file_uris())
    by_path = {uri.rsplit("/", 1)[-1]: uri for uri in uris}
    schema = pa.schema(dt.schema().to_arrow())
    read_schema = pa.schema([schema.field(c) for c in sorted(set(columns or where.columns))])
    fs, _ = storage.filesystem(uris[0])
    fmt = parquet_format()
    out = []
    for path, records in zip(actions.column("path").to_pylist(), actions.column("num_records").to_pylist()):
        uri = by_path.get(path.rsplit("/", 1)[-1])
        if uri is None:
            raise LakeError(f"{dt.table_uri}: the log's file {path} is not among its file URIs")
        dataset = ds.dataset([storage.path_in(uri)], schema=read_schema, format=fmt, filesystem=fs)
        out.append((uri, int(records) if records is not None else dataset.count_rows(), dataset))
    return out


def delete(
    load: Any,
    table: str,
    where: RowFilter,
    metadata: dict[str, str] | None = None,
    properties: WriterProperties | None = None,
) -> Deleted:
    """Delete ``where``'s rows in one commit, retried from a fresh snapshot when a concurrent commit
    conflicts (``load()``: the table at its newest version). Nothing matching: no commit. ``properties``:
    how the kept rows of the files it reaches are written anew (row groups, codec)."""
    from deltalake import CommitProperties
    from deltalake.exceptions import CommitFailedError

    for attempt in range(1, _ATTEMPTS + 1):
        dt = load()
        if reached(dt, where).rows == 0:
            return Deleted(0, 0, 0, dt.version(), None, attempt)
        since = dt.version()
        try:
            # in a thread the main one waits on (``stopping.interruptible``): a stop signal is taken at once,
            # not when deltalake's native delete returns (a retention's MERGE of a million messages' typed
            # rows held a second signal ~40 s: a review). Left behind, it commits or not, as after a kill
            if where.keys is not None:
                marked = {**(metadata or {}), DELETE_BY_KEYS: "true"}
                merged = functools.partial(_merge_delete, dt, where.keys, marked, properties)
                metrics = interruptible(merged, still=f"{table}: deleting the rows of {len(where.keys)} key(s)")
            else:
                committed = CommitProperties(custom_metadata=metadata or {})
                deleted = functools.partial(dt.delete, where.sql, properties, commit_properties=committed)
                metrics = interruptible(deleted, still=f"{table}: deleting rows")
        except CommitFailedError:
            time.sleep(min(0.05 * 2**attempt, 2.0))
            continue
        except Exception as exc:  # noqa: BLE001 - DataFusion's plan errors: say which table and predicate
            if "conflict" in str(exc).lower() or "concurrent" in str(exc).lower():
                time.sleep(min(0.05 * 2**attempt, 2.0))
                continue
            if outcome_unknown(exc) and attempt < _ATTEMPTS:
                # the store may have taken the commit and lost its reply (a review: a reset after the PUT
                # failed an erase whose delete had landed): the log tells, by the delete's write id
                time.sleep(min(0.5 * 2**attempt, 5.0))
                landed = _landed(load(), since, metadata, attempt)
                if landed is not None:
                    return landed
                continue
            raise LakeError(f"lake table {table}: delete where {where.sql} failed: {exc}") from exc
        dt = load()
        commit = dt.history(limit=1)[0]
        rows, removed, rewritten = _figures(metrics)
        return Deleted(
            rows=rows,
            files_removed=removed,
            files_rewritten=rewritten,
            read_version=_read_version(dt, metadata),
            version=int(commit.get("version", dt.version())),
            attempts=attempt,
        )
    raise LakeError(f"lake table {table}: the delete where {where.sql} kept conflicting ({_ATTEMPTS} attempts)")


def _merge_delete(
    dt: DeltaTable, keys: pa.Table, metadata: dict[str, str], properties: WriterProperties | None
) -> dict[str, Any]:
    """Delete the rows whose ``keys`` column (its only one) holds one of its values, by one MERGE."""
    from deltalake import CommitProperties

    (column,) = keys.column_names
    quoted = '"' + column.replace('"', '""') + '"'
    return dict(
        dt.merge(
            source=keys,
            predicate=f"target.{quoted} = source.{quoted}",
            source_alias="source",
            target_alias="target",
            writer_properties=properties,
            commit_properties=CommitProperties(custom_metadata=metadata),
        )
        .when_matched_delete()
        .execute()
    )


def _figures(metrics: dict[str, Any]) -> tuple[int, int, int]:
    """(rows deleted, files removed, files written anew) of a DELETE's or a MERGE's metrics."""

    def first(*names: str) -> int:
        return next((int(metrics[n]) for n in names if metrics.get(n) is not None), 0)

    return (
        first("num_deleted_rows", "num_target_rows_deleted"),
        first("num_removed_files", "num_target_files_removed"),
        first("num_added_files", "num_target_files_added"),
    )


def _landed(dt: DeltaTable, since: int, metadata: dict[str, str] | None, attempt: int) -> Deleted | None:
    """The delete that landed after version ``since`` carrying ``metadata``'s write id, with the figures
    its commit recorded; None when none did (or the delete carries no write id to tell it by)."""
    write_id = (metadata or {}).get(WRITE_ID_KEY)
    newer = dt.version() - since
    if write_id is None or newer <= 0:
        return None
    for commit in dt.history(limit=newer):
        if commit.get(WRITE_ID_KEY) == write_id:
            rows, removed, rewritten = _figures(commit.get("operationMetrics") or {})
            return Deleted(
                rows=rows,
                files_removed=removed,
                files_rewritten=rewritten,
                read_version=int(commit["readVersion"]) if commit.get("readVersion") is not None else since,
                version=int(commit.get("version", dt.version())),
                attempts=attempt,
            )
    return None


def _read_version(dt: DeltaTable, metadata: dict[str, str] | None) -> int | None:
    """The snapshot our delete read (its commitInfo ``readVersion``), found by its metadata."""
    for commit in dt.history(limit=50):
        if is_delete(commit) and all(commit.get(k) == v for k, v in (metadata or {}).items()):
            value = commit.get("readVersion")
            return int(value) if value is not None else None
    return None


def purge_removed(dt: DeltaTable) -> list[str]:
    """Delete from storage every file the log has tombstoned (removed by a delete, a compaction), now:
    what makes erased rows physically gone, time travel to earlier versions included.

    Never a "full" vacuum: that also deletes files no commit names, among them the drain's staged,
    not yet committed files of in-flight claims (the claim protocol), which would lose rows. deltalake's
    ``full=False`` (its "lite" mode) deletes only the log's tombstones, so staged files stay."""
    return list(dt.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False, full=False))

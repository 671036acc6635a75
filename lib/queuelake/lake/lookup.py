"""The rows of one table version whose one column holds one of a few values, found without Spark and
without reading whole rows: what ``queuelake find`` asks of a journal of millions of rows.

Why not ``read_arrow`` and a filter, or Spark: both read every column of every file (bodies and header
maps are nearly all of a journal's bytes) for the few rows of one message. Here, in three steps:

1. the files the Delta log lists for the version (never the folder: it also holds the drain's staged
   files of claims not yet committed), with their log statistics: a file whose ``[min, max]`` of the
   column excludes every value is skipped unopened;
2. of the others, only the column is read (row groups whose Parquet statistics exclude the values
   skipped unread), a few files at once on a pool of threads, to learn which files hold a match;
3. only the row groups holding a match are read whole, filtered again.

On a drain's layout (one file per batch of random GUIDs) step 1 prunes nothing and step 2 reads one
short column of every file: ~1-2 s at 10,000,000 rows on 2 cores. Clustering the journal so that
step 1 prunes was measured and not adopted (README, "Find": a Z-order rewrote the whole journal at
~1.5 GB of memory per million rows and pruned next to nothing on random GUIDs); step 1 pays where
ids do cluster (a journal compacted by another tool in id order, time-ordered ids).
Log statistics may be truncated prefixes (Delta writers cut long strings); a bound is compared on
its own length, so a truncated maximum never drops a file that holds a match.

``within`` (``Within``) narrows step 1 further for a caller that already knows where the rows may be:
points of other columns (the journal's ``(queue, seq)`` an index gave, ``pipeline/key_index``) that a
file's log statistics must admit, and files read whatever their statistics say (those the index does not
cover yet). Steps 2 and 3 are unchanged: every row returned holds a value asked for.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from queuelake import report
from queuelake.errors import LakeError
from queuelake.lake import storage
from queuelake.lake.arrow_types import as_string
from queuelake.lake.reading import INT96_UNIT, data_file_uris, table_schema
from queuelake.report import log

if TYPE_CHECKING:
    from deltalake import DeltaTable

# files whose column is read at once: the reads release the GIL, and on object storage each waits on
# a request. Measured at 10,000,000 rows on 2 cores: 1.0-1.5 s with 4 threads, against 2.0-2.2 s
# for pyarrow's dataset scanner over the same files and filter.
_THREADS = 8
PROGRESS_SECONDS = 10.0  # a progress line this often while the files' column is read


@dataclass(frozen=True)
class Lookup:
    """What ``LakeEngine.lookup`` found, and what it read to find it (for logs and summaries)."""

    rows: pa.Table  # the matching rows, every column of the table (in no particular order)
    version: int  # the table version searched
    files: int  # data files that version lists
    files_pruned: int  # skipped by their Delta log statistics, never opened
    files_scanned: int  # whose column was read (``files - files_pruned``)
    files_matched: int  # holding at least one match: only their matching row groups are read whole
    rows_scanned: int  # values of the column read in step 2


@dataclass(frozen=True)
class Within:
    """The files a lookup may open: those whose name (the last part of the path) is in ``always``,
    and those whose log statistics of ``columns`` admit one of ``points`` (a value per column, each
    within the file's [min, max]; a file without statistics of a column admits every point)."""

    columns: tuple[str, ...]
    points: tuple[tuple[Any, ...], ...]
    always: frozenset[str] = frozenset()

    def admits(self, name: str, bounds: list[tuple[Any, Any]]) -> bool:
        if name in self.always:
            return True
        return any(all(_within(v, low, high) for v, (low, high) in zip(p, bounds, strict=True)) for p in self.points)


def _within(value: Any, low: Any, high: Any) -> bool:
    if low is None or high is None or value is None:
        return True
    if isinstance(value, str):
        return value >= low and value[: len(high)] <= high  # a text bound may be a truncated prefix
    return bool(low <= value <= high)


def lookup(
    dt: DeltaTable,
    column: str,
    values: Sequence[str],
    within: Within | None = None,
    columns: Sequence[str] | None = None,
) -> Lookup:
    """Rows of the loaded version of ``dt`` whose string ``column`` equals one of ``values`` (of the
    files ``within`` admits, when given: the others count as pruned). ``columns``: only those (and
    ``column``) are read of the matching row groups, not whole rows (a replay's look at the copies an
    earlier replay sent read 100,000 journal rows with their bodies to use their headers)."""
    schema = table_schema(dt)
    if column not in schema.names:
        raise LakeError(f"lake table {dt.metadata().name or dt.table_uri}: no column {column!r}")
    if columns is not None:
        missing = [name for name in columns if name not in schema.names]
        if missing:
            raise LakeError(f"lake table {dt.metadata().name or dt.table_uri}: no column(s) {missing}")
        schema = pa.schema([schema.field(name) for name in dict.fromkeys([column, *columns])])
    if dt.metadata().partition_columns:
        raise LakeError("lookup reads unpartitioned tables (the journal is one)")
    wanted = sorted({str(v) for v in values})
    files = _files_with_bounds(dt, column)
    kept = [f for f in files if _may_hold(f.low, f.high, wanted)]
    if within is not None:
        admitted = _admitted(dt, within)
        kept = [f for f in kept if admitted.get(f.uri.rsplit("/", 1)[-1], True)]
    pruned = len(files) - len(kept)
    version = dt.version()
    if not kept or not wanted:
        return Lookup(schema.empty_table(), version, len(files), pruned, len(kept), 0, 0)
    fs, paths = _paths([f.uri for f in kept])
    value_set = pa.array(wanted, pa.string())
    read = [0]  # files whose column was read: what the progress line says

    def holds(path: str) -> list[int]:
        found = _holds(fs, path, column, value_set)
        read[0] += 1
        return found

    def say(took: float, ended: threading.Event) -> None:
        if not ended.is_set():
            log.info(
                "%s: looking for %d %s value(s) for %.0fs: %d of %d file(s) read",
                dt.table_uri.rstrip("/").rsplit("/", 1)[-1],
                len(wanted),
                column,
                took,
                read[0],
                len(paths),
            )

    # a line every PROGRESS_SECONDS: a journal of many files on a throttled store took minutes, silent (a review)
    with report.every(PROGRESS_SECONDS, say, "queuelake-lookup-progress"):
        with ThreadPoolExecutor(max_workers=min(_THREADS, len(paths))) as pool:
            groups = list(pool.map(holds, paths))
        hits = [(path, found) for path, found in zip(paths, groups, strict=True) if found]
        parts = [_matching_rows(fs, path, found, schema, column, value_set) for path, found in hits]
    rows = pa.concat_tables(parts) if parts else schema.empty_table()
    scanned = sum(f.rows or 0 for f in kept)
    return Lookup(rows, version, len(files), pruned, len(kept), len(hits), scanned)


@dataclass(frozen=True)
class _File:
    uri: str  # as pyarrow opens it (a local path, s3://...)
    low: str | None  # the column's bounds from the log, None without statistics
    high: str | None
    rows: int | None


def _files_with_bounds(dt: DeltaTable, column: str) -> list[_File]:
    """Every data file of the version with the column's min and max from the log."""
    actions = pa.table(dt.get_add_actions(flatten=True))
    uris = data_file_uris(dt, actions.column("path").to_pylist())
    none: list[str | None] = [None] * len(uris)
    low_name, high_name = f"min.{column}", f"max.{column}"
    lows = actions.column(low_name).to_pylist() if low_name in actions.column_names else none
    highs = actions.column(high_name).to_pylist() if high_name in actions.column_names else none
    rows = actions.column("num_records").to_pylist() if "num_records" in actions.column_names else none
    return [_File(*entry) for entry in zip(uris, lows, highs, rows, strict=True)]


def _admitted(dt: DeltaTable, within: Within) -> dict[str, bool]:
    """File name -> does ``within`` admit it, from the log's statistics of ``within.columns``."""
    actions = pa.table(dt.get_add_actions(flatten=True))
    names = [unquote(p).rsplit("/", 1)[-1] for p in actions.column("path").to_pylist()]
    none: list[Any] = [None] * len(names)
    bounds = []
    for name in within.columns:
        lows = actions.column(f"min.{name}").to_pylist() if f"min.{name}" in actions.column_names else none
        highs = actions.column(f"max.{name}").to_pylist() if f"max.{name}" in actions.column_names else none
        bounds.append(list(zip(lows, highs, strict=True)))
    return {file: within.admits(file, [b[i] for b in bounds]) for i, file in enumerate(names)}


def _may_hold(low: str | None, high: str | None, values: list[str]) -> bool:
    """Can a file whose column lies within [low, high] hold one of ``values``? A bound may be a
    truncated prefix: a value is compared with the maximum on the maximum's length."""
    if low is None or high is None:
        return True
    return any(value >= low and value[: len(high)] <= high for value in values)


def _holds(fs: Any, path: str, column: str, value_set: pa.Array) -> list[int]:
    """The row groups of the file that hold one of the values in ``column``. Reads that column alone,
    of the row groups whose Parquet statistics do not exclude the values (a file written before the
    column was added to the table holds none)."""
    import pyarrow.parquet as pq

    file = storage.read_retrying(lambda: pq.ParquetFile(path, filesystem=fs), path)
    parquet = file.metadata.schema  # leaf columns: a map or a list before ours shifts its index
    index = next((i for i in range(len(parquet)) if parquet.column(i).path == column), None)
    if index is None:
        return []
    found = []
    wanted = value_set.to_pylist()
    for group in range(file.metadata.num_row_groups):
        stats = file.metadata.row_group(group).column(index).statistics
        if stats is not None and stats.has_min_max and isinstance(stats.min, str) and isinstance(stats.max, str):
            if not _may_hold(stats.min, stats.max, wanted):
                continue
        read = functools.partial(file.read_row_group, group, columns=[column], use_threads=False)
        values = as_string(storage.read_retrying(read, path).column(0))
        if pc.any(pc.is_in(values, value_set=value_set)).as_py():
            found.append(group)
    return found


def _paths(uris: list[str]) -> tuple[Any, list[str]]:
    fs, first = storage.filesystem(uris[0])  # the lake's storage options, registered by its engine
    return fs, [first] + [storage.path_in(uri) for uri in uris[1:]]


def _matching_rows(
    fs: Any, path: str, groups: list[int], schema: pa.Schema, column: str, value_set: pa.Array
) -> pa.Table:
    """The rows of ``groups`` whose ``column`` holds one of the values, with the table's ``schema``: a
    column the file lacks (added to the table after it was written) reads as nulls, as Delta readers
    do. ``read_row_groups`` of one file: measured 0.02-0.13 s for two groups of 10,000 journal rows,
    against 0.16-0.22 s through a dataset fragment's subset."""
    import pyarrow.parquet as pq

    file = storage.read_retrying(
        lambda: pq.ParquetFile(path, filesystem=fs, coerce_int96_timestamp_unit=INT96_UNIT), path
    )
    present = [name for name in schema.names if name in file.schema_arrow.names]
    data = storage.read_retrying(lambda: file.read_row_groups(groups, columns=present, use_threads=True), path)
    # cast first: a file a delete rewrote holds string_view, which pyarrow cannot filter (no take kernel)
    arrays = [
        data.column(f.name).cast(f.type) if f.name in present else pa.nulls(data.num_rows, f.type) for f in schema
    ]
    typed = pa.Table.from_arrays(arrays, schema=schema)
    return typed.filter(pc.is_in(typed.column(column), value_set=value_set))

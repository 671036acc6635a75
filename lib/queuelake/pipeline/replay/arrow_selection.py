"""The selection's small columns read from the journal's files at one version, without Spark.

Why: the selection is small columns of a few rows; Spark took 7.5 s for it over a 100,000-row journal
with its session already up (the first query's planning, the Delta log, a job). Here the files of
version V (from the Delta log, through the lake port) are opened with pyarrow: the row groups whose
Parquet statistics exclude the predicate are skipped unread, and of the others only the columns the
selection needs are read (never headers or bodies). Each selected row keeps its file and its row
index in that file, as Spark's ``_metadata`` gives them, so the send reads its content the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from queuelake import stopping
from queuelake.lake import round_files
from queuelake.pipeline.replay.arrow_predicate import ArrowPredicate
from queuelake.pipeline.replay.rows import EMPTY_KEYS, KEY_COLUMNS

# what is_failure / is_audit are computed from (the Spark selection computes them the same way)
_FAILURE = ("failed_queue", "exception_type", "time_of_failure")
_AUDIT = ("processing_started", "processing_ended")


@dataclass
class Scan:
    """What the selection read: for the log line and the summary."""

    files: int = 0
    row_groups: int = 0
    row_groups_read: int = 0
    rows_read: int = 0


def select_keys(files: list[str], schema: pa.Schema, predicate: ArrowPredicate) -> tuple[pa.Table, Scan]:
    """The selected rows' key columns, ``is_failure``, ``is_audit``, ``file`` and ``row_index``, in
    the order the Spark selection returns them (sorted by the caller)."""
    scan = Scan(files=len(files))
    if not files:
        return EMPTY_KEYS.empty_table(), scan
    needed = sorted(set(KEY_COLUMNS) | set(_FAILURE) | set(_AUDIT) | predicate.columns)
    read_schema = pa.schema([schema.field(name) for name in needed])
    # schema=: a file written before a column was added reads it as nulls, as Delta readers do
    dataset = round_files.dataset(files, read_schema)  # with the lake's storage options (object storage)
    parts: list[pa.Table] = []
    for uri, fragment in zip(files, dataset.get_fragments(), strict=True):
        starts = np.cumsum([0] + [rg.num_rows for rg in fragment.row_groups])
        scan.row_groups += len(fragment.row_groups)
        for piece in _row_groups(fragment, predicate, read_schema):
            (group,) = piece.row_groups
            table = round_files.read_piece(piece, read_schema, needed, uri)
            if stopping.requested():  # a Ctrl-C during a selection of thousands of files waited for all of them
                raise stopping.Interrupted("replay: stopped while selecting the journal's rows; nothing was sent")
            scan.row_groups_read += 1
            scan.rows_read += table.num_rows
            start = int(starts[group.id])
            table = table.append_column("row_index", pa.array(np.arange(start, start + table.num_rows)))
            table = table.filter(predicate.expression)
            if table.num_rows:
                parts.append(_keys(table, uri))
    if not parts:
        return EMPTY_KEYS.empty_table(), scan
    return pa.concat_tables(parts), scan


def _row_groups(fragment: ds.ParquetFileFragment, predicate: ArrowPredicate, schema: pa.Schema) -> list[ds.Fragment]:
    """The file's row groups the predicate may match, by their statistics. A file a delete rewrote
    (an erase, retention: delta-rs 1.x) stores its text columns as ``string_view``, against which
    pyarrow cannot compare a ``string`` literal (``equal(string, string_view)`` has no kernel): every
    row group of such a file is read (cast to the table's types) and filtered in memory. Without
    this, every replay failed after an erase or retention until a compaction merged the file away."""
    try:
        return list(fragment.split_by_row_group(filter=predicate.expression, schema=schema))
    except pa.ArrowNotImplementedError:
        return list(fragment.split_by_row_group(schema=schema))


def _keys(table: pa.Table, uri: str) -> pa.Table:
    import pyarrow.compute as pc

    def any_valid(names: tuple[str, ...]) -> pa.Array:
        out = pc.is_valid(table.column(names[0]))
        for name in names[1:]:
            out = pc.or_(out, pc.is_valid(table.column(name)))
        return out

    columns = [table.column(c) for c in KEY_COLUMNS]
    file = pa.DictionaryArray.from_arrays(pa.array(np.zeros(table.num_rows, np.int32)), pa.array([uri], pa.string()))
    columns += [any_valid(_FAILURE), any_valid(_AUDIT), file]
    columns.append(table.column("row_index"))
    return pa.Table.from_arrays(columns, schema=EMPTY_KEYS)

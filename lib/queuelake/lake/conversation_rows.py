"""The journal rows of one conversation (``conversation_id`` equal to a value), as Arrow on the driver.

Why a reader of its own: ``queuelake conversation`` draws one conversation, a handful to a few hundred
rows out of a journal of millions. ``read_arrow`` would bring the whole table (bodies too) to the
driver; this scans the files with the equality as a filter and the body left out, so only the matching
rows are kept. It reads the files the Delta log lists, as ``reading.read_arrow`` does (not
``DeltaTable.to_pyarrow_table``, for the reason ``reading.py`` gives).

Kept apart from ``reading.py`` on purpose: another lookup by conversation id (a ``find`` command) was
written at the same time; the two are meant to become one reader, and a module of its own is the
easiest to merge or remove.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.dataset as ds

from queuelake.lake.reading import _filesystem_paths, files_by_partition, parse_partition_value, table_schema

if TYPE_CHECKING:
    from deltalake import DeltaTable

CONVERSATION_COLUMN = "conversation_id"


def read_conversation_rows(dt: DeltaTable, conversation_id: str, columns: list[str] | None = None) -> pa.Table:
    """The rows of the loaded version whose ``conversation_id`` equals ``conversation_id``, with
    ``columns`` (default: every column but ``body``), in the files' order."""
    schema = table_schema(dt)
    if CONVERSATION_COLUMN not in schema.names:
        raise KeyError(f"the table has no {CONVERSATION_COLUMN} column")
    wanted = list(columns) if columns is not None else [n for n in schema.names if n != "body"]
    unknown = [c for c in wanted if c not in schema.names]
    if unknown:
        raise KeyError(f"no such column(s): {', '.join(unknown)}")
    partition_by = list(dt.metadata().partition_columns)
    out_schema = pa.schema([schema.field(c) for c in wanted])
    data_schema = pa.schema([f for f in schema if f.name not in partition_by])
    pieces = []
    for values, uris in files_by_partition(dt):
        if CONVERSATION_COLUMN in partition_by:
            if values.get(CONVERSATION_COLUMN) != conversation_id:
                continue
            condition = None
        else:
            condition = ds.field(CONVERSATION_COLUMN) == conversation_id
        filesystem, paths = _filesystem_paths(uris)
        dataset = ds.dataset(paths, schema=data_schema, format="parquet", filesystem=filesystem)
        data = _matching(dataset, [c for c in wanted if c not in partition_by], condition)
        arrays = []
        for field in out_schema:
            if field.name in partition_by:
                value = parse_partition_value(values[field.name], field.type)
                arrays.append(pa.array([value] * data.num_rows, field.type))
            else:
                arrays.append(data.column(field.name))
        pieces.append(pa.Table.from_arrays(arrays, schema=out_schema))
    if not pieces:
        return out_schema.empty_table()
    return pa.concat_tables(pieces)


def _matching(dataset: ds.Dataset, columns: list[str], condition: ds.Expression | None) -> pa.Table:
    """The rows of ``dataset`` meeting ``condition``, in file and row order. Row group by row group, the
    id column alone is read first, and the wanted columns only of row groups that hold the id: a
    conversation lies in a few row groups of a large journal, and decoding every row's headers map to
    keep a few hundred rows was most of the time (row group statistics prune only where ids are ordered)."""
    if condition is None:
        return dataset.to_table(columns=columns)
    pieces = []
    for fragment in dataset.get_fragments(filter=condition):
        for group in fragment.split_by_row_group(filter=condition, schema=dataset.schema):
            if group.count_rows(filter=condition) == 0:
                continue
            pieces.append(group.to_table(columns=columns, filter=condition, schema=dataset.schema))
    if not pieces:
        return pa.schema([dataset.schema.field(c) for c in columns]).empty_table()
    return pa.concat_tables(pieces)

"""Rows per row group of the files deltalake rewrites (compaction), bounded by bytes as well as rows.

Why: deltalake writes up to a million rows per row group unless told otherwise, and reads a row group's
text column into one Arrow array whose offsets are 32-bit. A typed table of 2 MB fields, compacted once,
held 2.4-2.6 GiB of one column per row group, and every later compaction of it panicked ("byte array
offset overflow"); measured here, a compaction of 3,001 rows of 1 MB text wrote one row group of all of
them, and the next one panicked reading it, where with row groups of 100 rows both passed, at 0.6 GB of
memory instead of 2.7 GB. Writers on Spark's executors bound their row groups by Arrow bytes already
(``files.ROW_GROUP_BYTES``); a compaction has no byte bound, so the rows are sized here from the widest
rows the table's files hold, read from their footers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from queuelake.lake.files import ROW_GROUP_BYTES
from queuelake.lake.reading import data_file_uris
from queuelake.lake.round_files import open_file

if TYPE_CHECKING:
    from deltalake import DeltaTable

# deltalake's own default, kept where the rows are narrow
DEFAULT_ROWS = 1024 * 1024
FEWEST_ROWS = 16
# footers read per compaction: those of the files widest per row by the log's sizes (a compressed size:
# close enough to pick the widest, never used as the width itself)
SAMPLED_FILES = 8


def bounded_rows(dt: DeltaTable, rows: int | None) -> int:
    """``rows`` (the table's own, else deltalake's default), fewer when the table's widest row groups
    hold more than ``ROW_GROUP_BYTES`` in that many rows: never under ``FEWEST_ROWS``."""
    limit = rows or DEFAULT_ROWS
    width = widest_row_bytes(dt)
    if width <= 0:
        return limit
    return max(FEWEST_ROWS, min(limit, int(ROW_GROUP_BYTES // width)))


def widest_row_bytes(dt: DeltaTable) -> float:
    """The most bytes per row (uncompressed, as Parquet encodes them) of a row group among the files
    widest by the log's sizes; 0 for an empty table."""
    actions = pa.table(dt.get_add_actions(flatten=True))
    if actions.num_rows == 0 or "num_records" not in actions.column_names:
        return 0.0
    paths = actions.column("path").to_pylist()
    sizes = actions.column("size_bytes").to_pylist()
    counts = actions.column("num_records").to_pylist()
    by_width = sorted(
        ((size / count, path) for path, size, count in zip(paths, sizes, counts, strict=True) if count),
        reverse=True,
    )
    widest = 0.0
    for uri in data_file_uris(dt, [path for _, path in by_width[:SAMPLED_FILES]]):
        metadata = open_file(uri).metadata
        for group in (metadata.row_group(i) for i in range(metadata.num_row_groups)):
            if group.num_rows:
                widest = max(widest, group.total_byte_size / group.num_rows)
    return widest

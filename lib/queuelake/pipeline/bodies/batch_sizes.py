"""Spark's in-memory batches sized in bytes for a slice of large bodies, not in rows alone.

Why: Spark reads Parquet 4,096 rows at a time, caches 10,000 rows per batch and converts 10,000 rows
per Arrow batch, whatever the rows weigh. At about 1 KB a body that is 4 to 10 MB a batch; at 200 KB,
0.8 to 2 GB, past the default 1 GB driver by itself. The bodies stage knows its slice's average body
(``select.Plan.body_bytes``, from the files' footers) and sets these three to hold about
``BATCH_BYTES`` each for the slice, then puts back what the session had.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# small enough that two tasks' batches, and their copies, find room in a 1 GB heap beside Spark's own
# memory (16 MB batches of 2.9 KB bodies still ran it out of memory: Java's large arrays need
# contiguous room)
BATCH_BYTES = 4 * 2**20
FEWEST_ROWS = 16
# Spark's own defaults: never raised above them
ROWS = {
    "spark.sql.parquet.columnarReaderBatchSize": 4096,
    "spark.sql.inMemoryColumnarStorage.batchSize": 10_000,
    "spark.sql.execution.arrow.maxRecordsPerBatch": 10_000,
}


def rows_per_batch(average_row_bytes: float, default: int) -> int:
    """Rows of ``average_row_bytes`` that hold about ``BATCH_BYTES``, within [FEWEST_ROWS, default]."""
    if average_row_bytes <= 0:
        return default
    return max(FEWEST_ROWS, min(default, int(BATCH_BYTES / average_row_bytes)))


@contextmanager
def sized_for(spark: SparkSession, average_row_bytes: float) -> Iterator[dict[str, int]]:
    """The session's batch sizes for rows of ``average_row_bytes`` within the block (those it changed
    are yielded), the session's own values put back after it."""
    changed: dict[str, int] = {}
    before: dict[str, str | None] = {}
    for key, default in ROWS.items():
        current = spark.conf.get(key, None)
        effective = int(current) if current else default
        if effective <= 0:  # no limit (Arrow's maxRecordsPerBatch): Spark's row default bounds it then
            effective = default
        rows = rows_per_batch(average_row_bytes, effective)
        if rows != effective or (current is not None and int(current) <= 0):
            before[key] = current
            changed[key] = rows
            spark.conf.set(key, str(rows))
    try:
        yield changed
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)

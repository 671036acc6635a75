"""Which of an increment's message ids a typed table already holds, without reading the whole table.

Why: a message reaches the journal more than once (its business copy and its audit copy; a message
published to two subscribers, one drained and one audited; an error-queue copy), in one increment or
in two, and its typed table keeps one row. Checking every increment against every message id of the
table made each increment's cost grow with the table. Every copy of a message carries its
``NServiceBus.TimeSent`` header unchanged (the audit and error copies copy the headers through, the
subscribers' copies are one send), so a copy already in the table has exactly the ``time_sent`` of
the row it repeats. The check reads only the table's rows whose ``time_sent`` falls in the
increment's time ranges (a few ranges: the increment's send times, gaps over a minute split): the
lake reads those with the Parquet row groups' statistics on ``time_sent`` (``matching_rows``), so
row groups of other times are skipped unread. Rows without a ``time_sent`` are checked against the
table's rows without one.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc

from queuelake.lake.deletes import RowFilter
from queuelake.lake.port import LakeEngine

GAP_US = 60 * 1_000_000  # send times closer than a minute share a range
MAX_RANGES = 64  # beyond it the closest ranges are merged: a few wide ranges beat many filters


class Times:
    """An increment's send times (per type): ranges of microseconds since the epoch, and whether
    some rows have none."""

    def __init__(self, ranges: list[tuple[int, int]], nulls: bool) -> None:
        self.ranges = ranges
        self.nulls = nulls

    @classmethod
    def of(cls, chunks: list[pa.Array | pa.ChunkedArray]) -> Times:
        import numpy as np

        values = pa.chunked_array([c for c in chunks], pa.timestamp("us", tz="UTC")) if chunks else None
        if values is None or len(values) == 0:
            return cls([], False)
        nulls = values.null_count > 0
        micros = np.unique(pc.drop_null(values).cast(pa.int64()).to_numpy())
        if len(micros) == 0:
            return cls([], nulls)
        gaps = np.diff(micros)
        splits = np.flatnonzero(gaps > GAP_US)
        if len(splits) >= MAX_RANGES:  # keep the widest gaps as the splits
            splits = np.sort(splits[np.argsort(gaps[splits])[-(MAX_RANGES - 1) :]])
        starts = np.concatenate(([0], splits + 1))
        ends = np.concatenate((splits, [len(micros) - 1]))
        return cls([(int(micros[s]), int(micros[e])) for s, e in zip(starts, ends)], nulls)

    def row_filter(self) -> RowFilter | None:
        """The table rows an increment's copies could repeat; None: none (no rows)."""
        import pyarrow.dataset as ds

        field = ds.field("time_sent")
        arrow: ds.Expression | None = None
        sql: list[str] = []
        for low, high in self.ranges:
            lo, hi = _ts(low), _ts(high)
            part = (field >= pa.scalar(lo, pa.timestamp("us", tz="UTC"))) & (
                field <= pa.scalar(hi, pa.timestamp("us", tz="UTC"))
            )
            arrow = part if arrow is None else arrow | part
            sql.append(f"(\"time_sent\" >= '{lo.isoformat()}' AND \"time_sent\" <= '{hi.isoformat()}')")
        if self.nulls:
            arrow = field.is_null() if arrow is None else arrow | field.is_null()
            sql.append('"time_sent" IS NULL')
        if arrow is None:
            return None
        return RowFilter(sql=" OR ".join(sql), arrow=arrow, columns=("time_sent",))


def _ts(micros: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=micros)


def seen_ids(lake: LakeEngine, table: str, times: Times) -> pa.Table:
    """The table's ``message_id`` (and ``time_sent``) of the rows that share the increment's send times."""
    where = times.row_filter()
    if where is None:
        return pa.table({"message_id": pa.array([], pa.string())})
    return lake.matching_rows(table, where, ["message_id"])

"""A data file's Delta statistics, gathered while it is written: ``numRecords``, and per top-level column
``nullCount`` and, where they can be stated exactly, ``minValues`` / ``maxValues``.

Why apart from ``files.py``: what a bound may say (strings up to 64 characters, timestamps in the log's
milliseconds, nothing past year 9999) is Delta's data-skipping contract, separate from how a file is
written and rolled; ``FileSink`` updates one ``ColumnStats`` per column with each batch it writes.

Runs in Spark Python workers too: keep imports light and everything picklable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from queuelake.timetext import iso_utc

_STRING_STATS_MAX = 64  # longer strings get no min/max: a truncated max would be wrong for data skipping
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _kind(t: pa.DataType) -> str | None:
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_timestamp(t):
        return "ts"
    if pa.types.is_date32(t):
        return "date"
    return None


@dataclass
class ColumnStats:
    """Running nullCount / min / max of one top-level column, in JSON-ready values.

    Statistics are optional in Delta, per column: a bound that cannot be stated exactly is left out
    (the column is then never skipped), never a reason to fail the file. Two such cases come from
    values at the edges of their types: a timestamp maximum in the last millisecond of year 9999
    (the log carries milliseconds and a maximum rounds up, to an instant that does not exist), and
    values Python cannot hold at all. Failing there failed the drain's batch on every run."""

    kind: str | None
    nested: bool
    nulls: int = 0
    lo: Any = None
    hi: Any = None
    unbounded: bool = False  # a value whose bound cannot be stated was seen: no min/max for the file

    def update(self, column: pa.ChunkedArray | pa.Array) -> None:
        self.nulls += column.null_count
        if self.kind is None or self.unbounded or column.null_count == len(column):
            return
        try:
            if self.kind in ("ts", "date"):
                column = column.cast(pa.int64() if self.kind == "ts" else pa.int32())
            bounds = pc.min_max(column)
            lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        except (pa.ArrowException, UnicodeDecodeError, ValueError, OverflowError):
            self.unbounded = True  # e.g. text that is not valid UTF-8 (a quarantined row's)
            return
        self.lo = lo if self.lo is None else min(self.lo, lo)
        self.hi = hi if self.hi is None else max(self.hi, hi)

    def bounds(self) -> tuple[Any, Any] | None:
        if self.lo is None or self.unbounded:
            return None
        if self.kind == "str":
            if len(self.lo) > _STRING_STATS_MAX or len(self.hi) > _STRING_STATS_MAX:
                return None
            return self.lo, self.hi
        if self.kind == "ts":  # micros since the epoch; stats carry milliseconds: floor min, ceil max
            return _ms_bound(self.lo // 1000), _ms_bound(-(-self.hi // 1000))
        if self.kind == "date":
            try:
                return str((_EPOCH + timedelta(days=self.lo)).date()), str((_EPOCH + timedelta(days=self.hi)).date())
            except OverflowError:
                return None
        return self.lo, self.hi

    def json_bounds(self) -> tuple[Any, Any] | None:
        """``bounds``, or None where either end cannot be written (see the class docstring)."""
        bounds = self.bounds()
        return None if bounds is None or None in bounds else bounds


def _ms_bound(millis: int) -> str | None:
    """Milliseconds since the epoch as the log's ISO text; None when that instant is outside
    0001-01-01 .. 9999-12-31 23:59:59.999 (the maximum of a file holding 9999-12-31 23:59:59.9995
    or later rounds up past it)."""
    try:
        return iso_utc(_EPOCH + timedelta(milliseconds=millis), "milliseconds")
    except OverflowError:
        return None


def column_stats(schema: pa.Schema) -> dict[str, ColumnStats]:
    """Empty running statistics for each top-level column of a file about to be written."""
    return {f.name: ColumnStats(_kind(f.type), pa.types.is_nested(f.type)) for f in schema}


def stats_json(rows: int, columns: dict[str, ColumnStats]) -> str:
    """Delta file statistics: numRecords, and per top-level column nullCount and (where exact) min/max."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name, stats in columns.items():
        if stats.nested:
            continue
        nulls[name] = stats.nulls
        bounds = stats.json_bounds()
        if bounds is not None:
            mins[name], maxs[name] = bounds
    return json.dumps(
        {"numRecords": rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls},
        separators=(",", ":"),
    )

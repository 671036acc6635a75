"""Spark rows to pandas for the notebooks, and the time buckets they are counted in.

Spark's own ``toPandas`` renders timestamps in the session's time zone (a Databricks cluster's may not be
UTC) and drops the zone, so every conversion here goes through the instant in microseconds and comes out
UTC-aware. Buckets follow the data's span (at most ``BUCKET_TARGET`` of them), so that a count per bucket
is not a zig-zag between 0 and 1; every bucket of a range is kept, empty ones 0, so that quiet periods
drop to zero instead of being bridged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import pandas as pd
from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# Time buckets: Spark window duration (grouping), pandas frequency (filling empty buckets), seconds (``auto``).
# Seconds for the demo's lake (everything drained within a minute or two), hours and a day for production.
BUCKETS: dict[str, tuple[str, str, int]] = {
    "second": ("1 second", "1s", 1),
    "10 seconds": ("10 seconds", "10s", 10),
    "minute": ("1 minute", "1min", 60),
    "5 minutes": ("5 minutes", "5min", 300),
    "15 minutes": ("15 minutes", "15min", 900),
    "hour": ("1 hour", "1h", 3600),
    "day": ("1 day", "1D", 86400),
    # for journals that span months and years, and for a time of year 1 or 9999 a sender wrote (a .NET
    # DateTime.MinValue or MaxValue): days over that span were millions of buckets, and a picture of them
    "week": ("7 days", "7D", 7 * 86400),
    "30 days": ("30 days", "30D", 30 * 86400),
    "365 days": ("365 days", "365D", 365 * 86400),
}

# ``auto`` buckets: the finest that cuts the span into at most this many. A day is 24 hours, a demo drained
# within seconds one second; more buckets than this spread sparse events into 0/1 noise.
BUCKET_TARGET = 60


# Header times no clock of the traffic could have written: before 1970, or more than a day after the row was
# drained (after now, where a table has no drained_at). .NET's DateTime.MinValue and MaxValue, from a sender
# that never set a time, are such: one stretched a chart of three hours of failures over ten thousand years,
# and the lag of a year-1 TimeSent put every lag in days, 0.00 on every bar. The pictures and statistics over
# time leave those rows out and say how many (``plausible_times``); tables of rows still show them.
EARLIEST_PLAUSIBLE = 0  # seconds since 1970-01-01 UTC: the instant, whatever the session's time zone
LATEST_AFTER_DRAIN = "1 day"


def plausible_times(df: DataFrame, *columns: str) -> tuple[DataFrame, int]:
    """``df`` without the rows whose time in any of ``columns`` is implausible (see ``EARLIEST_PLAUSIBLE``;
    a null is not), and how many rows that left out."""
    latest = F.col("drained_at") if "drained_at" in df.columns else F.current_timestamp()
    latest = latest + F.expr(f"INTERVAL {LATEST_AFTER_DRAIN}")
    earliest = F.timestamp_seconds(F.lit(EARLIEST_PLAUSIBLE))
    odd = F.lit(False)
    for column in columns:
        odd = odd | F.coalesce((F.col(column) < earliest) | (F.col(column) > latest), F.lit(False))
    left_out = df.where(odd).count()
    return (df.where(~odd) if left_out else df), left_out


def implausible_note(count: int, what: str, columns: str) -> str:
    """The note that says ``plausible_times`` left rows out."""
    return (
        f"note: {count} {what} with {columns} before 1970 or after their drain left out here (a sender's clock "
        "at .NET's DateTime.MinValue or MaxValue?); the journal keeps them"
    )


def choose_bucket(df: DataFrame, column: str, bucket: str, most: int = BUCKET_TARGET) -> str:
    """``bucket`` (the parameter), or with ``auto`` the finest bucket that cuts the data's time span in
    ``column`` into at most ``most`` buckets: fine enough to see bursts, few enough that a bucket holds
    more than the odd event (100 failures over 1h40m per minute are a zig-zag between 0 and 1; per 5 minutes
    they are a level). A demo drained within seconds gets seconds, a day of traffic hours."""
    if bucket != "auto":
        return bucket
    row = df.agg((F.unix_seconds(F.max(column)) - F.unix_seconds(F.min(column))).alias("s")).first()
    span = (row["s"] if row is not None else None) or 0  # an aggregate has one row; its value null when empty
    return next((name for name, (_, _, seconds) in BUCKETS.items() if span / seconds <= most), "365 days")


_NULL_FLAG = "__queuelake_null_"  # beside each time column in transit: whether its value was null


def to_pandas_utc(df: DataFrame, *columns: str) -> pd.DataFrame:
    """``df`` as pandas, the timestamp ``columns`` as timezone-aware UTC. Spark's own conversion renders
    timestamps in the session's time zone (a Databricks cluster's may not be UTC) and drops the zone; the
    instant in microseconds cannot be misread, whatever the session says. Nulls travel as a flag of their
    own: a bigint column holding a null arrives as float64, exact only to 2^53 microseconds (the years
    1685 to 2255), and .NET's ``DateTime.MaxValue`` came out as year 10000, which no table could print."""
    micros = {c: F.coalesce(F.unix_micros(c), F.lit(0)) for c in columns}
    flags = {_NULL_FLAG + c: F.col(c).isNull() for c in columns}
    pdf = cast(pd.DataFrame, df.withColumns({**micros, **flags}).toPandas())
    for c in columns:
        pdf[c] = times_from_micros(pdf[c], pdf.pop(_NULL_FLAG + c))
    return pdf


def times_from_micros(micros: Sequence[int | None] | pd.Series, missing: Sequence[bool] | None = None) -> pd.Series:
    """Instants from microseconds since the epoch, exactly (UTC; None, or True in ``missing``: NaT). For
    values collected from Spark: through a float (a list holding None, a column holding a null) they lose
    their last digits outside the years 1685 to 2255."""
    values = pd.array(list(micros), dtype="Int64")  # from Python ints or int64: exact
    absent = values.isna() if missing is None else values.isna() | pd.array(list(missing), dtype="boolean")
    times = pd.Series(pd.to_datetime(values.fillna(0).astype("int64"), unit="us", utc=True))
    return times.mask(pd.Series(absent, dtype=bool).to_numpy())


def spark_table(df: DataFrame) -> pd.DataFrame:
    """``df`` as pandas for a table, every timestamp column as UTC (``to_pandas_utc``): Spark's own
    ``toPandas`` would render them in the session's time zone and drop it."""
    from pyspark.sql.types import TimestampType

    stamps = [f.name for f in df.schema.fields if isinstance(f.dataType, TimestampType)]
    return to_pandas_utc(df, *stamps)


def per_bucket(df: DataFrame, column: str, bucket: str, keys: Sequence[str | Column], *aggs: Column) -> pd.DataFrame:
    """Rows grouped by ``keys`` and the time bucket (aligned to UTC midnight) that ``column`` falls in, with
    ``aggs`` (default: a ``count``), as pandas; the bucket's start in the column ``bucket``, in UTC."""
    start = F.window(column, BUCKETS[bucket][0])["start"].alias("bucket")
    grouped = df.groupBy(*keys, start)
    return to_pandas_utc(grouped.agg(*aggs) if aggs else grouped.count(), "bucket")


def time_span(df: DataFrame, column: str) -> tuple[pd.Timestamp, pd.Timestamp]:
    """The first and last time in ``column`` (UTC): panels of one notebook share it as their x range."""
    row = df.agg(F.unix_micros(F.min(column)).alias("a"), F.unix_micros(F.max(column)).alias("b")).first()
    if row is None:  # an aggregate always has its one row
        raise ValueError(f"time_span: no aggregate row for {column}")
    return pd.Timestamp(row["a"], unit="us", tz="UTC"), pd.Timestamp(row["b"], unit="us", tz="UTC")


def wide(
    pdf: pd.DataFrame,
    index: str,
    columns: str,
    values: str,
    bucket: str | None = None,
    span: tuple[pd.Timestamp, pd.Timestamp] | None = None,
) -> pd.DataFrame:
    """Long to wide for plotting: one column per series; with a bucket, every bucket of the range (``span``
    when given, so that panels line up), empty ones 0, so that quiet periods drop to zero instead of being
    bridged."""
    table = pdf.pivot_table(index=index, columns=columns, values=values, aggfunc="sum").fillna(0).sort_index()
    if bucket and len(table):
        every = every_bucket(table.index, bucket, span)
        table = table.reindex(every, fill_value=0)
    return table


def every_bucket(
    index: pd.Index, bucket: str, span: tuple[pd.Timestamp, pd.Timestamp] | None = None
) -> pd.DatetimeIndex:
    """Every bucket start from the first to the last of ``index`` (or of ``span``), UTC."""
    first, last = index.min(), index.max()
    if span is not None:
        freq = BUCKETS[bucket][1]
        first, last = min(first, span[0].floor(freq)), max(last, span[1].floor(freq))
    return pd.date_range(first, last, freq=BUCKETS[bucket][1])

"""Endpoint health from journal rows, in Arrow: which rows are audit and error copies, who processed
them, when, how long, and the per-hour, per-day and per-endpoint-day figures.

What a row is:
- an error copy (a failure): it carries ``FailedQ`` or an exception type; counted at its
  ``TimeOfFailure`` (else ``ProcessingEnded``);
- an audit copy (a message processed): not an error copy, and it carries ``ProcessingEnded``; counted
  at ``ProcessingEnded``;
- anything else (a business queue's copy, an expired or quarantined row) is not read here.
The endpoint is ``ProcessingEndpoint``, else the endpoint of ``FailedQ`` (``"(unknown)"`` when neither
names one); the message type is the journal's ``message_type`` (``"(unknown)"`` when missing). A retry
is a copy (audit or error) carrying ServiceControl's ``ServiceControl.Retry.UniqueMessageId`` or a
queuelake replay's ``queuelake.Replay.Id``.

Processing time is ``ProcessingEnded - ProcessingStarted``, critical time ``ProcessingEnded - TimeSent``
(both of audit copies; negative spans from clock skew count as 0). Percentiles are exact, by nearest
rank: the p-th percentile of n values is the ceil(p/100 * n)-th smallest (no interpolation), so each is
a time some message actually took.
"""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from queuelake.lake import stage_tables, table_entry
from queuelake.nsb.message_types import without_versions
from queuelake.nsb.retry import REPLAY_ID, RETRY_UNIQUE_MESSAGE_ID
from queuelake.pipeline.conversation.model import endpoint_name

UNKNOWN = "(unknown)"
QUANTILES = (50, 95, 99)
# the journal columns read (never the body)
COLUMNS = [
    "outcome",
    "headers",
    "message_type",
    "processing_endpoint",
    "failed_queue",
    "exception_type",
    "time_sent",
    "processing_started",
    "processing_ended",
    "time_of_failure",
]
# what the first pass over an increment reads to know which days it touches
TIME_COLUMNS = ["outcome", "failed_queue", "exception_type", "processing_ended", "time_of_failure"]
_KEYS = ["endpoint", "message_type"]


def is_failure(rows: pa.Table) -> pa.ChunkedArray:
    return pc.or_(pc.is_valid(rows["failed_queue"]), pc.is_valid(rows["exception_type"]))


def copy_times(rows: pa.Table) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
    """(when each row counts, whether it is a failure); ``when`` is null for rows that are neither an
    audit nor an error copy (or did not land)."""
    failed = is_failure(rows)
    landed = pc.equal(rows["outcome"], "landed")
    when = pc.if_else(failed, pc.coalesce(rows["time_of_failure"], rows["processing_ended"]), rows["processing_ended"])
    return pc.if_else(landed, when, pa.scalar(None, when.type)), failed


def days_of(rows: pa.Table) -> set[dt.date]:
    """The UTC days the audit and error copies among ``rows`` (``TIME_COLUMNS``) count on."""
    when, _ = copy_times(rows)
    when = when.filter(pc.is_valid(when))
    if not len(when):
        return set()
    return set(pc.unique(pc.cast(pc.floor_temporal(when, unit="day"), pa.date32())).to_pylist())


def copies(
    rows: pa.Table, start: dt.datetime | None = None, end: dt.datetime | None = None, end_included: bool = False
) -> pa.Table:
    """The audit and error copies among journal ``rows`` (``COLUMNS``) counting in [start, end), one row
    each: endpoint, message_type, at, hour, day, processed, failed, retry (0/1), processing_us,
    critical_us (null unless processed with both times)."""
    when, failed = copy_times(rows)
    keep = pc.is_valid(when)
    if start is not None:
        keep = pc.and_(keep, pc.greater_equal(when, pa.scalar(start, when.type)))
    if end is not None:
        below = pc.less_equal if end_included else pc.less  # [start, end] for the calendar's last day
        keep = pc.and_(keep, below(when, pa.scalar(end, when.type)))
    keep = pc.fill_null(keep, False)
    rows, when, failed = rows.filter(keep), when.filter(keep), failed.filter(keep)
    processed = pc.invert(failed)
    ended = rows["processing_ended"]
    return pa.table(
        {
            "endpoint": _endpoints(rows),
            "message_type": _message_types(rows["message_type"]),
            "at": when,
            "hour": pc.floor_temporal(when, unit="hour"),
            "day": pc.cast(pc.floor_temporal(when, unit="day"), pa.date32()),
            "processed": pc.cast(processed, pa.int64()),
            "failed": pc.cast(failed, pa.int64()),
            "retry": pc.cast(_retried(rows["headers"]), pa.int64()),
            "processing_us": _span(rows["processing_started"], ended, processed),
            "critical_us": _span(rows["time_sent"], ended, processed),
        }
    )


def _message_types(types: pa.ChunkedArray | pa.Array) -> pa.Array | pa.ChunkedArray:
    """The journal's message type without its generic arguments' versions (``without_versions``): one
    generic contract across its releases is one row of the health tables, as a plain type is. Done per
    distinct value: a journal has a handful of types."""
    distinct = [t for t in pc.unique(types).to_pylist() if t is not None and "[" in t]
    if distinct:
        names = pa.array([without_versions(t) for t in distinct], pa.string())
        types = pc.coalesce(pc.take(names, pc.index_in(types, value_set=pa.array(distinct, pa.string()))), types)
    return pc.fill_null(types, UNKNOWN)


def _endpoints(rows: pa.Table) -> pa.Array:
    """ProcessingEndpoint, else FailedQ's endpoint (an address's table part), else UNKNOWN."""
    named = pc.if_else(
        pc.fill_null(pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(rows["processing_endpoint"])), 0), False),
        rows["processing_endpoint"],
        pa.scalar(None, pa.string()),
    )
    failed_queue = rows["failed_queue"]
    distinct = [q for q in pc.unique(failed_queue).to_pylist() if q is not None]
    if distinct:
        names = pa.array([endpoint_name(q) for q in distinct], pa.string())
        index = pc.index_in(failed_queue, value_set=pa.array(distinct, pa.string()))
        named = pc.coalesce(named, pc.take(names, index))
    return pc.fill_null(named, UNKNOWN).combine_chunks() if isinstance(named, pa.ChunkedArray) else named


def _retried(headers: pa.ChunkedArray) -> pa.ChunkedArray:
    found = pc.or_(
        pc.is_valid(pc.map_lookup(headers, RETRY_UNIQUE_MESSAGE_ID, "first")),
        pc.is_valid(pc.map_lookup(headers, REPLAY_ID, "first")),
    )
    return pc.fill_null(found, False)


# a span longer than this is not a time the message took but a time that was never set: .NET's
# ``DateTime.MinValue`` (0001-01-01) as a TimeSent made a critical time of 2,025 years, which failed
# every later ``health`` (its microseconds, over 2**53, refused by the cast to milliseconds)
MAX_SPAN_US = 100 * 366 * 86_400 * 1_000_000


def _span(start: pa.ChunkedArray, end: pa.ChunkedArray, processed: pa.ChunkedArray) -> pa.ChunkedArray:
    """end - start in microseconds (at least 0), null unless ``processed``, both times known and the
    span at most ``MAX_SPAN_US``."""
    us = pc.subtract(pc.cast(end, pa.int64()), pc.cast(start, pa.int64()))
    us = pc.max_element_wise(us, pa.scalar(0, pa.int64()))
    plausible = pc.fill_null(pc.less_equal(us, pa.scalar(MAX_SPAN_US, pa.int64())), False)
    return pc.if_else(pc.and_(processed, plausible), us, pa.scalar(None, pa.int64()))


def nearest_rank(table: pa.Table, keys: list[str], value: str, quantiles: tuple[int, ...] = QUANTILES) -> pa.Table:
    """Per group of ``keys``: the exact ``quantiles`` (percent) of ``value``'s non-null values by nearest
    rank, as columns ``p<q>`` (the values' type). Groups without a value are absent."""
    data = table.select([*keys, value]).filter(pc.is_valid(table[value]))
    out_fields = [table.schema.field(k) for k in keys] + [
        pa.field(f"p{q}", table.schema.field(value).type) for q in quantiles
    ]
    if not data.num_rows:
        return pa.schema(out_fields).empty_table()
    data = data.sort_by([(k, "ascending") for k in keys] + [(value, "ascending")])
    # with use_threads=False the groups come in the order they first appear: the sort's
    groups = data.group_by(keys, use_threads=False).aggregate([(value, "count")])
    counts = np.asarray(groups[f"{value}_count"].to_numpy(zero_copy_only=False), dtype=np.int64)
    starts = np.cumsum(counts) - counts
    columns = {k: groups[k] for k in keys}
    values = data[value]
    for q in quantiles:
        ranks = np.array([max(1, math.ceil(q * int(n) / 100)) for n in counts], dtype=np.int64)
        columns[f"p{q}"] = pc.take(values, pa.array(starts + ranks - 1))
    return pa.table(columns, schema=pa.schema(out_fields))


def _ms(us: pa.ChunkedArray | pa.Array) -> pa.Array:
    return pc.divide(pc.cast(us, pa.float64(), safe=False), 1000.0)  # past 2**53 us: rounded, not refused


def periods(rows: pa.Table, journal_version: int, computed_at: dt.datetime) -> pa.Table:
    """``endpoint_health`` rows (hour and day) of ``copies`` rows."""
    parts = []
    for period, column in (("hour", "hour"), ("day", "day")):
        data = rows
        if column == "day":  # the day's start as a time, beside its date
            data = rows.set_column(
                rows.schema.get_field_index("day"), "day_start", pc.floor_temporal(rows["at"], unit="day")
            )
            data = data.append_column("day", rows["day"])
            column = "day_start"
        keys = [*_KEYS, column]
        counts = data.group_by(keys, use_threads=False).aggregate(
            [("processed", "sum"), ("failed", "sum"), ("retry", "sum")]
        )
        table = counts
        for kind in ("processing", "critical"):
            ranks = nearest_rank(data, keys, f"{kind}_us")
            ranks = ranks.rename_columns([*keys, *(f"{kind}_p{q}_ms" for q in QUANTILES)])
            table = table.join(ranks, keys, join_type="left outer")
        start = table[column]
        part = {
            "period": pa.array([period] * table.num_rows, pa.string()),
            "period_start": start,
            "day": pc.cast(pc.floor_temporal(start, unit="day"), pa.date32()),
            "endpoint": table["endpoint"],
            "message_type": table["message_type"],
            "processed": table["processed_sum"],
            "failed": table["failed_sum"],
            "retries": table["retry_sum"],
        }
        for kind in ("processing", "critical"):
            for q in QUANTILES:
                part[f"{kind}_p{q}_ms"] = _ms(table[f"{kind}_p{q}_ms"])
        part["journal_version"] = pa.array([journal_version] * table.num_rows, pa.int64())
        part["computed_at"] = pa.array([computed_at] * table.num_rows, table_entry.UTC_TS)
        parts.append(pa.table(part).cast(stage_tables.ENDPOINT_HEALTH.schema))
    out = pa.concat_tables(parts)
    return out.sort_by(
        [
            ("period", "descending"),
            ("period_start", "ascending"),
            ("endpoint", "ascending"),
            ("message_type", "ascending"),
        ]
    )


def daily(rows: pa.Table, journal_version: int, computed_at: dt.datetime) -> pa.Table:
    """``endpoint_daily`` rows of ``copies`` rows: per endpoint and UTC day."""
    keys = ["endpoint", "day"]
    sums = rows.group_by(keys, use_threads=False).aggregate(
        [("processed", "sum"), ("failed", "sum"), ("retry", "sum"), ("message_type", "count_distinct")]
    )
    hourly = rows.group_by(["endpoint", "day", "hour"], use_threads=False).aggregate([("processed", "sum")])
    hourly = hourly.sort_by(
        [("endpoint", "ascending"), ("day", "ascending"), ("processed_sum", "descending"), ("hour", "ascending")]
    )
    peak: dict[tuple[str, dt.date], tuple[dt.datetime, int]] = {}
    for endpoint, day, hour, n in zip(
        hourly["endpoint"].to_pylist(),
        hourly["day"].to_pylist(),
        hourly["hour"].to_pylist(),
        hourly["processed_sum"].to_pylist(),
    ):
        peak.setdefault((endpoint, day), (hour, n))
    critical = {
        (e, d): p for e, d, p in zip(*(c.to_pylist() for c in nearest_rank(rows, keys, "critical_us", (95,)).columns))
    }
    out = []
    for row in sums.to_pylist():
        key = (row["endpoint"], row["day"])
        hour, most = peak[key]
        p95 = critical.get(key)
        out.append(
            {
                "day": row["day"],
                "endpoint": row["endpoint"],
                "processed": row["processed_sum"],
                "failed": row["failed_sum"],
                "retries": row["retry_sum"],
                "message_types": row["message_type_count_distinct"],
                "peak_hour": hour if most else None,
                "peak_hour_processed": most,
                "critical_p95_ms": None if p95 is None else p95 / 1000.0,
                "journal_version": journal_version,
                "computed_at": computed_at,
            }
        )
    table = pa.Table.from_pylist(out, schema=stage_tables.ENDPOINT_DAILY.schema)
    return table.sort_by([("day", "ascending"), ("endpoint", "ascending")])

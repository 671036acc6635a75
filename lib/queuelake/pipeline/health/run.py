"""``queuelake health``'s work: the journal versions not yet counted, the UTC days they touch, those days
recomputed from the journal and written again to ``endpoint_health`` and ``endpoint_daily``.

Why whole days: exact percentiles cannot be added up, so a bucket is recomputed from its rows, not
updated. An increment (the journal's versions after the one last counted, ``LakeEngine.added_files``)
is read once for its times alone (five small columns) to find the days it touches (audit copies are
drained late, so an increment may touch an old day); each such day is then read from the journal's
version, one day at a time (``matching_reduced``: row groups whose ``processing_ended`` /
``time_of_failure`` statistics exclude the day are skipped unread), each batch of ten columns (never the
body) reduced to its copies' narrow rows as it is read, so memory holds one batch, one day's narrow rows
(~50 bytes a copy) and the small result. Each table's rows of those days
are deleted, then the new rows appended under the application transaction ``queuelake.health`` with
the journal version: a run killed between the two leaves the checkpoint where it was, and the next run
recomputes the same days. The first run is the whole journal as one increment.

Rows the journal loses later (retention, ``erase``) stay counted: the figures hold counts and times,
not content; a deleted file adds no version to recount.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from queuelake.lake import record_tables, stage_tables, table_entry
from queuelake.lake.deletes import RowFilter
from queuelake.lake.engines import journal_engine, table_engine
from queuelake.lake.port import LakeEngine
from queuelake.lake.round_files import open_file
from queuelake.lake.transient import repeated
from queuelake.pipeline.health import compute
from queuelake.report import log

APP_ID = "queuelake.health"
HEALTH = stage_tables.ENDPOINT_HEALTH.name
DAILY = stage_tables.ENDPOINT_DAILY.name
MESSAGES = record_tables.MESSAGES.name
HEALTH_SCHEMA: pa.Schema = stage_tables.ENDPOINT_HEALTH.schema
DAILY_SCHEMA: pa.Schema = stage_tables.ENDPOINT_DAILY.schema


@dataclass
class HealthResult:
    journal_version: int | None = None
    counted_after: int | None = None  # the journal version the previous run had counted (None: none)
    days: list[dt.date] = field(default_factory=list)
    copies: int = 0  # audit and error copies read in the recomputed days
    hourly_rows: int = 0
    daily_rows: int = 0
    written: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "journal_version": self.journal_version,
            "counted_after": self.counted_after,
            "days_recomputed": [d.isoformat() for d in self.days],
            "copies_read": self.copies,
            "health_rows": self.hourly_rows,
            "daily_rows": self.daily_rows,
            "tables_written": self.written,
        }


def update(lake: LakeEngine, now: dt.datetime | None = None) -> HealthResult:
    """Bring ``endpoint_health`` and ``endpoint_daily`` up to the journal's current version."""
    journal = journal_engine(lake)
    writer = table_engine(lake, HEALTH)
    result = HealthResult(journal_version=journal.table_version(MESSAGES))
    upto = result.journal_version
    if upto is None:
        log.info("health: no journal yet (nothing drained into this lake)")
        return result
    done = {name: writer.last_version(name, APP_ID) for name in (HEALTH, DAILY)}
    behind = [name for name, version in done.items() if version is None or version < upto]
    if not behind:
        result.counted_after = upto
        log.info("health: up to date with journal version %d", upto)
        return result
    versions = [done[name] for name in behind]
    after = None if None in versions else min(v for v in versions if v is not None)
    result.counted_after = after
    files = journal.added_files(MESSAGES, after, upto)
    days: set[dt.date] = set()
    for uri in files:
        days |= compute.days_of(open_file(uri).read(columns=compute.TIME_COLUMNS))
    result.days = sorted(days)
    log.info(
        "health: journal versions %s..%d added %d file(s) touching %d day(s)",
        "start" if after is None else after + 1,
        upto,
        len(files),
        len(days),
    )
    computed_at = now or dt.datetime.now(dt.timezone.utc)
    hourly, per_day = [], []
    for day in result.days:
        start = dt.datetime.combine(day, dt.time(), dt.timezone.utc)
        # the last day a time can name (a TimeOfFailure of 9999-12-31 lands typed) has no next day
        # and its last microsecond (.NET's DateTime.MaxValue) counts: the day's end is taken in
        last = day == dt.date.max
        end = dt.datetime.max.replace(tzinfo=dt.timezone.utc) if last else start + dt.timedelta(days=1)
        # each batch of the day's rows reduced to its copies as it is read: the headers (read for the retry
        # marks) of a day's million audit copies held whole took 3 GB (a review)
        copies = journal.matching_reduced(
            MESSAGES,
            _journal_day(start, end, last),
            compute.COLUMNS,
            functools.partial(compute.copies, start=start, end=end, end_included=last),
            version=upto,
        )
        result.copies += copies.num_rows
        if copies.num_rows:
            hourly.append(compute.periods(copies, upto, computed_at))
            per_day.append(compute.daily(copies, upto, computed_at))
    new = {
        HEALTH: _concat(hourly, HEALTH_SCHEMA),
        DAILY: _concat(per_day, DAILY_SCHEMA),
    }
    result.hourly_rows, result.daily_rows = new[HEALTH].num_rows, new[DAILY].num_rows
    for name in behind:
        if writer.exists(name) and result.days:
            writer.delete_rows(name, _days_filter(result.days))
        # keyed by the journal version: a second attempt after a commit that landed adds nothing
        repeated(functools.partial(writer.append, name, new[name], APP_ID, upto), name)
        result.written.append(name)
    return result


def _concat(parts: list[pa.Table], schema: pa.Schema) -> pa.Table:
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _journal_day(start: dt.datetime, end: dt.datetime, end_included: bool = False) -> RowFilter:
    """The journal rows that may count in [start, end) (``end_included``: [start, end]): processed or
    failed then."""
    ts = table_entry.UTC_TS
    lo, hi = pa.scalar(start, ts), pa.scalar(end, ts)

    def within(column: str) -> ds.Expression:
        return (ds.field(column) >= lo) & ((ds.field(column) <= hi) if end_included else (ds.field(column) < hi))

    below = "<=" if end_included else "<"
    sql = " OR ".join(
        f"(\"{c}\" >= '{start.isoformat()}' AND \"{c}\" {below} '{end.isoformat()}')"
        for c in ("processing_ended", "time_of_failure")
    )
    return RowFilter(
        sql, within("processing_ended") | within("time_of_failure"), ("processing_ended", "time_of_failure")
    )


def _days_filter(days: list[dt.date]) -> RowFilter:
    listed = ", ".join(f"DATE '{d.isoformat()}'" for d in days)
    return RowFilter(f'"day" IN ({listed})', ds.field("day").isin(pa.array(days, pa.date32())), ("day",))


def read_latest(lake: LakeEngine) -> tuple[pa.Table, pa.Table]:
    """(the hourly ``endpoint_health`` rows of the latest hour it holds, the ``endpoint_daily`` rows of
    its latest day): what the current gauges show. Empty tables when nothing was counted."""
    writer = table_engine(lake, HEALTH)
    if not writer.exists(DAILY) or not writer.exists(HEALTH):
        return HEALTH_SCHEMA.empty_table(), DAILY_SCHEMA.empty_table()
    latest = _latest_day(writer.read_arrow(DAILY, columns=["day"])["day"], warn=True)
    if latest is None:
        return HEALTH_SCHEMA.empty_table(), DAILY_SCHEMA.empty_table()
    daily = writer.matching_rows(DAILY, _days_filter([latest]), [f.name for f in DAILY_SCHEMA])
    health = writer.matching_rows(HEALTH, _days_filter([latest]), [f.name for f in HEALTH_SCHEMA])
    hours = health.filter(pc.equal(health["period"], "hour"))
    if hours.num_rows:
        hours = hours.filter(pc.equal(hours["period_start"], pc.max(hours["period_start"])))
    return hours, daily


def read_daily(lake: LakeEngine, days: int | None = None) -> pa.Table:
    """``endpoint_daily``'s rows, of its last ``days`` days (None: all), by day and endpoint."""
    writer = table_engine(lake, DAILY)
    if not writer.exists(DAILY):
        return DAILY_SCHEMA.empty_table()
    table = writer.read_arrow(DAILY)
    if days is not None and table.num_rows:
        last = _latest_day(table["day"])
        if last is None:
            return DAILY_SCHEMA.empty_table()
        first = last - dt.timedelta(days=days - 1)
        within = pc.and_(
            pc.greater_equal(table["day"], pa.scalar(first, pa.date32())),
            pc.less_equal(table["day"], pa.scalar(last, pa.date32())),
        )
        table = table.filter(within)
    return table.sort_by([("day", "ascending"), ("endpoint", "ascending")])


# a day counts as current up to this far past today's UTC date: a sender's clock a little ahead
FUTURE_DAYS = 1


def _latest_day(days: pa.ChunkedArray, warn: bool = False, today: dt.date | None = None) -> dt.date | None:
    """The latest of ``days`` that is not in the future (tomorrow at most, for a clock a little ahead):
    what "the latest day" and "the last N days" count back from. Why: one message whose TimeOfFailure
    or ProcessingEnded said 9999-12-31 (DateTime.MaxValue) made that day the latest, and every gauge
    and the daily table showed it alone until the row was erased (a review). Days after it are shown
    with every day (``--days`` unset); ``warn``: a warning says they are there. None: no day to count."""
    today = today or dt.datetime.now(dt.timezone.utc).date()
    bound = pa.scalar(today + dt.timedelta(days=FUTURE_DAYS), pa.date32())
    ahead = pc.greater(days, bound)
    later = pc.sum(ahead).as_py() or 0
    if later and warn:
        first = pc.min(pc.filter(days, ahead)).as_py()
        log.warning(
            "health: %d endpoint-day row(s) fall on days after tomorrow (the first %s: a sender's or a handler's "
            "clock, or a header in the future); the latest figures count back from today",
            later,
            first,
        )
    return pc.max(pc.filter(days, pc.invert(ahead))).as_py()

"""The outbound contract: row-level reasons to reject a row, as Spark expressions.

Row-level reasons are computed with Spark expressions so that every failing row is named (GX's
unexpected-row lists are samples) and lands in ``<output>_rejected``. There is no second copy of the
contract in great-expectations: it could only fail if the two copies drifted apart, and it cost ~11 s
per round. GX runs the user's own business expectations instead (``quality/expectations.py``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from queuelake.errors import QualityError
from queuelake.nsb.message_types import NO_TYPE
from queuelake.nsb.times import FIRST_INSTANT, LAST_INSTANT
from queuelake.nsb.timespan import MAX_TTBR_MS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
REQUIRED = ["key", "message_type", "intent", "body"]
# Values at the edges of their types: a send must be faithful, so these are refused per row (they
# failed the whole round before: a datetime past 9999 cannot be read, a TTBR past it overflows).
TTBR_TOO_LONG = f"ttbr_ms must be under {MAX_TTBR_MS} (100 years); leave it null for no expiry"
DELIVER_AT_OUT_OF_RANGE = "deliver_at must fall between 0001-01-01 and 9999-12-31 23:59:59.997 UTC"
CHECKED = ["key", "message_type", "intent", "destination", "body_len", "ttbr_ms", "deliver_at", "reasons"]
INTENTS = ["Send", "Publish"]


def with_reasons(df: DataFrame) -> DataFrame:
    """Add ``reasons`` (array<string>): why each row cannot be published, empty when it can; and
    ``body_len``, so that validation can work on narrow rows (``CHECKED``) without the bodies."""
    from pyspark.sql import functions as F

    cols = set(df.columns)

    def col_or_null(name: str, kind: str = "string") -> Column:
        return F.col(name) if name in cols else F.lit(None).cast(kind)

    missing = [c for c in REQUIRED if c not in cols]
    if missing:
        raise QualityError(f"outbound table lacks required column(s): {', '.join(missing)}")
    # duplicates from a key-only aggregation: a window over the rows would shuffle the bodies too
    dups = df.groupBy("key").count().where(F.col("count") > 1).select("key", F.lit(True).alias("_dup"))
    df = df.join(F.broadcast(dups), on="key", how="left")
    body_len = F.length(F.col("body"))
    dup = F.coalesce(F.col("_dup"), F.lit(False))
    checks = [
        (F.col("key").isNull(), "key is null"),
        # ";;" or a tab names no type either: publish sends each entry trimmed and the empty ones dropped
        (F.col("message_type").isNull() | F.col("message_type").rlike(NO_TYPE), "message_type is empty"),
        (F.col("intent").isNull(), "intent is null"),
        (F.col("intent").isNotNull() & ~F.col("intent").isin(INTENTS), "intent must be Send or Publish"),
        (
            (F.col("intent") == "Send")
            & (col_or_null("destination").isNull() | (F.trim(col_or_null("destination")) == "")),
            "destination is required for Send",
        ),
        (F.col("body").isNull() | (body_len == 0), "body is empty"),
        (F.col("key").isNotNull() & dup, "key is not unique"),
        (
            col_or_null("deliver_at", "timestamp").isNotNull() & col_or_null("ttbr_ms", "long").isNotNull(),
            "a delay (deliver_at) together with a TTBR (ttbr_ms) is not allowed",
        ),
        (col_or_null("ttbr_ms", "long") <= 0, "ttbr_ms must be positive"),
        (col_or_null("ttbr_ms", "long") >= MAX_TTBR_MS, TTBR_TOO_LONG),
        (  # as integers: a Python datetime literal of year 1 reaches Spark two days off (Julian rebase)
            (F.unix_micros(col_or_null("deliver_at", "timestamp")) < F.lit(_micros(FIRST_INSTANT)))
            | (F.unix_micros(col_or_null("deliver_at", "timestamp")) > F.lit(_micros(LAST_INSTANT))),
            DELIVER_AT_OUT_OF_RANGE,
        ),
    ]
    reasons = F.filter(F.array(*[F.when(cond, F.lit(text)) for cond, text in checks]), lambda x: x.isNotNull())
    return df.withColumn("reasons", reasons).withColumn("body_len", body_len).drop("_dup")


# ---------------------------------------------------------------- the same contract, in Arrow

ARROW_COLUMNS = ["key", "message_type", "intent", "destination", "body", "ttbr_ms", "deliver_at"]
# The pre-check keeps a round's keys for the duplicate check: a larger round goes to Spark's checks,
# which spill, so the driver's memory stays bounded whatever the round (a million uuid keys: 40 MB
# of Arrow, and Arrow's pool peaked at 250 MB around their distinct count).
PRECHECK_MAX_ROWS = 1_000_000


def arrow_may_reject(files: list[str], open_file: Callable[[str], Any], max_rows: int = PRECHECK_MAX_ROWS) -> bool:
    """True when some row of the round might fail the contract; False only when none can.

    Why: a round with no bad row (the usual one) needs no Spark job at all, and the first Spark job
    and the shuffle for the duplicate-key check were nearly all of a 20,000-row publish. This reads
    the round's narrow columns (and the bodies, one batch at a time; the keys of the whole round are
    kept for the duplicate check) with pyarrow. It errs towards
    True: Spark's ``with_reasons`` stays the judge of which rows are rejected and why, so the two
    can never disagree on a row that is sent (``trim`` here strips all whitespace, Spark's only
    spaces). A round of more than ``max_rows`` rows is left to Spark before any is read: its keys
    would not fit a bounded driver, and for such a round the Spark job is a small share anyway."""
    import pyarrow.compute as pc

    seen: list[pa.Array] = []
    rows = 0
    for uri in files:
        parquet = open_file(uri)
        rows += parquet.metadata.num_rows
        if rows > max_rows:
            return True
        names = set(parquet.schema_arrow.names)
        if any(c not in names for c in REQUIRED):
            return True  # Spark names the missing column
        columns = [c for c in ARROW_COLUMNS if c in names]
        narrow = [c for c in columns if c != "body"]
        for group in range(parquet.metadata.num_row_groups):
            # the bodies are most of a round's bytes: read only where the footer cannot vouch for them
            read = narrow if _bodies_present(parquet.metadata.row_group(group)) else columns
            for batch in parquet.iter_batches(batch_size=50_000, row_groups=[group], columns=read):  # one batch
                table = pa.Table.from_batches([batch])
                if _any_reason(table, names, pc):
                    return True
                seen.append(table["key"].combine_chunks().cast(pa.string()))
    if not seen:
        return False
    keys = pa.concat_arrays(seen)
    # the distinct keys as a dictionary (nulls are left out of it): a hash of the keys as
    # count_distinct's is, without its aggregation (0.04 s of 300,000 keys against 0.25 s)
    return len(keys.dictionary_encode().dictionary) != len(keys) - keys.null_count


def _bodies_present(group: Any) -> bool:
    """True when a row group's footer proves every body non-null and non-empty: no null in the
    statistics, and a minimum that is not empty. The empty value sorts before every other in any
    byte order, and a truncated minimum is a prefix of the true one, so a non-empty minimum rules
    out an empty body. Without statistics (or with a null or an empty minimum) the bodies are read.
    Why: reading and decompressing the bodies was most of the pre-check, 0.05-0.13 s of a 20,000-row
    round (whose raw COPY takes ~0.25 s)."""
    for i in range(group.num_columns):
        column = group.column(i)
        if column.path_in_schema != "body":
            continue
        stats = column.statistics
        if stats is None or not stats.has_null_count or not stats.has_min_max:
            return False
        return stats.null_count == 0 and stats.min is not None and len(stats.min) > 0
    return False


def _any_reason(table: pa.Table, names: set[str], pc: Any) -> bool:
    def blank(column: pa.ChunkedArray) -> pa.ChunkedArray:
        text = column.cast(pa.string())
        return pc.or_kleene(pc.is_null(text), pc.equal(pc.utf8_trim_whitespace(text), ""))

    def no_type(column: pa.ChunkedArray) -> pa.ChunkedArray:
        text = column.cast(pa.string())
        return pc.or_kleene(pc.is_null(text), pc.match_substring_regex(text, NO_TYPE))

    intent = table["intent"].cast(pa.string())
    checks = [
        pc.is_null(table["key"]),
        no_type(table["message_type"]),
        pc.invert(pc.is_in(intent, value_set=pa.array(INTENTS))),  # null intent: not in the set
    ]
    if "body" in table.column_names:  # else the row group's footer vouched for the bodies
        body = table["body"]
        checks += [pc.equal(pc.binary_length(body.cast(pa.binary())), 0), pc.is_null(body)]
    if "destination" in names:
        checks.append(pc.and_kleene(pc.equal(intent, "Send"), blank(table["destination"])))
    else:
        checks.append(pc.equal(intent, "Send"))
    if "ttbr_ms" in names:
        ttbr = table["ttbr_ms"]
        as_float = pc.cast(ttbr, pa.float64(), safe=False)  # int64's extremes round, never raise
        checks.append(pc.fill_null(pc.less_equal(as_float, 0), False))  # no TTBR is fine
        checks.append(pc.fill_null(pc.greater_equal(as_float, float(MAX_TTBR_MS)), False))
        if "deliver_at" in names:
            checks.append(pc.and_(pc.is_valid(ttbr), pc.is_valid(table["deliver_at"])))
    if "deliver_at" in names:
        checks.append(pc.fill_null(_out_of_range(table["deliver_at"], pc), False))
    return any(pc.any(pc.fill_null(check, True)).as_py() for check in checks)


def _out_of_range(deliver_at: pa.ChunkedArray, pc: Any) -> pa.ChunkedArray:
    """deliver_at outside FIRST_INSTANT .. LAST_INSTANT, compared as integers in the column's own
    unit (a Python datetime cannot hold every value a Parquet timestamp can)."""
    if not pa.types.is_timestamp(deliver_at.type):
        return pa.chunked_array([pa.repeat(True, len(deliver_at))])  # not a timestamp: Spark's cast decides
    if deliver_at.type.unit == "ns":  # nanoseconds since 1970 span only 1677-2262: always inside
        return pc.is_null(deliver_at)
    per_second = {"s": 1, "ms": 1000, "us": 1_000_000}[deliver_at.type.unit]
    first, last = (_micros(t) * per_second // 1_000_000 for t in (FIRST_INSTANT, LAST_INSTANT))
    ticks = deliver_at.cast(pa.int64())
    return pc.or_(pc.less(ticks, first), pc.greater(ticks, last))


def _micros(instant: dt.datetime) -> int:
    return (instant - _EPOCH) // dt.timedelta(microseconds=1)

"""The outbound contract: row-level reasons to reject a row, as Spark expressions.

Row-level reasons are computed with Spark expressions so that every failing row is named (GX's
unexpected-row lists are samples) and lands in ``<output>_rejected``. There is no second copy of the
contract in great-expectations: it could only fail if the two copies drifted apart, and it cost ~11 s
per round. GX runs the user's own business expectations instead (``quality/expectations.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queuelake.errors import QueuelakeError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

REQUIRED = ["key", "message_type", "intent", "body"]
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
        raise QueuelakeError(f"outbound table lacks required column(s): {', '.join(missing)}")
    # duplicates from a key-only aggregation: a window over the rows would shuffle the bodies too
    dups = df.groupBy("key").count().where(F.col("count") > 1).select("key", F.lit(True).alias("_dup"))
    df = df.join(F.broadcast(dups), on="key", how="left")
    body_len = F.length(F.col("body"))
    dup = F.coalesce(F.col("_dup"), F.lit(False))
    checks = [
        (F.col("key").isNull(), "key is null"),
        (F.col("message_type").isNull() | (F.trim("message_type") == ""), "message_type is empty"),
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
    ]
    reasons = F.filter(F.array(*[F.when(cond, F.lit(text)) for cond, text in checks]), lambda x: x.isNotNull())
    return df.withColumn("reasons", reasons).withColumn("body_len", body_len).drop("_dup")

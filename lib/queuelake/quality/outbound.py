"""The outbound contract: row-level reasons to reject, and the great-expectations gate.

Row-level reasons are computed with Spark expressions so that every failing row is named (GX's
unexpected-row lists are samples). The accepted rows then pass through a great-expectations suite
expressing the same contract; if the gate fails, nothing of that output is published.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from queuelake.errors import QueuelakeError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

REQUIRED = ["key", "message_type", "intent", "body"]
CHECKED = ["key", "message_type", "intent", "destination", "body_len", "ttbr_ms", "deliver_at", "reasons"]
INTENTS = ["Send", "Publish"]


class GateFailed(QueuelakeError):
    """The great-expectations suite failed on rows that passed the row-level checks."""


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


def gate(df: DataFrame, name: str) -> dict[str, Any]:
    """Validate accepted rows (``CHECKED`` columns) with great-expectations; raise GateFailed
    naming what failed."""
    os.environ.setdefault("TQDM_DISABLE", "1")  # GX's metric progress bars would flood the job log
    import great_expectations as gx

    context = gx.get_context(mode="ephemeral")
    source = context.data_sources.add_spark(name=f"queuelake_{name}", persist=False)
    asset = source.add_dataframe_asset(name=name)
    batch = asset.add_batch_definition_whole_dataframe("increment").get_batch(batch_parameters={"dataframe": df})
    suite = gx.ExpectationSuite(name=f"outbound_{name}")
    for column in ["key", "message_type", "intent", "body_len"]:
        suite.add_expectation(gx.expectations.ExpectColumnValuesToNotBeNull(column=column))
    suite.add_expectation(gx.expectations.ExpectColumnValuesToBeInSet(column="intent", value_set=INTENTS))
    suite.add_expectation(gx.expectations.ExpectColumnValuesToBeUnique(column="key"))
    suite.add_expectation(
        gx.expectations.UnexpectedRowsExpectation(
            unexpected_rows_query=(
                "SELECT * FROM {batch} WHERE (intent = 'Send' AND (destination IS NULL OR trim(destination) = '')) "
                "OR body_len IS NULL OR body_len = 0"
            ),
            description="Send has a destination; body is non-empty",
        )
    )
    result = batch.validate(suite)
    failed = [
        r.expectation_config.type
        + (f"({r.expectation_config.kwargs.get('column')})" if r.expectation_config.kwargs.get("column") else "")
        for r in result.results
        if not r.success
    ]
    if failed:
        raise GateFailed(f"outbound {name}: great-expectations gate failed: {', '.join(failed)}")
    return {"expectations": len(result.results), "success": True}

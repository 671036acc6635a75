"""The worked example: OrderPlaced events in, per-customer totals out, published as an event, and
a loyalty-discount command sent to the Billing endpoint for customers who spent a lot.

Input: the journal's new landed rows (``messages`` columns), and the typed ``OrderPlaced`` table the
bodies stage builds from them (``queuelake bodies``, a step of ``queuelake run``): the orders' fields
come from that table's inferred columns, not from a schema written here. Output: an outbound table
(``key, message_type, intent, destination, body, headers, ttbr_ms, deliver_at, correlation_id,
conversation_id``). Keys are content hashes of the input, so a rerun over the same increment makes
the same keys, and publish makes the same message ids (uuid5 of pipeline, key, destination).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from queuelake.pipeline.bodies.reader import BodyTables

ORDER_PLACED = "Sales.Messages.Events.OrderPlaced"
TOTALS_UPDATED = (
    "Lakehouse.Events.CustomerTotalsUpdated, Lakehouse.Events, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null;"
    "Lakehouse.Events.ICustomerEvent, Lakehouse.Events, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null"
)
APPLY_DISCOUNT = (
    "Billing.Messages.Commands.ApplyLoyaltyDiscount, Billing.Messages, Version=1.0.0.0, Culture=neutral, "
    "PublicKeyToken=null"
)
DISCOUNT_THRESHOLD = 4000.0
DISCOUNT_QUEUE = "Billing"


def _orders(df: DataFrame, bodies: BodyTables) -> DataFrame:
    """This increment's orders, typed: no schema here. The bodies stage made ``OrderPlaced``'s table
    (its columns inferred from the bodies); the journal increment says which orders are new."""
    from pyspark.sql import functions as F

    new = (
        # the events themselves, not audit copies (ProcessingEnded) or failures (FailedQ) of them: an
        # order counts in the increment its business copy landed in, once
        df.where(F.col("message_type") == ORDER_PLACED)
        .where(F.col("processing_ended").isNull() & F.col("failed_queue").isNull())
        .select("message_id")
        .distinct()
    )
    typed = bodies.table(ORDER_PLACED).join(new, "message_id", "left_semi")
    return typed.select(
        "message_id", "conversation_id", "time_sent", "OrderId", "CustomerId", "Total", "Currency"
    ).where(F.col("CustomerId").isNotNull())


def customer_totals(df: DataFrame, bodies: BodyTables) -> DataFrame:
    """One CustomerTotalsUpdated event per customer with new orders, plus ApplyLoyaltyDiscount
    commands to Billing for customers whose new orders exceed the threshold. ``bodies``: the typed
    body tables (a transform function that names this parameter is given them)."""
    from pyspark.sql import functions as F

    per_customer = (
        _orders(df, bodies)
        .groupBy("CustomerId", "Currency")
        .agg(
            F.count("*").alias("Orders"),
            F.round(F.sum("Total"), 2).alias("Total"),
            F.min("time_sent").alias("FirstOrderSent"),
            F.max("time_sent").alias("LastOrderSent"),
            F.sha2(F.concat_ws(",", F.sort_array(F.collect_list("message_id"))), 256).alias("input_hash"),
        )
    )
    payload = F.to_json(
        F.struct(
            "CustomerId",
            "Orders",
            "Total",
            "Currency",
            F.date_format("FirstOrderSent", "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'").alias("FirstOrderSent"),
            F.date_format("LastOrderSent", "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'").alias("LastOrderSent"),
        )
    )
    events = per_customer.select(
        F.concat_ws(":", F.lit("totals"), "CustomerId", "input_hash").alias("key"),
        F.lit(TOTALS_UPDATED).alias("message_type"),
        F.lit("Publish").alias("intent"),
        F.lit(None).cast("string").alias("destination"),
        F.encode(payload, "UTF-8").alias("body"),
        F.create_map(F.lit("NServiceBus.ContentType"), F.lit("application/json")).alias("headers"),
        F.lit(None).cast("long").alias("ttbr_ms"),
        F.lit(None).cast("timestamp").alias("deliver_at"),
        F.lit(None).cast("string").alias("correlation_id"),
        F.lit(None).cast("string").alias("conversation_id"),
    )
    discount_payload = F.to_json(
        F.struct("CustomerId", F.lit(10).alias("DiscountPercent"), F.col("Total").alias("QualifyingTotal"))
    )
    commands = per_customer.where(F.col("Total") >= DISCOUNT_THRESHOLD).select(
        F.concat_ws(":", F.lit("discount"), "CustomerId", "input_hash").alias("key"),
        F.lit(APPLY_DISCOUNT).alias("message_type"),
        F.lit("Send").alias("intent"),
        F.lit(DISCOUNT_QUEUE).alias("destination"),
        F.encode(discount_payload, "UTF-8").alias("body"),
        F.create_map(F.lit("NServiceBus.ContentType"), F.lit("application/json")).alias("headers"),
        F.lit(24 * 3600 * 1000).cast("long").alias("ttbr_ms"),
        F.lit(None).cast("timestamp").alias("deliver_at"),
        F.lit(None).cast("string").alias("correlation_id"),
        F.lit(None).cast("string").alias("conversation_id"),
    )
    return events.unionByName(commands)

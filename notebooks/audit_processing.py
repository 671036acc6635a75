# Databricks notebook source
# MAGIC %md
# MAGIC # Audit: processing times
# MAGIC
# MAGIC Every message an endpoint processed successfully is copied to the audit queue with the
# MAGIC `ProcessingStarted`, `ProcessingEnded` and `ProcessingEndpoint` headers; the drain decodes them into the
# MAGIC `messages` journal. This notebook shows:
# MAGIC
# MAGIC * **processing time** (`processing_ended - processing_started`) per message type and per endpoint, as
# MAGIC   percentiles, together with the **critical time** (`processing_ended - time_sent`: sending to done);
# MAGIC * the **distribution** of processing times per endpoint;
# MAGIC * processing time **over time** (p90 per time bucket, per endpoint; a bucket without messages is a gap).
# MAGIC
# MAGIC Parameters: the `lake_root` widget on Databricks (elsewhere `QUEUELAKE_LAKE_ROOT`, default `./lake`);
# MAGIC `audit_queue` (elsewhere `QUEUELAKE_AUDIT_QUEUE`): the audit queue's name, e.g. `audit`; empty means every
# MAGIC row with processing headers and no exception headers; `bucket` (`auto`: at most 40 buckets over the
# MAGIC data's time span, or `second`, `10 seconds`, `minute`, `5 minutes`, `15 minutes`, `hour`, `day`, `week`,
# MAGIC `30 days`, `365 days`; elsewhere `QUEUELAKE_BUCKET`).
# MAGIC Times are UTC. Plots show under the cells on Databricks and in Jupyter; run as a script they are saved as PNG
# MAGIC files under `./notebook-output/`, or the folder `QUEUELAKE_NOTEBOOK_OUTPUT` names (`show`: shown instead).

# COMMAND ----------

import matplotlib.pyplot as plt
import numpy as np
from pyspark.sql import functions as F
from queuelake.config_sections import LakeConfig
from queuelake.lake import record_tables
from queuelake.notebook_support import (
    BUCKETS,
    LEAST_TREND_BUCKETS,
    Notebook,
    choose_bucket,
    decimals_for,
    duration_unit,
    grouped_bars,
    implausible_note,
    in_unit,
    legend_outside,
    none_if_empty,
    per_bucket,
    plausible_times,
    queue_rows,
    spark_table,
    trend_buckets,
    trend_lines,
    unquote_queues,
    value_axis,
)

# dbutils, spark and display are predefined on Databricks only: handed over, the same code runs here and there
nb = Notebook(dbutils=globals().get("dbutils"), spark=globals().get("spark"), display=globals().get("display"))
LAKE_ROOT = nb.param("lake_root", "./lake")
BUCKET = nb.param("bucket", "auto", ["auto", *BUCKETS])
AUDIT_QUEUE = nb.param("audit_queue", "").strip()  # as written, quoted or not (queue_rows reads both)

lake = nb.open_lake(LakeConfig(root=LAKE_ROOT, engine="auto"))


def percentiles(df, key):
    """Processing and critical time percentiles (milliseconds) per value of ``key``, busiest first; the
    critical times (sending to done: often minutes) converted to the unit that fits them."""
    pt = F.percentile_approx("processing_ms", [0.5, 0.9, 0.99], 10000)
    ct = F.percentile_approx("critical_ms", [0.5, 0.9], 10000)
    pdf = (
        df.groupBy(F.coalesce(key, F.lit("(unknown)")).alias(key))
        .agg(F.count("*").alias("n"), pt.alias("pt"), F.max("processing_ms").alias("max_ms"), ct.alias("ct"))
        .select(
            key,
            "n",
            F.col("pt")[0].alias("p50_ms"),
            F.col("pt")[1].alias("p90_ms"),
            F.col("pt")[2].alias("p99_ms"),
            "max_ms",
            F.col("ct")[0].alias("critical_p50_ms"),
            F.col("ct")[1].alias("critical_p90_ms"),
        )
        .orderBy(F.desc("n"), key)
        .toPandas()
    )
    critical = ["critical_p50_ms", "critical_p90_ms"]
    converted, _unit = in_unit(pdf.rename(columns={c: c[:-3] for c in critical}), [c[:-3] for c in critical], 0.001)
    return converted


def percentile_bars(pdf, key, title, name, n=15):
    """Grouped horizontal bars p50 / p90 / p99 for the n busiest values of ``key``, busiest on top, in the unit
    that fits the p99s: a linear axis from 0, so that 467 ms is more than half of 829 ms, as it is, with each
    bar's value written beside it (a short bar beside a long one still reads)."""
    rows = pdf.head(n).reset_index(drop=True)
    unit, size = duration_unit(float(rows["p99_ms"].max()) / 1000)
    table = rows[["p50_ms", "p90_ms", "p99_ms"]].astype(float) * 0.001 / size
    table.columns = ["p50", "p90", "p99"]
    table.index = [f"{str(v)[-55:]} (n={c})" for v, c in zip(rows[key], rows["n"])]
    fig, ax = plt.subplots(figsize=(12, 0.75 * len(rows) + 1.8))
    grouped_bars(ax, table, decimals_for(float(table.max().max())), horizontal=True)
    ax.set_xlabel(f"processing time, {unit}")
    ax.set_title(title)
    nb.save_or_show(fig, name)


# COMMAND ----------

# MAGIC %md
# MAGIC ## Audited messages

# COMMAND ----------

audited = None
messages = nb.read_table(record_tables.MESSAGES.name)
if messages is not None:
    messages = unquote_queues(messages)
    scope = queue_rows(messages, AUDIT_QUEUE)
    candidates, implausible = plausible_times(
        scope.where(
            (F.col("outcome") == "landed")
            & F.col("processing_started").isNotNull()
            & F.col("processing_ended").isNotNull()
            & F.col("exception_type").isNull()
            & F.col("failed_queue").isNull()
        ),
        "processing_started",
        "processing_ended",
        "time_sent",
    )
    if implausible:
        print(implausible_note(implausible, "audited row(s)", "a ProcessingStarted, ProcessingEnded or TimeSent"))
    candidates = candidates.withColumns(
        {
            "processing_ms": (F.unix_micros("processing_ended") - F.unix_micros("processing_started")) / 1000.0,
            "critical_ms": (F.unix_micros("processing_ended") - F.unix_micros("time_sent")) / 1000.0,
        }
    )
    negative = candidates.where(F.col("processing_ms") < 0).count()
    if negative:
        print(f"note: {negative} audited row(s) end before they start (clock skew); left out")
    audited = none_if_empty(
        candidates.where(F.col("processing_ms") >= 0),
        "audited messages (rows with ProcessingStarted/Ended headers)",
        AUDIT_QUEUE,
    )

if audited is not None:
    summary = audited.groupBy("queue").agg(
        F.count("*").alias("messages"),
        F.countDistinct("message_type").alias("message_types"),
        F.countDistinct("processing_endpoint").alias("endpoints"),
        F.min("processing_ended").alias("first_processed"),
        F.max("processing_ended").alias("last_processed"),
    )
    nb.show_table(spark_table(summary), "audited messages per queue")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Processing time per message type

# COMMAND ----------

if audited is not None:
    by_type = percentiles(audited, "message_type")
    nb.show_table(by_type, "processing and critical time per message type")
    percentile_bars(by_type, "message_type", "processing time per message type", "audit_by_message_type")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Processing time per endpoint

# COMMAND ----------

if audited is not None:
    by_endpoint = percentiles(audited, "processing_endpoint")
    nb.show_table(by_endpoint, "processing and critical time per endpoint")
    percentile_bars(by_endpoint, "processing_endpoint", "processing time per endpoint", "audit_by_endpoint")

    per_pair = (
        audited.groupBy(
            F.coalesce("processing_endpoint", F.lit("(unknown)")).alias("processing_endpoint"),
            F.coalesce("message_type", F.lit("(unknown)")).alias("message_type"),
        )
        .agg(
            F.count("*").alias("n"),
            F.percentile_approx("processing_ms", 0.5, 10000).alias("p50_ms"),
            F.percentile_approx("processing_ms", 0.99, 10000).alias("p99_ms"),
        )
        .orderBy(F.desc("n"))
        .limit(25)
        .toPandas()
    )
    nb.show_table(per_pair, "per endpoint and message type (top 25 by volume)")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Distribution and trend
# MAGIC
# MAGIC The histogram uses a sample of at most 200,000 rows.

# COMMAND ----------

if audited is not None:
    total = audited.count()
    fraction = min(1.0, 200_000 / total)
    sample = audited.sample(fraction=fraction, seed=7) if fraction < 1.0 else audited
    sample = sample.select(
        F.coalesce("processing_endpoint", F.lit("(unknown)")).alias("endpoint"), "processing_ms"
    ).toPandas()
    bucket = choose_bucket(audited, "processing_ended", BUCKET, most=40)  # percentiles need rows per bucket
    endpoint = F.coalesce("processing_endpoint", F.lit("(unknown)")).alias("endpoint")
    p90 = F.percentile_approx("processing_ms", 0.9).alias("p90_ms")
    trend = per_bucket(audited, "processing_ended", bucket, [endpoint], p90)
    enough = trend_buckets(trend) >= LEAST_TREND_BUCKETS  # fewer buckets are lone points, not a trend
    fig, axes = plt.subplots(1, 2 if enough else 1, figsize=(14 if enough else 9, 4.5), squeeze=False)
    left = axes[0][0]
    # A histogram shows a shape, not values to compare: a log x axis (labelled so) only where the times span
    # more than two decades, so that fast and slow handlers both show; its count axis is linear from 0.
    positive = sample["processing_ms"].clip(lower=0.01)
    low, high = positive.quantile(0.01), positive.quantile(0.99)
    logarithmic = high > 100 * max(low, 0.01)
    if logarithmic:
        bins = np.logspace(np.log10(positive.min()), np.log10(max(positive.max(), positive.min() * 10)), 40)
    else:
        bins = np.linspace(0, max(positive.max(), 1.0), 40)
    for endpoint, rows in sample.groupby("endpoint"):
        left.hist(rows["processing_ms"].clip(lower=0.01), bins=bins, alpha=0.5, label=endpoint)
    if logarithmic:
        left.set_xscale("log")
    value_axis(left, counts=True)
    left.set_xlabel("processing time, ms" + (" (log scale)" if logarithmic else ""))
    left.set_ylabel("messages")
    left.set_title("processing time distribution per endpoint")
    legend_outside(left)
    if enough:
        unit, size = duration_unit(float(trend["p90_ms"].max()) / 1000)
        title = f"p90 processing time per {bucket}"
        trend_lines(
            axes[0][1], trend, "endpoint", "p90_ms", title, f"processing time, {unit}", bucket, None, size / 0.001
        )
    else:
        spanned = f"{trend_buckets(trend)} bucket(s) of {BUCKETS[bucket][0]}"  # "2 bucket(s) of 5 minutes"
        print(f"note: the audited messages were processed within {spanned}: no trend to draw")
    nb.save_or_show(fig, "audit_distribution")

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
# MAGIC * processing time **over time** (p90 per minute or hour, per endpoint).
# MAGIC
# MAGIC Parameters: the `lake_root` widget on Databricks (elsewhere `QUEUELAKE_LAKE_ROOT`, default `./lake`);
# MAGIC `audit_queue` (elsewhere `QUEUELAKE_AUDIT_QUEUE`): the audit queue's name, e.g. `audit`; empty means every
# MAGIC row with processing headers and no exception headers; `bucket` (`auto`, `minute`, `5 minutes`,
# MAGIC `15 minutes`, `hour`, `day`; elsewhere `QUEUELAKE_BUCKET`).
# MAGIC When `QUEUELAKE_NOTEBOOK_OUTPUT` names a folder, plots are saved there as PNG files instead of shown.

# COMMAND ----------

import os

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from pyspark.sql import functions as F
from queuelake.config import LakeConfig
from queuelake.lake import open_lake

OUTPUT = os.environ.get("QUEUELAKE_NOTEBOOK_OUTPUT")  # a folder: save the plots there instead of showing them
if OUTPUT:
    plt.switch_backend("Agg")

# time buckets: Spark window duration, pandas frequency, seconds
BUCKETS = {
    "minute": ("1 minute", "1min", 60),
    "5 minutes": ("5 minutes", "5min", 300),
    "15 minutes": ("15 minutes", "15min", 900),
    "hour": ("1 hour", "1h", 3600),
    "day": ("1 day", "1D", 86400),
}

dbutils = globals().get("dbutils")  # predefined on Databricks only
display = globals().get("display")


def param(name, default, choices=None):
    """A widget on Databricks; elsewhere the environment variable QUEUELAKE_<NAME>, else the default."""
    value = os.environ.get(f"QUEUELAKE_{name.upper()}", default)
    if dbutils is None:
        return value
    if choices:
        dbutils.widgets.dropdown(name, value if value in choices else default, choices)
    else:
        dbutils.widgets.text(name, value)
    return dbutils.widgets.get(name)


LAKE_ROOT = param("lake_root", "./lake")
BUCKET = param("bucket", "auto", ["auto", *BUCKETS])
AUDIT_QUEUE = param("audit_queue", "").replace('"', "")  # queue names are compared without quotes

if "spark" not in globals():
    from queuelake.spark import get_spark

    spark = get_spark()

lake = open_lake(LakeConfig(root=LAKE_ROOT, engine="auto"), spark)
print(f"lake {LAKE_ROOT} ({lake.name})")


def read_table(name):
    """The lake table as a DataFrame, or None (with a note) when it is missing or empty."""
    if not lake.exists(name):
        print(f"note: no lake table {name!r} under {LAKE_ROOT}")
        return None
    df = lake.read(name)
    if df.isEmpty():
        print(f"note: lake table {name!r} is empty")
        return None
    return df


def show_table(pdf, title):
    print(f"\n{title}")
    if display is not None:
        display(pdf)
    else:
        print(pdf.to_string(index=False) if len(pdf) else "(no rows)")


def save_or_show(fig, name):
    fig.tight_layout()
    if OUTPUT:
        os.makedirs(OUTPUT, exist_ok=True)
        path = os.path.join(OUTPUT, f"{name}.png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        print(f"saved {path}")
    else:
        plt.show()


def label(queue):
    """`"public"."Sales"` reads better as public.Sales."""
    return str(queue).replace('"', "")


def choose_bucket(df, column, most=120):
    """The bucket parameter, or with `auto` the finest bucket that cuts the data's time span into at most
    ``most`` buckets."""
    if BUCKET != "auto":
        return BUCKET
    span = df.agg((F.unix_seconds(F.max(column)) - F.unix_seconds(F.min(column))).alias("s")).first()["s"] or 0
    return next((name for name, (_, _, seconds) in BUCKETS.items() if span / seconds <= most), "day")


def bucket_start(column, bucket):
    """The start of the time bucket a timestamp falls in (buckets aligned to UTC midnight)."""
    return F.window(column, BUCKETS[bucket][0])["start"].alias("bucket")


def wide(pdf, index, columns, values, bucket=None):
    """Long to wide for plotting: one column per series; with a bucket, every bucket of the range, empty ones 0."""
    table = pdf.pivot_table(index=index, columns=columns, values=values, aggfunc="sum").fillna(0).sort_index()
    if bucket and len(table):
        every = pd.date_range(table.index.min(), table.index.max(), freq=BUCKETS[bucket][1])
        table = table.reindex(every, fill_value=0)
    return table


def in_queue(name):
    """Rows of the queue called ``name``: `audit`, `public.audit`, `audit@[dbo]@[nsb]` all match `audit`."""
    queue = F.col("queue")
    return (queue == name) | queue.endswith("." + name) | queue.startswith(name + "@")


def percentiles(df, key):
    """Processing and critical time percentiles (milliseconds) per value of ``key``, busiest first."""
    pt = F.percentile_approx("processing_ms", [0.5, 0.9, 0.99], 10000)
    ct = F.percentile_approx("critical_ms", [0.5, 0.9], 10000)
    return (
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


def percentile_bars(pdf, key, title, name, n=15):
    """Grouped horizontal bars p50 / p90 / p99 for the n busiest values of ``key``."""
    rows = pdf.head(n).iloc[::-1].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(11, 0.55 * len(rows) + 1.8))
    height = 0.27
    for i, column in enumerate(["p50_ms", "p90_ms", "p99_ms"]):
        ax.barh(
            [p + (i - 1) * height for p in range(len(rows))], rows[column].clip(lower=0.01), height, label=column[:-3]
        )
    ax.set_yticks(range(len(rows)), [f"{str(v)[-55:]} (n={c})" for v, c in zip(rows[key], rows["n"])])
    ax.set_xscale("log")
    ax.set_xlabel("processing time, ms (log)")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    save_or_show(fig, name)


# COMMAND ----------

# MAGIC %md
# MAGIC ## Audited messages

# COMMAND ----------

audited = None
messages = read_table("messages")
if messages is not None:
    messages = messages.withColumn("queue", F.regexp_replace("queue", '"', ""))
    scope = messages.where(in_queue(AUDIT_QUEUE)) if AUDIT_QUEUE else messages
    candidates = scope.where(
        (F.col("outcome") == "landed")
        & F.col("processing_started").isNotNull()
        & F.col("processing_ended").isNotNull()
        & F.col("exception_type").isNull()
        & F.col("failed_queue").isNull()
    ).withColumns(
        {
            "processing_ms": (F.unix_micros("processing_ended") - F.unix_micros("processing_started")) / 1000.0,
            "critical_ms": (F.unix_micros("processing_ended") - F.unix_micros("time_sent")) / 1000.0,
        }
    )
    negative = candidates.where(F.col("processing_ms") < 0).count()
    if negative:
        print(f"note: {negative} audited row(s) end before they start (clock skew); left out")
    audited = candidates.where(F.col("processing_ms") >= 0)
    if audited.isEmpty():
        where = f"queue {AUDIT_QUEUE!r}" if AUDIT_QUEUE else "the journal"
        print(f"note: no audited messages (rows with ProcessingStarted/Ended headers) in {where}: nothing to show")
        audited = None

if audited is not None:
    summary = (
        audited.groupBy("queue")
        .agg(
            F.count("*").alias("messages"),
            F.countDistinct("message_type").alias("message_types"),
            F.countDistinct("processing_endpoint").alias("endpoints"),
            F.min("processing_ended").alias("first_processed"),
            F.max("processing_ended").alias("last_processed"),
        )
        .toPandas()
    )
    show_table(summary, "audited messages per queue")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Processing time per message type

# COMMAND ----------

if audited is not None:
    by_type = percentiles(audited, "message_type")
    show_table(by_type.round(2), "processing and critical time per message type (ms)")
    percentile_bars(by_type, "message_type", "processing time per message type", "audit_by_message_type")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Processing time per endpoint

# COMMAND ----------

if audited is not None:
    by_endpoint = percentiles(audited, "processing_endpoint")
    show_table(by_endpoint.round(2), "processing and critical time per endpoint (ms)")
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
    show_table(per_pair.round(2), "per endpoint and message type (top 25 by volume)")

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
    bucket = choose_bucket(audited, "processing_ended")
    trend = (
        audited.groupBy(
            F.coalesce("processing_endpoint", F.lit("(unknown)")).alias("endpoint"),
            bucket_start("processing_ended", bucket),
        )
        .agg(F.percentile_approx("processing_ms", 0.9, 10000).alias("p90_ms"))
        .toPandas()
    )
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    positive = sample["processing_ms"].clip(lower=0.01)
    bins = np.logspace(np.log10(positive.min()), np.log10(max(positive.max(), positive.min() * 10)), 40)
    for endpoint, rows in sample.groupby("endpoint"):
        left.hist(rows["processing_ms"].clip(lower=0.01), bins=bins, alpha=0.5, label=endpoint)
    left.set_xscale("log")
    left.set_xlabel("processing time, ms (log)")
    left.set_ylabel("messages")
    left.set_title("processing time distribution per endpoint")
    left.legend(fontsize="small")
    series = trend.pivot_table(index="bucket", columns="endpoint", values="p90_ms").sort_index()
    for endpoint in series.columns:
        right.plot(series.index, series[endpoint], marker=".", label=endpoint)
    right.set_title(f"p90 processing time per {bucket}")
    right.set_ylabel("ms")
    right.grid(alpha=0.3)
    right.legend(fontsize="small")
    fig.autofmt_xdate()
    save_or_show(fig, "audit_distribution")

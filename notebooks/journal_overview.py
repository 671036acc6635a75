# Databricks notebook source
# MAGIC %md
# MAGIC # Journal overview
# MAGIC
# MAGIC What the drain has put into the `messages` journal, per queue and over time:
# MAGIC
# MAGIC * **throughput**: messages drained per minute (or 5 or 15 minutes, hour, day), per queue;
# MAGIC * **lag**: from `time_sent` (the sender's clock) to `drained_at` (when the batch landed), as percentiles;
# MAGIC * **expired and quarantined** rows: counts per queue and over time, and the quarantine reasons;
# MAGIC * the **`runs`** table: drain rate and the backlog left behind by each run.
# MAGIC
# MAGIC Parameters: the `lake_root` widget on Databricks (elsewhere the `QUEUELAKE_LAKE_ROOT` environment variable,
# MAGIC default `./lake`), and `bucket` (`minute`, `5 minutes`, `15 minutes`, `hour`, `day`, or `auto`: the finest
# MAGIC that gives at most 120 points; elsewhere `QUEUELAKE_BUCKET`).
# MAGIC On Databricks, attach a cluster that has the queuelake wheel installed (the asset bundle's job cluster does).
# MAGIC When `QUEUELAKE_NOTEBOOK_OUTPUT` names a folder, plots are saved there as PNG files instead of shown.

# COMMAND ----------

import matplotlib.pyplot as plt
import pandas as pd
from pyspark.sql import functions as F
from queuelake.config import LakeConfig
from queuelake.notebook_support import BUCKETS, Notebook, bucket_start, choose_bucket, trend_lines, unquote_queues, wide

# dbutils, spark and display are predefined on Databricks only: handed over, the same code runs here and there
nb = Notebook(dbutils=globals().get("dbutils"), spark=globals().get("spark"), display=globals().get("display"))
LAKE_ROOT = nb.param("lake_root", "./lake")
BUCKET = nb.param("bucket", "auto", ["auto", *BUCKETS])

lake = nb.open_lake(LakeConfig(root=LAKE_ROOT, engine="auto"))


# COMMAND ----------

# MAGIC %md
# MAGIC ## Messages per queue and outcome

# COMMAND ----------

messages = nb.read_table("messages")
if messages is not None:
    messages = unquote_queues(messages)
    per_queue = (
        messages.groupBy("queue")
        .agg(
            F.count("*").alias("rows"),
            F.sum(F.when(F.col("outcome") == "landed", 1).otherwise(0)).alias("landed"),
            F.sum(F.when(F.col("outcome") == "expired", 1).otherwise(0)).alias("expired"),
            F.sum(F.when(F.col("outcome") == "quarantined", 1).otherwise(0)).alias("quarantined"),
            F.countDistinct("batch_id").alias("batches"),
            F.min("drained_at").alias("first_drained"),
            F.max("drained_at").alias("last_drained"),
        )
        .orderBy(F.desc("rows"))
        .toPandas()
    )
    nb.show_table(per_queue, "rows per queue")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Throughput per queue

# COMMAND ----------

if messages is not None:
    bucket = choose_bucket(messages, "drained_at", BUCKET)
    throughput = messages.groupBy("queue", bucket_start("drained_at", bucket)).count().toPandas()
    series = wide(throughput, "bucket", "queue", "count", bucket)
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for queue in series.columns:
        ax.plot(series.index, series[queue], drawstyle="steps-post", label=queue)
    ax.set_title(f"messages drained per {bucket}, per queue")
    ax.set_ylabel(f"messages / {bucket}")
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    nb.save_or_show(fig, "throughput")
    peaks = series.agg(["sum", "max", "mean"]).T.reset_index()
    peaks.columns = ["queue", "messages", f"peak per {bucket}", f"mean per {bucket}"]
    nb.show_table(peaks.round(1), f"throughput per {bucket}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Lag from `time_sent` to `drained_at`
# MAGIC
# MAGIC The sender's clock against the lake's: small negative values are clock skew. Expired and quarantined rows
# MAGIC have no decoded `time_sent` and are left out.

# COMMAND ----------

lagged = None
if messages is not None:
    lagged = messages.where((F.col("outcome") == "landed") & F.col("time_sent").isNotNull()).withColumn(
        "lag_s", (F.unix_micros("drained_at") - F.unix_micros("time_sent")) / 1e6
    )
    if lagged.isEmpty():
        print("note: no landed rows with a TimeSent header: no lag to show")
        lagged = None

if lagged is not None:
    pct = F.percentile_approx("lag_s", [0.5, 0.9, 0.99], 10000)
    lag = (
        lagged.groupBy("queue")
        .agg(F.count("*").alias("n"), pct.alias("p"), F.max("lag_s").alias("max_s"))
        .select(
            "queue",
            "n",
            F.col("p")[0].alias("p50_s"),
            F.col("p")[1].alias("p90_s"),
            F.col("p")[2].alias("p99_s"),
            "max_s",
        )
        .orderBy("queue")
        .toPandas()
    )
    nb.show_table(lag.round(3), "lag time_sent -> drained_at (seconds)")

    bucket = choose_bucket(lagged, "drained_at", BUCKET)
    over_time = (
        lagged.groupBy("queue", bucket_start("drained_at", bucket))
        .agg(F.percentile_approx("lag_s", 0.95, 10000).alias("p95_s"))
        .toPandas()
    )
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [2, 3]})
    positions = range(len(lag))
    width = 0.27
    for i, column in enumerate(["p50_s", "p90_s", "p99_s"]):
        left.bar([p + (i - 1) * width for p in positions], lag[column].clip(lower=1e-3), width, label=column[:-2])
    left.set_xticks(list(positions), lag["queue"], rotation=30, ha="right")
    spread = lag["p99_s"].max() / max(lag["p50_s"].clip(lower=1e-3).min(), 1e-3)
    if spread > 50:  # queues minutes and milliseconds apart: a log scale keeps both readable
        left.set_yscale("log")
    left.set_ylabel("seconds" + (" (log)" if spread > 50 else ""))
    left.set_title("lag percentiles per queue")
    left.legend(fontsize="small")
    trend_lines(right, over_time, "queue", "p95_s", f"p95 lag per {bucket}", "seconds")
    fig.autofmt_xdate()
    nb.save_or_show(fig, "lag")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Expired and quarantined rows
# MAGIC
# MAGIC Expired rows were past their `TimeToBeReceived` when drained (judged by the database clock): only their
# MAGIC identity and `expires` are kept. Quarantined rows had headers that could not be decoded; `error` says why
# MAGIC and `raw_headers` keeps the text.

# COMMAND ----------

if messages is not None:
    bad = messages.where(F.col("outcome").isin("expired", "quarantined"))
    if bad.isEmpty():
        print("note: no expired or quarantined rows")
    else:
        counts = bad.groupBy("queue", "outcome").count().toPandas()
        bucket = choose_bucket(bad, "drained_at", BUCKET)
        over_time = bad.groupBy("outcome", bucket_start("drained_at", bucket)).count().toPandas()
        fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
        wide(counts, "queue", "outcome", "count").plot.bar(ax=left, stacked=True, rot=30)
        left.set_title("expired and quarantined rows per queue")
        left.set_xlabel("")
        left.set_ylabel("rows")
        series = wide(over_time, "bucket", "outcome", "count", bucket)
        for outcome in series.columns:
            right.plot(series.index, series[outcome], drawstyle="steps-post", label=outcome)
        right.set_title(f"expired and quarantined rows per {bucket}")
        right.set_ylabel(f"rows / {bucket}")
        right.grid(alpha=0.3)
        right.legend(fontsize="small")
        fig.autofmt_xdate()
        nb.save_or_show(fig, "outcomes")

        reasons = (
            bad.where(F.col("outcome") == "quarantined")
            .groupBy("queue", F.substring(F.coalesce("error", F.lit("(no reason)")), 1, 120).alias("error"))
            .count()
            .orderBy(F.desc("count"))
            .limit(20)
            .toPandas()
        )
        nb.show_table(reasons, "quarantine reasons (top 20)")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Runs: drain rate and backlog left

# COMMAND ----------

runs = nb.read_table("runs")
if runs is not None:
    runs = unquote_queues(runs.where(F.col("queue").isNotNull()))
    if runs.isEmpty():
        print("note: no per-queue rows in the runs table")
        runs = None

if runs is not None:
    recent = (
        runs.select(
            "started_at",
            "command",
            "queue",
            "status",
            "dequeued",
            "landed",
            "expired",
            "quarantined",
            "batches",
            "seconds",
            "rate",
            "backlog_left",
            "error",
        )
        .orderBy(F.desc("started_at"))
        .limit(30)
        .toPandas()
    )
    nb.show_table(recent, "latest runs (30)")
    status = runs.groupBy("command", "status").count().orderBy("command", "status").toPandas()
    nb.show_table(status, "runs per command and status")

    per_run = runs.select("started_at", "queue", "rate", "backlog_left").orderBy("started_at").toPandas()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    for queue, rows in per_run.groupby("queue"):
        top.plot(rows["started_at"], rows["rate"], marker="o", label=queue)
        bottom.plot(rows["started_at"], rows["backlog_left"].fillna(0), marker="o", label=queue)
    top.set_title("drain rate per run")
    top.set_ylabel("messages / s")
    bottom.set_title("backlog left after each run")
    bottom.set_ylabel("messages")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="upper left")
    fig.autofmt_xdate()
    nb.save_or_show(fig, "runs")

    if pd.notna(per_run["backlog_left"]).any():
        latest = per_run.sort_values("started_at").groupby("queue").tail(1)[["queue", "started_at", "backlog_left"]]
        nb.show_table(latest, "backlog left by the latest run per queue")

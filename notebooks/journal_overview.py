# Databricks notebook source
# MAGIC %md
# MAGIC # Journal overview
# MAGIC
# MAGIC What the drain has put into the `messages` journal, per queue and over time:
# MAGIC
# MAGIC * **throughput**: messages drained per second, 10 seconds, minute, 5 or 15 minutes, hour or day, per queue;
# MAGIC * **lag**: from `time_sent` (the sender's clock) to `drained_at` (when the batch landed), as percentiles;
# MAGIC * **expired and quarantined** rows: counts per queue and over time, and the quarantine reasons;
# MAGIC * the **`runs`** table: drain rate and the backlog left behind by each run, failed runs marked.
# MAGIC
# MAGIC Times are UTC. Parameters: the `lake_root` widget on Databricks (elsewhere the `QUEUELAKE_LAKE_ROOT`
# MAGIC environment variable, default `./lake`), and `bucket` (`second`, `10 seconds`, `minute`, `5 minutes`,
# MAGIC `15 minutes`, `hour`, `day`, or `auto`: the finest that cuts the journal's time span into at most 120
# MAGIC buckets; elsewhere `QUEUELAKE_BUCKET`). Up to 40 buckets draw as bars, more as lines.
# MAGIC On Databricks, attach a cluster that has the queuelake wheel installed (the asset bundle's job cluster does).
# MAGIC Plots show under the cells on Databricks and in Jupyter; run as a script
# MAGIC (`python notebooks/journal_overview.py`) they are saved as PNG files under `./notebook-output/`, or the
# MAGIC folder `QUEUELAKE_NOTEBOOK_OUTPUT` names (`show`: shown instead).

# COMMAND ----------

import matplotlib.pyplot as plt
import pandas as pd
from pyspark.sql import functions as F
from queuelake.config import LakeConfig
from queuelake.lake import tables
from queuelake.notebook_support import (
    BUCKETS,
    Notebook,
    choose_bucket,
    counts_over_time,
    per_bucket,
    per_run_lines,
    time_span,
    to_pandas_utc,
    trend_lines,
    unquote_queues,
    wide,
)

# dbutils, spark and display are predefined on Databricks only: handed over, the same code runs here and there
nb = Notebook(dbutils=globals().get("dbutils"), spark=globals().get("spark"), display=globals().get("display"))
LAKE_ROOT = nb.param("lake_root", "./lake")
BUCKET = nb.param("bucket", "auto", ["auto", *BUCKETS])

lake = nb.open_lake(LakeConfig(root=LAKE_ROOT, engine="auto"))


# COMMAND ----------

# MAGIC %md
# MAGIC ## Messages per queue and outcome

# COMMAND ----------

messages = nb.read_table(tables.MESSAGES.name)
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
    # One time bucket and x range for every panel over the journal, so that they line up.
    bucket = choose_bucket(messages, "drained_at", BUCKET)
    span = time_span(messages, "drained_at")
    print(f"journal drained from {span[0]:%Y-%m-%d %H:%M:%S} to {span[1]:%Y-%m-%d %H:%M:%S} UTC; buckets: {bucket}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Throughput per queue

# COMMAND ----------

if messages is not None:
    throughput = per_bucket(messages, "drained_at", bucket, ["queue"])
    series = wide(throughput, "bucket", "queue", "count", bucket)
    fig, ax = plt.subplots(figsize=(11, 4.5))
    counts_over_time(ax, series, bucket, f"messages drained per {bucket}, per queue", f"messages / {bucket}")
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

    over_time = per_bucket(lagged, "drained_at", bucket, ["queue"], F.percentile_approx("lag_s", 0.95).alias("p95_s"))
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
    trend_lines(right, over_time, "queue", "p95_s", f"p95 lag per {bucket}", "seconds", bucket, span)
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
        over_time = per_bucket(bad, "drained_at", bucket, ["outcome"])
        fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [2, 3]})
        wide(counts, "queue", "outcome", "count").plot.bar(ax=left, stacked=True, rot=30)
        left.set_title("expired and quarantined rows per queue")
        left.set_xlabel("")
        left.set_ylabel("rows")
        series = wide(over_time, "bucket", "outcome", "count", bucket, span)  # over the whole journal's time
        counts_over_time(right, series, bucket, f"expired and quarantined rows per {bucket}", f"rows / {bucket}")
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
# MAGIC
# MAGIC One point per drain run and queue, at the run's start. A failed run is a red cross on a red dashed line
# MAGIC (incomplete and interrupted runs have their own markers); a backlog a run could not measure is a gap.

# COMMAND ----------

runs = nb.read_table(tables.RUNS.name)
if runs is not None:
    runs = unquote_queues(runs.where(F.col("queue").isNotNull()))
    if runs.isEmpty():
        print("note: no per-queue rows in the runs table")
        runs = None

if runs is not None:
    shown = ["started_at", "command", "queue", "status", "dequeued", "landed", "expired", "quarantined", "published"]
    shown += ["batches", "seconds", "rate", "backlog_left", "error"]
    recent = (
        runs.select(*[c for c in shown if c in runs.columns])  # a runs table an older version wrote has fewer
        .orderBy(F.desc("started_at"))
        .limit(30)
        .toPandas()
    )
    nb.show_table(recent, "latest runs (30)")
    status = runs.groupBy("command", "status").count().orderBy("command", "status").toPandas()
    nb.show_table(status, "runs per command and status")

    drains = runs.where(F.col("command") == "drain").select("started_at", "queue", "status", "rate", "backlog_left")
    per_run = to_pandas_utc(drains, "started_at").sort_values("started_at")
    if per_run.empty:
        print("note: no drain runs in the runs table: no drain rate or backlog to plot")
    else:
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
        per_run_lines(top, per_run, "rate", "drain rate per run", "messages / s")
        per_run_lines(bottom, per_run, "backlog_left", "backlog left after each run", "messages")
        top.set_xlabel("")  # the axis is shared: labelled once, below
        nb.save_or_show(fig, "runs")

    if pd.notna(per_run["backlog_left"]).any():
        latest = per_run.sort_values("started_at").groupby("queue").tail(1)[["queue", "started_at", "backlog_left"]]
        nb.show_table(latest, "backlog left by the latest run per queue")

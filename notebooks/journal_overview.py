# Databricks notebook source
# MAGIC %md
# MAGIC # Journal overview
# MAGIC
# MAGIC What the drain has put into the `messages` journal, per queue and over time:
# MAGIC
# MAGIC * **throughput**: messages drained per second, 10 seconds, minute, 5 or 15 minutes, hour, day, week, 30 or
# MAGIC   365 days, per queue;
# MAGIC * **lag**: from `time_sent` (the sender's clock) to `drained_at` (when the batch landed), as percentiles;
# MAGIC * **expired and quarantined** rows: counts per queue and over time, and the quarantine reasons;
# MAGIC * the **`runs`** table: drain rate and the backlog left behind by each run, failed runs marked.
# MAGIC
# MAGIC Times are UTC. Parameters: the `lake_root` widget on Databricks (elsewhere the `QUEUELAKE_LAKE_ROOT`
# MAGIC environment variable, default `./lake`), and `bucket` (`second`, `10 seconds`, `minute`, `5 minutes`,
# MAGIC `15 minutes`, `hour`, `day`, `week`, `30 days`, `365 days`, or `auto`: the finest that cuts the journal's
# MAGIC time span into at most 60 buckets; elsewhere `QUEUELAKE_BUCKET`). Up to 60 buckets draw as bars, more as lines.
# MAGIC On Databricks, attach a cluster that has the queuelake wheel installed (the asset bundle's job cluster does).
# MAGIC Plots show under the cells on Databricks and in Jupyter; run as a script
# MAGIC (`python notebooks/journal_overview.py`) they are saved as PNG files under `./notebook-output/`, or the
# MAGIC folder `QUEUELAKE_NOTEBOOK_OUTPUT` names (`show`: shown instead).

# COMMAND ----------

import matplotlib.pyplot as plt
from pyspark.sql import functions as F
from queuelake.config_sections import LakeConfig
from queuelake.lake import record_tables
from queuelake.notebook_support import (
    BUCKETS,
    LEAST_TREND_BUCKETS,
    Notebook,
    choose_bucket,
    counts_over_time,
    decimals_for,
    duration_unit,
    grouped_bars,
    implausible_note,
    in_unit,
    per_bucket,
    plausible_times,
    runs_figure,
    spark_table,
    time_span,
    to_pandas_utc,
    trend_buckets,
    trend_lines,
    unquote_queues,
    utc_text,
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

messages = nb.read_table(record_tables.MESSAGES.name)
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
    )
    nb.show_table(spark_table(per_queue), "rows per queue")
    # One time bucket and x range for every panel over the journal, so that they line up.
    bucket = choose_bucket(messages, "drained_at", BUCKET)
    span = time_span(messages, "drained_at")
    print(f"journal drained from {utc_text(span[0])} to {utc_text(span[1])}; buckets: {bucket}")

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
    nb.show_table(peaks, f"throughput per {bucket}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Lag from `time_sent` to `drained_at`
# MAGIC
# MAGIC The sender's clock against the lake's: small negative values are clock skew. Expired and quarantined rows
# MAGIC have no decoded `time_sent` and are left out, as are times no clock wrote (before 1970, or more than a day
# MAGIC after the drain: .NET's `DateTime.MinValue` or `MaxValue`), counted in a note.

# COMMAND ----------

lagged = None
if messages is not None:
    lagged, implausible = plausible_times(
        messages.where((F.col("outcome") == "landed") & F.col("time_sent").isNotNull()), "time_sent"
    )
    if implausible:
        print(implausible_note(implausible, "row(s)", "a TimeSent"))
    lagged = lagged.withColumn("lag_s", (F.unix_micros("drained_at") - F.unix_micros("time_sent")) / 1e6)
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
    # One unit for the table and the bars, the one that fits the largest value: hours for hours.
    lag, unit = in_unit(lag.rename(columns=lambda c: c.removesuffix("_s")), ["p50", "p90", "p99", "max"])
    nb.show_table(lag, f"lag time_sent -> drained_at ({unit})")

    over_time = per_bucket(lagged, "drained_at", bucket, ["queue"], F.percentile_approx("lag_s", 0.95).alias("p95_s"))
    trend = trend_buckets(over_time) >= LEAST_TREND_BUCKETS  # fewer buckets are lone points, not a trend
    fig, axes = plt.subplots(1, 2 if trend else 1, figsize=(14 if trend else 9, 4.5), squeeze=False)
    left = axes[0][0]
    # Linear bars from 0, each with its value: p50 and p99 compared by length, not by a log axis' decades.
    bars = lag.set_index("queue")[[f"p50_{unit}", f"p90_{unit}", f"p99_{unit}"]]
    grouped_bars(left, bars.rename(columns=lambda c: c.split("_")[0]), decimals_for(float(bars.max().max())))
    left.set_ylabel(f"lag, {unit}")
    left.set_title("lag percentiles per queue")
    if trend:
        trend_unit, size = duration_unit(float(over_time["p95_s"].max()))
        trend_title = f"p95 lag per {bucket}"
        trend_lines(axes[0][1], over_time, "queue", "p95_s", trend_title, f"lag, {trend_unit}", bucket, span, size)
    else:
        print(f"note: the journal was drained within {trend_buckets(over_time)} {bucket}(s): no lag trend to draw")
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
        fig, (left, right) = plt.subplots(1, 2, figsize=(14, 4.5), gridspec_kw={"width_ratios": [2, 3]})
        stacked = wide(counts, "queue", "outcome", "count")
        grouped_bars(left, stacked, lambda v: f"{v:,.0f}", stacked=True, counts=True)
        left.set_title("expired and quarantined rows per queue")
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
        )
        nb.show_table(spark_table(reasons), "quarantine reasons (top 20)")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Runs: drain rate and backlog left
# MAGIC
# MAGIC One point per drain run and queue, at the run's start. A failed run is a red cross on a red dashed line
# MAGIC (incomplete and interrupted runs have their own markers); a backlog a run could not measure is a gap.
# MAGIC A run that found its queue empty drained nothing: it has no rate (a gap, and a grey tick along the bottom),
# MAGIC rather than a rate of 0. With fewer than three runs (the demo drains once) the values are bars per queue.

# COMMAND ----------

every_run = nb.read_table(record_tables.RUNS.name)
runs = None
if every_run is not None:
    # every command's rows (bodies, transform, publish, replay...: a row per table or output), not only the
    # drains' per-queue rows (a review: these two tables showed drains alone)
    every_run = unquote_queues(every_run)
    shown = ["started_at", "command", "queue", "table", "status", "dequeued", "landed", "expired", "quarantined"]
    shown += ["published", "rows_in", "rows_out", "batches", "seconds", "rate", "backlog_left", "error"]
    recent = (
        every_run.select(*[c for c in shown if c in every_run.columns])  # an older version's runs table has fewer
        .orderBy(F.desc("started_at"))
        .limit(30)
    )
    nb.show_table(spark_table(recent), "latest runs of every command (30 rows)")
    status = every_run.groupBy("command", "status").count().orderBy("command", "status").toPandas()
    nb.show_table(status, "runs rows per command and status")
    runs = every_run.where(F.col("queue").isNotNull())
    if runs.isEmpty():
        print("note: no per-queue rows in the runs table")
        runs = None

if runs is not None:
    kept = [c for c in ["started_at", "queue", "status", "dequeued", "rate", "backlog_left"] if c in runs.columns]
    drains = runs.where(F.col("command") == "drain").select(*kept)
    per_run = to_pandas_utc(drains, "started_at").sort_values("started_at")
    if per_run.empty:
        print("note: no drain runs in the runs table: no drain rate or backlog to plot")
    else:
        nb.save_or_show(runs_figure(per_run), "runs")

    if per_run["backlog_left"].notna().any():
        latest = per_run.sort_values("started_at").groupby("queue").tail(1)[["queue", "started_at", "backlog_left"]]
        nb.show_table(latest, "backlog left by the latest run per queue")

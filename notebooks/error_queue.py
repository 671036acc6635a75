# Databricks notebook source
# MAGIC %md
# MAGIC # Error queue
# MAGIC
# MAGIC The messages NServiceBus moved to the error queue after its retries gave up, as drained into the `messages`
# MAGIC journal: the decoded `exception_type`, `exception_message`, `failed_queue` (the queue the message failed in),
# MAGIC `processing_endpoint` and `time_of_failure` headers.
# MAGIC
# MAGIC * the **top exception types**, with a sample message each;
# MAGIC * the **failing endpoints and queues**;
# MAGIC * **failures over time**, per exception type;
# MAGIC * **retry one exception group**: back to the queues the messages failed in, with `queuelake replay`.
# MAGIC
# MAGIC Parameters: the `lake_root` widget on Databricks (elsewhere `QUEUELAKE_LAKE_ROOT`, default `./lake`);
# MAGIC `error_queue` (elsewhere `QUEUELAKE_ERROR_QUEUE`): the error queue's name, e.g. `error`; empty means every
# MAGIC row that carries exception headers, whichever queue it was drained from; `bucket` (`auto`: at most 60
# MAGIC buckets over the data's time span, or `second`, `10 seconds`, `minute`, `5 minutes`, `15 minutes`, `hour`,
# MAGIC `day`, `week`, `30 days`, `365 days`; elsewhere `QUEUELAKE_BUCKET`).
# MAGIC Times are UTC. Plots show under the cells on Databricks and in Jupyter; run as a script they are saved as PNG
# MAGIC files under `./notebook-output/`, or the folder `QUEUELAKE_NOTEBOOK_OUTPUT` names (`show`: shown instead).

# COMMAND ----------

import matplotlib.pyplot as plt
from pyspark.sql import functions as F
from queuelake.config_sections import LakeConfig
from queuelake.lake import record_tables
from queuelake.notebook_support import (
    BUCKETS,
    Notebook,
    choose_bucket,
    counts_over_time,
    implausible_note,
    label_bars,
    none_if_empty,
    per_bucket,
    plausible_times,
    queue_rows,
    spark_table,
    unquote_queues,
    value_axis,
    wide,
)

# dbutils, spark and display are predefined on Databricks only: handed over, the same code runs here and there
nb = Notebook(dbutils=globals().get("dbutils"), spark=globals().get("spark"), display=globals().get("display"))
LAKE_ROOT = nb.param("lake_root", "./lake")
BUCKET = nb.param("bucket", "auto", ["auto", *BUCKETS])
ERROR_QUEUE = nb.param("error_queue", "").strip()  # as written, quoted or not (queue_rows reads both)

lake = nb.open_lake(LakeConfig(root=LAKE_ROOT, engine="auto"))


def top_n_bar(ax, pdf, column, title, n=15):
    """A horizontal bar chart of the n largest counts, largest on top: linear from 0, whole-number ticks, each
    bar's count written beside it."""
    rows = pdf.head(n).iloc[::-1]
    bars = ax.barh([str(v)[-60:] for v in rows[column]], rows["failures"], color="tab:red")
    value_axis(ax, "x", counts=True)
    label_bars(ax, [bars], lambda v: f"{v:,.0f}")
    ax.set_title(title)
    ax.set_xlabel("failed messages")
    ax.grid(axis="x", alpha=0.3)


# COMMAND ----------

# MAGIC %md
# MAGIC ## Failed messages

# COMMAND ----------

failures = None
messages = nb.read_table(record_tables.MESSAGES.name)
if messages is not None:
    messages = unquote_queues(messages)
    scope = queue_rows(messages, ERROR_QUEUE)
    failed = (F.col("outcome") == "landed") & (F.col("exception_type").isNotNull() | F.col("failed_queue").isNotNull())
    failures = scope.where(failed).withColumns(
        {
            "exception_type": F.coalesce("exception_type", F.lit("(unknown)")),
            "failed_at": F.coalesce("time_of_failure", "drained_at"),
        }
    )
    if ERROR_QUEUE:
        without = scope.where(~failed).count()
        if without:
            print(f"note: {without} row(s) in {ERROR_QUEUE} carry no exception headers (expired, quarantined, ...)")
    failures = none_if_empty(failures, "failed messages (rows with exception headers)", ERROR_QUEUE)

if failures is not None:
    summary = failures.groupBy("queue").agg(
        F.count("*").alias("failures"),
        F.countDistinct("exception_type").alias("exception_types"),
        F.countDistinct("failed_queue").alias("failed_queues"),
        F.countDistinct("message_type").alias("message_types"),
        F.min("failed_at").alias("first_failure"),
        F.max("failed_at").alias("last_failure"),
    )
    nb.show_table(spark_table(summary), "failed messages per error queue")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Top exception types

# COMMAND ----------

if failures is not None:
    by_type = (
        failures.groupBy("exception_type")
        .agg(
            F.count("*").alias("failures"),
            F.countDistinct("failed_queue").alias("queues"),
            F.max("failed_at").alias("last_failure"),
            F.mode(F.substring("exception_message", 1, 150)).alias("most_common_message"),
        )
        .orderBy(F.desc("failures"), "exception_type")
    )
    by_type = spark_table(by_type)
    nb.show_table(by_type.head(20), "top exception types")
    fig, ax = plt.subplots(figsize=(10, 0.45 * min(len(by_type), 15) + 1.5))
    top_n_bar(ax, by_type, "exception_type", "top exception types")
    nb.save_or_show(fig, "error_exception_types")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Failing endpoints and queues
# MAGIC
# MAGIC `processing_endpoint` is the endpoint whose handler threw; `failed_queue` is the input queue the message
# MAGIC failed in (where ServicePulse would retry it to).

# COMMAND ----------

if failures is not None:

    def counts(column):
        return (
            failures.groupBy(F.coalesce(column, F.lit("(unknown)")).alias(column))
            .agg(F.count("*").alias("failures"))
            .orderBy(F.desc("failures"), column)
            .toPandas()
        )

    endpoints = counts("processing_endpoint")
    queues = counts("failed_queue")
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 0.45 * min(max(len(endpoints), len(queues)), 15) + 1.8))
    top_n_bar(left, endpoints, "processing_endpoint", "failures per processing endpoint")
    top_n_bar(right, queues, "failed_queue", "failures per failed queue")
    nb.save_or_show(fig, "error_endpoints")

    matrix = (
        failures.groupBy(
            F.coalesce("failed_queue", F.lit("(unknown)")).alias("failed_queue"),
            "exception_type",
            F.coalesce("message_type", F.lit("(unknown)")).alias("message_type"),
        )
        .agg(F.count("*").alias("failures"), F.max("failed_at").alias("last_failure"))
        .orderBy(F.desc("failures"))
        .limit(25)
    )
    nb.show_table(spark_table(matrix), "failures per failed queue, exception type and message type (top 25)")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Failures over time
# MAGIC
# MAGIC By `time_of_failure` (when the last retry gave up), else by when the row was drained. A time no clock wrote
# MAGIC (before 1970, or more than a day after the drain: .NET's `DateTime.MinValue` or `MaxValue`) is left out of
# MAGIC the picture and counted in a note.

# COMMAND ----------

timed = None
if failures is not None:
    timed, implausible = plausible_times(failures, "time_of_failure")
    if implausible:
        print(implausible_note(implausible, "failure(s)", "a TimeOfFailure"))
        timed = none_if_empty(timed, "failures with a plausible TimeOfFailure", ERROR_QUEUE)

if timed is not None:
    bucket = choose_bucket(timed, "failed_at", BUCKET)
    top_types = [r["exception_type"] for r in by_type.head(5).to_dict("records")]
    series_col = F.when(F.col("exception_type").isin(top_types), F.col("exception_type")).otherwise(F.lit("(other)"))
    over_time = per_bucket(timed, "failed_at", bucket, [series_col.alias("exception_type")])
    series = wide(over_time, "bucket", "exception_type", "count", bucket)
    fig, ax = plt.subplots(figsize=(11, 4.5))
    counts_over_time(ax, series, bucket, f"failures per {bucket}, by exception type", f"failures / {bucket}")
    nb.save_or_show(fig, "error_failures_over_time")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Retry one exception group
# MAGIC
# MAGIC Sends the group's failed messages back to the queues they failed in (`NServiceBus.FailedQ`), as a ServicePulse
# MAGIC retry does, exactly once (see the README, *Replay and retry*). This cell only reads the lake unless
# MAGIC `RETRY_CONFIG` names the deployment's config file (the queue database); then it dry-runs the retry, and sends it
# MAGIC once `RETRY_DRY_RUN` is set to `False`. `RETRY_EXCEPTION_TYPE` picks the group (default: the top one above).
# MAGIC To resume an interrupted retry, set `RETRY_ID` to the `replay_id` it printed.

# COMMAND ----------

import os  # noqa: E402
import shlex  # noqa: E402

RETRY_EXCEPTION_TYPE = os.environ.get("QUEUELAKE_RETRY_EXCEPTION_TYPE", "")  # e.g. "System.TimeoutException"
RETRY_CONFIG = os.environ.get("QUEUELAKE_RETRY_CONFIG", "")  # e.g. "conf/prod.yaml"; empty: nothing is sent
RETRY_DRY_RUN = True
RETRY_MAX_RATE = None  # messages per second, e.g. 200, so that the endpoints are not flooded
RETRY_ID = None


def spark_sql_string(text):
    """A Spark SQL string literal: quotes and backslashes escaped."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


if failures is not None:
    group = RETRY_EXCEPTION_TYPE or by_type["exception_type"].iloc[0]
    predicate = f"exception_type = {spark_sql_string(group)}"
    per_queue = (
        failures.where(F.col("exception_type") == group)
        .groupBy(F.coalesce("failed_queue", F.lit("(no FailedQ: cannot be retried)")).alias("failed_queue"))
        .agg(F.count("*").alias("messages"), F.max("failed_at").alias("last_failure"))
        .orderBy(F.desc("messages"))
    )
    per_queue = spark_table(per_queue)
    nb.show_table(per_queue, f"retry group {group!r}: messages per queue they failed in")
    # shell-quoted: the exception type is a header's text, and any sender writes it (a quote in it broke the
    # line; a $(...) would have run in the shell of whoever pasted it: a review)
    command = f"queuelake replay -c <config> --where {shlex.quote(predicate)} --dry-run"
    print(f"\nfrom a shell: {command}   (then without --dry-run)")
    if RETRY_CONFIG:
        from queuelake import config as queuelake_config
        from queuelake.context import open_database
        from queuelake.lake.engines import open_lake
        from queuelake.pipeline.replay.replayer import ReplayOptions, replay

        retry_cfg = queuelake_config.load(RETRY_CONFIG)
        options = ReplayOptions(predicate, dry_run=RETRY_DRY_RUN, max_rate=RETRY_MAX_RATE, replay_id=RETRY_ID)
        lake = open_lake(retry_cfg.lake, nb.spark)
        summary = replay(retry_cfg, open_database(retry_cfg), nb.spark, lake, options)
        print(summary)

# COMMAND ----------

# MAGIC %md
# MAGIC ## One failed conversation, drawn
# MAGIC
# MAGIC To see where a failure sits in its conversation (who sent what to whom, which attempt failed, what was
# MAGIC retried), draw the conversation as a sequence diagram, in a cell of its own:
# MAGIC
# MAGIC ```python
# MAGIC from queuelake.notebook_support import draw_conversation
# MAGIC latest = failures.orderBy(F.desc("failed_at")).select("conversation_id").first()["conversation_id"]
# MAGIC draw_conversation(lake, latest)  # shows under the cell; .save("flow.svg") writes the SVG
# MAGIC ```
# MAGIC
# MAGIC From a shell, `queuelake conversation -c <config> <conversation id> --out flow.svg` writes the same picture
# MAGIC (see the README, *Conversations*).

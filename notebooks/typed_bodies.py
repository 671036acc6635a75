# Databricks notebook source
# MAGIC %md
# MAGIC # Typed body tables
# MAGIC
# MAGIC What `queuelake bodies` (also a step of `queuelake run`) made of the journal's message bodies: one Delta
# MAGIC table per message type, `body_<type>`, holding each message's identity (`message_id`, `queue`,
# MAGIC `message_type`, `type_version`, `time_sent`, ...) beside its body's fields as typed columns. This notebook
# MAGIC shows:
# MAGIC
# MAGIC * the **typed tables**: which message type went to which table (`body_schema_changes`' `created` rows),
# MAGIC   with their row counts, and the increments of the journal the stage consumed (`body_increments`);
# MAGIC * **one table's schema and a few rows** (the type with the most rows, or the one `message_type` names);
# MAGIC * the **schema-change history** (`body_schema_changes`: created, column added, widened, conflict);
# MAGIC * the **bodies that did not parse** (`body_unparsed`), grouped by reason;
# MAGIC * an **example query on typed columns**: the sum of an amount per customer and per day, and over time, in
# MAGIC   Spark SQL (the demo's `OrderPlaced` table: `Total` per `CustomerId`).
# MAGIC
# MAGIC Parameters: the `lake_root` widget on Databricks (elsewhere `QUEUELAKE_LAKE_ROOT`, default `./lake`);
# MAGIC `message_type` (elsewhere `QUEUELAKE_MESSAGE_TYPE`): a type name (`Sales.Messages.Events.OrderPlaced`) or
# MAGIC its table, `auto` for the type with the most rows; `group_by` and `amount` (`QUEUELAKE_GROUP_BY`,
# MAGIC `QUEUELAKE_AMOUNT`, default `CustomerId` and `Total`): the example query's columns; `bucket` (`auto`: at
# MAGIC most 60 buckets over the data's time span, or `second`, `10 seconds`, `minute`, `5 minutes`, `15 minutes`,
# MAGIC `hour`, `day`, `week`, `30 days`, `365 days`; elsewhere `QUEUELAKE_BUCKET`).
# MAGIC Times are UTC. Plots show under the cells on Databricks and in Jupyter; run as a script they are saved as PNG
# MAGIC files under `./notebook-output/`, or the folder `QUEUELAKE_NOTEBOOK_OUTPUT` names (`show`: shown instead).

# COMMAND ----------

import matplotlib.pyplot as plt
import pandas as pd
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DecimalType,
    DoubleType,
    FloatType,
    MapType,
    NumericType,
    StringType,
    StructType,
)
from queuelake.config_sections import LakeConfig
from queuelake.lake import stage_tables
from queuelake.notebook_support import (
    BAR_LIMIT,
    BUCKETS,
    Notebook,
    choose_bucket,
    date_numbers,
    decimals_for,
    every_bucket,
    grouped_bars,
    implausible_note,
    per_bucket,
    plausible_times,
    spark_table,
    time_axis,
    times_from_micros,
    unquote_queues,
    value_axis,
)

# dbutils, spark and display are predefined on Databricks only: handed over, the same code runs here and there
nb = Notebook(dbutils=globals().get("dbutils"), spark=globals().get("spark"), display=globals().get("display"))
LAKE_ROOT = nb.param("lake_root", "./lake")
MESSAGE_TYPE = nb.param("message_type", "auto")
GROUP_BY = nb.param("group_by", "CustomerId")
AMOUNT = nb.param("amount", "Total")
BUCKET = nb.param("bucket", "auto", ["auto", *BUCKETS])

lake = nb.open_lake(LakeConfig(root=LAKE_ROOT, engine="auto"))
IDENTITY = set(stage_tables.BODY_IDENTITY.names)  # the columns every typed table starts with; the body's follow


def shown(df, width=60):
    """``df`` for a printed table: structs, lists and maps as their JSON text, long texts cut to ``width``
    characters (a body's free text runs to hundreds), so that a row fits a line; fractional numbers as
    written (an amount of 598.31 is not rounded to 598.3 for the table)."""
    columns = []
    for field in df.schema.fields:
        column = F.col(q(field.name))
        if isinstance(field.dataType, (FloatType, DoubleType, DecimalType)):
            column = F.regexp_replace(column.cast("string"), r"\.0$", "")
        if isinstance(field.dataType, (StructType, ArrayType, MapType)):
            column = F.to_json(column)
        if isinstance(field.dataType, (StructType, ArrayType, MapType, StringType)):
            column = F.when(
                F.length(column) > width, F.concat(F.substring(column, 1, width - 3), F.lit("..."))
            ).otherwise(column)
        columns.append(column.alias(field.name))
    return spark_table(df.select(*columns))


def q(name):
    """A column name as a Spark SQL identifier: backquoted, a backquote in it doubled (a body's field may be
    called anything)."""
    return "`" + name.replace("`", "``") + "`"


def column_named(df, name):
    """The column of ``df`` called ``name`` as written in the bodies, matched without regard to case (Spark
    resolves names so), or None."""
    return next((f for f in df.schema.fields if f.name.lower() == name.lower()), None)


# COMMAND ----------

# MAGIC %md
# MAGIC ## Typed tables
# MAGIC
# MAGIC A message type's table is named once, when the stage first meets the type, and recorded as a `created` row
# MAGIC of `body_schema_changes`; every version of a contract shares it (`type_version` is a column).

# COMMAND ----------

typed = {}  # type name -> (table, its DataFrame, rows)
changes = nb.read_table(stage_tables.BODY_SCHEMA_CHANGES.name)
if changes is None:
    print("note: no typed tables yet: run `queuelake bodies` (or `queuelake run`) on a lake with a journal")
else:
    created = changes.where(F.col("change") == "created").select("type_name", "table").distinct().collect()
    listed = []
    for row in sorted(created, key=lambda r: r["type_name"]):
        if not lake.exists(row["table"]):
            print(f"note: {row['type_name']}: its table {row['table']} is not in the lake")
            continue
        df = lake.read(row["table"])
        stats = df.agg(
            F.count("*").alias("rows"),
            F.concat_ws(", ", F.sort_array(F.collect_set("type_version"))).alias("versions"),
            F.unix_micros(F.min("time_sent")).alias("first_sent"),
            F.unix_micros(F.max("time_sent")).alias("last_sent"),
        ).first()
        typed[row["type_name"]] = (row["table"], df, stats["rows"])
        body_columns = len([c for c in df.columns if c not in IDENTITY])
        listed.append(
            {"type_name": row["type_name"], "table": row["table"], "body_columns": body_columns, **stats.asDict()}
        )
    if listed:
        overview = pd.DataFrame(listed).sort_values(["rows", "type_name"], ascending=[False, True])
        for column in ("first_sent", "last_sent"):  # from the instant in microseconds: UTC, whatever the session
            overview[column] = times_from_micros([entry[column] for entry in listed])  # aligned by the index
        nb.show_table(overview, "typed tables (type name -> table), rows per table")

increments = nb.read_table(stage_tables.BODY_INCREMENTS.name)
if increments is not None:
    latest = increments.select(
        "journal_after",
        "journal_version",
        "rows_read",
        "rows_written",
        "unparsed",
        F.size("tables").alias("tables"),
        "recorded_at",
    ).orderBy(F.desc("journal_version"))
    nb.show_table(spark_table(latest.limit(10)), "journal increments the bodies stage consumed (latest 10)")

# COMMAND ----------

# MAGIC %md
# MAGIC ## One table: schema and rows
# MAGIC
# MAGIC The identity columns come first, then the body's fields as the serializer wrote them: numbers, times, nested
# MAGIC objects as structs and lists as arrays (shown here as their JSON text).

# COMMAND ----------

chosen = None  # (type name, table, DataFrame)
if typed:
    wanted = MESSAGE_TYPE.strip()
    if wanted in ("", "auto"):
        name = max(sorted(typed), key=lambda n: typed[n][2])
        chosen = (name, *typed[name][:2])
    else:
        found = [(n, t, df) for n, (t, df, _rows) in typed.items() if wanted in (n, t)]
        if found:
            chosen = found[0]
        else:
            print(f"note: no typed table for message_type {wanted!r}; the types: {', '.join(sorted(typed))}")

if chosen is not None:
    name, table, df = chosen
    columns = pd.DataFrame(
        [
            {
                "column": f.name,
                "type": f.dataType.simpleString()[:100],
                "part": "identity" if f.name in IDENTITY else "body",
            }
            for f in df.schema.fields
        ]
    )
    nb.show_table(columns, f"{table}: the schema of {name}")
    body = [c for c in df.columns if c not in IDENTITY]
    sample = df.orderBy(F.desc_nulls_last("time_sent"), "message_id").select(
        "message_id", "time_sent", "type_version", *[q(c) for c in body]
    )
    nb.show_table(shown(sample.limit(5)), f"{table}: the latest 5 rows (by time_sent)")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Schema changes
# MAGIC
# MAGIC Every change of a typed table, oldest first: `created`; `added` (a new field; `type_version` is the
# MAGIC contract version whose bodies showed it); `widened` (e.g. whole numbers, then decimals: `bigint -> double`,
# MAGIC older rows converted); `conflict` (a field seen as two kinds of value: kept as text, nothing lost).

# COMMAND ----------

if changes is not None:
    history = changes.select(
        "changed_at",
        "journal_version",
        "table",
        "change",
        "column",
        "type_version",
        F.substring("old_type", 1, 40).alias("old_type"),
        F.substring("new_type", 1, 60).alias("new_type"),
    ).orderBy("journal_version", "changed_at", "table", F.col("change") != "created", "change", "column")
    nb.show_table(spark_table(history.limit(50)), "schema changes (oldest first, 50 at most)")
    kinds = changes.groupBy("table").pivot("change", ["created", "added", "widened", "conflict"]).count()
    nb.show_table(spark_table(kinds.na.fill(0).orderBy("table")), "schema changes per table and kind")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Bodies that did not parse
# MAGIC
# MAGIC A body that is empty, not JSON or XML, malformed, or not an object cannot be a row of its type's table: it
# MAGIC is kept in `body_unparsed` with the reason, the journal row it came from (`queue`, `seq`) and the first 200
# MAGIC characters of its text (`body_start`).

# COMMAND ----------

unparsed = None
if lake.exists(stage_tables.BODY_UNPARSED.name):
    unparsed = nb.read_table(stage_tables.BODY_UNPARSED.name)
elif changes is not None:  # the stage writes body_unparsed with its first unparsed row
    print("note: no unparsed bodies: every body the stage read parsed")

if unparsed is not None:
    unparsed = unquote_queues(unparsed)
    reasons = (
        unparsed.groupBy("reason")
        .agg(
            F.count("*").alias("rows"),
            F.concat_ws(", ", F.sort_array(F.collect_set("type_name"))).alias("message types"),
            F.concat_ws(", ", F.sort_array(F.collect_set("queue"))).alias("queues"),
        )
        .orderBy(F.desc("rows"), "reason")
        .toPandas()
    )
    nb.show_table(reasons, "unparsed bodies per reason")
    examples = unparsed.select(
        "reason", "queue", "seq", "type_name", "content_type", F.substring("body_start", 1, 40).alias("body_start")
    ).orderBy("reason", "queue", "seq")
    nb.show_table(shown(examples.limit(20)), "unparsed bodies (20 at most)")
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(reasons) + 1.6))
    bars = reasons.set_index("reason")[["rows"]].iloc[:15]
    bars.index = [r if len(r) <= 55 else r[:52] + "..." for r in bars.index]  # a reason reads from its start
    grouped_bars(ax, bars, lambda v: f"{v:,.0f}", horizontal=True, counts=True)
    ax.set_xlabel("rows")
    ax.set_title("unparsed bodies per reason")
    nb.save_or_show(fig, "unparsed_reasons")

# COMMAND ----------

# MAGIC %md
# MAGIC ## An example query on typed columns
# MAGIC
# MAGIC With the bodies as columns, a question about the business is a query: here the sum of `amount` (default
# MAGIC `Total`) per `group_by` (default `CustomerId`) and per day of `time_sent` (UTC), on the table shown above,
# MAGIC in Spark SQL over a temporary view. With `lake.schema` set, the table also has a metastore name, and the
# MAGIC same query runs on `<schema>.<table>`. Where the table has a `Currency` column, amounts are summed per
# MAGIC currency (euros added to dollars would mislead); the picture shows the currency with the most rows.

# COMMAND ----------

example = None
if chosen is not None:
    name, table, df = chosen
    group, amount, currency = column_named(df, GROUP_BY), column_named(df, AMOUNT), column_named(df, "Currency")
    if group is None or amount is None or not isinstance(amount.dataType, NumericType):
        print(f"note: {table} has no column {GROUP_BY!r} or no numeric column {AMOUNT!r}: set group_by and amount")
    else:
        df.createOrReplaceTempView("typed_body")
        g, a = q(group.name), q(amount.name)
        cur = q(currency.name) if currency is not None else "'-'"
        # the UTC day, whatever the session's time zone (to_date would use it): days since 1970-01-01
        example = nb.spark.sql(
            f"""
            SELECT date_from_unix_date(CAST(floor(unix_seconds(time_sent) / 86400) AS INT)) AS day,
                   {g} AS {g}, {cur} AS currency, count(*) AS orders, CAST(sum({a}) AS DECIMAL(38, 2)) AS total
            FROM typed_body
            WHERE {a} IS NOT NULL AND time_sent IS NOT NULL
            GROUP BY 1, 2, 3
            """
        )
        left_out = df.where(F.col(a).isNull() | F.col("time_sent").isNull()).count()
        if left_out:
            print(f"note: {left_out} row(s) of {table} have no {amount.name} or no time_sent: not summed")
        if example.isEmpty():
            print(f"note: no row of {table} has a {amount.name}: nothing to sum")
            example = None

if example is not None:
    per_day = example.orderBy(F.desc("day"), F.desc("total"), g).limit(20).toPandas()
    if currency is None:
        per_day = per_day.drop(columns=["currency"])
    nb.show_table(per_day, f"{table}: {amount.name} per day (UTC) and {group.name}, latest day first, 20 rows at most")

    currencies = example.groupBy("currency").agg(F.sum("orders").alias("orders")).orderBy(F.desc("orders"), "currency")
    main = currencies.first()["currency"]
    others = [r["currency"] for r in currencies.collect()[1:]]
    if others:
        print(f"note: the picture shows {main} only; also in the table: {', '.join(map(str, others))}")
    unit = f" ({main})" if currency is not None else ""
    rows = df.where(F.col(a).isNotNull() & F.col("time_sent").isNotNull())
    if currency is not None:
        rows = rows.where(F.col(cur) == main)
    per_key = (
        rows.groupBy(F.col(g).cast("string").alias("key"))
        .agg(F.sum(a).alias("total"))
        .orderBy(F.desc("total"), "key")
        .toPandas()
    )
    timed, implausible = plausible_times(rows, "time_sent")
    if implausible and timed.isEmpty():
        timed = rows  # every time is implausible: those are drawn, as they are, rather than an empty panel
    elif implausible:
        print(implausible_note(implausible, "row(s)", "a TimeSent"))
    bucket = choose_bucket(timed, "time_sent", BUCKET)
    over_time = per_bucket(timed, "time_sent", bucket, [], F.sum(a).alias("total")).set_index("bucket")["total"]
    over_time = over_time.reindex(every_bucket(over_time.index, bucket), fill_value=0).sort_index()

    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 5), gridspec_kw={"width_ratios": [2, 3]})
    top = per_key.head(15).set_index("key")[["total"]]
    top.index = [str(k) for k in top.index]
    grouped_bars(left, top, decimals_for(float(top["total"].max())), horizontal=True)
    left.set_xlabel(f"{amount.name}{unit}")
    shown_of = f"the {len(top)} largest of {len(per_key)}" if len(per_key) > len(top) else f"all {len(per_key)}"
    left.set_title(f"{amount.name}{unit} per {group.name} ({shown_of})")
    seconds = BUCKETS[bucket][2]
    x = date_numbers(over_time.index)
    if len(over_time) <= BAR_LIMIT:
        right.bar(x, over_time.to_numpy(dtype=float), seconds / 86400 * 0.85, align="edge", color="tab:green")
    else:  # a bucket fixed by hand that cuts the span fine: a line, a point per bucket
        right.plot(x + seconds / 86400 / 2, over_time.to_numpy(dtype=float), marker=".", color="tab:green")
    time_axis(right, over_time.index.min(), over_time.index.max(), seconds)
    value_axis(right)
    right.set_ylabel(f"{amount.name}{unit} / {bucket}")
    right.set_title(f"{amount.name}{unit} per {bucket} of time_sent")
    right.grid(alpha=0.3)
    nb.save_or_show(fig, "typed_query")

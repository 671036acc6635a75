# Databricks notebook source
# MAGIC %md
# MAGIC # Endpoint health
# MAGIC
# MAGIC What `queuelake health` keeps in the lake (`endpoint_health`, `endpoint_daily`), drawn: per endpoint, the
# MAGIC **messages processed per hour** and the hour's **p95 critical time** (time sent to processing ended; the
# MAGIC slowest message type's), and each queue's **depth when each drain started** (from the drain's `runs`
# MAGIC rows: rows taken + rows left, no `count(*)`). Then the **daily throughput per endpoint** as a table, the
# MAGIC one a licence review asks for. Run `queuelake health -c FILE` first (a step a schedule runs after the drain).
# MAGIC
# MAGIC Parameters: `lake_root` (elsewhere `QUEUELAKE_LAKE_ROOT`, default `./lake`). Times are UTC. Run as a script,
# MAGIC the picture is saved as `endpoint_health.png` under `./notebook-output/` (or `QUEUELAKE_NOTEBOOK_OUTPUT`).
# MAGIC No Spark: the tables are small and read as Arrow.

# COMMAND ----------

from queuelake.config_sections import LakeConfig
from queuelake.lake import stage_tables
from queuelake.notebook_support import Notebook
from queuelake.notebooks.health_figure import draw
from queuelake.pipeline.health.depth import depth_over_time

nb = Notebook(dbutils=globals().get("dbutils"), spark=globals().get("spark"), display=globals().get("display"))
LAKE_ROOT = nb.param("lake_root", "./lake")
lake = nb.open_lake(LakeConfig(root=LAKE_ROOT, engine="delta-rs"), with_spark=False)  # QUEUELAKE_CONFIG's lake too

# COMMAND ----------

if not lake.exists(stage_tables.ENDPOINT_HEALTH.name):
    print(f"note: no {stage_tables.ENDPOINT_HEALTH.name} under {nb.lake_root}: run `queuelake health -c FILE` first")
else:
    health = lake.read_arrow(stage_tables.ENDPOINT_HEALTH.name)
    nb.save_or_show(draw(health, depth_over_time(lake)), "endpoint_health")

# COMMAND ----------

if lake.exists(stage_tables.ENDPOINT_DAILY.name):
    daily = lake.read_arrow(stage_tables.ENDPOINT_DAILY.name).to_pandas()
    columns = ["day", "endpoint", "processed", "failed", "retries", "message_types", "peak_hour", "peak_hour_processed"]
    nb.show_table(daily.sort_values(["day", "endpoint"])[columns], "daily throughput per endpoint")

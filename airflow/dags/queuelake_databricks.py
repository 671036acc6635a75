"""queuelake on Databricks, triggered from Airflow: drain, transform, publish every 15 minutes.

Submits a one-time run (``DatabricksSubmitRunOperator``) of the queuelake wheel as a ``python_wheel_task``
(package ``queuelake``, entry point ``queuelake-run``, the console script that calls ``queuelake.jobs:run``)
on a job cluster with Databricks Runtime 17.3 LTS (Spark 4.0, Delta built in, so ``lake.engine: auto`` picks
the JVM Delta engine). If the job is deployed with the asset bundle (``databricks.yml``), Databricks schedules it
itself and this DAG is not needed; it is for sites where Airflow owns the schedule.

Deployment settings (environment of the Airflow scheduler and workers, read when the DAG is parsed; none of
them is a secret):

- ``QUEUELAKE_DATABRICKS_CONN_ID``: Airflow connection of the workspace (default ``databricks_default``);
- ``QUEUELAKE_DATABRICKS_WHEEL``: the wheel, on a Unity Catalog volume or in the workspace (default: see WHEEL).
  Build it and copy it there once per release, from a checkout::

      python -m pip wheel --no-deps -w dist .
      databricks fs cp dist/queuelake-0.1.0-py3-none-any.whl dbfs:/Volumes/main/queuelake/artifacts/

- ``QUEUELAKE_DATABRICKS_CONFIG``: the deployment's YAML config as the driver sees it (default
  ``/Workspace/Shared/queuelake/conf/postgres.example.yaml``, the shipped example, which takes everything
  deployment-specific from the environment; copy ``conf/`` there with
  ``databricks workspace import-dir conf /Workspace/Shared/queuelake/conf``, or point this at your own file);
- ``QUEUELAKE_DATABRICKS_LAKE_ROOT``: the lake root, which configs reference as ``${QUEUELAKE_LAKE_ROOT}``
  (default ``/Volumes/main/queuelake/lake``);
- ``QUEUELAKE_DATABRICKS_NODE_TYPE``: node type of the job cluster (default ``Standard_D4ds_v5``, Azure).

The transport's connection string never passes through Airflow: the cluster reads it from the Databricks secret
scope ``queuelake`` (key ``connection``) into ``QUEUELAKE_CONNECTION``::

    databricks secrets create-scope queuelake
    databricks secrets put-secret queuelake connection --string-value '<connection string>'

Reruns are safe (exactly-once drain, idempotent publish), hence the retries; ``max_active_runs=1`` keeps two runs
from draining the same queues at once.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

from airflow.providers.databricks.operators.databricks import DatabricksSubmitRunOperator

try:
    from airflow.sdk import DAG  # Airflow 3
except ImportError:  # Airflow 2
    from airflow import DAG

DATABRICKS_CONN_ID = os.environ.get("QUEUELAKE_DATABRICKS_CONN_ID", "databricks_default")
WHEEL = os.environ.get(
    "QUEUELAKE_DATABRICKS_WHEEL", "/Volumes/main/queuelake/artifacts/queuelake-0.1.0-py3-none-any.whl"
)
CONFIG = os.environ.get("QUEUELAKE_DATABRICKS_CONFIG", "/Workspace/Shared/queuelake/conf/postgres.example.yaml")
LAKE_ROOT = os.environ.get("QUEUELAKE_DATABRICKS_LAKE_ROOT", "/Volumes/main/queuelake/lake")
NODE_TYPE = os.environ.get("QUEUELAKE_DATABRICKS_NODE_TYPE", "Standard_D4ds_v5")

# A Databricks secret reference, resolved on the cluster. The operator's ``json`` is a Jinja template, so the
# reference is wrapped in a raw block to reach Databricks literally.
CONNECTION_SECRET = "{% raw %}{{secrets/queuelake/connection}}{% endraw %}"

RUN = {
    "run_name": "queuelake run",
    "timeout_seconds": 45 * 60,
    "tasks": [
        {
            "task_key": "run",
            "new_cluster": {
                "spark_version": "17.3.x-scala2.13",  # Databricks Runtime 17.3 LTS: Spark 4.0, Delta built in
                "node_type_id": NODE_TYPE,
                "num_workers": 1,
                "data_security_mode": "SINGLE_USER",
                "spark_conf": {"spark.sql.session.timeZone": "UTC"},
                "spark_env_vars": {
                    "QUEUELAKE_CONNECTION": CONNECTION_SECRET,
                    "QUEUELAKE_LAKE_ROOT": LAKE_ROOT,
                },
            },
            "libraries": [{"whl": WHEEL}],
            "python_wheel_task": {
                "package_name": "queuelake",
                "entry_point": "queuelake-run",
                "parameters": ["-c", CONFIG],
            },
        }
    ],
}

with DAG(
    dag_id="queuelake_databricks",
    description="queuelake run (drain, transform, publish) as a Databricks python_wheel_task",
    doc_md=__doc__,
    schedule="*/15 * * * *",
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(minutes=60),
    default_args={
        "owner": "queuelake",
        "retries": 2,
        "retry_delay": timedelta(minutes=2),
        "retry_exponential_backoff": True,
        "execution_timeout": timedelta(minutes=50),
    },
    tags=["queuelake", "databricks"],
) as dag:
    run = DatabricksSubmitRunOperator(
        task_id="run",
        databricks_conn_id=DATABRICKS_CONN_ID,
        json=RUN,
        polling_period_seconds=30,
    )

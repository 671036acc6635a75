"""queuelake on a Spark cluster through spark-submit: drain, transform, publish every 15 minutes.

Runs ``jobs/run.py -c <config>`` (the same code as ``queuelake run``) with ``SparkSubmitOperator``.
queuelake's dependencies include native wheels (deltalake, pyarrow, orjson, psycopg), so ``--py-files``
with the wheel is not enough: ship a packed environment instead, built once per release::

    python -m venv /tmp/ql && /tmp/ql/bin/pip install 'queuelake-<version>-py3-none-any.whl[spark]' venv-pack
    /tmp/ql/bin/venv-pack -o queuelake-env.tar.gz        # or conda-pack

and put it, ``jobs/run.py`` and the config file under ``QUEUELAKE_HOME`` on the Airflow workers.

Deployment settings (environment of the Airflow scheduler and workers, read when the DAG is parsed; none of
them is a secret):

- ``QUEUELAKE_HOME``: folder holding ``jobs/``, ``conf/`` and the packed environment (default ``/opt/queuelake``);
- ``QUEUELAKE_PACKED_ENV``: the packed environment (default ``$QUEUELAKE_HOME/queuelake-env.tar.gz``);
- ``QUEUELAKE_CONFIG``: the deployment's YAML config (default ``$QUEUELAKE_HOME/conf/postgres.example.yaml``,
  the shipped example, which takes everything deployment-specific from the environment; for SQL Server
  start from ``conf/sqlserver.example.yaml``);
- ``QUEUELAKE_SPARK_CONN_ID``: Airflow connection of the Spark master (default ``spark_default``);
- ``QUEUELAKE_SPARK_DEPLOY_MODE``: ``cluster`` (YARN, Kubernetes; the default) or ``client``;
- ``QUEUELAKE_DRIVER_PYTHON``: client mode only, a local Python with queuelake installed
  (default ``$QUEUELAKE_HOME/venv/bin/python``).

Secrets never live in this file: the transport's connection string reaches the job as the environment
variable ``QUEUELAKE_CONNECTION`` (which the config references as ``${QUEUELAKE_CONNECTION}``), rendered at
run time from the Airflow connection ``queuelake_transport``: its URI for a ``postgres`` connection, else its
password field holding the full connection string (e.g. an ODBC string for SQL Server). Airflow masks the
connection's password in logs and rendered fields; ``spark.redaction.regex`` (``SPARK_REDACTION_REGEX``)
makes Spark redact it too (as ``spark.yarn.appMasterEnv.QUEUELAKE_CONNECTION`` in the UI and event logs).
The lake root comes from the Airflow Variable ``queuelake_lake_root`` (configs reference
``${QUEUELAKE_LAKE_ROOT}``).

Reruns are safe: the drain lands every dequeued row exactly once and publish is idempotent per batch, so a
retry after a failure or a killed driver neither loses nor duplicates messages. ``max_active_runs=1`` keeps two
runs from draining the same queues at once.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

try:
    from airflow.sdk import DAG  # Airflow 3
except ImportError:  # Airflow 2
    from airflow import DAG

QUEUELAKE_HOME = os.environ.get("QUEUELAKE_HOME", "/opt/queuelake")
PACKED_ENV = os.environ.get("QUEUELAKE_PACKED_ENV", f"{QUEUELAKE_HOME}/queuelake-env.tar.gz")
CONFIG = os.environ.get("QUEUELAKE_CONFIG", f"{QUEUELAKE_HOME}/conf/postgres.example.yaml")
SPARK_CONN_ID = os.environ.get("QUEUELAKE_SPARK_CONN_ID", "spark_default")
DEPLOY_MODE = os.environ.get("QUEUELAKE_SPARK_DEPLOY_MODE", "cluster")
DRIVER_PYTHON = os.environ.get("QUEUELAKE_DRIVER_PYTHON", f"{QUEUELAKE_HOME}/venv/bin/python")

# Rendered when the task runs, never at parse time; the connection's password is masked by Airflow.
TRANSPORT_CONNECTION = (
    "{% set c = conn.queuelake_transport %}"
    "{{ c.get_uri() if c.conn_type in ('postgres', 'postgresql') else c.password }}"
)
LAKE_ROOT = "{{ var.value.queuelake_lake_root }}"

# Spark shows its configuration in the UI (Environment tab) and writes it to event logs, redacting
# the keys and values this pattern matches. Its default, (?i)secret|password|token|access[.]?key,
# misses spark.yarn.appMasterEnv.QUEUELAKE_CONNECTION (how env_vars reach a YARN cluster-mode
# driver; spark.kubernetes.driverEnv.* on Kubernetes), storage account keys and SAS signatures.
SPARK_REDACTION_REGEX = (
    r"(?i)secret|password|token|access[.]?key|account[._]?key|credential|connection|sig=|private[._]?key"
)

spark_conf = {
    # executors (and the driver in cluster mode) run the packed environment's Python
    "spark.pyspark.python": "./environment/bin/python",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
    "spark.redaction.regex": SPARK_REDACTION_REGEX,
}
if DEPLOY_MODE == "client":
    spark_conf["spark.pyspark.driver.python"] = DRIVER_PYTHON
    config_arg = CONFIG  # the driver runs here and reads the file in place
else:
    config_arg = os.path.basename(CONFIG)  # shipped with --files into the driver's working folder

with DAG(
    dag_id="queuelake_spark_submit",
    description="queuelake run (drain, transform, publish) through spark-submit",
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
        "execution_timeout": timedelta(minutes=45),
    },
    tags=["queuelake", "spark"],
) as dag:
    run = SparkSubmitOperator(
        task_id="run",
        conn_id=SPARK_CONN_ID,
        deploy_mode=DEPLOY_MODE,
        name="queuelake-run",
        application=f"{QUEUELAKE_HOME}/jobs/run.py",
        application_args=["-c", config_arg],
        files=CONFIG,
        archives=f"{PACKED_ENV}#environment",
        conf=spark_conf,
        env_vars={
            "QUEUELAKE_CONNECTION": TRANSPORT_CONNECTION,
            "QUEUELAKE_LAKE_ROOT": LAKE_ROOT,
        },
    )

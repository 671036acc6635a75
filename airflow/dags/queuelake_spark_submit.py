"""queuelake on Spark through spark-submit: drain, transform, publish every 15 minutes.

Runs ``jobs/run.py -c <config>`` (the same code as ``queuelake run``) with ``SparkSubmitOperator``.
docs/deployment.md walks through it from zero; tests/product/test_airflow_dags.py runs this DAG with a real
Airflow (``airflow dags test``) set up exactly as below.

**Before the first run**, once per transport database, with an account that may create tables:
``queuelake install -c <config>`` (queue, delayed, subscription and bridge-state tables). The job itself needs
only read/write/delete rights on them.

**On every Airflow worker** (``QUEUELAKE_HOME``, default ``/opt/queuelake``), from a release's wheel
(``python -m pip wheel --no-deps -w dist .`` in a checkout)::

    python3 -m venv $QUEUELAKE_HOME/venv
    $QUEUELAKE_HOME/venv/bin/pip install 'dist/queuelake-<version>-py3-none-any.whl[spark]'
    cp -r jobs conf $QUEUELAKE_HOME/                           # jobs/run.py and the config

**PATH**: the Airflow worker's ``PATH`` must have ``$QUEUELAKE_HOME/venv/bin`` first. The operator runs the
command ``spark-submit`` found on ``PATH`` (the connection's ``spark-binary`` takes only the names
``spark-submit``/``spark2-submit``/``spark3-submit``), and that environment's ``spark-submit`` finds its Spark
through the ``python3`` on ``PATH``. The apache-spark provider installs a pyspark of its own into Airflow's
environment (4.3 seen); with that environment's ``bin`` first, its Spark runs the job, which then refuses
to start (``error_kind`` ``spark-version``, naming both versions). Java 17 or 21 must be on the worker too.

Deploy modes (``QUEUELAKE_SPARK_DEPLOY_MODE``):

- ``client``: the driver runs on the Airflow worker with ``QUEUELAKE_DRIVER_PYTHON``; the driver's Python
  data sources (the ``bodies`` stage) and the executors run that same Python (``spark.pyspark.python``), so
  the executors must have it at the same path: a ``local[N]`` master, or a standalone cluster whose hosts have
  the venv where the worker has it. Nothing is shipped, nothing is unpacked.
- ``cluster`` (the default; YARN or Kubernetes): the driver runs on the cluster, so queuelake and its native
  wheels (deltalake, pyarrow, orjson, psycopg) travel as a packed environment (``--py-files`` with the wheel is
  not enough), unpacked as ``./environment`` for the driver and each executor. Build it once per release::

      $QUEUELAKE_HOME/venv/bin/pip install venv-pack
      $QUEUELAKE_HOME/venv/bin/venv-pack -p $QUEUELAKE_HOME/venv -o $QUEUELAKE_HOME/queuelake-env.tar.gz

  It is ~720 MB (pyspark's jars are most of it) and every container unpacks it on start (~11 s each with a
  local master, as measured in issue 62); keep it on the cluster's file system (``hdfs://...``), where YARN's
  distributed cache keeps it per node.
  Spark standalone cannot run Python applications in cluster mode; use ``client`` there.

Deployment settings (environment of the Airflow scheduler and workers, read when the DAG is parsed; none of
them is a secret):

- ``QUEUELAKE_HOME``: folder holding ``jobs/``, ``conf/``, ``venv/`` and the packed environment;
- ``QUEUELAKE_CONFIG``: the deployment's YAML config (default ``$QUEUELAKE_HOME/conf/postgres.example.yaml``,
  the shipped example, which takes everything deployment-specific from the environment; for SQL Server start
  from ``conf/sqlserver.example.yaml``);
- ``QUEUELAKE_SPARK_CONN_ID``: Airflow connection of the Spark master (default ``spark_default``);
- ``QUEUELAKE_SPARK_DEPLOY_MODE``: ``cluster`` (the default) or ``client``;
- ``QUEUELAKE_DRIVER_PYTHON``: client mode, the Python with queuelake installed (default
  ``$QUEUELAKE_HOME/venv/bin/python``);
- ``QUEUELAKE_PACKED_ENV``: cluster mode, the packed environment (default
  ``$QUEUELAKE_HOME/queuelake-env.tar.gz``);
- ``QUEUELAKE_SPARK_PACKAGES`` / ``QUEUELAKE_SPARK_JARS``: for a lake with ``lake.engine: delta-spark`` (or
  ``auto`` on tables delta-spark made): spark-submit's ``--packages`` (what ``queuelake spark-packages``
  prints) or ``--jars`` (the Delta jars, comma-separated); either also sets the two ``spark.sql`` settings
  Delta needs (docs/lake.md). Unset: the job runs on delta-rs, and refuses a delta-spark lake, saying so;
- ``QUEUELAKE_DRIVER_MEMORY``: spark-submit's ``--driver-memory`` (default: Spark's, 1g); the config's
  ``spark.conf`` cannot set it here, the driver's JVM runs before the job reads the config.

Airflow connections and Variables (set in the UI, with ``airflow connections add``, or as environment
variables ``AIRFLOW_CONN_<ID>`` / ``AIRFLOW_VAR_<NAME>``, upper case):

- ``spark_default``: type ``spark``, host the master, e.g.
  ``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "yarn"}'`` (or ``local[2]``,
  ``spark://host:7077``, ``k8s://https://host:443``);
- ``queuelake_transport``: for PostgreSQL type ``postgres``: host (or a socket folder), port, schema (the
  database), login, password; extras become libpq keywords (``sslmode``, ``sslrootcert``, a socket folder as
  ``host``...), e.g. ``AIRFLOW_CONN_QUEUELAKE_TRANSPORT='postgresql://bridge:pw@db.internal:5432/nsb?sslmode=require'``.
  The job gets a libpq ``key=value`` string built from these fields, never the URI Airflow renders (which
  turned a socket folder and a port given as extras into an ``__extra__`` parameter that libpq refuses). For
  SQL Server (any other type) the password field holds the whole ODBC connection string;
- Variable ``queuelake_lake_root``: the lake root (configs reference ``${QUEUELAKE_LAKE_ROOT}``).

Secrets never live in this file: the connection string reaches the job as the environment variable
``QUEUELAKE_CONNECTION`` (which the config references), rendered when the task runs. Airflow masks the
connection's password in logs and rendered fields; ``spark.redaction.regex`` makes Spark redact it too (as
``spark.yarn.appMasterEnv.QUEUELAKE_CONNECTION`` in the UI and event logs).

A failed run leaves nothing to clean up: every row the drain dequeued is in the journal exactly once (a claim
the failure interrupted is resolved by the next run), and publish is idempotent per batch, so the retries (and
the next scheduled run) complete what a failure left, neither losing nor duplicating messages.
``max_active_runs=1`` keeps two runs from draining the same queues at once.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from typing import Any

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
DRIVER_MEMORY = os.environ.get("QUEUELAKE_DRIVER_MEMORY") or None
DRIVER_PYTHON = os.environ.get("QUEUELAKE_DRIVER_PYTHON", f"{QUEUELAKE_HOME}/venv/bin/python")
# a delta-spark lake: the Delta package or jars (a review: the DAG could not run one, and had no setting for it)
PACKAGES = os.environ.get("QUEUELAKE_SPARK_PACKAGES") or None
JARS = os.environ.get("QUEUELAKE_SPARK_JARS") or None
if DEPLOY_MODE not in ("client", "cluster"):
    raise ValueError(f"QUEUELAKE_SPARK_DEPLOY_MODE={DEPLOY_MODE!r}: client or cluster")

# Extras of Airflow's postgres connection that are the provider's own settings, not libpq keywords.
AIRFLOW_ONLY_EXTRAS = frozenset(
    {
        "cursor",
        "iam",
        "redshift",
        "redshift-serverless",
        "aws_conn_id",
        "cluster-identifier",
        "workgroup-name",
        "enable_log_db_messages",
        "sqlalchemy_scheme",
        "sqlalchemy_query",
        "azure_conn_id",
    }
)


def _libpq_value(value: object) -> str:
    """A libpq keyword value: quoted (``'``, ``\\`` escaped) when empty or holding a space or a quote."""
    text = str(value)
    if text and not any(c.isspace() or c in "'\\" for c in text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def libpq_conninfo(conn: Any) -> str:
    """The libpq ``key=value`` string of an Airflow postgres connection, from its fields: ``host`` (or the
    extra ``host``: a socket folder), ``port`` (or the extra), ``schema`` as the database, ``login``,
    ``password``; every other extra is a libpq keyword (``sslmode``...) except the provider's own settings.

    Why not ``conn.get_uri()``: Airflow re-renders extras it cannot place (a socket folder, a port given in the
    query) as ``?__extra__=<json>``, which libpq refuses; the fields are what the connection means."""
    extra = dict(getattr(conn, "extra_dejson", None) or {})
    fields = {
        "host": conn.host or extra.pop("host", None),
        "port": conn.port or extra.pop("port", None),
        "dbname": conn.schema or extra.pop("dbname", None),
        "user": conn.login or extra.pop("user", None),
        "password": conn.password,
    }
    for key in ("host", "port", "dbname", "user"):
        extra.pop(key, None)  # a field set on the connection wins over the same key in its extras
    fields.update({k: v for k, v in extra.items() if k not in AIRFLOW_ONLY_EXTRAS})
    if conn.password:
        _mask_as_written(str(conn.password))
    return " ".join(f"{k}={_libpq_value(v)}" for k, v in fields.items() if v not in (None, ""))


def _mask_as_written(password: str) -> None:
    """Have Airflow mask the password as the connection string writes it, escaped: Airflow masks the raw
    password only, and a password holding a quote or a backslash stood unmasked in the task's rendered
    fields (a review)."""
    written = _libpq_value(password)
    if written == password:
        return
    try:
        from airflow.sdk.log import mask_secret  # Airflow 3
    except ImportError:
        try:
            from airflow.utils.log.secrets_masker import mask_secret  # Airflow 2
        except ImportError:
            return
    mask_secret(written[1:-1])  # inside the quotes: the rendered text keeps password='***'


def transport_connection(conn: Any) -> str:
    """``QUEUELAKE_CONNECTION`` from the ``queuelake_transport`` connection: libpq fields for PostgreSQL,
    else (SQL Server) the whole connection string kept in the password field."""
    if conn.conn_type in ("postgres", "postgresql"):
        return libpq_conninfo(conn)
    return str(conn.password or "")


# Rendered when the task runs, never at parse time; the connection's password is masked by Airflow.
TRANSPORT_CONNECTION = "{{ queuelake_transport_connection(conn.queuelake_transport) }}"
LAKE_ROOT = "{{ var.value.queuelake_lake_root }}"

# Spark shows its configuration in the UI (Environment tab) and writes it to event logs, redacting
# the keys and values this pattern matches. Its default, (?i)secret|password|token|access[.]?key,
# misses spark.yarn.appMasterEnv.QUEUELAKE_CONNECTION (how env_vars reach a YARN cluster-mode
# driver; spark.kubernetes.driverEnv.* on Kubernetes), storage account keys and SAS signatures.
SPARK_REDACTION_REGEX = (
    r"(?i)secret|password|token|access[.]?key|account[._]?key|credential|connection|sig=|private[._]?key"
)

spark_conf = {
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
    "spark.redaction.regex": SPARK_REDACTION_REGEX,
}
if PACKAGES or JARS:  # Delta's JVM classes on the classpath, and the session set up to use them
    spark_conf["spark.sql.extensions"] = "io.delta.sql.DeltaSparkSessionExtension"
    spark_conf["spark.sql.catalog.spark_catalog"] = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
if DEPLOY_MODE == "client":
    # The driver plans Python data sources (bodies) with spark.pyspark.python, in the worker's folder where no
    # ./environment exists: the driver's own Python, for the driver and the executors alike.
    spark_conf["spark.pyspark.python"] = DRIVER_PYTHON
    spark_conf["spark.pyspark.driver.python"] = DRIVER_PYTHON
    config_arg = CONFIG  # the driver runs here and reads the file in place
    files: str | None = None
    archives: str | None = None
else:
    # The driver and the executors run in containers that unpack the packed environment as ./environment.
    spark_conf["spark.pyspark.python"] = "./environment/bin/python"
    config_arg = os.path.basename(CONFIG)  # shipped with --files into the driver's working folder
    files = CONFIG
    archives = f"{PACKED_ENV}#environment"

with DAG(
    dag_id="queuelake_spark_submit",
    description="queuelake run (drain, transform, publish) through spark-submit",
    doc_md=__doc__,
    schedule="*/15 * * * *",
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(minutes=60),
    user_defined_macros={"queuelake_transport_connection": transport_connection},
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
        files=files,
        archives=archives,
        conf=spark_conf,
        packages=PACKAGES,
        jars=JARS,
        driver_memory=DRIVER_MEMORY,
        env_vars={
            "QUEUELAKE_CONNECTION": TRANSPORT_CONNECTION,
            "QUEUELAKE_LAKE_ROOT": LAKE_ROOT,
        },
    )

"""Packaging for queuelake.

The SQL scripts live in the top-level ``sql/`` folder so that DBAs can review them; they are mapped
into the wheel as the ``queuelake._sql`` package so a Databricks ``python_wheel_task`` finds them too.
"""

import sys
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent

# The Spark line and its Delta release, in one place (run, not imported: nothing is installed yet).
VERSIONS: dict = {}
exec((HERE / "lib" / "queuelake" / "versions.py").read_text(encoding="utf-8"), VERSIONS)
SPARK = [VERSIONS["PYSPARK_REQUIREMENT"], VERSIONS["DELTA_SPARK_REQUIREMENT"]]

# The console scripts come from the command registry: the CLI, and queuelake-<job> for each command
# declared a job (also the entry points of Databricks python_wheel_task, databricks.yml). The command
# modules import only the standard library at module level, so this works before anything is installed.
sys.path.insert(0, str(HERE / "lib"))
from queuelake.commands.registry import console_scripts  # noqa: E402

setup(
    name="queuelake",
    version="0.1.0",
    description="Bridge NServiceBus SQL Server / PostgreSQL transport queues and a Delta lakehouse",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    package_dir={"": "lib", "queuelake._sql": "sql"},
    # every package under lib/ (a new one needs no line here), and the SQL folder mapped in
    packages=[*find_packages("lib"), "queuelake._sql"],
    package_data={"queuelake._sql": ["*/*.sql", "*.sql"], "queuelake": ["log4j2.properties"]},
    # No pyspark or delta-spark here (they are the `spark` extra): a Databricks runtime brings its own
    # Spark and Delta, and a python_wheel_task installing this wheel must leave them alone (pip would
    # replace DBR 17.3 LTS's Spark 4.0.0 with the pinned 4.1, and reinstall it on every run). Without
    # pyspark, the Spark commands fail with a summary naming the extra; the others work.
    install_requires=[
        "deltalake>=1.0",
        "pyarrow>=15",
        "pyodbc>=5",
        "adbc-driver-postgresql>=1.0",
        "psycopg[binary]>=3.1",
        "orjson>=3.9",
        "great-expectations>=1.0",
        "pyyaml>=6",
        # replay evaluates a simple --where without Spark: sqlglot parses it as Spark SQL
        "sqlglot>=25",
    ],
    extras_require={
        # the pinned Spark line and its Delta (lib/queuelake/versions.py): laptops, CI, spark-submit
        # environments packed with venv-pack. `make demo` / `make test` install it.
        "spark": SPARK,
        "dev": [
            "pytest>=8",
            # two test workers (setup.cfg): the suite is bound by its Spark and subprocess start-ups
            "pytest-xdist>=3.5",
            "hypothesis>=6",
            "sqlglot>=25",
            "pgserver>=0.1",
            "ruff>=0.5",
            "mypy>=1.10",
            # a local S3 server for the object-storage lake tests (tests/lake/test_s3.py)
            "moto[server]>=5.1",
            # parses `queuelake health --metrics` output, as Prometheus would (tests/pipeline/health/test_health.py)
            "prometheus_client>=0.20",
        ],
        # the embedded default (transport.embedded, conf/local.yaml, `queuelake demo`): a throwaway
        # PostgreSQL whose binaries this package ships. Kept out of install_requires so that deployments
        # (a Databricks wheel) do not carry PostgreSQL; dev lists it too, so `.[spark,dev]` runs the tests.
        "embedded": ["pgserver>=0.1"],
        # the notebooks/ (plots) and their test
        "notebooks": ["matplotlib>=3.8"],
        # parse-checks the DAGs in airflow/dags (tests/product/test_schedulers.py). The Spark provider stays below 6:
        # 6.x depends on pyspark-client, which installs its own `pyspark` package over pyspark's files.
        "airflow": [
            "apache-airflow>=2.10,<4",
            "apache-airflow-providers-apache-spark>=4.11,<6",
            "apache-airflow-providers-databricks>=6.11",
        ],
    },
    entry_points={
        "console_scripts": console_scripts(),
    },
)

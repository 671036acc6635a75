"""The spark-submit DAG run by a real Airflow: ``airflow dags test queuelake_spark_submit``.

Why: parsing the DAG (test_schedulers.py) said nothing about running it; followed to the letter, it failed on
every attempt (issue 62). Here Airflow (the version the ``airflow`` extra installed) gets exactly what the
DAG's docstring and docs/deployment.md ask for, the documented way: ``PATH`` with queuelake's environment's
``bin`` first, the connections and the Variable as ``AIRFLOW_CONN_*`` / ``AIRFLOW_VAR_*`` environment
variables, the ``QUEUELAKE_*`` settings, and ``queuelake install`` run first. Then every stage of the job must
end ``ok``, every seeded message must be in the journal and publish must have delivered to its queue.

Two cases, each ``client`` mode (the driver on the Airflow worker):

- a ``local[2]`` master;
- a Spark standalone cluster (tests/helpers/standalone.py), the stand-in for a cluster: Spark standalone
  cannot run Python applications in ``cluster`` deploy mode ("Cluster deploy mode is currently not supported
  for python applications on standalone clusters"), and there is no YARN or Kubernetes here, so ``cluster``
  mode with its packed environment is not run (docs/deployment.md says how it differs).

Cost: one sqlite metadata database (``airflow db migrate``, ~3 s) shared by both cases; each case is one
``airflow dags test`` (Airflow's start, one spark-submit) of a small backlog.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # queuelake's environment: its spark-submit, python3, queuelake, airflow
CONFIG = ROOT / "conf" / "postgres.example.yaml"
# the embedded server trusts local sockets: any password connects, none may leak. A quote and a backslash:
# written escaped into the libpq string, where Airflow's mask of the raw password did not reach (a review)
PASSWORD = "s3cret-pw's\\x"
WRITTEN = "s3cret-pw\\'s\\\\x"  # as the libpq string writes it, inside its quotes
PER_QUEUE = 200


def _missing_airflow() -> list[str]:
    missing = []
    for name in ("apache-airflow", "apache-airflow-providers-apache-spark"):
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    return missing


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An AIRFLOW_HOME with a migrated sqlite metadata database, shared by this module's DAG runs."""
    missing = _missing_airflow()
    if missing:
        pytest.skip(f"running the DAGs needs {', '.join(missing)}: pip install -e '.[airflow]'")
    home = tmp_path_factory.mktemp("airflow_home")
    proc = subprocess.run(
        [str(BIN / "airflow"), "db", "migrate"],
        cwd=home,
        env=_airflow_env(home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"airflow db migrate failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return home


def _airflow_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "QUEUELAKE_CONNECTION"))}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "airflow" / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            # the documented PATH: queuelake's environment's bin first
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    env.pop("PYTHONPATH", None)
    return env


def _airflow_transport_uri(pg_uri: str) -> str:
    """The test database as an Airflow connection URI, with a password and the socket folder as a query
    parameter: the form Airflow used to re-render as ``?__extra__=`` (issue 62)."""
    parts = urlsplit(pg_uri)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    host = query.pop("host", None) or parts.hostname or "localhost"
    port = query.pop("port", None) or (str(parts.port) if parts.port else None)
    user = parts.username or "postgres"
    params = [f"host={quote(host, safe='')}"] + ([f"port={port}"] if port else [])
    params += [f"{k}={quote(v, safe='')}" for k, v in query.items()]
    return f"postgresql://{quote(user)}:{quote(PASSWORD)}@{parts.path}?{'&'.join(params)}"


def _queuelake(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([str(BIN / "queuelake"), *args], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"queuelake {args[0]} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _seed(pg_uri: str, lake: Path) -> dict[str, dict[str, int]]:
    """``queuelake install`` first (as the docs say), then the demo's traffic into Sales, audit and error."""
    from queuelake import config as config_mod
    from queuelake.commands.demo.end_to_end import seed_traffic
    from queuelake.context import connect
    from queuelake.transport import subscriptions
    from queuelake.transport.table_refs import bridge_ref

    env = {**os.environ, "QUEUELAKE_CONNECTION": pg_uri, "QUEUELAKE_LAKE_ROOT": str(lake)}
    installed = _queuelake(["install", "-c", str(CONFIG)], env)
    assert installed["status"] == "ok", installed
    cfg = config_mod.load(CONFIG, env={"QUEUELAKE_CONNECTION": pg_uri, "QUEUELAKE_LAKE_ROOT": str(lake)})
    with connect(cfg, "test-subscriber") as conn:  # Billing subscribes to the example transform's event
        table = bridge_ref(cfg.transport.subscription_table, cfg.transport)
        subscriptions.subscribe(conn, table, "Billing", "Billing", "Lakehouse.Events.CustomerTotalsUpdated")
        conn.commit()
    return {queue: dict(counts) for queue, counts in seed_traffic(cfg, PER_QUEUE).items()}


def _summary(output: str) -> dict[str, Any]:
    """The job's JSON summary, as the operator logged spark-submit's output."""
    for line in reversed(output.splitlines()):
        found = re.search(r'\{"command": ?"run"', line)
        if found:  # Airflow's log line goes on after the object: [logger] loc=...
            return dict(json.JSONDecoder().raw_decode(line[found.start() :])[0])
    raise AssertionError(f"no JSON summary of the run in the task's output:\n{output[-4000:]}")


def _stages(summary: dict[str, Any]) -> dict[str, str]:
    return {k: v["status"] for k, v in summary.items() if isinstance(v, dict) and "status" in v}


def _journal(lake: Path) -> dict[str, dict[str, int]]:
    from deltalake import DeltaTable

    table = DeltaTable(str(lake / "messages")).to_pyarrow_table(columns=["queue", "outcome"])
    out: dict[str, dict[str, int]] = {}
    for row in table.group_by(["queue", "outcome"]).aggregate([("outcome", "count")]).to_pylist():
        out.setdefault(row["queue"], {})[row["outcome"]] = row["outcome_count"]
    return out


def _rows(pg_uri: str, table: str) -> int:
    with psycopg.connect(pg_uri) as conn:
        row = conn.execute(f'SELECT count(*) FROM "public"."{table}"').fetchone()
        return int(row[0]) if row else 0


def dags_test(home: Path, pg_uri: str, lake: Path, spark_conn: dict[str, Any]) -> tuple[str, float]:
    """``airflow dags test queuelake_spark_submit``, set up the documented way; its output and seconds."""
    env = _airflow_env(home)
    env.update(
        {
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_conn),
            "AIRFLOW_CONN_QUEUELAKE_TRANSPORT": _airflow_transport_uri(pg_uri),
            "AIRFLOW_VAR_QUEUELAKE_LAKE_ROOT": str(lake),
            "QUEUELAKE_HOME": str(ROOT),  # jobs/ and conf/; the venv is this one (QUEUELAKE_DRIVER_PYTHON)
            "QUEUELAKE_CONFIG": str(CONFIG),
            "QUEUELAKE_SPARK_DEPLOY_MODE": "client",
            "QUEUELAKE_DRIVER_PYTHON": str(BIN / "python"),
        }
    )
    started = time.monotonic()
    proc = subprocess.run(
        [str(BIN / "airflow"), "dags", "test", "queuelake_spark_submit"],
        cwd=home,  # not the repo: its airflow/ folder would shadow the package
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    seconds = time.monotonic() - started
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"airflow dags test failed (exit {proc.returncode}):\n{output[-8000:]}"
    return output, seconds


def rendered_connection(home: Path) -> str:
    """``QUEUELAKE_CONNECTION`` as Airflow stored the task's rendered fields (masked)."""
    with contextlib.closing(sqlite3.connect(home / "airflow.db")) as db:
        rows = db.execute("SELECT rendered_fields FROM rendered_task_instance_fields").fetchall()
    assert rows
    return str(json.loads(rows[-1][0])["env_vars"]["QUEUELAKE_CONNECTION"])


def check_run(output: str, home: Path, pg_uri: str, lake: Path, expected: dict[str, dict[str, int]]) -> dict[str, Any]:
    finished = [line for line in output.splitlines() if "DagRun Finished" in line]
    assert finished and "state=success" in finished[-1], output[-4000:]
    # on the first attempt: a retry would hide a failure behind the exactly-once guarantees
    failed = [line for line in output.splitlines() if re.search(r"up_for_retry|Task failed|ERROR", line)]
    assert not failed, "\n".join(failed)[-6000:]
    summary = _summary(output)
    assert summary["status"] == "ok", summary
    stages = _stages(summary)
    assert {"drain", "bodies", "transform", "publish"} <= set(stages), summary
    assert set(stages.values()) == {"ok"}, stages
    assert _journal(lake) == {f'"public"."{q}"': counts for q, counts in expected.items()}
    assert {_rows(pg_uri, q) for q in ("Sales", "audit", "error")} == {0}  # drained
    delivered = _rows(pg_uri, "Billing")
    assert delivered > 0 and delivered == summary["publish"]["copies"], summary["publish"]
    # Airflow masks the connection's password in every log line and in what it stores
    stored = (home / "airflow.db").read_bytes()
    for form in (PASSWORD, WRITTEN, "s3cret"):
        assert form not in output and form.encode() not in stored, form
    # the job got libpq fields, the socket folder and the password among them, not Airflow's URI
    assert re.fullmatch(r"host=/\S+ dbname=\S+ user=\S+ password='\*\*\*'", rendered_connection(home))
    return summary


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    return tmp_path / "lake"


def test_dag_runs_in_client_mode_on_a_local_master(
    airflow_home: Path, fresh_pg_uri: str, lake: Path, record_property: Any
) -> None:
    expected = _seed(fresh_pg_uri, lake)
    output, seconds = dags_test(airflow_home, fresh_pg_uri, lake, {"conn_type": "spark", "host": "local[2]"})
    record_property("dags_test_seconds", round(seconds, 1))
    check_run(output, airflow_home, fresh_pg_uri, lake, expected)
    assert "--master local[2]" in output and "--deploy-mode client" in output


@pytest.fixture
def standalone() -> Iterator[Any]:
    from tests.helpers.standalone import standalone_cluster

    yield from standalone_cluster(workers=1)


def test_dag_runs_on_a_standalone_cluster(
    airflow_home: Path, fresh_pg_uri: str, lake: Path, standalone: Any, record_property: Any
) -> None:
    """Client mode against a standalone master: the job's session is the cluster's (spark-submit's
    ``--master`` wins over the config's ``spark.master``), its executors run the driver's Python."""
    expected = _seed(fresh_pg_uri, lake)
    host, port = standalone.master.rsplit(":", 1)
    output, seconds = dags_test(
        airflow_home, fresh_pg_uri, lake, {"conn_type": "spark", "host": host, "port": int(port)}
    )
    record_property("dags_test_seconds", round(seconds, 1))
    check_run(output, airflow_home, fresh_pg_uri, lake, expected)
    assert f"--master {standalone.master}" in output
    with urllib.request.urlopen(standalone.ui + "/json/", timeout=5) as response:
        apps = json.load(response)
    names = [app["name"] for app in apps.get("activeapps", []) + apps.get("completedapps", [])]
    assert "queuelake-run" in names, apps

"""The scheduler side: spark-submit entry points, the Databricks asset bundle, the Airflow DAGs.

The DAGs are parsed by Airflow's own ``DagBag`` in a subprocess (Airflow configures logging and settings
globally on import); that test is skipped unless apache-airflow and both providers are installed
(``pip install -e '.[airflow]'``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from queuelake.commands.registry import COMMANDS, jobs

ROOT = Path(__file__).resolve().parents[2]
JOB_COMMANDS = [c.name for c in jobs()]
SECRET_REF = "{{secrets/queuelake/connection}}"


def console_scripts() -> dict[str, str]:
    """``name -> module:function`` from setup.py's entry_points (the wheel's metadata), as setup.py
    computes them: run in a subprocess with ``setup()`` recording its arguments instead of building."""
    probe = (
        "import json, runpy, setuptools\n"
        "seen = {}\n"
        "setuptools.setup = lambda **kwargs: seen.update(kwargs)\n"
        "runpy.run_path('setup.py')\n"
        "print(json.dumps(seen['entry_points']))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    scripts = {}
    for spec in json.loads(out.stdout.splitlines()[-1])["console_scripts"]:
        name, target = (part.strip() for part in spec.split("=", 1))
        scripts[name] = target
    return scripts


def bundle() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "databricks.yml").read_text(encoding="utf-8"))


def wheel_tasks(config: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{job_name}/{task['task_key']}", task)
        for job_name, job in config["resources"]["jobs"].items()
        for task in job["tasks"]
        if "python_wheel_task" in task
    ]


# ---------------------------------------------------------------- spark-submit entry points


@pytest.mark.parametrize("command", JOB_COMMANDS)
def test_job_entry_point_calls_run_job(command: str) -> None:
    """``jobs/<command>.py`` is a thin spark-submit entry point for its CLI command, like jobs/drain.py."""
    path = ROOT / "jobs" / f"{command}.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    calls = [
        node for node in ast.walk(tree) if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "run_job"
    ]
    assert len(calls) == 1, f"{path} must call run_job once"
    assert ast.literal_eval(calls[0].args[0]) == command
    assert command in COMMANDS


def test_jobs_folder_holds_exactly_the_registrys_jobs() -> None:
    """``jobs/`` has one thin entry point per command the registry declares a job, and no other:
    a new job command fails here until its file exists (copy jobs/drain.py, change the name)."""
    assert JOB_COMMANDS == ["drain", "bodies", "transform", "publish", "run", "maintain", "replay"]
    assert sorted(p.stem for p in (ROOT / "jobs").glob("*.py")) == sorted(JOB_COMMANDS)


def test_console_scripts_point_at_job_functions() -> None:
    scripts = console_scripts()
    assert scripts["queuelake"] == "queuelake.cli:console"
    assert sorted(scripts) == sorted(["queuelake", *(f"queuelake-{c}" for c in JOB_COMMANDS)])
    for command in JOB_COMMANDS:
        target = scripts[f"queuelake-{command}"]
        module, function = target.split(":")
        assert callable(getattr(importlib.import_module(module), function)), target


def test_the_program_ends_without_the_final_collections(monkeypatch: pytest.MonkeyPatch) -> None:
    """``console`` returns ``main``'s exit code and leaves the collector off with every object frozen,
    so the interpreter's exit does not walk them (0.15-0.2 s of every command)."""
    import gc

    from queuelake import cli

    monkeypatch.setattr(cli, "main", lambda: 3)
    try:
        assert cli.console() == 3
        assert not gc.isenabled()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.enable()


# ---------------------------------------------------------------- Databricks asset bundle


def test_bundle_is_valid_yaml_with_targets() -> None:
    config = bundle()
    assert config["bundle"]["name"] == "queuelake"
    assert {"dev", "prod"} <= set(config["targets"])
    assert config["targets"]["dev"].get("default") is True
    assert config["targets"]["prod"]["mode"] == "production"
    for name, variable in config.get("variables", {}).items():
        assert "default" in variable or all(name in t.get("variables", {}) for t in config["targets"].values())


def test_bundle_builds_the_wheel() -> None:
    artifacts = bundle()["artifacts"]
    (artifact,) = artifacts.values()
    assert artifact["type"] == "whl"
    assert (ROOT / artifact.get("path", ".") / "setup.py").exists()
    assert "wheel" in artifact["build"] and "dist" in artifact["build"]


def test_bundle_wheel_tasks_use_entry_points_of_the_wheel() -> None:
    config = bundle()
    scripts = console_scripts()
    tasks = wheel_tasks(config)
    assert {task["python_wheel_task"]["entry_point"] for _, task in tasks} >= {"queuelake-run", "queuelake-maintain"}
    for key, task in tasks:
        wheel_task = task["python_wheel_task"]
        assert wheel_task["package_name"] == "queuelake", key
        assert wheel_task["entry_point"] in scripts, f"{key}: {wheel_task['entry_point']} is not a console script"
        assert {"whl": "./dist/*.whl"} in task["libraries"], key
        args = wheel_task["parameters"]
        assert args[0] == "-c" and len(args) == 2, key


def test_bundle_installs_only_the_base_wheel() -> None:
    """Databricks Runtime brings Spark and Delta: every task installs the base wheel alone (a whl library
    takes no extras, and no pyspark or delta-spark library is added), and the base wheel's requirements
    leave Spark to the runtime (tests/product/test_packaging.py checks the built wheel's metadata)."""
    for job_name, job in bundle()["resources"]["jobs"].items():
        for task in job["tasks"]:
            assert task.get("libraries") == [{"whl": "./dist/*.whl"}], f"{job_name}/{task['task_key']}"
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    (requires,) = [n.value for n in ast.walk(tree) if isinstance(n, ast.keyword) and n.arg == "install_requires"]
    names = {re.split(r"[<>=!~\[;\s]", spec, maxsplit=1)[0].lower() for spec in ast.literal_eval(requires)}
    assert "deltalake" in names
    assert not names & {"pyspark", "delta-spark", "py4j"}, names


def test_bundle_run_job_schedule_cluster_and_secret() -> None:
    job = bundle()["resources"]["jobs"]["queuelake_run"]
    assert job["max_concurrent_runs"] == 1
    assert re.fullmatch(r"0 0/15 \* \* \* \?", job["schedule"]["quartz_cron_expression"])
    (task,) = job["tasks"]
    assert task["python_wheel_task"]["entry_point"] == "queuelake-run"
    assert task["max_retries"] >= 1
    clusters = {c["job_cluster_key"]: c["new_cluster"] for c in job["job_clusters"]}
    cluster = clusters[task["job_cluster_key"]]
    major = int(cluster["spark_version"].split(".")[0])
    assert major >= 17, "Databricks Runtime 17+ is Spark 4 (Delta built in)"
    assert cluster["spark_env_vars"]["QUEUELAKE_CONNECTION"] == SECRET_REF
    assert "QUEUELAKE_LAKE_ROOT" in cluster["spark_env_vars"]


def test_bundle_references_files_that_exist() -> None:
    config = bundle()
    variables = {name: v.get("default") for name, v in config.get("variables", {}).items()}
    for target in config["targets"].values():
        for name, value in (target.get("variables") or {}).items():
            assert name in variables, f"target sets unknown variable {name}"
            if name == "config_file":
                assert (ROOT / value).is_file(), value
    assert (ROOT / variables["config_file"]).is_file(), variables["config_file"]
    for key, task in wheel_tasks(config):
        path = task["python_wheel_task"]["parameters"][1]
        relative = path.replace("${workspace.file_path}/", "").replace("${var.config_file}", variables["config_file"])
        assert (ROOT / relative).is_file(), f"{key}: {path}"
    notebooks = [
        task["notebook_task"]["notebook_path"]
        for job in config["resources"]["jobs"].values()
        for task in job["tasks"]
        if "notebook_task" in task
    ]
    assert notebooks
    for path in notebooks:
        assert (ROOT / path).is_file(), path
        assert (ROOT / path).read_text(encoding="utf-8").startswith("# Databricks notebook source"), path


def test_bundle_config_file_loads_with_its_environment() -> None:
    """The config the jobs get parses with queuelake's strict loader, given the environment the cluster sets."""
    from queuelake import config as config_mod

    default = bundle()["variables"]["config_file"]["default"]
    env = {"QUEUELAKE_CONNECTION": "postgresql://u:p@db/nsb", "QUEUELAKE_LAKE_ROOT": "/Volumes/main/queuelake/lake"}
    loaded = config_mod.load(ROOT / default, env=env)
    assert loaded.lake.root == env["QUEUELAKE_LAKE_ROOT"]
    assert loaded.transport.connection == env["QUEUELAKE_CONNECTION"]


# ---------------------------------------------------------------- Airflow

AIRFLOW_DISTRIBUTIONS = [
    "apache-airflow",
    "apache-airflow-providers-apache-spark",
    "apache-airflow-providers-databricks",
]


def _missing_airflow() -> list[str]:
    # Distribution metadata, not find_spec: the repo's own airflow/ folder would pass for a namespace package.
    missing = []
    for name in AIRFLOW_DISTRIBUTIONS:
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    return missing


DAGBAG_SCRIPT = r"""
import json, sys, types

try:
    from airflow.dag_processing.dagbag import DagBag  # Airflow 3
except ImportError:
    from airflow.models.dagbag import DagBag  # Airflow 2

bag = DagBag(dag_folder=sys.argv[1])  # examples off through AIRFLOW__CORE__LOAD_EXAMPLES
out = {"import_errors": {str(k): str(v) for k, v in bag.import_errors.items()}, "dags": {}}
# the issue 62 case: a socket folder and a port given as extras (the URI's query), which Airflow's own
# get_uri() re-rendered as ?__extra__=...; and an extra of the provider's own (cursor), not a libpq keyword
conn = types.SimpleNamespace(
    queuelake_transport=types.SimpleNamespace(
        conn_type="postgres", host=None, port=None, schema="nsb", login="ql", password="s3 cret",
        extra_dejson={"host": "/run/pg sock", "port": 5432, "sslmode": "require", "cursor": "dictcursor"},
        get_uri=lambda: "postgres://ql:s3%20cret@/nsb?__extra__=%7B%7D",
    )
)
var = types.SimpleNamespace(value=types.SimpleNamespace(queuelake_lake_root="/data/lake"))
for dag_id, dag in bag.dags.items():
    env = dag.get_template_env()
    tasks = {}
    for task in dag.tasks:
        info = {"type": type(task).__name__, "retries": task.retries}
        if hasattr(task, "json"):
            info["rendered_json"] = json.loads(env.from_string(json.dumps(task.json)).render(ts="2026-01-01"))
        if getattr(task, "env_vars", None):
            info["rendered_env"] = {k: env.from_string(v).render(conn=conn, var=var) for k, v in task.env_vars.items()}
        for name in ("application", "application_args", "files", "conf", "packages", "jars"):
            if hasattr(task, name):
                value = getattr(task, name)
                info[name] = value if isinstance(value, (str, list, dict, type(None))) else str(value)
        tasks[task.task_id] = info
    out["dags"][dag_id] = {
        "tasks": tasks,
        "schedule": str(getattr(dag, "schedule", None) or getattr(dag, "schedule_interval", None)),
        "max_active_runs": dag.max_active_runs,
        "catchup": dag.catchup,
    }
print("DAGBAG " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _dagbag(tmp_path_factory, {})


def _dagbag(tmp_path_factory: pytest.TempPathFactory, settings: dict[str, str]) -> dict[str, Any]:
    missing = _missing_airflow()
    if missing:
        pytest.skip(f"Airflow DAG parse check needs {', '.join(missing)}: pip install -e '.[airflow]'")
    home = tmp_path_factory.mktemp("airflow_home")
    env = {
        **os.environ,
        **settings,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
    }
    proc = subprocess.run(
        [sys.executable, "-c", DAGBAG_SCRIPT, str(ROOT / "airflow" / "dags")],
        cwd=home,  # not the repo: its airflow/ folder must not shadow the package
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("DAGBAG ")]
    assert proc.returncode == 0 and lines, f"DagBag failed (exit {proc.returncode}):\n{proc.stderr[-5000:]}"
    return json.loads(lines[-1][len("DAGBAG ") :])


def test_dags_import_without_errors(dagbag: dict[str, Any]) -> None:
    assert dagbag["import_errors"] == {}
    assert set(dagbag["dags"]) == {"queuelake_spark_submit", "queuelake_databricks"}
    for dag_id, dag in dagbag["dags"].items():
        assert dag["max_active_runs"] == 1, dag_id
        assert dag["catchup"] is False, dag_id
        assert "*/15 * * * *" in dag["schedule"], dag_id
        assert set(dag["tasks"]) == {"run"}, dag_id
        assert dag["tasks"]["run"]["retries"] >= 1, dag_id


def test_spark_submit_dag(dagbag: dict[str, Any]) -> None:
    task = dagbag["dags"]["queuelake_spark_submit"]["tasks"]["run"]
    assert task["type"] == "SparkSubmitOperator"
    assert task["application"].endswith("/jobs/run.py")
    assert task["application_args"][0] == "-c"
    # cluster mode (the default): driver and executors run the packed environment, unpacked as ./environment
    assert task["conf"]["spark.pyspark.python"] == "./environment/bin/python"
    assert "spark.pyspark.driver.python" not in task["conf"]
    assert task["packages"] is None and "spark.sql.extensions" not in task["conf"]  # delta-rs: no Delta JVM
    # the secret comes from the Airflow connection at run time, as libpq fields (quoted where needed), never
    # the URI Airflow renders
    assert task["rendered_env"] == {
        "QUEUELAKE_CONNECTION": "host='/run/pg sock' port=5432 dbname=nsb user=ql password='s3 cret' sslmode=require",
        "QUEUELAKE_LAKE_ROOT": "/data/lake",
    }
    source = (ROOT / "airflow" / "dags" / "queuelake_spark_submit.py").read_text(encoding="utf-8")
    assert "s3 cret" not in source
    # Spark redacts the connection string where it shows the env var (UI, event logs)
    assert task["conf"]["spark.redaction.regex"] == dag_redaction_regex()


def test_spark_submit_dag_takes_the_delta_package_for_a_delta_spark_lake(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A lake delta-spark wrote could not run under the shipped DAG: nothing added Delta's package and its
    two settings (a review). ``QUEUELAKE_SPARK_PACKAGES`` does; without it the DAG adds neither."""
    packages = "io.delta:delta-spark_2.13:4.0.0"
    bag = _dagbag(tmp_path_factory, {"QUEUELAKE_SPARK_PACKAGES": packages})
    task = bag["dags"]["queuelake_spark_submit"]["tasks"]["run"]
    assert task["packages"] == packages and task["jars"] is None, task
    assert task["conf"]["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension", task["conf"]
    assert task["conf"]["spark.sql.catalog.spark_catalog"].endswith("DeltaCatalog"), task["conf"]


# ---------------------------------------------------------------- Spark's redaction of secrets

SPARK_DEFAULT_REDACTION = r"(?i)secret|password|token|access[.]?key"
# keys that carry secrets when queuelake runs under spark-submit: the env var as YARN and Kubernetes get
# it, and the storage credentials a cloud lake root needs (lake.storage_options or Hadoop settings)
SECRET_KEYS = [
    "spark.yarn.appMasterEnv.QUEUELAKE_CONNECTION",
    "spark.kubernetes.driverEnv.QUEUELAKE_CONNECTION",
    "spark.executorEnv.QUEUELAKE_CONNECTION",
    "spark.hadoop.fs.s3a.secret.key",
    "spark.hadoop.fs.s3a.access.key",
    "spark.hadoop.fs.azure.account.key.lake.dfs.core.windows.net",
    "spark.hadoop.fs.azure.sas.token.provider.type",
    "spark.hadoop.google.cloud.auth.service.account.json.keyfile.private.key",
    "spark.yarn.appMasterEnv.AZURE_STORAGE_ACCOUNT_KEY",
    "spark.yarn.appMasterEnv.AWS_SECRET_ACCESS_KEY",
    "spark.yarn.appMasterEnv.AZURE_CLIENT_SECRET",
    "spark.yarn.appMasterEnv.GOOGLE_APPLICATION_CREDENTIALS",
]
PLAIN_KEYS = [
    "spark.yarn.appMasterEnv.QUEUELAKE_LAKE_ROOT",
    "spark.pyspark.python",
    "spark.sql.session.timeZone",
    "spark.executor.memory",
    "spark.sql.extensions",
]


def dag_redaction_regex() -> str:
    """``SPARK_REDACTION_REGEX`` of the spark-submit DAG, read without importing Airflow."""
    tree = ast.parse((ROOT / "airflow" / "dags" / "queuelake_spark_submit.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["SPARK_REDACTION_REGEX"]:
            return ast.literal_eval(node.value)
    raise AssertionError("the spark-submit DAG defines no SPARK_REDACTION_REGEX")


def docs_redaction_regex() -> str:
    """The spark-submit example's pattern, in docs/operations.md (the README's once)."""
    page = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    found = re.findall(r"--conf 'spark\.redaction\.regex=([^']+)'", page)
    assert len(found) == 1, "docs/operations.md's spark-submit example sets spark.redaction.regex once"
    return found[0]


def test_spark_default_redaction_misses_the_connection() -> None:
    """Why the setting exists: Spark's default pattern would show the connection string."""
    assert not re.search(SPARK_DEFAULT_REDACTION, "spark.yarn.appMasterEnv.QUEUELAKE_CONNECTION")


@pytest.mark.parametrize("where", ["dag", "docs"])
def test_redaction_regex_covers_connection_and_storage_secrets(where: str) -> None:
    pattern = re.compile(dag_redaction_regex() if where == "dag" else docs_redaction_regex())
    missed = [key for key in SECRET_KEYS if not pattern.search(key)]
    assert missed == [], f"not redacted: {missed}"
    # it only adds to Spark's default: everything the default redacts stays redacted
    for key in ["spark.ssl.keyStorePassword", "spark.authenticate.secret", "spark.hadoop.fs.s3a.session.token"]:
        assert re.search(SPARK_DEFAULT_REDACTION, key) and pattern.search(key), key
    # and the value of a SAS URL is caught too (Spark matches values as well as keys)
    assert pattern.search("https://lake.blob.core.windows.net/c?sv=2024-01-01&sig=abc%3D")
    assert [key for key in PLAIN_KEYS if pattern.search(key)] == [], "plain settings stay readable"


def test_dag_and_docs_use_the_same_redaction_regex() -> None:
    assert dag_redaction_regex() == docs_redaction_regex()


def test_databricks_dag(dagbag: dict[str, Any]) -> None:
    task = dagbag["dags"]["queuelake_databricks"]["tasks"]["run"]
    assert task["type"] == "DatabricksSubmitRunOperator"
    (run,) = task["rendered_json"]["tasks"]
    wheel_task = run["python_wheel_task"]
    assert wheel_task["package_name"] == "queuelake"
    assert wheel_task["entry_point"] in console_scripts()
    assert wheel_task["parameters"][0] == "-c"
    # the Databricks secret reference survives Airflow's Jinja rendering literally
    assert run["new_cluster"]["spark_env_vars"]["QUEUELAKE_CONNECTION"] == SECRET_REF
    assert int(run["new_cluster"]["spark_version"].split(".")[0]) >= 17
    assert run["libraries"][0]["whl"].endswith(".whl")


# ---------------------------------------------------------------- the Spark a scheduler runs


def test_bundle_wheel_task_parameters_parse_as_the_commands_options() -> None:
    """Each wheel task's parameters are what its command's CLI accepts (``queuelake-<command> <params>`` runs
    ``queuelake <command> <params>``): a renamed or removed option fails here, not in the workspace."""
    from queuelake.cli import build_parser

    parser = build_parser()
    for key, task in wheel_tasks(bundle()):
        wheel_task = task["python_wheel_task"]
        command = wheel_task["entry_point"].removeprefix("queuelake-")
        args = parser.parse_args([command, *wheel_task["parameters"]])
        assert args.command == command, key
        assert args.config == wheel_task["parameters"][1], key


@pytest.mark.parametrize(
    ("version", "ok"),
    [("4.1.2", True), ("4.1.4", True), ("4.1.10", True), ("4.1.1", False), ("4.2.0", False)]
    + [("4.2.0.dev1", False), ("4.0.0", False), ("4.3.0", False), ("3.5.3-amzn-0", False), ("4.1.4.dev0", True)],
)
def test_supported_spark_versions_follow_the_pin(version: str, ok: bool) -> None:
    from queuelake.spark_version import satisfies
    from queuelake.versions import PYSPARK_REQUIREMENT

    assert PYSPARK_REQUIREMENT == "pyspark>=4.1.2,<4.2", "the cases above follow the pin"
    assert satisfies(version) is ok


def test_unsupported_spark_is_refused_in_one_line_naming_both_versions() -> None:
    from queuelake.spark_version import ALLOW_ENV, problem

    # issue 62: Airflow's environment's spark-submit (the provider's pyspark) ran queuelake's Python
    why = problem("4.3.0", "4.1.4")
    assert why is not None and "\n" not in why
    assert why.startswith("Spark 4.3.0 with pyspark 4.1.4 runs this job, but queuelake supports Spark >=4.1.2,<4.2")
    assert "PATH" in why and ALLOW_ENV not in why  # two Sparks in one job: only PATH fixes it
    one = problem("4.2.0", "4.2.0")
    assert one is not None and f"{ALLOW_ENV}=4.2.0" in one
    assert problem("4.2.0", "4.2.0", allowed="4.2.0") is None
    assert problem("4.3.0", "4.1.4", allowed="4.3.0") is not None
    assert problem("4.1.4", "4.1.4") is None
    # Databricks Runtime 17.3 LTS (databricks.yml) is Spark 4.0, with its own Delta
    assert problem("4.0.0", "4.0.0", databricks=True) is None
    assert problem("4.0.0", "4.0.0") is not None
    assert problem("3.5.2", "3.5.2", databricks=True) is not None


def test_spark_check_on_a_real_session(spark: Any) -> None:
    """The running session passes; the same session against a pin it misses is refused, and the CLI reports
    that as ``error_kind`` ``spark-version`` with the one line."""
    import argparse

    from queuelake.cli import _failure
    from queuelake.spark_version import SparkVersionError, check_spark

    check_spark(spark)
    with pytest.raises(SparkVersionError) as refused:
        check_spark(spark, requirement="pyspark>=9.0")
    assert f"Spark {spark.version} runs this job, but queuelake supports Spark >=9.0" in str(refused.value)
    summary = _failure(argparse.Namespace(command="run", debug=False), refused.value)
    assert summary["error_kind"] == "spark-version"
    assert summary["error"] == str(refused.value)

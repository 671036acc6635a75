"""Shared fixtures: one real PostgreSQL per session, a fresh database per module, one local Spark.

Set QUEUELAKE_TEST_PG_DSN to a libpq URI to use your own server instead of the embedded one.

The local Spark session gets the Delta Lake JVM jars that ``bash jvm/fetch-jars.sh`` put in
``jvm/jars`` (or the folder / comma-separated jars in QUEUELAKE_DELTA_JARS), with the Delta SQL
extension and catalog, so the delta-spark engine's tests run; without them those tests skip, saying
why. QUEUELAKE_REQUIRE_DELTA_JVM=1 (CI) turns that skip into a failure. Nothing is downloaded here.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from queuelake.transport.embedded import start_embedded, with_database

from tests.helpers import jvm_flags
from tests.helpers.jvm import delta_jars
from tests.helpers.jvm import require_delta_jvm as require_delta_jvm  # test_publish still imports it from here

# Test files by the time they took in a full run (two workers, slowest first; measured 2026-11-27). They run
# first so that the two workers end together: xdist hands out files in collection order (setup.cfg), and a
# 2-minute file left for last ran alone. A file not listed keeps its place after these.
HEAVIEST_FIRST = (
    "product/test_schedule_jvm.py",
    "product/test_schedule.py",
    "pipeline/drain/test_drain_executors.py",
    "product/test_benches.py",
    "lake/test_s3.py",
    "product/test_notebooks.py",
    "product/test_airflow_dags.py",
    "pipeline/publish/test_publish_executors.py",
    "pipeline/replay/test_replay.py",
    "pipeline/drain/test_drain.py",
    "pipeline/publish/test_publish.py",
    "pipeline/drain/test_drain_kills.py",
    "product/test_ctrl_c.py",
    "product/test_demo.py",
    "pipeline/test_cli_pipeline.py",
    "product/test_fresh_clone.py",
    "pipeline/bodies/test_bodies.py",
    "product/test_demo_engines.py",
    "product/test_docs_examples.py",
    "pipeline/test_runs.py",
    "product/test_embedded_multi.py",
    "lake/test_s3_throttling.py",
)


# The tiers. A test's tier follows from what it uses, never from a hand-set mark: the fixtures that start a
# real part (its closure, so a fixture built on ``pg_uri`` counts) and, for a test module that starts processes
# itself, the ``subprocess`` module among its names. Everything else is ``fast``: ``make test-fast`` runs those
# alone, and ``_fast_tier_guard`` fails a fast test that starts a process or opens a database connection anyway,
# so the tier cannot quietly grow slow.
NEEDS = {
    "db": {"pg_server_uri"},
    "spark": {"spark"},
    "s3": {"s3"},
}
TIERS = ("fast", "db", "spark", "s3", "subprocess")


def _starts_processes(module: object) -> bool:
    """The test module, or a tests helper module it imported (``from tests.helpers import cli``) or imported
    names from (``from tests.helpers.cli import run_cli``), has ``subprocess`` among its names."""
    names = vars(module) if module is not None else {}
    if names.get("subprocess") is subprocess:
        return True
    helpers = {v.__name__ if isinstance(v, types.ModuleType) else getattr(v, "__module__", "") for v in names.values()}
    return any(
        vars(sys.modules[h]).get("subprocess") is subprocess
        for h in helpers
        if h.startswith("tests.") and h in sys.modules and h != "tests.conftest"
    )


def tiers_of(item: pytest.Item) -> set[str]:
    """What ``item`` needs: ``db``, ``spark``, ``s3``, ``subprocess``, or nothing (``fast``)."""
    fixtures = set(getattr(item, "fixturenames", ()))
    needs = {tier for tier, names in NEEDS.items() if fixtures & names}
    if _starts_processes(getattr(item, "module", None)):
        needs.add("subprocess")
    return needs or {"fast"}


def pytest_configure(config: pytest.Config) -> None:
    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: tier, applied from the fixtures a test uses (tests/conftest.py)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks each test with its tiers; the heaviest files first (``HEAVIEST_FIRST``), a file's own order and the
    rest's kept."""
    for item in items:
        for tier in tiers_of(item):
            item.add_marker(tier)
    tests = Path(__file__).resolve().parent
    rank = {str(tests / name): i for i, name in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(str(item.path), len(rank)))


class _FastTierBreach(AssertionError):
    pass


@pytest.fixture(autouse=True)
def _fast_tier_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fast test may not start a process (Spark's JVM, a server, the CLI) nor connect to a database: it would
    belong to another tier. Slower tests get the JVM launch flags instead (``jvm_flags``), set the first time one
    runs in this process, so that ``pytest tests/nsb`` never builds the class archive."""
    if request.node.get_closest_marker("fast") is None:
        _use_jvm_flags(request.config)
        yield
        return
    name = request.node.nodeid

    def refuse(what: str) -> Callable[..., object]:
        def refused(*args: object, **kwargs: object) -> object:
            raise _FastTierBreach(f"{name} is in the fast tier (it uses no db/spark/s3 fixture) but {what}")

        return refused

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("starts a process"))
    monkeypatch.setattr(os, "fork", refuse("forks"))
    monkeypatch.setattr(psycopg, "connect", refuse("connects to PostgreSQL"))
    yield


def _use_jvm_flags(config: pytest.Config) -> None:
    """The tests' JVMs start from a class archive, the short-lived ones on C1 (``jvm_flags``): made once per
    JDK and pyspark (73-75 s), by the first test that may start a JVM; other processes wait on its lock."""
    if "SPARK_SUBMIT_OPTS" in os.environ or not jvm_flags.enabled():
        return
    capture = config.pluginmanager.getplugin("capturemanager")

    def say(line: str) -> None:
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            print(line, file=sys.stderr, flush=True)

    jvm_flags.use(delta_jars()[0], say)


@pytest.fixture(scope="session")
def pg_server_uri() -> Iterator[str]:
    dsn = os.environ.get("QUEUELAKE_TEST_PG_DSN")
    if dsn:
        yield dsn
        return
    # Not under pytest's tmp_path: the server runs as another OS user when we are root, and a second
    # pytest session re-chmods pytest's tmp root to 0700, which cut a running server off its data.
    data = tempfile.mkdtemp(prefix="queuelake-test-pg-")
    server = start_embedded(data)
    yield server.get_uri("postgres")
    server.cleanup()
    shutil.rmtree(data, ignore_errors=True)


def _fresh_database(server_uri: str, hint: str, options: str = "") -> Iterator[str]:
    """A new database, dropped afterwards: a CI run makes hundreds, some with 60,000-row queues and
    their WAL, and a full disk on the test host failed every test after it. ``options``: the rest of
    the ``CREATE DATABASE`` statement (a literal of the test's own, e.g. an encoding)."""
    name = "ql_" + re.sub(r"[^a-z0-9]", "_", hint.lower())[-40:] + "_" + uuid.uuid4().hex[:8]
    with psycopg.connect(server_uri, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" {options}')
    yield with_database(server_uri, name)
    try:
        with psycopg.connect(server_uri, autocommit=True) as conn:
            # FORCE: a killed subprocess's backend may not have gone yet
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except psycopg.Error:
        pass  # a database left behind costs disk, never a result


@pytest.fixture(scope="module")
def pg_uri(pg_server_uri: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A libpq URI of a database of this test module's own."""
    yield from _fresh_database(pg_server_uri, request.module.__name__)


@pytest.fixture
def fresh_pg_uri(pg_server_uri: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A database of this one test's own."""
    yield from _fresh_database(pg_server_uri, request.node.name)


@pytest.fixture
def more_pg_databases(pg_server_uri: str) -> Iterator[Callable[..., str]]:
    """Makes more databases for one test, on the same server (``make(hint, options="")`` returns
    the new one's URI), and drops them all after it."""
    made: list[Iterator[str]] = []

    def make(hint: str, options: str = "") -> str:
        database = _fresh_database(pg_server_uri, hint, options)
        uri = next(database)
        made.append(database)
        return uri

    yield make
    for database in made:
        next(database, None)


@pytest.fixture(params=["psycopg", "pyodbc"])
def pg_driver(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="session")
def spark():
    from queuelake.config_sections import SparkConfig
    from queuelake.spark import delta_conf, get_spark

    jars, _ = delta_jars()
    conf = delta_conf(jars) if jars else {}
    with jvm_flags.long_lived():  # lives for the whole run: compiled fully (C2), unlike the subprocesses' JVMs
        session = get_spark(SparkConfig(master="local[2]", app_name="queuelake-tests", conf=conf))
    yield session
    session.stop()


@pytest.fixture(params=["delta-rs", "delta-spark"])
def lake_engine(request: pytest.FixtureRequest, spark) -> str:
    """Each lake engine in turn (delta-spark skipped without the Delta jars): a test of what a table
    written by either engine must keep."""
    if request.param == "delta-spark":
        require_delta_jvm(spark)
    return request.param


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    """A moto S3 server with one bucket (``tests.helpers.s3``); yields its endpoint URL. Imported
    when used: moto and boto3 are the dev extra's."""
    from tests.helpers.s3 import s3_server

    with s3_server() as url:
        yield url

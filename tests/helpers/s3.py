"""A lake in object storage for the tests: moto's S3 server (on a free port, one bucket, credentials only in
``lake.storage_options``: no ``AWS_*`` variable reaches a command), the job config, queues and environment
a command on it runs with, and the check that a journal on the store holds every seeded row once."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.lake.delta_rs.engine import DeltaRsEngine
from queuelake.transport import db, installer, subscriptions
from queuelake.transport.table_refs import bridge_ref, queue_ref

from tests.helpers.cli import run_cli
from tests.helpers.ports import free_port

REPO = Path(__file__).resolve().parents[2]
S3_JARS = REPO / "jvm" / "jars" / "s3"
DELTA_JARS = REPO / "jvm" / "jars"
BUCKET = "queuelake-tests"
KEY_ID = "QLTESTKEYID12345"
SECRET = "ql-test-secret-" + uuid.uuid4().hex  # must never show in any output


def start_moto(extra_env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**no_aws(os.environ), **(extra_env or {})},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url + "/moto-api/", timeout=2).close()
            return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto server did not start on port {port}") from None
            time.sleep(0.1)


def stop_moto(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def no_aws(env: dict[str, str] | os._Environ) -> dict[str, str]:
    """The environment without AWS_* settings: only lake.storage_options may reach the store."""
    return {k: v for k, v in env.items() if not k.startswith("AWS_")}


@contextlib.contextmanager
def s3_server() -> Iterator[str]:
    """A moto S3 server with one bucket (``BUCKET``); yields its endpoint URL."""
    boto3 = pytest.importorskip("boto3", reason="moto[server] (the dev extra) brings boto3")
    proc, url = start_moto()
    try:
        client = boto3.client(
            "s3", endpoint_url=url, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET, region_name="us-east-1"
        )
        client.create_bucket(Bucket=BUCKET)
        yield url
    finally:
        stop_moto(proc)


# the ``s3`` fixture (tests/conftest.py) serves the tests from ``s3_server``


def assert_drained_once_into(root: str, url: str, seeded: dict[str, set[str]]) -> None:
    """The journal at ``root`` on the store holds every seeded row once, under its own queue."""
    rows = DeltaRsEngine(root, storage_options=resolved_options(url)).read_arrow("messages", columns=["id", "queue"])
    ids = rows["id"].to_pylist()
    assert len(ids) == len(set(ids)) == sum(len(s) for s in seeded.values())
    for name, want in seeded.items():
        got = {i for i, q in zip(ids, rows["queue"].to_pylist()) if q == f'"public"."{name}"'}
        assert got == want, name


def storage_options(url: str) -> dict[str, str]:
    """lake.storage_options as a config gives them: credentials from the environment."""
    return {
        "AWS_ACCESS_KEY_ID": "${QL_TEST_S3_KEY_ID}",
        "AWS_SECRET_ACCESS_KEY": "${QL_TEST_S3_SECRET}",
        "AWS_ENDPOINT_URL": url,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }


def resolved_options(url: str, key_id: str = KEY_ID, secret: str = SECRET) -> dict[str, str]:
    opts = storage_options(url)
    opts["AWS_ACCESS_KEY_ID"], opts["AWS_SECRET_ACCESS_KEY"] = key_id, secret
    return opts


def s3_env(uri: str, key_id: str = KEY_ID, secret: str = SECRET, delta_jars: bool = False) -> dict[str, str]:
    env = {
        **no_aws(os.environ),
        "QUEUELAKE_CONNECTION": uri,
        "QL_TEST_S3_KEY_ID": key_id,
        "QL_TEST_S3_SECRET": secret,
    }
    env.pop("QUEUELAKE_DELTA_JARS", None)
    if delta_jars:
        env["QUEUELAKE_DELTA_JARS"] = str(DELTA_JARS)
    return env


def s3_cli(args: list[str], env: dict[str, str], cwd: Path) -> tuple[dict, str]:
    """(the JSON summary, stdout and stderr) of one command run with exactly ``env`` (``s3_env``'s)."""
    result = run_cli(args, env=env, cwd=cwd, timeout=900).checked()
    return result.summary, result.stdout + result.stderr


def spark_conf() -> dict[str, str]:
    """hadoop-aws on the driver's class path (local mode: executors run in the driver's JVM). Not on
    spark.jars: Spark would copy the ~640 MB SDK bundle into every session's work folder."""
    return {
        "spark.driver.extraClassPath": f"{S3_JARS}/*",
        "spark.sql.shuffle.partitions": "1",
    }


def require_s3_jars() -> None:
    if not list(S3_JARS.glob("hadoop-aws-*.jar")) or not list(S3_JARS.glob("bundle-*.jar")):
        reason = f"hadoop-aws jars not in {S3_JARS} (run: bash jvm/fetch-jars.sh --s3): Spark cannot read s3://"
        if os.environ.get("QUEUELAKE_REQUIRE_DELTA_JVM", "") not in ("", "0"):
            pytest.fail(f"QUEUELAKE_REQUIRE_DELTA_JVM is set: {reason}")
        pytest.skip(reason)


def require_delta_jars() -> None:
    if not list(DELTA_JARS.glob("delta-spark_*.jar")):
        reason = f"Delta JVM jars not in {DELTA_JARS} (run: bash jvm/fetch-jars.sh)"
        if os.environ.get("QUEUELAKE_REQUIRE_DELTA_JVM", "") not in ("", "0"):
            pytest.fail(f"QUEUELAKE_REQUIRE_DELTA_JVM is set: {reason}")
        pytest.skip(reason)


def job_config(root: str, url: str, engine: str, queues_: list[str], batch_size: int = 100) -> dict:
    return {
        "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
        "lake": {"root": root, "engine": engine, "storage_options": storage_options(url)},
        "spark": {"master": "local[1]", "conf": spark_conf()},
        "drain": {"queues": queues_, "batch_size": batch_size},
        "transforms": [
            {
                "name": "activity",
                "sql": str(REPO / "sql/transforms/messages_per_endpoint.sql"),
                "output": "outbound_activity",
            },
        ],
        "publish": {"endpoint": "Lakehouse", "outputs": ["outbound_activity"]},
    }


def install_queues(uri: str, queue_names: list[str], monitoring: bool = False) -> None:
    cfg = from_dict({"transport": {"connection": uri}, "drain": {"queues": queue_names}}, env={})
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=["Monitoring"] if monitoring else []))
        if monitoring:
            subscriptions.subscribe(
                conn,
                bridge_ref("SubscriptionRouting", cfg.transport),
                "Monitoring",
                "Monitoring",
                "Lakehouse.Events.EndpointActivity",
            )
        conn.commit()


def seed_queue(uri: str, queue: str, count: int, seed: int) -> None:
    cfg = from_dict({"transport": {"connection": uri}}, env={})
    with db.connect(cfg.transport) as conn:
        traffic.seed(conn, queue_ref(queue, cfg.transport), traffic.order_events(count, seed=seed))

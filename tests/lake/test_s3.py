"""A lake in object storage, for real: moto's S3 server (started here, on a free port) as the store,
``s3://<bucket>/lake`` as the root, credentials only in ``lake.storage_options`` (``${VAR}`` from the
environment; no ``AWS_*`` variable is set, so nothing but the config can have reached the store).

- the scheduled job (install, drain, transform, publish) then maintain and status through the CLI,
  on delta-rs and on delta-spark; Spark reads and writes ``s3://`` through hadoop-aws, which
  ``bash jvm/fetch-jars.sh --s3`` fetches into jvm/jars/s3 (the tests skip, saying so, without it);
- two drains of different queues committing to one journal concurrently: no commit lost (deltalake's
  conditional put, ``If-None-Match: *``, which moto honours like S3 does);
- a bad credential: a one-line error and the JSON summary, neither showing the secret.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from queuelake.config import from_dict
from queuelake.examples import traffic
from queuelake.lake.delta_rs.engine import DeltaRsEngine
from queuelake.transport import db, installer, queues, subscriptions
from queuelake.transport.tables import bridge_ref, queue_ref

from tests.ports import free_port

REPO = Path(__file__).resolve().parents[2]
S3_JARS = REPO / "jvm" / "jars" / "s3"
DELTA_JARS = REPO / "jvm" / "jars"
BUCKET = "queuelake-tests"
KEY_ID = "QLTESTKEYID12345"
SECRET = "ql-test-secret-" + uuid.uuid4().hex  # must never show in any output

boto3 = pytest.importorskip("boto3", reason="moto[server] (the dev extra) brings boto3")
pytest.importorskip("moto.server", reason="moto[server] is in the dev extra: pip install -e '.[dev]'")


def _start_moto(extra_env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**_no_aws(os.environ), **(extra_env or {})},
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


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _no_aws(env: dict[str, str] | os._Environ) -> dict[str, str]:
    """The environment without AWS_* settings: only lake.storage_options may reach the store."""
    return {k: v for k, v in env.items() if not k.startswith("AWS_")}


@contextlib.contextmanager
def s3_server() -> Iterator[str]:
    """A moto S3 server with one bucket (``BUCKET``); yields its endpoint URL."""
    proc, url = _start_moto()
    try:
        client = boto3.client(
            "s3", endpoint_url=url, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET, region_name="us-east-1"
        )
        client.create_bucket(Bucket=BUCKET)
        yield url
    finally:
        _stop(proc)


# the ``s3`` fixture (tests/conftest.py) serves this module's tests from ``s3_server``


def assert_drained_once_into(root: str, url: str, seeded: dict[str, set[str]]) -> None:
    """The journal at ``root`` on the store holds every seeded row once, under its own queue."""
    rows = DeltaRsEngine(root, storage_options=_resolved(url)).read_arrow("messages", columns=["id", "queue"])
    ids = rows["id"].to_pylist()
    assert len(ids) == len(set(ids)) == sum(len(s) for s in seeded.values())
    for name, want in seeded.items():
        got = {i for i, q in zip(ids, rows["queue"].to_pylist()) if q == f'"public"."{name}"'}
        assert got == want, name


def _options(url: str) -> dict[str, str]:
    """lake.storage_options as a config gives them: credentials from the environment."""
    return {
        "AWS_ACCESS_KEY_ID": "${QL_TEST_S3_KEY_ID}",
        "AWS_SECRET_ACCESS_KEY": "${QL_TEST_S3_SECRET}",
        "AWS_ENDPOINT_URL": url,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }


def _resolved(url: str, key_id: str = KEY_ID, secret: str = SECRET) -> dict[str, str]:
    opts = _options(url)
    opts["AWS_ACCESS_KEY_ID"], opts["AWS_SECRET_ACCESS_KEY"] = key_id, secret
    return opts


def _env(uri: str, key_id: str = KEY_ID, secret: str = SECRET, delta_jars: bool = False) -> dict[str, str]:
    env = {
        **_no_aws(os.environ),
        "QUEUELAKE_CONNECTION": uri,
        "QL_TEST_S3_KEY_ID": key_id,
        "QL_TEST_S3_SECRET": secret,
    }
    env.pop("QUEUELAKE_DELTA_JARS", None)
    if delta_jars:
        env["QUEUELAKE_DELTA_JARS"] = str(DELTA_JARS)
    return env


def _cli(args: list[str], env: dict[str, str], cwd: Path) -> tuple[dict, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "queuelake", *args], env=env, capture_output=True, text=True, timeout=900, cwd=cwd
    )
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no JSON summary; stderr:\n{proc.stderr[-3000:]}"
    summary = json.loads(lines[-1])
    assert proc.returncode == (0 if summary["status"] == "ok" else 1), proc.stderr[-3000:]
    return summary, proc.stdout + proc.stderr


def _spark_conf() -> dict[str, str]:
    """hadoop-aws on the driver's class path (local mode: executors run in the driver's JVM). Not on
    spark.jars: Spark would copy the ~640 MB SDK bundle into every session's work folder."""
    return {
        "spark.driver.extraClassPath": f"{S3_JARS}/*",
        "spark.sql.shuffle.partitions": "1",
    }


def _require_s3_jars() -> None:
    if not list(S3_JARS.glob("hadoop-aws-*.jar")) or not list(S3_JARS.glob("bundle-*.jar")):
        reason = f"hadoop-aws jars not in {S3_JARS} (run: bash jvm/fetch-jars.sh --s3): Spark cannot read s3://"
        if os.environ.get("QUEUELAKE_REQUIRE_DELTA_JVM", "") not in ("", "0"):
            pytest.fail(f"QUEUELAKE_REQUIRE_DELTA_JVM is set: {reason}")
        pytest.skip(reason)


def _require_delta_jars() -> None:
    if not list(DELTA_JARS.glob("delta-spark_*.jar")):
        reason = f"Delta JVM jars not in {DELTA_JARS} (run: bash jvm/fetch-jars.sh)"
        if os.environ.get("QUEUELAKE_REQUIRE_DELTA_JVM", "") not in ("", "0"):
            pytest.fail(f"QUEUELAKE_REQUIRE_DELTA_JVM is set: {reason}")
        pytest.skip(reason)


def _config(root: str, url: str, engine: str, queues_: list[str], batch_size: int = 100) -> dict:
    return {
        "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
        "lake": {"root": root, "engine": engine, "storage_options": _options(url)},
        "spark": {"master": "local[1]", "conf": _spark_conf()},
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


def _install(uri: str, queue_names: list[str], monitoring: bool = False) -> None:
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


def _seed(uri: str, queue: str, count: int, seed: int) -> None:
    cfg = from_dict({"transport": {"connection": uri}}, env={})
    with db.connect(cfg.transport) as conn:
        traffic.seed(conn, queue_ref(queue, cfg.transport), traffic.order_events(count, seed=seed))


def _objects(url: str, prefix: str) -> list[str]:
    client = boto3.client(
        "s3", endpoint_url=url, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET, region_name="us-east-1"
    )
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        keys.extend(obj["Key"] for obj in page.get("Contents", []))
    return keys


def _job(s3: str, uri: str, tmp_path: Path, engine: str) -> tuple[str, str, Path, dict[str, str]]:
    """A lake under a fresh prefix, a job config for it, Sales seeded with 250 messages."""
    _require_s3_jars()
    if engine == "delta-spark":
        _require_delta_jars()
    prefix = f"lake-{engine}-{uuid.uuid4().hex[:8]}"
    conf = tmp_path / "job.yaml"
    conf.write_text(json.dumps(_config(f"s3://{BUCKET}/{prefix}", s3, engine, ["Sales"])))
    _install(uri, ["Sales"], monitoring=True)
    _seed(uri, "Sales", 250, seed=4)
    return prefix, f"s3://{BUCKET}/{prefix}", conf, _env(uri, delta_jars=engine == "delta-spark")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["delta-rs", "delta-spark"])
def test_drain_transform_maintain_status_on_s3(s3: str, fresh_pg_uri: str, tmp_path: Path, engine: str) -> None:
    prefix, root, conf, env = _job(s3, fresh_pg_uri, tmp_path, engine)
    small = ["Small1", "Small2", "Small3"]  # 20 rows each: one shared batch (``small_queues.py``) on the store
    _install(fresh_pg_uri, small)
    for i, queue in enumerate(small):
        _seed(fresh_pg_uri, queue, 20, seed=40 + i)

    # `run` (drain, transform, publish) with nothing to publish: test_publish_on_s3 is the publish part
    job = json.loads(conf.read_text())
    job["publish"]["outputs"] = []
    job["drain"]["queues"] = ["Sales", *small]
    conf.write_text(json.dumps(job))
    run, out = _cli(["run", "-c", str(conf)], env, tmp_path)
    assert run["status"] == "ok", out[-3000:]
    assert run["drain"]["landed"] == 310
    assert [q["landed"] for q in run["drain"]["queues"]] == [250, 20, 20, 20]
    assert run["transform"]["transforms"][0]["rows_out"] == 1  # one endpoint, one message type
    assert SECRET not in out

    keys = _objects(s3, prefix + "/")
    assert any(k.startswith(f"{prefix}/messages/_delta_log/") for k in keys)
    assert any(k.startswith(f"{prefix}/outbound_activity/_delta_log/") for k in keys)
    assert not list(tmp_path.glob("**/_delta_log")), "nothing may land on the local disk"

    # replay reads the journal's files from the store without Spark (the selection and the bodies)
    where = 'queue = \'"public"."Sales"\' AND seq >= 0'
    replay = ["replay", "-c", str(conf), "--where", where, "--to", "Monitoring", "--limit", "10"]
    replayed, out = _cli(replay, env, tmp_path)
    assert replayed["status"] == "ok" and replayed["selected_by"] == "arrow", out[-3000:]
    assert replayed["matched"] == 250 and replayed["rows_sent"] == 10, replayed
    assert "no Spark needed" in out and SECRET not in out
    cfg = from_dict({"transport": {"connection": fresh_pg_uri}}, env={})
    with db.connect(cfg.transport) as conn:
        assert len(queues.receive_batch(conn, queue_ref("Monitoring", cfg.transport), 100)) == 10
        conn.commit()

    maintained, out = _cli(["maintain", "-c", str(conf)], env, tmp_path)
    assert maintained["status"] == "ok", out[-3000:]
    assert {"messages", "runs", "outbound_activity", "replays"} <= set(maintained["tables"])
    assert maintained["tables"]["outbound_activity"]["engine"] == engine
    assert SECRET not in out

    status, out = _cli(["status", "-c", str(conf)], env, tmp_path)
    assert status["status"] == "ok", out[-3000:]
    assert SECRET not in out

    lake = DeltaRsEngine(root, storage_options=_resolved(s3))
    journal = lake.read_arrow("messages", columns=["queue", "batch_id"])
    assert journal.num_rows == 310  # compaction keeps every row
    by_batch: dict[str, set[str]] = {}
    for row in journal.to_pylist():
        by_batch.setdefault(row["batch_id"], set()).add(row["queue"])
    assert sorted(len(qs) for qs in by_batch.values()) == [1, 1, 1, 3], by_batch  # Sales' 3, the small ones' 1
    (body,) = lake.read_arrow("outbound_activity", columns=["body"])["body"].to_pylist()
    assert json.loads(body)["Messages"] == 310


@pytest.mark.slow
@pytest.mark.parametrize("from_rows", [None, 1], ids=["driver", "executors"])
def test_publish_on_s3(s3: str, fresh_pg_uri: str, tmp_path: Path, from_rows: int | None) -> None:
    _, _, conf, env = _job(s3, fresh_pg_uri, tmp_path, "delta-rs")
    data = json.loads(conf.read_text())  # executors: the tasks read the round's files from S3 too
    data.setdefault("publish", {})["executors_from_rows"] = from_rows
    conf.write_text(json.dumps(data))
    run, out = _cli(["run", "-c", str(conf)], env, tmp_path)
    assert SECRET not in out
    assert run["status"] == "ok", run
    assert run["drain"]["landed"] == 250 and run["publish"]["copies"] == 1
    cfg = from_dict({"transport": {"connection": fresh_pg_uri}}, env={})
    with db.connect(cfg.transport) as conn:
        rows = queues.receive_batch(conn, queue_ref("Monitoring", cfg.transport), 10)
        conn.commit()
    assert len(rows) == 1 and json.loads(rows[0].body)["Messages"] == 250


def test_hadoop_aws_matches_the_hadoop_inside_pyspark() -> None:
    """hadoop-aws must be the exact Hadoop version of pyspark's own hadoop-client jars."""
    import xml.etree.ElementTree as ET

    import pyspark
    from queuelake import versions

    jars = Path(pyspark.__file__).parent / "jars"
    assert (jars / f"hadoop-client-api-{versions.HADOOP_VERSION}.jar").is_file(), sorted(
        p.name for p in jars.glob("hadoop-client-*.jar")
    )
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    props = ET.parse(REPO / "jvm" / "pom.xml").getroot().find("m:properties", ns)
    assert props is not None and props.findtext("m:hadoop.version", namespaces=ns) == versions.HADOOP_VERSION


def test_storage_options_map_to_s3a_and_secrets() -> None:
    from queuelake.lake import storage

    opts = _resolved("http://127.0.0.1:9000")
    conf = storage.s3a_conf(opts)
    assert conf["fs.s3a.access.key"] == KEY_ID and conf["fs.s3a.secret.key"] == SECRET
    assert conf["fs.s3a.endpoint"] == "http://127.0.0.1:9000" and conf["fs.s3a.path.style.access"] == "true"
    assert conf["fs.s3a.endpoint.region"] == "us-east-1" and conf["fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert storage.s3a_conf({}) == {}
    # what the CLI redacts: the credentials, not the endpoint, region or flags
    assert sorted(storage.secret_values(opts)) == sorted([KEY_ID, SECRET])
    cfg = from_dict(
        {"lake": {"root": "s3://b/lake", "storage_options": _options("http://x:1")}},
        env={"QL_TEST_S3_KEY_ID": KEY_ID, "QL_TEST_S3_SECRET": SECRET},
    )
    assert cfg.lake.storage_options["AWS_SECRET_ACCESS_KEY"] == SECRET  # ${VAR}-expanded


@pytest.mark.slow
def test_concurrent_drains_of_two_queues_lose_no_commit(s3: str, fresh_pg_uri: str, tmp_path: Path) -> None:
    """Two processes commit batches to one journal at the same time; deltalake's conditional put makes
    the loser of each race retry on top of the winner's commit instead of overwriting it."""
    prefix = f"lake-concurrent-{uuid.uuid4().hex[:8]}"
    root = f"s3://{BUCKET}/{prefix}"
    counts = {"Sales": 300, "Billing": 240}
    _install(fresh_pg_uri, list(counts))
    for i, (queue, count) in enumerate(counts.items()):
        _seed(fresh_pg_uri, queue, count, seed=10 + i)
    env = _env(fresh_pg_uri)
    lake = DeltaRsEngine(root, storage_options=_resolved(s3))  # both drains race to create it, too
    procs = []
    for queue in counts:
        conf = tmp_path / f"{queue}.yaml"
        conf.write_text(json.dumps(_config(root, s3, "delta-rs", [queue], batch_size=20)))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "queuelake", "drain", "-c", str(conf)],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    summaries = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        summary = json.loads(out.strip().splitlines()[-1])
        assert proc.returncode == 0 and summary["status"] == "ok", (summary, err[-3000:])
        assert SECRET not in out + err
        summaries.append(summary)
    assert sum(s["landed"] for s in summaries) == sum(counts.values())

    queue_of_row = lake.read_arrow("messages", columns=["queue"])["queue"].to_pylist()
    landed = {q: sum(1 for name in queue_of_row if name.split(".")[-1].strip('"') == q) for q in counts}
    assert landed == counts, sorted(set(queue_of_row))
    # one log entry per version, no gap; a group commit carries several batches (each worker's
    # highest version): per queue, the workers' last versions add up to the batches it claimed
    log_keys = sorted(k for k in _objects(s3, f"{prefix}/messages/_delta_log/") if k.endswith(".json"))
    assert len(log_keys) == lake.table_version("messages") + 1
    txns = [_txns(s3, key) for key in log_keys]
    last: dict[str, int] = {}
    for entry in txns:
        for app_id, version in entry.items():
            last[app_id] = max(version, last.get(app_id, 0))
    batches = {q: sum(v for a, v in last.items() if q in a) for q in counts}
    claimed = {q: s["queues"][0]["batches"] for q, s in zip(counts, summaries)}
    assert batches == claimed and all(batches[q] >= -(-n // 20) for q, n in counts.items()), (batches, claimed)
    commits = {q: sum(1 for entry in txns if any(q in a for a in entry)) for q in counts}
    print(f"journal on S3: {len(log_keys)} versions, commits per queue {commits}, batches {batches}")


def _txns(url: str, key: str) -> dict[str, int]:
    """The application transactions (app id: version) of one Delta log entry."""
    client = boto3.client(
        "s3", endpoint_url=url, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET, region_name="us-east-1"
    )
    text = client.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode("utf-8")
    actions = [json.loads(line) for line in text.splitlines() if line.strip()]
    return {a["txn"]["appId"]: int(a["txn"]["version"]) for a in actions if "txn" in a}


@pytest.mark.slow
def test_bad_credential_is_a_clear_error_without_the_secret(fresh_pg_uri: str, tmp_path: Path) -> None:
    """moto checks access keys when started with INITIAL_NO_AUTH_ACTION_COUNT=0: an unknown key id
    is refused (403 InvalidAccessKeyId), as S3 refuses it."""
    proc, url = _start_moto({"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    try:
        bad_id, bad_secret = "QLBADKEY" + uuid.uuid4().hex[:12].upper(), "ql-bad-secret-" + uuid.uuid4().hex
        conf = tmp_path / "job.yaml"
        conf.write_text(json.dumps(_config(f"s3://{BUCKET}/lake", url, "delta-rs", ["Sales"])))
        _install(fresh_pg_uri, ["Sales"])
        _seed(fresh_pg_uri, "Sales", 5, seed=1)
        env = _env(fresh_pg_uri, key_id=bad_id, secret=bad_secret)
        for command in ("maintain", "drain"):
            summary, out = _cli([command, "-c", str(conf)], env, tmp_path)
            assert summary["status"] == "failed", summary
            assert "object storage error" in summary["error"] and "lake.storage_options" in summary["error"], summary
            assert re.search(r"invalid_?access_?key_?id", summary["error"], re.I), summary  # S3's reason
            assert "\n" not in summary["error"] and "\x1b" not in summary["error"]
            assert bad_secret not in out and bad_id not in out, out[-3000:]
            assert "Traceback" not in out
    finally:
        _stop(proc)


def test_find_reads_a_journal_on_s3(s3: str, fresh_pg_uri: str, tmp_path: Path) -> None:
    """``queuelake find`` through the lake port's lookup, with the credentials only in
    lake.storage_options: the journal's log and files read from the store."""
    root = f"s3://{BUCKET}/find-{uuid.uuid4().hex[:8]}"
    _install(fresh_pg_uri, ["Sales"])
    _seed(fresh_pg_uri, "Sales", 60, seed=34)
    conf = tmp_path / "find.yaml"
    conf.write_text(json.dumps(_config(root, s3, "delta-rs", ["Sales"], batch_size=20)))
    env = _env(fresh_pg_uri)
    drained, _ = _cli(["drain", "-c", str(conf)], env, tmp_path)
    assert drained["status"] == "ok", drained
    target = list(traffic.order_events(60, seed=34))[41].id
    found, out = _cli(["find", "-c", str(conf), "--message-id", target, "--json"], env, tmp_path)
    assert found["found"] == 1 and found["files"] >= 3, found
    assert f'"message_id":"{target}"' in out

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

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.lake.delta_rs.engine import DeltaRsEngine
from queuelake.transport import db, queues
from queuelake.transport.table_refs import queue_ref

from tests.helpers.s3 import (
    BUCKET,
    KEY_ID,
    REPO,
    SECRET,
    install_queues,
    job_config,
    require_delta_jars,
    require_s3_jars,
    resolved_options,
    s3_cli,
    s3_env,
    seed_queue,
    start_moto,
    stop_moto,
    storage_options,
)

boto3 = pytest.importorskip("boto3", reason="moto[server] (the dev extra) brings boto3")
pytest.importorskip("moto.server", reason="moto[server] is in the dev extra: pip install -e '.[dev]'")


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
    require_s3_jars()
    if engine == "delta-spark":
        require_delta_jars()
    prefix = f"lake {engine}-{uuid.uuid4().hex[:8]}"  # a space: deltalake encodes it in its file URIs
    conf = tmp_path / "job.yaml"
    conf.write_text(json.dumps(job_config(f"s3://{BUCKET}/{prefix}", s3, engine, ["Sales"])))
    install_queues(uri, ["Sales"], monitoring=True)
    seed_queue(uri, "Sales", 250, seed=4)
    return prefix, f"s3://{BUCKET}/{prefix}", conf, s3_env(uri, delta_jars=engine == "delta-spark")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["delta-rs", "delta-spark"])
def test_drain_transform_maintain_status_on_s3(s3: str, fresh_pg_uri: str, tmp_path: Path, engine: str) -> None:
    prefix, root, conf, env = _job(s3, fresh_pg_uri, tmp_path, engine)
    small = ["Small1", "Small2", "Small3"]  # 20 rows each: one shared batch (``small_queues.py``) on the store
    install_queues(fresh_pg_uri, small)
    for i, queue in enumerate(small):
        seed_queue(fresh_pg_uri, queue, 20, seed=40 + i)

    # `run` (drain, transform, publish) with nothing to publish: test_publish_on_s3 is the publish part
    job = json.loads(conf.read_text())
    job["publish"]["outputs"] = []
    job["drain"]["queues"] = ["Sales", *small]
    conf.write_text(json.dumps(job))
    run, out = s3_cli(["run", "-c", str(conf)], env, tmp_path)
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
    replayed, out = s3_cli(replay, env, tmp_path)
    assert replayed["status"] == "ok" and replayed["selected_by"] == "arrow", out[-3000:]
    assert replayed["matched"] == 250 and replayed["rows_sent"] == 10, replayed
    assert "no Spark needed" in out and SECRET not in out
    cfg = from_dict({"transport": {"connection": fresh_pg_uri}}, env={})
    with db.connect(cfg.transport) as conn:
        assert len(queues.receive_batch(conn, queue_ref("Monitoring", cfg.transport), 100)) == 10
        conn.commit()

    maintained, out = s3_cli(["maintain", "-c", str(conf)], env, tmp_path)
    assert maintained["status"] == "ok", out[-3000:]
    assert {"messages", "runs", "outbound_activity", "replays"} <= set(maintained["tables"])
    assert maintained["tables"]["outbound_activity"]["engine"] == engine
    assert SECRET not in out

    status, out = s3_cli(["status", "-c", str(conf)], env, tmp_path)
    assert status["status"] == "ok", out[-3000:]
    assert SECRET not in out

    # erase on the store: its pending record (lake/pending) written there and cleared, its purge there
    erase = ["erase", "-c", str(conf), "--where", """queue = '"public"."Small1"'"""]
    erased, out = s3_cli(erase, env, tmp_path)
    assert erased["status"] == "ok" and erased["tables"]["messages"]["rows"] == 20, out[-3000:]
    assert erased["tables"]["messages"]["files_vacuumed"] >= 1, erased
    assert not [k for k in _objects(s3, prefix + "/") if "/_queuelake/" in k and k.endswith(".json")]

    lake = DeltaRsEngine(root, storage_options=resolved_options(s3))
    journal = lake.read_arrow("messages", columns=["queue", "batch_id"])
    assert journal.num_rows == 290  # compaction keeps every row; the erase took Small1's 20
    by_batch: dict[str, set[str]] = {}
    for row in journal.to_pylist():
        by_batch.setdefault(row["batch_id"], set()).add(row["queue"])
    assert sorted(len(qs) for qs in by_batch.values()) == [1, 1, 1, 2], by_batch  # Sales' 3, the small ones' 1
    (body,) = lake.read_arrow("outbound_activity", columns=["body"])["body"].to_pylist()
    assert json.loads(body)["Messages"] == 310


@pytest.mark.slow
@pytest.mark.parametrize("from_rows", [None, 1], ids=["driver", "executors"])
def test_publish_on_s3(s3: str, fresh_pg_uri: str, tmp_path: Path, from_rows: int | None) -> None:
    _, _, conf, env = _job(s3, fresh_pg_uri, tmp_path, "delta-rs")
    data = json.loads(conf.read_text())  # executors: the tasks read the round's files from S3 too
    data.setdefault("publish", {})["executors_from_rows"] = from_rows
    conf.write_text(json.dumps(data))
    run, out = s3_cli(["run", "-c", str(conf)], env, tmp_path)
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

    opts = resolved_options("http://127.0.0.1:9000")
    conf = storage.s3a_conf(opts)
    assert conf["fs.s3a.access.key"] == KEY_ID and conf["fs.s3a.secret.key"] == SECRET
    assert conf["fs.s3a.endpoint"] == "http://127.0.0.1:9000" and conf["fs.s3a.path.style.access"] == "true"
    assert conf["fs.s3a.endpoint.region"] == "us-east-1" and conf["fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert storage.s3a_conf({}) == {}
    # what the CLI redacts: the credentials, not the endpoint, region or flags
    assert sorted(storage.secret_values(opts)) == sorted([KEY_ID, SECRET])
    cfg = from_dict(
        {"lake": {"root": "s3://b/lake", "storage_options": storage_options("http://x:1")}},
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
    install_queues(fresh_pg_uri, list(counts))
    for i, (queue, count) in enumerate(counts.items()):
        seed_queue(fresh_pg_uri, queue, count, seed=10 + i)
    env = s3_env(fresh_pg_uri)
    lake = DeltaRsEngine(root, storage_options=resolved_options(s3))  # both drains race to create it, too
    procs = []
    for queue in counts:
        conf = tmp_path / f"{queue}.yaml"
        conf.write_text(json.dumps(job_config(root, s3, "delta-rs", [queue], batch_size=20)))
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
    proc, url = start_moto({"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    try:
        bad_id, bad_secret = "QLBADKEY" + uuid.uuid4().hex[:12].upper(), "ql-bad-secret-" + uuid.uuid4().hex
        conf = tmp_path / "job.yaml"
        conf.write_text(json.dumps(job_config(f"s3://{BUCKET}/lake", url, "delta-rs", ["Sales"])))
        install_queues(fresh_pg_uri, ["Sales"])
        seed_queue(fresh_pg_uri, "Sales", 5, seed=1)
        env = s3_env(fresh_pg_uri, key_id=bad_id, secret=bad_secret)
        for command in ("maintain", "drain"):
            summary, out = s3_cli([command, "-c", str(conf)], env, tmp_path)
            assert summary["status"] == "failed", summary
            assert "object storage error" in summary["error"] and "lake.storage_options" in summary["error"], summary
            assert re.search(r"invalid_?access_?key_?id", summary["error"], re.I), summary  # S3's reason
            assert "\n" not in summary["error"] and "\x1b" not in summary["error"]
            assert bad_secret not in out and bad_id not in out, out[-3000:]
            assert "Traceback" not in out
    finally:
        stop_moto(proc)


def test_find_reads_a_journal_on_s3(s3: str, fresh_pg_uri: str, tmp_path: Path) -> None:
    """``queuelake find`` through the lake port's lookup, with the credentials only in
    lake.storage_options: the journal's log and files read from the store."""
    root = f"s3://{BUCKET}/find-{uuid.uuid4().hex[:8]}"
    install_queues(fresh_pg_uri, ["Sales"])
    seed_queue(fresh_pg_uri, "Sales", 60, seed=34)
    conf = tmp_path / "find.yaml"
    conf.write_text(json.dumps(job_config(root, s3, "delta-rs", ["Sales"], batch_size=20)))
    env = s3_env(fresh_pg_uri)
    drained, _ = s3_cli(["drain", "-c", str(conf)], env, tmp_path)
    assert drained["status"] == "ok", drained
    target = list(traffic.order_events(60, seed=34))[41].id
    found, out = s3_cli(["find", "-c", str(conf), "--message-id", target, "--json"], env, tmp_path)
    assert found["found"] == 1 and found["files"] >= 3, found
    assert f'"message_id":"{target}"' in out


def test_a_tables_stored_files_are_judged_and_deleted_by_the_logs_names_on_s3(s3: str) -> None:
    """What delta-spark's purge and maintain's vacuum check compare on a store: the listing's paths below
    the table (not the bucket) against the log's. An orphan is the one file not named, and deleting it (and
    one already gone) leaves the table's own file and log."""
    import pyarrow as pa
    from queuelake.lake.delta_spark.engine import _live_paths, _unreferenced
    from queuelake.lake.storage import delete_stored, stored_files

    root = f"s3://{BUCKET}/purge-{uuid.uuid4().hex[:8]}"
    options = resolved_options(s3)
    lake = DeltaRsEngine(root, storage_options=options)
    assert lake.append("typed", pa.table({"id": pa.array([1, 2], pa.int64())}), "app", 1)
    client = boto3.client(
        "s3", endpoint_url=s3, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET, region_name="us-east-1"
    )
    prefix = root[len(f"s3://{BUCKET}/") :] + "/typed/"
    client.put_object(Bucket=BUCKET, Key=prefix + "part-orphan.parquet", Body=b"PAR1")
    stored = stored_files(lake.path("typed"), options)
    assert _unreferenced(stored, _live_paths(lake._require("typed"))) == ["part-orphan.parquet"]
    delete_stored(lake.path("typed"), ["part-orphan.parquet", "part-gone.parquet"], options)
    keys = _objects(s3, prefix)
    assert prefix + "part-orphan.parquet" not in keys and any(k.startswith(prefix + "_delta_log/") for k in keys)
    assert lake.read_arrow("typed").num_rows == 2

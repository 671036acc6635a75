"""The drain on Spark executors (``drain.on: executors``, issue 32) on a real standalone cluster
started from the installed pyspark (``tests/helpers/standalone.py``): tasks receive, build, stage and claim in
their own Python processes; the driver commits. The drain runs as ``queuelake drain`` in a
subprocess whose fresh SparkSession connects to the cluster (``spark.master`` in its config); the
suite's own local session (conftest) is not involved.

Kills: the tasks' Python workers SIGKILLed at each step of the claim protocol (Spark retries the
task: a new drain of that queue), and the driver SIGKILLed (from inside its poller, and from outside
at a random instant); then a normal run. Every seeded row is in the journal exactly once, nothing is
left in the queues or the claims table.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from queuelake.config import Config
from queuelake.lake.reading import read_table

from tests.helpers import jvm_flags
from tests.helpers.cli import summary_of
from tests.helpers.drain import claim_count, install, journal, make_config, queue_depth, seed_ids
from tests.helpers.kills import TASK_POINTS, wait_for_no_drain
from tests.helpers.standalone import Cluster, standalone_cluster

LIB = str(Path(__file__).resolve().parents[3] / "lib")


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    yield from standalone_cluster(workers=2)


def write_conf(
    path: Path, cluster: Cluster, lake_root: Path | str, names: list[str], batch_size: int, **conf: str
) -> Path:
    spark_conf = {
        "spark.executor.memory": "768m",
        "spark.executor.cores": "1",
        "spark.cores.max": "2",
        # the executors' Python is the driver's (PYSPARK_PYTHON, set by queuelake to its own
        # interpreter); queuelake's source reaches it through the executors' environment
        "spark.executorEnv.PYTHONPATH": LIB,
        "spark.task.maxFailures": "12",
        # the executors' JVMs start as the tests' drivers do (tests/helpers/jvm_flags.py)
        "spark.executor.extraJavaOptions": jvm_flags.executor_options(),
        **conf,
    }
    path.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
                "lake": {"root": str(lake_root), "engine": "delta-rs"},
                "spark": {"master": cluster.master, "app_name": "queuelake-drain-executors-test", "conf": spark_conf},
                "drain": {"queues": names, "batch_size": batch_size, "workers_per_queue": 2, "on": "executors"},
            }
        )
    )
    return path


def task_kills(tmp_path: Path, at: str, count: int) -> tuple[Path, dict[str, str]]:
    """Kill tokens for ``count`` of the tasks' Python workers at ``at`` (``point:n``), and the Spark
    settings that hand them to the executors: each kill takes a token, so Spark's retries finish."""
    tokens = tmp_path / "kill-tokens"
    tokens.mkdir()
    for k in range(count):
        (tokens / str(k)).touch()
    return tokens, {
        "spark.executorEnv.QUEUELAKE_TEST_KILL_AT": at,
        "spark.executorEnv.QUEUELAKE_TEST_KILL_TOKENS": str(tokens),
    }


def drain_cmd(conf: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "queuelake", "drain", "-c", str(conf), *args]


def env_for(uri: str, **extra: str) -> dict[str, str]:
    env = {**os.environ, "QUEUELAKE_CONNECTION": uri, "PYTHONPATH": LIB, "PYSPARK_PYTHON": sys.executable, **extra}
    env.pop("QUEUELAKE_TEST_KILL_AT", None)
    return {**env, **extra}


def assert_every_row_once(
    cfg: Config, lake_root: Path, seeded: dict[str, set[str]], run_id: str, per_queue: int
) -> None:
    """Every seeded row in the journal once, under its own queue; no claim left, every queue empty;
    the run's ``runs`` rows: one per queue, each with ``per_queue`` dequeued and ok."""
    names = list(seeded)
    rows = journal(lake_root)
    ids = rows["id"].to_pylist()
    assert len(ids) == len(set(ids)) == per_queue * len(names)
    for name in names:
        got = {i for i, q in zip(ids, rows["queue"].to_pylist()) if q == f'"public"."{name}"'}
        assert got == seeded[name], name
    assert claim_count(cfg) == 0
    assert all(queue_depth(cfg, n) == 0 for n in names)
    runs = read_table(str(lake_root / "runs")).to_pylist()
    mine = [r for r in runs if r["run_id"] == run_id]
    assert sorted(r["queue"] for r in mine) == sorted(f'"public"."{n}"' for n in names)
    assert all(r["dequeued"] == per_queue and r["status"] == "ok" for r in mine), mine


@pytest.mark.slow
def test_many_queues_drained_by_spark_tasks(fresh_pg_uri: str, tmp_path: Path, cluster: Cluster) -> None:
    names = [f"Endpoint{i:02d}" for i in range(12)]
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, names)
    install(cfg)
    seeded = {name: seed_ids(cfg, name, 2_000, seed=100 + i) for i, name in enumerate(names)}
    conf = write_conf(tmp_path / "drain.yaml", cluster, lake_root, names, batch_size=250)
    proc = subprocess.run(drain_cmd(conf), env=env_for(fresh_pg_uri), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = summary_of(proc)
    assert summary["status"] == "ok" and summary["on"] == "executors", summary
    assert summary["dequeued"] == summary["landed"] == 24_000, summary
    for q in summary["queues"]:
        assert (q["status"], q["dequeued"], q["landed"], q["backlog_left"]) == ("ok", 2_000, 2_000, 0), q
        # 8 full batches; the last 250 rows may be split between the two workers' receives (one more batch):
        # which worker's statement comes first is the cluster's timing (a CI run saw 9)
        assert 8 <= q["batches"] <= 9 and q["workers"] == 2, q
    assert summary["journal_commits"] < 12 * 9, summary  # group commits of the tasks' batches
    assert summary["peak_connections"] <= 24, summary

    assert_every_row_once(cfg, lake_root, seeded, summary["run_id"], per_queue=2_000)
    # the tasks ran on the cluster's executors, in this venv's Python, with queuelake importable there
    logs = cluster.executor_logs()
    assert logs.count(f"a task, python {sys.executable}") >= 12, logs[-3000:]
    assert "a task, python" not in proc.stderr  # not in the driver
    # Python workers are reused from one queue's task to the next (two 1-core executors): a task that
    # left its input unread made Spark start a fresh worker, imports and all, for every queue
    mine = re.findall(r'drain "public"\."Endpoint\d\d": a task, python \S+, pid (\d+)', logs)
    assert len(mine) >= 12 and len(set(mine)) < len(mine), mine  # without reuse: a pid per queue


@pytest.mark.slow
def test_small_queues_share_spark_jobs_and_keep_every_guarantee(
    fresh_pg_uri: str, tmp_path: Path, cluster: Cluster
) -> None:
    """30 queues of one batch each: fewer Spark jobs (tasks) than queues, each task draining several
    queues one after another; two tasks' Python workers SIGKILLed after their 2nd claim's DB commit
    (the 2nd queue of a packed task: the 1st drained, the 2nd claimed and not in the journal), so
    Spark retries them. Every row once, every queue's runs row exact, no claim left. Then the driver
    SIGKILLed in its poller, and a normal run: every row once, no claim left."""
    names = [f"Small{i:02d}" for i in range(30)]
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, names)
    install(cfg)
    seeded = {name: seed_ids(cfg, name, 100, seed=700 + i) for i, name in enumerate(names)}
    tokens, kills = task_kills(tmp_path, "after_db_commit:2", 2)
    conf = write_conf(tmp_path / "drain.yaml", cluster, lake_root, names, batch_size=250, **kills)
    proc = subprocess.run(drain_cmd(conf), env=env_for(fresh_pg_uri), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = summary_of(proc)
    assert summary["status"] == "ok", summary
    assert len(list(tokens.iterdir())) < 2, "no task was killed"
    assert 1 < summary["spark_jobs"] < len(names), summary
    # the killed attempts' batches, committed by the driver, count in every figure (from their claims)
    assert summary["dequeued"] == summary["landed"] == 3_000, summary
    for q in summary["queues"]:
        assert (q["status"], q["dequeued"], q["landed"], q["backlog_left"], q["workers"]) == ("ok", 100, 100, 0, 1), q
    assert summary["peak_connections"] <= 24, summary

    assert_every_row_once(cfg, lake_root, seeded, summary["run_id"], per_queue=100)
    # the tasks' own word: some drained several queues (their attempts, retries included)
    logs = cluster.executor_logs()
    packed = [int(n) for n in re.findall(r"a task of (\d+) queue\(s\)", logs)]
    assert packed and max(packed) > 1, logs[-3000:]

    # the driver SIGKILLed in its poller after a group's Delta commit: the packed tasks, holding their
    # queues' locks, find the driver gone and close their connections; the next run resolves the rest
    for i, name in enumerate(names):
        seeded[name] |= seed_ids(cfg, name, 100, seed=800 + i)
    plain = write_conf(tmp_path / "plain.yaml", cluster, lake_root, names, batch_size=250)
    killed = subprocess.run(
        drain_cmd(plain),
        env=env_for(fresh_pg_uri, QUEUELAKE_TEST_KILL_AT="after_delta_commit:2"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    wait_for_no_drain(fresh_pg_uri)
    left = claim_count(cfg)
    final = subprocess.run(drain_cmd(plain), env=env_for(fresh_pg_uri), capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr[-4000:]
    summary = summary_of(final)
    assert summary["status"] == "ok" and summary["claims_resolved"] == left, summary
    rows = journal(lake_root)
    ids = rows["id"].to_pylist()
    assert len(ids) == len(set(ids)) == 6_000
    assert set(ids) == set().union(*seeded.values())
    assert claim_count(cfg) == 0
    assert all(queue_depth(cfg, n) == 0 for n in names)


def test_small_queues_are_planned_into_fewer_jobs() -> None:
    from queuelake.config import from_dict
    from queuelake.pipeline.drain.backlog import Backlog
    from queuelake.pipeline.drain.executors import PACK_BATCHES, plan_jobs
    from queuelake.transport.table_refs import queue_ref

    transport = from_dict({"transport": {"connection": "x"}}, env={}).transport
    refs = [queue_ref(f"q{i}", transport) for i in range(40)]
    depths: list[int | None] = [5_000, None, 1_001] + [100] * 30 + [1_000] * 7
    backlogs = {r.canonical: Backlog(d, 0) for r, d in zip(refs, depths)}
    todo = [(r, 1) for r in refs]
    jobs = plan_jobs(todo, backlogs, batch_size=1_000, max_messages=None, slots=2)
    # deeper than a batch, or unknown: alone, first; every queue planned once, in order
    assert [[r for r, _ in j] for j in jobs[:3]] == [[refs[0]], [refs[1]], [refs[2]]]
    assert [r for j in jobs for r, _ in j] == refs
    small = jobs[3:]
    assert len(small) >= 2 * 2 and all(len(j) > 1 for j in small), [len(j) for j in small]
    for job in small:
        assert sum(backlogs[r.canonical].depth or 0 for r, _ in job) <= PACK_BATCHES * 1_000
    # a message budget makes a deep queue small; 39 small ones spread over 2 jobs per slot or so:
    # at most ceil(39 / 16) = 3 a job
    capped = plan_jobs(todo, backlogs, batch_size=1_000, max_messages=500, slots=8)
    assert [r for r, _ in capped[0]] == [refs[1]]  # unknown depth: still alone
    assert [len(j) for j in capped[1:]] == [3] * 13 and sum(len(j) for j in capped) == 40


@pytest.mark.slow
def test_a_second_ctrl_c_cancels_the_tasks_and_keeps_the_counts(
    fresh_pg_uri: str, tmp_path: Path, cluster: Cluster
) -> None:
    """A second SIGINT while the tasks ran: the jobs were cancelled and the command ended with no counts and
    no ``runs`` row, though the driver had committed 34,000 rows (a review). Now the tasks are cancelled,
    the run counts what the driver committed and records it; the next run drains the rest, each row once."""
    names = ["Sales", "Billing"]
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, names)
    install(cfg)
    seeded = {name: seed_ids(cfg, name, 3_000, seed=700 + i) for i, name in enumerate(names)}
    held = tmp_path / "held"  # a task holds its third staged batch: the tasks surely run
    hold = {
        "spark.executorEnv.QUEUELAKE_TEST_HOLD_AT": "after_stage:60:3",
        "spark.executorEnv.QUEUELAKE_TEST_HOLD_MARK": str(held),
    }
    conf = write_conf(tmp_path / "held.yaml", cluster, lake_root, names, batch_size=150, **hold)
    driver = subprocess.Popen(
        drain_cmd(conf), env=env_for(fresh_pg_uri), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while not held.exists() and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held.exists(), driver.communicate()[1][-3000:]
    driver.send_signal(signal.SIGINT)
    time.sleep(0.5)
    driver.send_signal(signal.SIGINT)
    out, err = driver.communicate(timeout=300)
    summary = summary_of(subprocess.CompletedProcess([], driver.returncode, out, err))
    assert driver.returncode == 130 and summary["status"] == "interrupted", (summary, err[-3000:])
    landed = len(journal(lake_root)["id"].to_pylist())
    assert summary["landed"] == landed > 0 and summary["run_id"], summary
    runs = read_table(str(lake_root / "runs")).to_pylist()
    assert sum(r["dequeued"] for r in runs if r["run_id"] == summary["run_id"]) == landed, runs
    assert "its Spark tasks are cancelled" in err, err[-3000:]
    # the held task was cancelled (not let run to the end of its hold): its queue says so
    assert "stopped as asked: its Spark task was cancelled" in err, err[-3000:]
    assert any(q["status"] == "interrupted" for q in summary["queues"]), summary

    wait_for_no_drain(fresh_pg_uri)
    final = subprocess.run(
        drain_cmd(write_conf(tmp_path / "drain.yaml", cluster, lake_root, names, batch_size=150)),
        env=env_for(fresh_pg_uri),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert final.returncode == 0, final.stderr[-4000:]
    got = journal(lake_root)["id"].to_pylist()
    assert len(got) == len(set(got)) and set(got) == seeded["Sales"] | seeded["Billing"]
    assert claim_count(cfg) == 0


@pytest.mark.slow
def test_exactly_once_with_executors_and_the_driver_sigkilled(
    fresh_pg_uri: str, tmp_path: Path, cluster: Cluster
) -> None:
    names = [f"Endpoint{i}" for i in range(8)]
    lake_root = tmp_path / "lake"
    cfg = make_config(fresh_pg_uri, lake_root, names)
    install(cfg)
    seeded: set[str] = set()
    for i, name in enumerate(names):
        seeded |= seed_ids(cfg, name, 3_000, seed=500 + i)
    tokens = tmp_path / "kill-tokens"
    rng = random.Random(32)
    task_kills = driver_kills = claims_left = retried = 0
    base = env_for(fresh_pg_uri)

    # 1. the tasks' Python workers killed at each protocol step: Spark retries the task, a new drain
    for n, point in enumerate(TASK_POINTS):
        tokens.mkdir(exist_ok=True)
        for k in range(3):
            (tokens / f"{n}-{k}").touch()
        conf = write_conf(
            tmp_path / f"kill-{point}.yaml",
            cluster,
            lake_root,
            names,
            batch_size=150,
            **{
                "spark.executorEnv.QUEUELAKE_TEST_KILL_AT": f"{point}:{rng.randint(2, 3)}",
                "spark.executorEnv.QUEUELAKE_TEST_KILL_TOKENS": str(tokens),
            },
        )
        proc = subprocess.run(
            drain_cmd(conf, "--max-messages", "450"), env=base, capture_output=True, text=True, timeout=600
        )
        killed = 3 - len(list(tokens.iterdir()))
        task_kills += killed
        assert proc.returncode == 0, proc.stderr[-4000:]  # every killed task was retried and finished
        summary = summary_of(proc)
        assert summary["status"] == "ok", summary
        retried += summary["claims_resolved"]
        assert killed >= 1, f"no task was killed at {point}"
        assert claim_count(cfg) == 0

    # 2a. the driver killed from outside at a random instant while the tasks run; on a fast machine a
    # run may end before the instant drawn: then more rows and an earlier instant, up to 5 tries
    conf = write_conf(tmp_path / "drain.yaml", cluster, lake_root, names, batch_size=150)
    for attempt in range(5):
        for i, name in enumerate(names):  # more to drain, so that the outside kill lands mid-run
            seeded |= seed_ids(cfg, name, 1_500 * (attempt + 1), seed=900 + 10 * attempt + i)
        driver = subprocess.Popen(
            drain_cmd(conf),
            env=base,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert driver.stderr is not None
        for line in driver.stderr:
            if "on Spark executors" in line:
                break
        time.sleep(rng.uniform(0.5, 4.0) / (attempt + 1))
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)  # the driver's Python and its JVM
            driver.wait()
            driver_kills += 1
            break
        driver.wait()
    assert driver_kills == 1, "every run ended before the kill"
    wait_for_no_drain(fresh_pg_uri)
    claims_left += claim_count(cfg)

    # 2b. ... and inside its poller, after a group's Delta commit, its claims not cleared yet
    for i, name in enumerate(names):
        seeded |= seed_ids(cfg, name, 1_000, seed=1900 + i)
    proc = subprocess.run(
        drain_cmd(conf),
        env={**base, "QUEUELAKE_TEST_KILL_AT": "after_delta_commit:3"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    driver_kills += 1
    wait_for_no_drain(fresh_pg_uri)
    left = claim_count(cfg)
    assert left > 0, "the kill after the Delta commit left no claim"
    claims_left += left

    # 3. a normal run resolves everything
    final = subprocess.run(drain_cmd(conf), env=base, capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr[-4000:]
    summary = summary_of(final)
    assert summary["status"] == "ok", summary
    assert summary["claims_resolved"] == left, summary  # what the killed poller left, resolved first
    got = journal(lake_root)["id"].to_pylist()
    duplicates = len(got) - len(set(got))
    lost = len(seeded - set(got))
    print(
        f"task kills {task_kills}, driver kills {driver_kills}, rows {len(seeded)}, journal {len(got)}, "
        f"duplicates {duplicates}, lost {lost}, claims left by driver kills {claims_left}, "
        f"resolved by retries and runs {retried + summary['claims_resolved']}"
    )
    assert duplicates == 0
    assert set(got) == seeded, f"missing {lost}, unknown {len(set(got) - seeded)}"
    assert all(queue_depth(cfg, n) == 0 for n in names)
    assert claim_count(cfg) == 0
    assert task_kills >= len(TASK_POINTS)


def test_drain_on_is_driver_or_executors_and_tasks_fit_the_connection_budget() -> None:
    from queuelake.config import from_dict
    from queuelake.errors import ConfigError
    from queuelake.pipeline.drain.executors import queues_at_once, task_connections
    from queuelake.transport.database import QueueDatabase

    with pytest.raises(ConfigError, match="drain.on"):
        from_dict({"drain": {"on": "nowhere"}}, env={})
    assert from_dict({}, env={}).drain.on == "driver"
    for most in range(4, 40):
        cfg = from_dict(
            {"transport": {"connection": "x"}, "drain": {"on": "executors", "max_connections": most}}, env={}
        )
        for workers in (1, 2, 5):
            database = QueueDatabase(cfg.transport)
            at_once = queues_at_once(database, cfg.drain, [workers] * 300)
            fits = at_once * task_connections(database, cfg.drain, workers) + 1 <= most  # + the driver's poller
            assert at_once >= 1 and (fits or at_once == 1), (most, workers, at_once)


@pytest.mark.slow
def test_drain_on_executors_into_a_lake_on_object_storage(
    fresh_pg_uri: str, tmp_path: Path, cluster: Cluster, s3: str
) -> None:
    """The journal on S3 (a moto server): the tasks stage their files into its folder on the store
    with the lake's storage options (credentials from the driver's environment, never the executors'),
    the driver commits them. Two tasks' Python workers SIGKILLed after a claim's DB commit (their
    staged files named by a claim only): Spark retries them, and every row is in the journal once.
    The secret shows in no output, the driver's or the executors'."""
    from tests.helpers.s3 import BUCKET, KEY_ID, SECRET, assert_drained_once_into, no_aws, storage_options

    root = f"s3://{BUCKET}/executors-{os.getpid()}"
    names = [f"Store{i}" for i in range(4)]
    cfg = make_config(fresh_pg_uri, tmp_path / "unused", names)
    install(cfg)
    seeded = {name: seed_ids(cfg, name, 1_000, seed=900 + i) for i, name in enumerate(names)}
    tokens, kills = task_kills(tmp_path, "after_db_commit:2", 2)
    conf = write_conf(tmp_path / "drain.yaml", cluster, root, names, batch_size=250, **kills)
    data = json.loads(conf.read_text())
    data["lake"]["storage_options"] = storage_options(s3)
    conf.write_text(json.dumps(data))
    env = {
        **no_aws(env_for(fresh_pg_uri)),
        "QL_TEST_S3_KEY_ID": KEY_ID,
        "QL_TEST_S3_SECRET": SECRET,
    }
    proc = subprocess.run(drain_cmd(conf), env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = summary_of(proc)
    assert summary["status"] == "ok" and summary["on"] == "executors", summary
    assert len(list(tokens.iterdir())) < 2, "no task was killed"
    assert summary["dequeued"] == summary["landed"] == 4_000, json.dumps(summary)
    assert SECRET not in proc.stdout + proc.stderr
    assert SECRET not in cluster.executor_logs()
    assert_drained_once_into(root, s3, seeded)
    assert claim_count(cfg) == 0
    assert all(queue_depth(cfg, n) == 0 for n in names)
    assert not list(tmp_path.glob("**/_delta_log")), "nothing may land on the local disk"

"""A lake on S3 behind a store that throttles in bursts, as S3 does: every client retries.

Found by an independent check: with every request answered ``503 SlowDown`` for 2 s of every 6 s (and
2% at random besides), a drain failed on pyarrow's ``HeadObject`` and ``queuelake maintain`` exited 1;
a rerun landed everything. Here moto's S3 server (``tests.helpers.s3``) sits behind
``FaultyProxy`` (2 s bursts of every 6 s, 3% random 503s, 1% connection resets, seeded), and a drain
and a maintain must each finish in one run with every message landed exactly once: the retry defaults
of ``queuelake.lake.storage`` (``RETRY_DEFAULTS``) at work in pyarrow's S3 client and delta-rs.

The rows are checked straight on moto, past the proxy: the checks themselves must not need retries.
Without the defaults (the clients' own: pyarrow's 3 attempts) the drain failed on a PutObject
``SLOW_DOWN`` with 2,800 of the 3,000 messages landed. ``test_spark_s3a_rides_out_throttling`` does
the same for the JVM engine's S3A (about 4 minutes on 2 cores: Spark's jobs meet many bursts), when
``QUEUELAKE_TEST_S3A_THROTTLING=1`` asks for it: CI's time budget has no room for it.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from queuelake.commands.demo import traffic
from queuelake.lake import storage

from tests.helpers.faulty_proxy import FaultyProxy, resets_of, serve_in_a_process
from tests.helpers.s3 import (
    BUCKET,
    KEY_ID,
    SECRET,
    assert_drained_once_into,
    install_queues,
    job_config,
    require_delta_jars,
    require_s3_jars,
    resolved_options,
    s3_cli,
    s3_env,
    seed_queue,
)

pytest.importorskip("moto.server", reason="moto[server] is in the dev extra: pip install -e '.[dev]'")

MESSAGES = 3000


@pytest.fixture
def throttling(s3: str) -> Iterator[FaultyProxy]:
    """The store behind bursts of 503 SlowDown (2 s of every 4 s), 3% random 503s, 1% resets."""
    with FaultyProxy(s3, burst=2.0, period=4.0, error_rate=0.03, reset_rate=0.01, seed=20261) as proxy:
        yield proxy


@pytest.mark.slow
def test_drain_and_maintain_ride_out_throttling(
    s3: str, throttling: FaultyProxy, fresh_pg_uri: str, tmp_path: Path
) -> None:
    root = f"s3://{BUCKET}/throttled-{uuid.uuid4().hex[:8]}"
    install_queues(fresh_pg_uri, ["Sales"])
    seed_queue(fresh_pg_uri, "Sales", MESSAGES, seed=61)
    seeded = {"Sales": {m.id for m in traffic.order_events(MESSAGES, seed=61)}}
    conf = tmp_path / "job.yaml"
    config = job_config(root, throttling.url, "delta-rs", ["Sales"], batch_size=100)
    config["spark"]["conf"] = {"spark.sql.shuffle.partitions": "1"}
    conf.write_text(json.dumps(config))
    env = s3_env(fresh_pg_uri)

    started, before = time.monotonic(), throttling.throttled
    drained, out = s3_cli(["drain", "-c", str(conf)], env, tmp_path)
    took = time.monotonic() - started
    assert drained["status"] == "ok", out[-3000:]
    assert drained["landed"] == MESSAGES, drained
    assert SECRET not in out
    print(f"drain: {took:.1f} s, {throttling.requests} requests, {throttling.throttled - before} throttled")
    print(f"throttled by client: {dict(throttling.throttled_by)}")
    assert throttling.throttled > before and took > throttling.period, "no burst met the drain"
    assert_drained_once_into(root, s3, seeded)

    started, before = time.monotonic(), throttling.throttled
    maintained, out = s3_cli(["maintain", "-c", str(conf)], env, tmp_path)
    took = time.monotonic() - started
    assert maintained["status"] == "ok", out[-3000:]
    assert "messages" in maintained["tables"], maintained
    assert SECRET not in out
    print(f"maintain: {took:.1f} s, {throttling.throttled - before} throttled, {throttling.resets} resets in all")
    print(f"throttled by client: {dict(throttling.throttled_by)}")
    assert throttling.throttled > before, "no 503 met the maintain"
    assert_drained_once_into(root, s3, seeded)  # compaction keeps every row, once


def test_pyarrow_rides_out_a_burst_and_without_retries_does_not(s3: str) -> None:
    """One HEAD sent at the start of a 1.5 s burst: with the defaults pyarrow's client retries past
    it; with ``max_retries: 0`` it fails at once (the proxy is what makes the difference). The burst
    starts with the first request, however long the client took to set up (a loaded machine)."""
    with FaultyProxy(s3, burst=1.5, period=600.0, error_rate=0.0, from_first_request=True) as proxy:
        fs, base = storage.filesystem(f"s3://{BUCKET}/x", resolved_options(proxy.url))
        assert fs.get_file_info(f"{BUCKET}/absent").type.name == "NotFound"
        assert proxy.throttled >= 2
    with FaultyProxy(s3, burst=1.5, period=600.0, error_rate=0.0, from_first_request=True) as proxy:
        fs, base = storage.filesystem(f"s3://{BUCKET}/x", {**resolved_options(proxy.url), "max_retries": "0"})
        with pytest.raises(OSError, match="503"):
            fs.get_file_info(f"{BUCKET}/absent")
        assert proxy.requests == 1


def test_a_throttled_small_read_is_read_again(s3: str) -> None:
    """A throttled ranged read shorter than the 503 SlowDown body (a small column chunk): the S3 client
    reports it as INTERNAL_FAILURE "Failed to flush response stream", which its own retries skip (a CI
    run's ``maintain`` failed so, building the id index); the lake's readers read it again."""
    import pyarrow.parquet as pq
    from queuelake.lake import round_files

    uri = f"s3://{BUCKET}/small-read-{uuid.uuid4().hex[:8]}.parquet"
    rows = pa.table({"body": pa.array([b"x" * 1000] * 200), "tiny": pa.array([1] * 200, pa.int8())})
    fs, path = storage.filesystem(uri, resolved_options(s3))
    with fs.open_output_stream(path) as out:
        pq.write_table(rows, out)
    with FaultyProxy(s3, burst=0.0, period=600.0, error_rate=0.0, small_reads=1) as proxy:
        fs, path = storage.filesystem(uri, resolved_options(proxy.url))
        with pytest.raises(OSError, match=storage.TRANSIENT_READ):  # pyarrow's client alone
            pq.ParquetFile(path, filesystem=fs).read(columns=["tiny"])
        assert proxy.small_reads == 0
        proxy.small_reads = 1
        storage.register(uri.rsplit("/", 1)[0], resolved_options(proxy.url))
        read = round_files.open_file(uri).read(columns=["tiny"])
        assert proxy.small_reads == 0 and proxy.throttled == 2, "the throttle did not meet the reader"
    assert read.column("tiny").to_pylist() == [1] * 200


def test_a_throttled_small_read_mid_stream_resumes_where_it_stopped(s3: str) -> None:
    """The same throttled small read in the middle of a stream of batches (the id index's rewrite reads
    the index so: a CI run's ``maintain`` failed there): the stream is opened again and resumes after
    the last batch it gave, so every row comes once and in order."""
    import pyarrow.parquet as pq
    from queuelake.lake import round_files

    uri = f"s3://{BUCKET}/stream-read-{uuid.uuid4().hex[:8]}.parquet"
    bodies = [os.urandom(1000) for _ in range(200)]  # incompressible: the footer's read holds no chunk
    rows = pa.table({"body": pa.array(bodies), "seq": pa.array(range(200), pa.int16())})
    fs, path = storage.filesystem(uri, resolved_options(s3))
    with fs.open_output_stream(path) as out:  # row groups whose seq chunk is shorter than the 503's body
        pq.write_table(rows, out, row_group_size=20, use_dictionary=False, write_statistics=False)
    with FaultyProxy(s3, burst=0.0, period=600.0, error_rate=0.0) as proxy:
        storage.register(uri.rsplit("/", 1)[0], resolved_options(proxy.url))
        seqs: list[int] = []
        for batch in round_files.open_file(uri).iter_batches(columns=["seq"], batch_size=20):
            seqs += batch.column("seq").to_pylist()
            if len(seqs) == 100:
                proxy.small_reads = 1  # the sixth row group's chunk
        assert proxy.small_reads == 0 and proxy.throttled == 1, "the throttle did not meet the stream"
    assert seqs == list(range(200))


def test_the_delta_logs_small_files_are_read_again_when_throttled(s3: str) -> None:
    """The drain's read of ``_last_checkpoint`` (smaller than the 503's body) and the increments' read of
    a commit went to pyarrow's client alone: one throttled GET failed a scheduled ``run`` at its drain
    (a review). Both go through the lake's read retry."""
    import deltalake
    from queuelake.lake import increments
    from queuelake.lake.delta_rs.append_log import AppendLog

    uri = f"s3://{BUCKET}/small-log-{uuid.uuid4().hex[:8]}"
    direct = storage.lake_options(uri, resolved_options(s3))
    deltalake.write_deltalake(uri, pa.table({"x": [1]}), storage_options=direct)
    fs, path = storage.filesystem(uri, resolved_options(s3))
    with FaultyProxy(s3, burst=0.0, period=600.0, error_rate=0.0) as proxy:
        options = resolved_options(proxy.url)
        log = AppendLog(uri, "small_log", "delta-rs", storage.lake_options(uri, options))
        with fs.open_output_stream(f"{path}/_delta_log/_last_checkpoint") as out:
            out.write(b'{"version":0,"size":1}')
        proxy.small_reads = 1
        assert log._read_log_file("_last_checkpoint") == b'{"version":0,"size":1}'
        assert proxy.small_reads == 0 and proxy.throttled == 1, "the throttle did not meet the reader"
        with fs.open_output_stream(f"{path}/_delta_log/00000000000000000001.json") as out:
            out.write(b'{"commitInfo":{}}\n')
        proxy.small_reads = 1
        commits = increments._commits(uri, 0, 1, options)
        assert [c.version for c in commits] == [1] and proxy.small_reads == 0 and proxy.throttled == 2


def test_a_delta_log_load_throttled_past_deltalakes_retries_is_loaded_again(s3: str) -> None:
    """deltalake's retries wait 0.3 s growing, with no jitter: behind bursts longer than they last (3.5 s
    of every 6 s) its load of a table's log gave up, and the loads outside the lake's own ``_load`` (the
    increments' snapshot, ``read_table``, the commits' reload) had no retry of their own (a review).
    Here deltalake retries once (``max_retries: 1``) into a 2.5 s burst: each load is begun again."""
    import deltalake
    from queuelake.lake import increments, reading
    from queuelake.lake.delta_rs.engine import DeltaRsEngine

    uri = f"s3://{BUCKET}/log-load-{uuid.uuid4().hex[:8]}"
    deltalake.write_deltalake(
        uri, pa.table({"x": [1, 2]}), storage_options=storage.lake_options(uri, resolved_options(s3))
    )
    for load in (
        lambda options: increments.snapshot_files(uri, 0, options),
        lambda options: reading.read_table(uri).num_rows,
        lambda options: storage.delta_table(uri, None, options).version() == 0,
        # whether a table is there at all (a command's first question of every table it writes)
        lambda options: DeltaRsEngine(f"s3://{BUCKET}", storage_options=options).exists(uri.rsplit("/", 1)[1]),
    ):
        with FaultyProxy(s3, burst=2.5, period=600.0, error_rate=0.0, from_first_request=True) as proxy:
            options = storage.lake_options(uri, {**resolved_options(proxy.url), "max_retries": "1"})
            storage.register(uri, options)  # what read_table finds for the table's root
            assert load(options), "nothing loaded"
            assert proxy.throttled >= 2, "the burst did not meet the load"


@pytest.mark.parametrize("path", ["driver", "executors"])
def test_a_commit_whose_reply_was_lost_is_its_writes_own(s3: str, path: str, spark) -> None:  # type: ignore[no-untyped-def]
    """The store takes a commit's PUT and the reply is lost (a reset after the store acted): the commit
    landed, and the write must know it as its own. The data source's commit failed on it, and Spark's
    abort deleted the files the landed commit names: the table was broken for good (a review). Both
    write paths: the driver's append, and Spark tasks' files committed by the data source."""
    from queuelake.lake.delta_rs.engine import DeltaRsEngine

    root = f"s3://{BUCKET}/lost-reply-{uuid.uuid4().hex[:8]}"
    rows = pa.table({"n": pa.array(range(50), pa.int64())})
    DeltaRsEngine(root, storage_options=resolved_options(s3)).create_table("t", rows.schema)
    proxy, url = serve_in_a_process(s3, r"^PUT .*/t/_delta_log/0+1\.json")
    try:
        lake = DeltaRsEngine(root, spark=spark, storage_options=resolved_options(url))
        if path == "driver":
            assert lake.append("t", rows, "app", 1) is True
        else:
            assert lake.append_dataframe("t", spark.createDataFrame(rows.to_pandas()), "app", 1) is True
        assert lake.append("t", rows, "app", 1) is False  # landed once: the same version again adds nothing
    finally:
        assert resets_of(proxy) == 1, "the commit's reply was not dropped"
    lake = DeltaRsEngine(root, storage_options=resolved_options(s3))
    assert sorted(lake.read_arrow("t").column("n").to_pylist()) == list(range(50))


@pytest.mark.parametrize("step", ["compaction", "vacuum"])
def test_a_maintain_whose_compaction_or_vacuum_lost_its_reply_is_done_again(s3: str, step: str) -> None:
    """deltalake retries neither a compaction nor a vacuum as a whole: a reset under either failed a
    ``maintain`` (a review, behind bursts and resets). Here the compaction's commit lands and its reply
    is lost, or the vacuum's removal of a compacted file is: maintain does the step again from a fresh
    load and ends with every row once in one file."""
    from queuelake.lake.delta_rs.engine import DeltaRsEngine

    root = f"s3://{BUCKET}/maintain-{uuid.uuid4().hex[:8]}"
    lake = DeltaRsEngine(root, storage_options=resolved_options(s3))
    rows = pa.table({"n": pa.array(range(10), pa.int64())})
    lake.create_table("t", rows.schema)
    for version in range(1, 5):
        lake.append("t", rows, "app", version)
    newest = storage.delta_table(lake.path("t"), None, lake.storage_options).version()
    # the compaction's commit is the log's next version; the vacuum deletes the compacted files (all
    # but the one the compaction wrote): its first DELETE or batch delete (POST ?delete)
    said = rf"^PUT .*/t/_delta_log/0+{newest + 1}\.json" if step == "compaction" else r"^(DELETE .*/t/|POST .*\?delete)"
    proxy, url = serve_in_a_process(s3, said)
    try:
        through = DeltaRsEngine(root, storage_options=resolved_options(url))
        figures = through.maintain("t", retention_hours=0)
    finally:
        assert resets_of(proxy) == 1, "no reply was dropped"
    assert figures["files_after"] == 1, figures
    after = DeltaRsEngine(root, storage_options=resolved_options(s3))
    assert sorted(after.read_arrow("t").column("n").to_pylist()) == sorted(list(range(10)) * 4)


@pytest.mark.parametrize("by_keys", [False, True], ids=["predicate", "keys"])
def test_a_delete_whose_reply_was_lost_is_taken_as_done(s3: str, by_keys: bool) -> None:
    """The store took a delete's commit and the reply was reset: an ``erase`` failed though its rows were
    gone (a review). The log tells by the delete's write id: the delete is done, with its commit's figures;
    a delete by keys (a MERGE: retention's and erase's typed rows) alike."""
    import pyarrow.dataset as ds
    from queuelake.lake.deletes import RowFilter
    from queuelake.lake.delta_rs.engine import DeltaRsEngine

    root = f"s3://{BUCKET}/delete-{uuid.uuid4().hex[:8]}"
    lake = DeltaRsEngine(root, storage_options=resolved_options(s3))
    rows = pa.table({"n": pa.array(range(50), pa.int64())})
    lake.create_table("t", rows.schema)
    lake.append("t", rows, "app", 1)
    newest = storage.delta_table(lake.path("t"), None, lake.storage_options).version()
    proxy, url = serve_in_a_process(s3, rf"^PUT .*/t/_delta_log/0+{newest + 1}\.json")
    try:
        through = DeltaRsEngine(root, storage_options=resolved_options(url))
        keys = pa.table({"n": pa.array(range(10), pa.int64())}) if by_keys else None
        deleted = through.delete_rows("t", RowFilter('"n" < 10', ds.field("n") < 10, ("n",), keys=keys))
    finally:
        assert resets_of(proxy) == 1, "the delete's reply was not dropped"
    assert (deleted.rows, deleted.version, deleted.read_version) == (10, newest + 1, newest), deleted
    after = DeltaRsEngine(root, storage_options=resolved_options(s3))
    assert sorted(after.read_arrow("t").column("n").to_pylist()) == list(range(10, 50))


def test_a_store_that_answers_late_is_waited_for(s3: str) -> None:
    """A slow store: object_store gave up on a commit's reply after 30 s, and pyarrow's client on a
    staged file's PUT after ~9 s without a byte (a review's drain failed so). With the clients' own
    retries off, each must wait for the one late reply (``timeout``, 60 s by default)."""
    from deltalake import write_deltalake
    from queuelake.lake.delta_rs.engine import DeltaRsEngine

    root = f"s3://{BUCKET}/late-{uuid.uuid4().hex[:8]}"
    rows = pa.table({"n": pa.array(range(20), pa.int64())})
    DeltaRsEngine(root, storage_options=resolved_options(s3)).create_table("t", rows.schema)
    proxy, url = serve_in_a_process(s3, slow_reply=(r"^PUT .*/t/_delta_log/0+1\.json", 35.0))
    try:
        options = storage.lake_options(root, {**resolved_options(url), "max_retries": "0"})
        write_deltalake(f"{root}/t", rows, mode="append", storage_options=options)
    finally:
        assert resets_of(proxy) == 1, "the commit's reply was not held"
    proxy, url = serve_in_a_process(s3, slow_reply=(r"^PUT .*/staged/late\.bin", 12.0))
    try:
        fs, base = storage.filesystem(root, storage.lake_options(root, {**resolved_options(url), "max_retries": "0"}))
        with fs.open_output_stream(f"{base}/staged/late.bin") as out:
            out.write(b"x" * 1000)
    finally:
        assert resets_of(proxy) == 1, "the staged file's reply was not held"
    assert sorted(DeltaRsEngine(root, storage_options=resolved_options(s3)).read_arrow("t")["n"].to_pylist()) == list(
        range(20)
    )


def test_a_reply_held_past_the_timeout_is_asked_again(s3: str) -> None:
    """A request that timed out is tried again while ``retry_timeout`` has not passed: with both at 60 s
    (round 54's defaults) one stalled reply failed a drain that one retry would have landed (a review).
    Here at a scale of seconds: a log read held 8 s, a 3 s timeout; asked again, it loads, where a
    ``retry_timeout`` no longer than the timeout gives up."""
    from queuelake.lake.delta_rs.engine import DeltaRsEngine

    root = f"s3://{BUCKET}/held-{uuid.uuid4().hex[:8]}"
    DeltaRsEngine(root, storage_options=resolved_options(s3)).create_table("t", pa.schema([("n", pa.int64())]))
    held = r"^GET .*/t/_delta_log/0+\.json"
    for retry_timeout, loads in (("3s", False), (None, True)):
        proxy, url = serve_in_a_process(s3, slow_reply=(held, 8.0))
        try:
            asked = {**resolved_options(url), "timeout": "3s", "max_retries": "2"}
            if retry_timeout:
                asked["retry_timeout"] = retry_timeout
            options = storage.lake_options(root, asked)
            if loads:
                assert storage.delta_table(f"{root}/t", None, options).version() == 0
            else:
                with pytest.raises(Exception, match="(?i)timed out"):
                    storage.read_retrying(lambda o=options: storage.delta_table(f"{root}/t", None, o), "t")
        finally:
            assert resets_of(proxy) == 1, "the log's reply was not held"


def test_retry_defaults_and_overrides() -> None:
    opts = storage.lake_options(
        "s3://b/lake", {**resolved_options("http://x:1"), "MAX_RETRIES": "4", "retry_timeout": "9s"}
    )
    # deltalake reads object_store's retry keys in lower case only; the config's win over the defaults
    assert opts["max_retries"] == "4" and opts["retry_timeout"] == "9s" and "MAX_RETRIES" not in opts
    assert opts["backoff_config.max_backoff"] == storage.RETRY_DEFAULTS["backoff_config.max_backoff"]
    assert storage.lake_options("/tmp/lake", {}) == {}  # a local lake: nothing to retry
    conf = storage.s3a_conf(opts)
    assert conf["fs.s3a.retry.limit"] == conf["fs.s3a.retry.throttle.limit"] == "4"
    assert conf["fs.s3a.retry.interval"] == conf["fs.s3a.retry.throttle.interval"] == "300ms"
    assert conf["fs.s3a.attempts.maximum"] == "4"
    assert storage.s3a_conf(storage.lake_options("s3://b/lake", {}))["fs.s3a.attempts.maximum"] == "5"
    assert sorted(storage.secret_values(opts)) == sorted([KEY_ID, SECRET])  # retry settings are not secrets
    with pytest.raises(Exception, match="max_retries"):
        storage.filesystem("s3://b/lake", {**opts, "max_retries": "many"})


@pytest.mark.slow
@pytest.mark.deltaspark
@pytest.mark.skipif(
    os.environ.get("QUEUELAKE_TEST_S3A_THROTTLING", "") in ("", "0"),
    reason="about 4 minutes on 2 cores, past CI's budget: QUEUELAKE_TEST_S3A_THROTTLING=1 runs it",
)
def test_spark_s3a_rides_out_throttling(s3: str, fresh_pg_uri: str, tmp_path: Path) -> None:
    """The JVM engine's S3A (hadoop-aws): ``run`` writes the outbound table with Delta Spark and
    ``maintain`` compacts it, through the same faults (fewer messages: Spark's part is what is new)."""
    require_s3_jars()
    require_delta_jars()
    root = f"s3://{BUCKET}/throttled-spark-{uuid.uuid4().hex[:8]}"
    install_queues(fresh_pg_uri, ["Sales"], monitoring=True)
    seed_queue(fresh_pg_uri, "Sales", 300, seed=62)
    conf = tmp_path / "job.yaml"
    with FaultyProxy(s3, burst=2.0, period=4.0, error_rate=0.03, reset_rate=0.01, seed=20262) as proxy:
        config = job_config(root, proxy.url, "delta-spark", ["Sales"], batch_size=100)
        config["publish"]["outputs"] = []
        conf.write_text(json.dumps(config))
        env = s3_env(fresh_pg_uri, delta_jars=True)
        for command in ("run", "maintain"):
            summary, out = s3_cli([command, "-c", str(conf)], env, tmp_path)
            assert summary["status"] == "ok", out[-3000:]
            assert SECRET not in out
            print(f"{command}: throttled by client {dict(proxy.throttled_by)}")
        assert proxy.throttled_by["s3a"] > 0, dict(proxy.throttled_by)
    assert_drained_once_into(root, s3, {"Sales": {m.id for m in traffic.order_events(300, seed=62)}})

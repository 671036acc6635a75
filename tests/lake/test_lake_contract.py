"""The LakeEngine contract, on real Delta tables in tmp_path with one real local Spark session.

Parametrized over engines: delta-rs always; delta-spark where the Delta JVM jars are on the classpath
(``bash jvm/fetch-jars.sh`` puts them in jvm/jars, tests/conftest.py adds them to the session; nothing
is downloaded here), else those skip saying why. Tests about delta-rs internals (marks written by hand,
the Python data source, orphan files) are delta-rs only. Cross-engine tests: a table written by one
engine reads identically through the other.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from queuelake.errors import LakeError
from queuelake.lake.arrow_types import UTC_TIMESTAMP
from queuelake.lake.delta_rs.engine import DeltaRsEngine
from queuelake.lake.files import leaf_paths
from queuelake.lake.marks import description_for

from tests.helpers.jvm import require_delta_jvm

REPO = Path(__file__).resolve().parents[2]
BASE = datetime(2024, 5, 1, 13, 45, 10, 123456, tzinfo=timezone.utc)
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("queue", pa.string()),
        ("name", pa.string()),
        ("flag", pa.bool_()),
        ("score", pa.float64()),
        ("body", pa.binary()),
        ("headers", pa.map_(pa.string(), pa.string())),
        ("types", pa.list_(pa.string())),
        ("sent", UTC_TIMESTAMP),
    ]
)


def sample(n: int = 40, start: int = 0, queues: tuple[str | None, ...] = ("Sales",)) -> pa.Table:
    """Message-like rows with every type we store, nulls sprinkled in every column."""
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "queue": [queues[i % len(queues)] for i in ids],
            "name": [None if i % 7 == 0 else f"name-{i}-é" for i in ids],
            "flag": [None if i % 5 == 0 else i % 2 == 0 for i in ids],
            "score": [None if i % 3 == 0 else i * 0.25 for i in ids],
            "body": [None if i % 4 == 0 else bytes([i % 256]) * 1024 for i in ids],
            "headers": [None if i % 6 == 0 else [("NServiceBus.MessageId", str(i)), ("empty", None)] for i in ids],
            "types": [None if i % 8 == 0 else [f"Type{i}", None] for i in ids],
            "sent": [None if i % 9 == 0 else BASE + timedelta(seconds=i, microseconds=i) for i in ids],
        },
        schema=SCHEMA,
    )


def same_rows(actual: pa.Table, expected: pa.Table) -> None:
    """Equal as data: same rows (by id), same values, every column of ``expected`` present."""
    actual = actual.select(expected.column_names).cast(expected.schema).sort_by("id")
    assert actual.to_pylist() == expected.sort_by("id").to_pylist()


def spark_rows(df) -> pa.Table:
    return df.toArrow()


ENGINES = ["delta-rs", pytest.param("delta-spark", marks=pytest.mark.deltaspark)]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, spark, tmp_path: Path):
    root = str(tmp_path / "lake")
    if request.param == "delta-spark":
        require_delta_jvm(spark)
        from queuelake.lake.delta_spark.engine import DeltaSparkEngine

        return DeltaSparkEngine(root, spark)
    return DeltaRsEngine(root, spark)


@pytest.fixture
def rs(spark, tmp_path: Path) -> DeltaRsEngine:
    return DeltaRsEngine(str(tmp_path / "lake"), spark)


def protocol(engine, table: str):
    from deltalake import DeltaTable

    p = DeltaTable(engine.path(table)).protocol()
    return p.min_reader_version, p.min_writer_version, p.reader_features, p.writer_features


# ------------------------------------------------------------------ round trips


def test_arrow_append_reads_back_equal(engine) -> None:
    data = sample(60)
    assert engine.last_version("messages", "drain-1") is None
    assert engine.table_version("messages") is None
    assert engine.append("messages", data, "drain-1", 1) is True
    assert engine.last_version("messages", "drain-1") == 1
    same_rows(engine.read_arrow("messages"), data)
    same_rows(spark_rows(engine.read("messages")), data)
    assert engine.read_arrow("messages", columns=["id", "sent"]).column_names == ["id", "sent"]
    assert protocol(engine, "messages") == (1, 2, None, None)


def test_dataframe_append_reads_back_equal(engine, spark) -> None:
    data = sample(60)
    assert engine.append_dataframe("out", spark.createDataFrame(data), "transform", 7) is True
    assert engine.last_version("out", "transform") == 7
    same_rows(engine.read_arrow("out"), data)
    same_rows(spark_rows(engine.read("out")), data)
    assert protocol(engine, "out") == (1, 2, None, None)


def test_partitioned_table_both_paths(engine, spark) -> None:
    odd = ("Sales@[dbo]@[my.c@ta]]og]", "a b/c%d=é", None)
    engine.create_table("parts", SCHEMA, partition_by=["queue"])
    engine.create_table("parts", SCHEMA, partition_by=["queue"])  # idempotent
    first, second = sample(30, 0, odd), sample(30, 100, odd)
    assert engine.append("parts", first, "a", 1)
    assert engine.append_dataframe("parts", spark.createDataFrame(second), "b", 1)
    both = pa.concat_tables([first, second])
    same_rows(engine.read_arrow("parts"), both)
    same_rows(spark_rows(engine.read("parts")), both)
    with pytest.raises(LakeError, match="partitioned by"):
        engine.create_table("parts", SCHEMA, partition_by=["name"])


def test_empty_table_and_empty_batches(engine, spark) -> None:
    engine.create_table("empty", SCHEMA)
    assert engine.read("empty").count() == 0
    assert engine.read_arrow("empty").num_rows == 0
    assert engine.append("empty", SCHEMA.empty_table(), "drain", 1) is True
    assert engine.append_dataframe("empty", spark.createDataFrame(SCHEMA.empty_table()), "xform", 3) is True
    assert (engine.last_version("empty", "drain"), engine.last_version("empty", "xform")) == (1, 3)
    assert engine.read("empty").count() == 0


def test_naive_timestamps_are_stored_as_utc(engine, spark) -> None:
    naive = pa.table({"id": [1], "at": pa.array([datetime(2024, 1, 2, 3, 4, 5, 6000)], pa.timestamp("ms"))})
    engine.append("times", naive, "a", 1)
    ntz = spark.sql("select 2L as id, timestamp_ntz'2024-01-02 03:04:05' as at")
    engine.append_dataframe("times", ntz, "b", 1)
    got = engine.read_arrow("times").sort_by("id")
    assert got.schema.field("at").type == UTC_TIMESTAMP
    assert got.column("at").to_pylist() == [
        datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=timezone.utc),
        datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
    ]
    assert protocol(engine, "times") == (1, 2, None, None)


def test_far_times_either_engine_wrote_are_read_by_deltalake(engine, spark) -> None:
    """.NET's ``DateTime.MinValue`` (year 1) and ``MaxValue`` in a table delta-spark wrote: Spark's default
    INT96 files hold nanoseconds, which deltalake (and polars, DuckDB) could not read back for year 1: the
    whole table was unreadable to every engine but Spark (a review). Written as microseconds now."""
    from deltalake import DeltaTable

    far = [datetime(1, 1, 1, tzinfo=timezone.utc), datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)]
    rows = pa.table({"id": [1, 2], "at": pa.array(far, UTC_TIMESTAMP)})
    engine.append("far", rows, "a", 1)
    engine.append_dataframe("far", spark.createDataFrame(rows).selectExpr("id + 2 AS id", "at"), "b", 1)
    got = DeltaTable(engine.path("far")).to_pyarrow_table().sort_by("id")
    assert got.column("at").to_pylist() == far + far


def test_unknown_columns_are_refused(engine) -> None:
    engine.append("strict", sample(3), "a", 1)
    with pytest.raises(LakeError, match="surprise"):
        engine.append("strict", sample(3).append_column("surprise", pa.array([1, 2, 3])), "a", 2)
    assert engine.last_version("strict", "a") == 1


# ------------------------------------------------------------------ idempotency and versions


def test_repeated_app_version_lands_once(engine, spark) -> None:
    assert engine.append("msgs", sample(10), "drain-Sales-0", 5) is True
    assert engine.append("msgs", sample(10), "drain-Sales-0", 5) is False
    assert engine.append("msgs", sample(10), "drain-Sales-0", 4) is False
    assert engine.append_dataframe("msgs", spark.createDataFrame(sample(10)), "drain-Sales-0", 5) is False
    assert engine.append("msgs", sample(10, 10), "drain-Sales-1", 5) is True  # another app id
    assert engine.read_arrow("msgs").num_rows == 20
    assert engine.last_version("msgs", "drain-Sales-0") == 5
    assert engine.last_version("msgs", "nobody") is None
    assert engine.last_version("missing", "drain-Sales-0") is None


def test_read_an_older_version(engine) -> None:
    engine.append("hist", sample(10), "a", 1)
    v1 = engine.table_version("hist")
    engine.append("hist", sample(15, 10), "a", 2)
    assert engine.table_version("hist") == v1 + 1
    assert engine.read("hist", version=v1).count() == 10
    same_rows(engine.read_arrow("hist", version=v1), sample(10))
    assert engine.read("hist").count() == 25


def test_concurrent_appends_from_threads_all_land(engine) -> None:
    engine.create_table("busy", SCHEMA)
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        try:
            for v in range(1, 7):
                assert engine.append("busy", sample(50, (w * 100 + v) * 50), f"drain-{w}", v)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    got = engine.read_arrow("busy", columns=["id"])
    assert got.num_rows == 2 * 6 * 50 and len(set(got.column("id").to_pylist())) == 600
    assert [engine.last_version("busy", f"drain-{w}") for w in range(2)] == [6, 6]


def test_same_app_version_from_racing_threads_lands_once(engine) -> None:
    engine.create_table("race", SCHEMA)
    results: list[bool] = []
    barrier = threading.Barrier(4)

    def worker() -> None:
        barrier.wait()
        results.append(engine.append("race", sample(20), "drain-0", 1))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, False, False, True]
    assert engine.read_arrow("race").num_rows == 20


def test_dataframe_and_arrow_appends_run_concurrently(engine, spark) -> None:
    engine.create_table("mixed", SCHEMA)
    df = spark.createDataFrame(sample(500, 10_000)).repartition(3)
    errors: list[BaseException] = []

    def arrow_writer() -> None:
        try:
            for v in range(1, 9):
                engine.append("mixed", sample(10, v * 10), "drain", v)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    thread = threading.Thread(target=arrow_writer)
    thread.start()
    assert engine.append_dataframe("mixed", df, "xform", 1)
    thread.join()
    assert not errors
    assert engine.read_arrow("mixed").num_rows == 580


def test_create_table_race_and_idempotency(engine) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(3)

    def creator() -> None:
        try:
            barrier.wait()
            engine.create_table("runs", SCHEMA)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=creator) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert engine.exists("runs") and engine.table_version("runs") == 0


# ------------------------------------------------------------------ schema evolution, maintenance


def test_added_column_reads_null_in_old_rows(engine, spark) -> None:
    engine.append("evolve", sample(5), "a", 1)
    engine.add_columns("evolve", [pa.field("error", pa.string()), pa.field("expires", pa.timestamp("us"))])
    engine.add_columns("evolve", [pa.field("error", pa.string())])  # idempotent
    newer = sample(5, 5).append_column("error", pa.array(["boom"] * 5))
    engine.append("evolve", newer, "a", 2)
    got = engine.read_arrow("evolve").sort_by("id")
    assert got.schema.field("expires").type == UTC_TIMESTAMP
    assert got.column("error").to_pylist() == [None] * 5 + ["boom"] * 5
    assert got.column("expires").to_pylist() == [None] * 10
    via_spark = engine.read("evolve").orderBy("id").select("error").toArrow()
    assert via_spark.column("error").to_pylist() == [None] * 5 + ["boom"] * 5
    assert protocol(engine, "evolve") == (1, 2, None, None)


def test_maintain_compacts_and_keeps_rows(engine) -> None:
    for v in range(1, 6):
        engine.append("small", sample(10, v * 10), "a", v)
    figures = engine.maintain("small", retention_hours=0)
    assert figures["files_before"] == 5 and figures["files_after"] == 1
    # the five compacted files are gone from storage, on either engine (delta-spark's said "?": a review)
    assert figures["files_vacuumed"] == 5, figures
    assert engine.read_arrow("small").num_rows == 50
    assert engine.last_version("small", "a") == 5
    assert protocol(engine, "small") == (1, 2, None, None)


# ------------------------------------------------------------------ engines and files (delta-rs)


def _table_marked_by_spark(path: Path) -> None:
    """A table as delta-spark leaves it: table property queuelake.engine=delta-spark."""
    log = path / "_delta_log"
    log.mkdir(parents=True)
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    actions = [
        {"commitInfo": {"timestamp": 0, "operation": "CREATE TABLE", "engineInfo": "Apache-Spark Delta-Lake"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": "00000000-0000-0000-0000-000000000001",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": [],
                "configuration": {"queuelake.engine": "delta-spark"},
                "createdTime": 0,
            }
        },
    ]
    (log / "00000000000000000000.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def test_engine_mismatch_is_refused(rs: DeltaRsEngine, spark) -> None:
    from deltalake import DeltaTable

    _table_marked_by_spark(Path(rs.path("by_property")))
    marked = description_for("delta-spark")
    DeltaTable.create(rs.path("by_description"), pa.schema([("id", pa.int64())]), description=marked)
    rows = pa.table({"id": [1]})
    for table in ("by_property", "by_description"):
        for write in (
            lambda t: rs.append(t, rows, "a", 1),
            lambda t: rs.append_dataframe(t, spark.createDataFrame(rows), "a", 1),
            lambda t: rs.add_columns(t, [pa.field("x", pa.string())]),
            lambda t: rs.maintain(t),
            lambda t: rs.create_table(t, rows.schema),
        ):
            with pytest.raises(LakeError) as info:
                write(table)
            message = str(info.value)
            assert table in message and "delta-spark" in message and "delta-rs" in message
    assert rs.read_arrow("by_property").num_rows == 0  # reading is fine


@pytest.mark.deltaspark
def test_engines_refuse_each_others_tables(spark, tmp_path: Path) -> None:
    require_delta_jvm(spark)
    from queuelake.lake.delta_spark.engine import DeltaSparkEngine

    jvm, rust = DeltaSparkEngine(str(tmp_path), spark), DeltaRsEngine(str(tmp_path), spark)
    jvm.append("j", sample(3), "a", 1)
    rust.append("r", sample(3), "a", 1)
    with pytest.raises(LakeError, match="delta-spark"):
        rust.append("j", sample(3), "a", 2)
    with pytest.raises(LakeError, match="delta-rs"):
        jvm.append("r", sample(3), "a", 2)


@pytest.mark.deltaspark
@pytest.mark.parametrize("writer", ["delta-rs", "delta-spark"])
def test_tables_written_by_one_engine_read_identically_with_the_other(spark, tmp_path: Path, writer: str) -> None:
    """Every way of reading (Arrow through deltalake, Spark through each engine, an older version, the
    application transactions) gives the same rows whichever engine wrote: partitioned with awkward
    partition values, evolved, appended from Arrow and from a DataFrame."""
    require_delta_jvm(spark)
    from queuelake.lake.delta_spark.engine import DeltaSparkEngine

    jvm, rust = DeltaSparkEngine(str(tmp_path), spark), DeltaRsEngine(str(tmp_path), spark)
    w, r = (rust, jvm) if writer == "delta-rs" else (jvm, rust)
    odd = ("Sales@[dbo]@[my.c@ta]]og]", "a b/c%d=é", None)
    first, second = sample(30, 0, odd), sample(30, 100, odd)
    w.create_table("parts", SCHEMA, partition_by=["queue"])
    assert w.append("parts", first, "drain", 1)
    v1 = w.table_version("parts")
    w.add_columns("parts", [pa.field("error", pa.string())])
    second = second.append_column("error", pa.array(["boom"] * 30))
    assert w.append_dataframe("parts", spark.createDataFrame(second).repartition(2), "xform", 4)
    w.append("plain", sample(25), "drain", 1)
    expected = {
        "parts": pa.concat_tables([first.append_column("error", pa.nulls(30, pa.string())), second]),
        "plain": sample(25),
    }
    for table, rows in expected.items():
        assert r.table_version(table) == w.table_version(table)
        for engine in (w, r):
            same_rows(engine.read_arrow(table), rows)
            same_rows(spark_rows(engine.read(table)), rows)
        assert protocol(w, table) == (1, 2, None, None)
    for engine in (w, r):
        same_rows(spark_rows(engine.read("parts", version=v1)), first)
        same_rows(engine.read_arrow("parts", version=v1), first)
        assert (engine.last_version("parts", "drain"), engine.last_version("parts", "xform")) == (1, 4)
    # Partition values as Spark's delta reader sees them: from the log, not from folder names.
    by_queue = {row["queue"]: row["count"] for row in r.read("parts").groupBy("queue").count().collect()}
    assert by_queue == {"Sales@[dbo]@[my.c@ta]]og]": 20, "a b/c%d=é": 20, None: 20}


def test_same_app_version_racing_engine_instances_lands_once(engine, spark) -> None:
    """Separate engine objects share no lock, as separate processes would: Delta's conflict check on the
    application transaction decides, and the losers report False."""
    engine.create_table("race2", SCHEMA)
    engines = [type(engine)(engine.root, spark) for _ in range(4)]
    results: list[bool] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(engines))

    def worker(e) -> None:
        barrier.wait()
        try:
            results.append(e.append("race2", sample(20), "drain-0", 1))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(results) == [False, False, False, True]
    assert engine.read_arrow("race2").num_rows == 20


def test_spark_path_files_read_alike_by_deltalake_and_pyarrow(rs: DeltaRsEngine, spark) -> None:
    from deltalake import DeltaTable, QueryBuilder

    data = sample(200)
    rs.append_dataframe("shared", spark.createDataFrame(data).repartition(2), "x", 1)
    dt = DeltaTable(rs.path("shared"))
    by_deltalake = pa.table(QueryBuilder().register("t", dt).execute("select * from t").read_all())
    same_rows(by_deltalake, data)
    by_pyarrow = ds.dataset(dt.file_uris(), format="parquet").to_table()
    same_rows(by_pyarrow, data)
    by_parquet = pa.concat_tables([pq.read_table(uri) for uri in dt.file_uris()])
    same_rows(by_parquet, data)
    stats = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    assert sum(s["num_records"] for s in stats) == 200
    assert min(s["min.id"] for s in stats) == 0 and max(s["max.id"] for s in stats) == 199


def test_spark_path_refuses_unknown_columns_before_running(rs: DeltaRsEngine, spark) -> None:
    rs.append("narrow", pa.table({"id": [1]}), "a", 1)
    with pytest.raises(LakeError, match="extra"):
        rs.append_dataframe("narrow", spark.sql("select 2L as id, 'x' as extra"), "a", 2)


def test_vacuum_removes_orphans(rs: DeltaRsEngine) -> None:
    rs.append("orphans", sample(5), "a", 1)
    orphan = Path(rs.path("orphans")) / "part-orphan.snappy.parquet"
    pq.write_table(sample(5).drop_columns(["queue"]), orphan)
    assert rs.read_arrow("orphans").num_rows == 5
    figures = rs.maintain("orphans", retention_hours=0)
    assert figures["files_vacuumed"] >= 1 and not orphan.exists()
    assert rs.read_arrow("orphans").num_rows == 5


def test_staged_commits_checkpoint_every_ten(rs: DeltaRsEngine) -> None:
    """The drain commits once per batch; a load replays the log from the last checkpoint, so tables
    this engine makes checkpoint every CHECKPOINT_INTERVAL commits (bench/commits.py: 0.37 x the
    CPU per commit of Delta's default 100)."""
    from deltalake import DeltaTable
    from queuelake.lake.delta_rs.engine import CHECKPOINT_INTERVAL

    rs.create_table("journal", sample(1).schema)
    for version in range(1, CHECKPOINT_INTERVAL + 2):  # versions 1..11 of the table
        rs.commit_staged("journal", rs.stage("journal", sample(2)), "drain-0", version)
    assert DeltaTable(rs.path("journal")).metadata().configuration["delta.checkpointInterval"] == "10"
    log = Path(rs.path("journal")) / "_delta_log"
    checkpoints = sorted(p.name for p in log.glob("*.checkpoint.parquet"))
    assert checkpoints == [f"{CHECKPOINT_INTERVAL - 1:020d}.checkpoint.parquet"]  # the 10th commit (version 9)
    assert rs.read_arrow("journal").num_rows == 2 * (CHECKPOINT_INTERVAL + 1)
    assert rs.last_version("journal", "drain-0") == CHECKPOINT_INTERVAL + 1


def test_staged_commits_from_a_kept_snapshot_see_every_other_writers_commit(rs: DeltaRsEngine, tmp_path: Path) -> None:
    """Staged commits start from the snapshot of the engine's previous commit, brought up to date
    incrementally. Another writer (a second drain process: its own engine) commits in between, maintain
    compacts and checkpoints, the table is even dropped and made again: each commit still sees what
    is there. An app version another writer committed with other files is refused loudly (its batch's
    rows would be lost: ``check_landed``), none is committed twice, and a snapshot that cannot be brought
    up to date is loaded afresh."""
    import shutil

    from queuelake.lake.delta_rs.engine import CHECKPOINT_INTERVAL

    other = DeltaRsEngine(rs.root)  # a second process: a cache of its own
    rs.create_table("journal", sample(1).schema)
    assert rs.commit_staged("journal", rs.stage("journal", sample(2, 0)), "drain-0", 1)
    kept = rs._snapshots["journal"]
    expected = 2
    for version in range(2, 2 * CHECKPOINT_INTERVAL + 3):  # across two checkpoints
        # the other writer commits the same app's next version first: ours is refused, saying why
        assert other.commit_staged("journal", other.stage("journal", sample(2, 10 * version)), "drain-0", version)
        with pytest.raises(LakeError, match="another writer committed that version"):
            rs.commit_staged("journal", rs.stage("journal", sample(2, 10 * version)), "drain-0", version)
        # a version nobody committed yet goes in, once
        assert rs.commit_staged("journal", rs.stage("journal", sample(1, 10 * version + 5)), f"drain-{version}", 1)
        expected += 3
        if version == CHECKPOINT_INTERVAL:
            rs.maintain("journal", retention_hours=0)  # compaction and its own checkpoint in between
    assert rs._snapshots["journal"] is kept  # the same snapshot, brought up to date each time
    assert rs.read_arrow("journal").num_rows == expected
    assert rs.last_version("journal", "drain-0") == 2 * CHECKPOINT_INTERVAL + 2

    # the table dropped and made again under the kept snapshot: its log starts over at version 0
    shutil.rmtree(rs.path("journal"))
    other.create_table("journal", sample(1).schema)
    assert rs.commit_staged("journal", rs.stage("journal", sample(2, 500)), "drain-0", 1)
    assert rs.read_arrow("journal").num_rows == 2 and rs.last_version("journal", "drain-0") == 1


def test_maintain_gives_older_tables_the_checkpoint_interval(rs: DeltaRsEngine, monkeypatch) -> None:
    """A table made before queuelake set the interval (Delta's default, 100) gets 10 from maintain; an
    interval of the user's own is kept. Maintain beside a drain: its metadata commit lands between the
    drain's load of the table and its commit, which conflicts, is retried and lands exactly once."""
    from deltalake import DeltaTable
    from queuelake.lake.delta_rs.engine import CHECKPOINT_INTERVAL

    for name, configuration in (("older", None), ("tuned", {"delta.checkpointInterval": "50"})):
        DeltaTable.create(
            rs.path(name), sample(1).schema, description=description_for(rs.name), configuration=configuration
        )
        rs.commit_staged(name, rs.stage(name, sample(3)), "drain-0", 1)
    # maintain's metadata commit lands between the drain's load of the table and its commit
    calls: list[dict] = []
    real_commit = DeltaTable.create_write_transaction

    def maintain_first(self: DeltaTable, *args, **kwargs):
        if not calls:
            calls.append(rs.maintain("older"))
        else:
            calls.append({})
        return real_commit(self, *args, **kwargs)

    staged = rs.stage("older", sample(3, 100))
    monkeypatch.setattr(DeltaTable, "create_write_transaction", maintain_first)
    assert rs.commit_staged("older", staged, "drain-0", 2)
    monkeypatch.undo()
    assert len(calls) == 2  # the first attempt met the metadata change and was retried
    figures = calls[0]
    assert (figures["checkpoint_interval"], figures["checkpoint_interval_set"]) == (str(CHECKPOINT_INTERVAL), True)
    assert not rs.commit_staged("older", staged, "drain-0", 2)  # the same batch again: already there
    assert rs.read_arrow("older").num_rows == 6 and rs.last_version("older", "drain-0") == 2
    assert DeltaTable(rs.path("older")).metadata().configuration["delta.checkpointInterval"] == "10"
    again = rs.maintain("older")
    assert (again["checkpoint_interval"], again["checkpoint_interval_set"]) == ("10", False)
    tuned = rs.maintain("tuned")
    assert (tuned["checkpoint_interval"], tuned["checkpoint_interval_set"]) == ("50", False)


def test_staged_journal_files_skip_statistics_and_dictionaries_that_earn_nothing(rs: DeltaRsEngine) -> None:
    """The journal's files: dictionary-encoded header keys but not header values (ids and times, near
    unique), no Parquet statistics on the map, the body and other long texts, statistics kept on the
    scalar columns, the GUID columns uncompressed and every other column (nested leaves included)
    snappy; the Delta log still carries every column's file statistics, and the rows read back."""
    from deltalake import DeltaTable
    from queuelake.lake import record_tables

    schema = record_tables.MESSAGES.schema
    rows = pa.table(
        {
            "queue": ["Sales"] * 3,
            "seq": [1, 2, 3],
            "id": ["a", "b", "c"],
            "batch_id": ["w:1"] * 3,
            "drained_at": pa.array([BASE] * 3, UTC_TIMESTAMP),
            "outcome": ["landed"] * 3,
            "headers": pa.array([[("k", f"v{i}"), ("j", "same")] for i in range(3)], schema.field("headers").type),
            "body": [b"x", b"y", b"z"],
            "message_id": ["m1", "m2", "m3"],
        }
    )
    rows = pa.table({f.name: rows[f.name] if f.name in rows.column_names else pa.nulls(3, f.type) for f in schema})
    rs.create_table("messages", schema)
    rs.commit_staged("messages", rs.stage("messages", rows.cast(schema)), "drain-0", 1)
    (uri,) = DeltaTable(rs.path("messages")).file_uris()
    group = pq.ParquetFile(uri).metadata.row_group(0)
    chunks = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
    assert "RLE_DICTIONARY" in chunks["headers.key_value.key"].encodings
    assert "RLE_DICTIONARY" not in chunks["headers.key_value.value"].encodings
    for path in ("headers.key_value.key", "headers.key_value.value", "body", "raw_headers"):
        assert not chunks[path].is_stats_set, path
    for path in ("seq", "queue", "message_id", "drained_at"):
        assert chunks[path].is_stats_set, path
    plain = {"id", "message_id", "conversation_id", "correlation_id"}
    assert {p for p, c in chunks.items() if c.compression == "UNCOMPRESSED"} == plain
    assert {c.compression for p, c in chunks.items() if p not in plain} == {"SNAPPY"}
    assert len(chunks) == len(leaf_paths(schema)) and set(chunks) == set(leaf_paths(schema))
    (add,) = pa.table(DeltaTable(rs.path("messages")).get_add_actions(flatten=True)).to_pylist()
    assert (add["min.seq"], add["max.seq"], add["min.message_id"]) == (1, 3, "m1")
    same_rows(rs.read_arrow("messages"), rows.cast(schema))


@pytest.mark.deltaspark
def test_delta_spark_reads_a_delta_rs_table_across_its_checkpoints(rs: DeltaRsEngine, spark) -> None:
    """The checkpoints deltalake writes every CHECKPOINT_INTERVAL commits are read by the JVM engine
    too: the same rows, and the application transactions kept in the checkpoint."""
    require_delta_jvm(spark)
    from queuelake.lake.delta_rs.engine import CHECKPOINT_INTERVAL
    from queuelake.lake.delta_spark.engine import DeltaSparkEngine

    rs.create_table("journal", sample(1).schema)
    batches = [sample(3, 10 * v) for v in range(2 * CHECKPOINT_INTERVAL + 1)]
    for version, rows in enumerate(batches, start=1):  # two checkpoints, then one more commit
        rs.commit_staged("journal", rs.stage("journal", rows), f"drain-{version % 2}", version)
    jvm = DeltaSparkEngine(rs.root, spark)
    expected = pa.concat_tables(batches)
    same_rows(spark_rows(jvm.read("journal")), expected)
    same_rows(jvm.read_arrow("journal"), expected)
    last = 2 * CHECKPOINT_INTERVAL + 1
    assert (jvm.last_version("journal", "drain-0"), jvm.last_version("journal", "drain-1")) == (last - 1, last)


# ------------------------------------------------------------------ killed processes (delta-rs)

_KILLED_SPARK_WRITER = textwrap.dedent(
    """
    import sys
    from queuelake.config_sections import SparkConfig
    from queuelake.lake.delta_rs.engine import DeltaRsEngine
    from queuelake.spark import get_spark

    spark = get_spark(SparkConfig(master="local[1]", conf={"spark.sql.shuffle.partitions": "1"}))
    df = spark.sql("select id, 'Sales' as queue, cast(id as string) as name from range(1000, 1300)").repartition(2)
    DeltaRsEngine(sys.argv[1], spark).append_dataframe("messages", df, "drain-0", 2)
    print("committed: the kill hook did not fire", flush=True)
    """
)


@pytest.mark.slow
def test_spark_writer_killed_before_commit_leaves_no_rows(rs: DeltaRsEngine, tmp_path: Path) -> None:
    seed = pa.table({"id": pa.array(range(10), pa.int64()), "queue": ["Sales"] * 10, "name": ["seed"] * 10})
    rs.append("messages", seed, "drain-0", 1)
    script = tmp_path / "killed.py"
    script.write_text(_KILLED_SPARK_WRITER)
    env = {**os.environ, "QUEUELAKE_TEST_KILL_BEFORE_COMMIT": "1", "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run(
        [sys.executable, str(script), rs.root],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        start_new_session=True,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr[-3000:]
    table_dir = Path(rs.path("messages"))
    on_disk = {p.name for p in table_dir.glob("*.parquet")}
    from deltalake import DeltaTable

    committed = {Path(u).name for u in DeltaTable(rs.path("messages")).file_uris()}
    assert on_disk - committed, "the killed writer should have left its data files behind"
    assert rs.read_arrow("messages").num_rows == 10
    assert rs.read("messages").count() == 10
    assert rs.last_version("messages", "drain-0") == 1
    # The retried batch lands, exactly once.
    retry = pa.table({"id": pa.array(range(1000, 1300), pa.int64()), "queue": ["Sales"] * 300, "name": ["r"] * 300})
    assert rs.append("messages", retry, "drain-0", 2) is True
    assert rs.read_arrow("messages").num_rows == 310
    rs.maintain("messages", retention_hours=0)
    assert {p.name for p in table_dir.glob("*.parquet")} == {
        Path(u).name for u in DeltaTable(rs.path("messages")).file_uris()
    }


_ARROW_LOOP = textwrap.dedent(
    """
    import sys
    import pyarrow as pa
    from queuelake.lake.delta_rs.engine import DeltaRsEngine

    engine = DeltaRsEngine(sys.argv[1])
    v = 1
    while True:
        ids = pa.array(range(v * 1000, v * 1000 + 1000), pa.int64())
        engine.append("loop", pa.table({"id": ids, "batch": pa.array([v] * 1000, pa.int64())}), "w", v)
        print(v, flush=True)
        v += 1
    """
)


@pytest.mark.slow
def test_arrow_writer_killed_at_random_moments_commits_whole_batches(rs: DeltaRsEngine, tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(_ARROW_LOOP)
    rng = random.Random(7)
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, str(script), rs.root], cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        for _ in range(rng.randint(1, 4)):
            proc.stdout.readline()
        time.sleep(rng.uniform(0, 0.02))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        last = rs.last_version("loop", "w")
        got = rs.read_arrow("loop")
        batches = got.column("batch").to_pylist()
        assert sorted(set(batches)) == list(range(1, last + 1))
        assert got.num_rows == 1000 * last
        # A restart resumes after the last committed version; rows of a killed batch never show.
    assert rs.append("loop", pa.table({"id": [-1], "batch": [last + 1]}), "w", last + 1)


# ------------------------------------------------------------------ the JVM engine's pure-Spark helper


def test_jvm_engine_reads_ntz_wall_clock_as_utc(spark) -> None:
    from queuelake.lake.delta_spark.engine import _utc_timestamps

    df = _utc_timestamps(spark.sql("select timestamp_ntz'2024-01-02 03:04:05' as at, 1 as id"))
    assert df.schema["at"].dataType.typeName() == "timestamp"
    assert df.toArrow().column("at").to_pylist() == [datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc)]


def test_a_rewrite_with_a_changed_type_keeps_every_row_off_the_driver(
    rs: DeltaRsEngine, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A typed table whose column changed type is rewritten (``replace_dataframe``): it came to the driver
    whole (``toArrow``), and a table of 2.4 GB ran the JVM out of heap at every run (a review). Its
    executors write it now, the schema changes in one overwrite commit, the mark and the application
    transactions stay."""
    from pyspark.sql import functions as F
    from queuelake.lake.marks import engine_of

    data = sample(50)
    assert rs.append("typed", data.slice(0, 30), "bodies", 1) and rs.append("typed", data.slice(30), "bodies", 2)

    def refused(self: object) -> object:
        raise AssertionError("the rewrite brought the table's rows to the driver")

    current = rs.read("typed")
    monkeypatch.setattr(type(current), "toArrow", refused)  # Spark 4's classic DataFrame has its own
    rs.replace_dataframe("typed", current.withColumn("id", F.col("id").cast("string")))
    monkeypatch.undo()
    assert str(rs.schema("typed").field("id").type) == "string"
    back = rs.read_arrow("typed")
    assert sorted(back["id"].to_pylist(), key=int) == [str(i) for i in range(50)]
    same_rows(back.set_column(back.schema.get_field_index("id"), "id", back["id"].cast(pa.int64())), data)
    metadata = rs._require("typed").metadata()
    assert engine_of(metadata.configuration, metadata.description) == "delta-rs"
    assert rs.last_version("typed", "bodies") == 2
    assert rs.append("typed", data.slice(0, 1).set_column(0, "id", pa.array(["x"])), "bodies", 3)


def test_a_rewrite_of_a_table_committed_to_since_its_read_is_refused(engine) -> None:
    """A rewrite's overwrite commit removed what another writer committed after the rewrite read the
    table: its rows gone, its transaction kept, so no rerun brought them back (a review). It is refused
    now, the table as it was; a rewrite of the version it read commits."""
    from pyspark.sql import functions as F

    data = sample(20)
    assert engine.append("typed", data.slice(0, 10), "bodies", 1)
    read_at = engine.table_version("typed")
    current = engine.read("typed", read_at)
    assert engine.append("typed", data.slice(10), "bodies", 2)  # another writer, after the read
    with pytest.raises(LakeError, match="typed changed while its rows were rewritten"):
        engine.replace_dataframe("typed", current.withColumn("id", F.col("id").cast("string")), read_version=read_at)
    assert engine.read_arrow("typed").num_rows == 20 and str(engine.schema("typed").field("id").type) == "int64"
    if isinstance(engine, DeltaRsEngine):  # and at its commit, after the executors wrote (the data source's)
        from queuelake.lake.files import replace_files

        with pytest.raises(LakeError, match="read at version 1, now 2"):
            replace_files(engine.path("typed"), "typed", [], engine.schema("typed"), [], "w1", read_version=1)
    read_at = engine.table_version("typed")
    current = engine.read("typed", read_at)
    engine.replace_dataframe("typed", current.withColumn("id", F.col("id").cast("string")), read_version=read_at)
    assert engine.read_arrow("typed").num_rows == 20 and str(engine.schema("typed").field("id").type) == "string"

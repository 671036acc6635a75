"""How many Spark jobs delta-spark's calls cost: a fixed cost of every erase and maintain, whatever the
rows (a one-id erase took 46-51 s on a small lake). Counted against Delta's own call on a twin table, so
the figure holds whatever Delta's version makes one VACUUM or DELETE cost; never a timing."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from queuelake.lake.deletes import RowFilter
from queuelake.lake.reading import quoted_name

from tests.helpers.jvm import require_delta_jvm

pytestmark = pytest.mark.deltaspark


def _jobs(spark) -> int:
    """Jobs this session has started so far (their ids count from 0)."""
    ids = spark.sparkContext.statusTracker().getJobIdsForGroup(None)
    return max(ids) + 1 if ids else 0


def _jobs_of(spark, call) -> int:
    before = _jobs(spark)
    call()
    return _jobs(spark) - before


def _filled(engine, table: str, files: int) -> None:
    for version in range(1, files + 1):
        rows = pa.table({"id": pa.array([version * 10 + i for i in range(5)], pa.int64()), "k": ["x"] * 5})
        assert engine.append(table, rows, "app", version)


@pytest.fixture
def engine(spark, tmp_path: Path):
    require_delta_jvm(spark)
    from queuelake.lake.delta_spark.engine import DeltaSparkEngine

    return DeltaSparkEngine(str(tmp_path / "lake"), spark)


def test_a_delete_costs_the_jobs_of_deltas_delete_alone(engine, spark) -> None:
    """``delete_rows`` reads its commit's figures from the log with deltalake: no Spark job for ``history``."""
    from delta.tables import DeltaTable

    _filled(engine, "ours", 1)
    _filled(engine, "twin", 1)
    where = RowFilter('"id" = 11', ds.field("id") == 11, ("id",))
    bare = _jobs_of(spark, lambda: DeltaTable.forPath(spark, engine.path("twin")).delete("id = 11"))
    deleted = None

    def ours() -> None:
        nonlocal deleted
        deleted = engine.delete_rows("ours", where)

    assert _jobs_of(spark, ours) <= bare
    assert deleted is not None and (deleted.rows, deleted.files_removed, deleted.files_rewritten) == (1, 1, 1)
    assert deleted.version == engine.table_version("ours")


def test_a_purge_starts_no_spark_job_and_deletes_what_a_vacuum_would(engine, spark) -> None:
    """``purge_removed`` deletes on the driver what ``VACUUM ... RETAIN 0 HOURS`` deletes (the file the delete
    removed and an orphan, with their checksums), and starts no Spark job: a VACUUM is 9 of them (5.5 s of a
    one-row erase's 22 s)."""
    _filled(engine, "ours", 2)
    table = Path(engine.path("ours"))
    orphan = table / "part-00000-orphan.snappy.parquet"
    orphan.write_bytes(next(table.glob("*.parquet")).read_bytes())
    (table / f".{orphan.name}.crc").write_bytes(b"x")
    engine.delete_rows("ours", RowFilter('"id" = 11', ds.field("id") == 11, ("id",)))
    live = {Path(uri).name for uri in engine._require("ours").file_uris()}
    purged: list[int] = []
    assert _jobs_of(spark, lambda: purged.append(engine.purge_removed("ours"))) == 0
    assert purged == [2]  # the file the delete removed, and the orphan
    assert {p.name for p in table.glob("*.parquet")} == live
    assert {p.name for p in table.glob(".*.crc")} == {f".{name}.crc" for name in live}
    assert engine.read_arrow("ours").num_rows == 9
    assert engine.purge_removed("ours") == 0  # nothing left to purge


def test_a_purge_leaves_what_names_cannot_judge_to_the_vacuum(engine, spark) -> None:
    """A stored file that is neither Parquet nor hidden (a deletion vector's ``.bin``, named inside an add
    action) is not judged on the driver: Delta's VACUUM runs, and the table still reads."""
    _filled(engine, "ours", 2)
    (Path(engine.path("ours")) / "deletion_vector_00000000-0000-0000-0000-000000000000.bin").write_bytes(b"dv")
    engine.delete_rows("ours", RowFilter('"id" = 11', ds.field("id") == 11, ("id",)))
    purged: list[int] = []
    assert _jobs_of(spark, lambda: purged.append(engine.purge_removed("ours"))) > 0
    assert purged == [1]
    assert engine.read_arrow("ours").num_rows == 9


def test_what_a_purge_deletes_is_judged_from_the_stored_names() -> None:
    from queuelake.lake.delta_spark.engine import _unreferenced
    from queuelake.lake.storage import StoredFile

    live = {"part-1.parquet", "k=a/part-2.parquet"}
    kept = [StoredFile("part-1.parquet", None), StoredFile(".part-1.parquet.crc", None)]
    kept += [StoredFile("k=a/part-2.parquet", None), StoredFile("k=a/.part-2.parquet.crc", None)]
    assert _unreferenced(kept, live) == []
    removed = [StoredFile("k=a/part-3.parquet", None), StoredFile("k=a/.part-3.parquet.crc", None)]
    assert _unreferenced([*kept, *removed], live) == ["k=a/part-3.parquet", "k=a/.part-3.parquet.crc"]
    assert _unreferenced([*kept, StoredFile("part-4.parquet", None)], live) == ["part-4.parquet"]
    assert _unreferenced([*kept, StoredFile(".other", None)], live) == []  # hidden, not a checksum of ours
    assert _unreferenced([*kept, StoredFile("deletion_vector_1.bin", None)], live) is None
    assert _unreferenced(kept[:2], live) is None  # a live file not stored under the log's name
    assert _unreferenced([StoredFile("k=a%20b/part-2.parquet", None)], {"k=a b/part-2.parquet"}) is None


def test_maintain_with_nothing_to_vacuum_starts_no_spark_job(engine, spark) -> None:
    """A table of one file has nothing to compact, and nothing stored beside it to vacuum: ``maintain`` starts
    no Spark job (a VACUUM is 9 of them however little it deletes)."""
    _filled(engine, "ours", 1)
    figures: list[dict] = []
    assert _jobs_of(spark, lambda: figures.append(engine.maintain("ours"))) == 0
    assert figures[0]["files_before"] == figures[0]["files_after"] == 1 and figures[0]["files_compacted"] == 0
    assert figures[0]["files_vacuumed"] == 0
    assert engine.read_arrow("ours").num_rows == 5


def test_maintain_vacuums_only_when_a_file_is_due(engine, spark) -> None:
    """The files a compaction removed are kept through the retention: no VACUUM's jobs for them. An orphan
    written before the retention's cutoff makes the VACUUM run (what it deletes is Delta's to say: it keeps a
    file written since the cutoff); with no retention every file but the live one goes."""
    _filled(engine, "ours", 3)
    compacted = engine.maintain("ours", retention_hours=1)
    assert compacted["files_compacted"] == 3 and compacted["files_vacuumed"] == 0
    assert _jobs_of(spark, lambda: engine.maintain("ours", retention_hours=1)) == 0  # the 3 removed: too young

    table = Path(engine.path("ours"))
    live = table / Path(engine._require("ours").file_uris()[0]).name
    young, old = table / "part-young-orphan.snappy.parquet", table / "part-old-orphan.snappy.parquet"
    for orphan in (young, old):
        orphan.write_bytes(live.read_bytes())
    assert _jobs_of(spark, lambda: engine.maintain("ours", retention_hours=1)) == 0  # young: not due
    two_hours_ago = time.time() - 2 * 3600
    os.utime(old, (two_hours_ago, two_hours_ago))
    assert _jobs_of(spark, lambda: engine.maintain("ours", retention_hours=1)) > 0
    assert young.exists()
    stored = len(list(table.glob("*.parquet")))
    assert engine.maintain("ours", retention_hours=0)["files_vacuumed"] == stored - 1
    assert [file.name for file in table.glob("*.parquet")] == [live.name]
    assert engine.read_arrow("ours").num_rows == 15


def test_a_vacuum_is_due_for_a_stored_file_no_live_one_is_before_the_cutoff() -> None:
    from queuelake.lake.delta_spark.engine import _vacuum_would_delete
    from queuelake.lake.storage import StoredFile

    now = datetime.now(timezone.utc)
    live = {"part-1.parquet", "k=a/part-2.parquet"}
    kept = [StoredFile("part-1.parquet", now - timedelta(days=30)), StoredFile("k=a/part-2.parquet", None)]
    assert not _vacuum_would_delete(kept, live, 168)
    assert not _vacuum_would_delete([*kept, StoredFile(".part-9.parquet.crc", None)], live, 0)  # hidden
    assert not _vacuum_would_delete([*kept, StoredFile("part-9.parquet", now - timedelta(hours=1))], live, 2)
    assert _vacuum_would_delete([*kept, StoredFile("part-9.parquet", now - timedelta(hours=3))], live, 2)
    assert _vacuum_would_delete([*kept, StoredFile("part-9.parquet", None)], live, 168)  # no time: due
    assert _vacuum_would_delete([*kept, StoredFile("deletion_vector_1.bin", now - timedelta(seconds=1))], live, 0)
    assert _vacuum_would_delete([StoredFile("k=a%20b/part-3.parquet", now - timedelta(days=9))], live, 168)


def test_a_vacuum_runs_without_adaptive_execution_and_restores_it(engine, spark) -> None:
    """An erase's purge and maintain vacuum with adaptive execution off (a job per query stage: 21 Spark jobs
    for a two-file table against 9), and give the session its setting back."""
    _filled(engine, "ours", 2)
    key = "spark.databricks.delta.retentionDurationCheck.enabled"
    spark.conf.set(key, "false")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:  # the same table's VACUUM, plain (nothing to delete)
        bare = _jobs_of(spark, lambda: spark.sql(f"VACUUM delta.{quoted_name(engine.path('ours'))} RETAIN 0 HOURS"))
    finally:
        spark.conf.set(key, "true")
        spark.conf.set("spark.sql.adaptive.enabled", "true")
    engine.delete_rows("ours", RowFilter('"id" = 11', ds.field("id") == 11, ("id",)))
    assert _jobs_of(spark, lambda: engine.purge_removed("ours")) <= bare
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"
    engine.maintain("ours")
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"


def test_a_lake_given_a_way_to_start_spark_starts_it_only_for_spark_work(engine, spark, tmp_path: Path) -> None:
    """``writing_lake``'s delta-spark lake for maintain and erase: the session is started when a table first
    needs Spark's work (a compaction, a delete), not for what the log and a listing answer (a maintain with
    nothing due, a purge, a count); a maintain with nothing to do was 9 s of which the Spark start 8."""
    from queuelake.config import from_dict
    from queuelake.lake.engines import journal_engine, open_lake

    _filled(engine, "ours", 1)
    cfg = from_dict({"lake": {"root": engine.root, "engine": "delta-spark"}}, env={})
    started: list[int] = []

    def start():
        started.append(1)
        return spark

    lake = open_lake(cfg.lake, None, start_spark=start)
    where = RowFilter('"id" = 11', ds.field("id") == 11, ("id",))
    assert lake.maintain("ours")["files_vacuumed"] == 0
    assert lake.count_rows("ours", where).rows == 1 and lake.purge_removed("ours") == 0
    assert journal_engine(lake).name == "delta-rs"
    assert started == []
    assert lake.delete_rows("ours", where).rows == 1
    assert lake.maintain("ours", retention_hours=0)["files_vacuumed"] == 1
    assert started == [1]

"""Checkpoints the followed log writes from the last one and the blind appends after it
(``lake/delta_rs/checkpoint.py``): read by deltalake and by delta-spark with the commit files they replace
deleted (so only the checkpoint can answer), the same actions deltalake's own checkpoint holds, and
deltalake's checkpoint wherever the commits since hold more than appends."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from queuelake.lake.delta_rs.checkpoint import TEMPORARY_PREFIX, checkpoint_name, write_appended_checkpoint
from queuelake.lake.delta_rs.commit_files import STALE_TEMPORARY_SECONDS
from queuelake.lake.delta_rs.engine import DeltaRsEngine

from tests.helpers.jvm import require_delta_jvm
from tests.helpers.small_lake import engine, rows

APPS = ["app/a", "app/b", "app/c"]


def _run(lake: DeltaRsEngine, first: int, last: int) -> None:
    """Versions ``first .. last`` of a run: group commits of one to three batches of the app ids, then
    the run's end (``finish_staged``: a checkpoint when 10 versions have passed since the last)."""
    for v in range(first, last + 1):
        batches = [(lake.stage("t", rows(f"v{v}-{app}", 1 + v % 3)), app, v) for app in APPS[: 1 + v % 3]]
        lake.commit_staged_group("t", batches)
    lake.finish_staged("t")


def _writer(log_dir: Path, version: int) -> str:
    return pq.ParquetFile(log_dir / checkpoint_name(version)).metadata.created_by


def _state(path: str) -> dict:
    """What a reader sees of the table: version, files with their stats, app versions, rows."""
    dt = DeltaTable(path)
    adds = dt.get_add_actions(flatten=True)
    files = sorted(
        zip(
            adds.column("path").to_pylist(),
            adds.column("size_bytes").to_pylist(),
            adds.column("num_records").to_pylist(),
        )
    )
    return {
        "version": dt.version(),
        "files": files,
        "apps": {a: dt.transaction_version(a) for a in APPS},
        "rows": dt.to_pyarrow_table().num_rows,
        "schema": dt.schema().to_json(),
        "configuration": dt.metadata().configuration,
    }


def _only_the_checkpoint(table: Path, copy: Path, version: int) -> Path:
    """A copy of the table whose commit files before ``version`` are gone: only its checkpoint answers
    (the JVM wants the checkpoint's own commit file)."""
    shutil.copytree(table, copy)
    for v in range(version):
        (copy / "_delta_log" / f"{v:020d}.json").unlink()
    return copy


def test_a_runs_checkpoint_is_the_last_one_with_its_appends(tmp_path: Path) -> None:
    lake = engine(tmp_path / "lake")
    table = Path(lake.path("t"))
    log_dir = table / "_delta_log"
    _run(lake, 1, 12)  # the first checkpoint: none before it, so deltalake's
    assert _writer(log_dir, 12).startswith("parquet-rs")
    stale = log_dir / f"{TEMPORARY_PREFIX}killed.tmp"  # a killed checkpoint's leftover
    stale.write_bytes(b"PAR1")
    hours_ago = time.time() - STALE_TEMPORARY_SECONDS - 60
    os.utime(stale, (hours_ago, hours_ago))

    again = engine(tmp_path / "lake")  # the next run: every app id's version moves on
    _run(again, 13, 25)
    assert _writer(log_dir, 25).startswith("parquet-cpp-arrow")  # this module's
    assert json.loads((log_dir / "_last_checkpoint").read_text())["version"] == 25
    assert not stale.exists()
    assert [p.name for p in log_dir.glob("_checkpoint_*")] == []
    ours = _state(str(table))
    assert ours["version"] == 25 and ours["apps"] == {"app/a": 25, "app/b": 25, "app/c": 23}
    assert len(ours["files"]) == sum(1 + v % 3 for v in range(1, 26)) and ours["rows"] > 0

    # read from the checkpoint alone: the commit files it replaces deleted
    alone = _only_the_checkpoint(table, tmp_path / "alone", 25)
    assert _state(str(alone)) == ours

    # deltalake's checkpoint of the same version holds the same actions
    theirs = tmp_path / "theirs"
    shutil.copytree(table, theirs)
    (theirs / "_delta_log" / checkpoint_name(25)).unlink()
    (theirs / "_delta_log" / "_last_checkpoint").write_text(json.dumps({"version": 12}))
    DeltaTable(str(theirs), version=25).create_checkpoint()
    assert _writer(theirs / "_delta_log", 25).startswith("parquet-rs")

    def actions(log: Path) -> dict:
        checkpoint = pq.read_table(log / checkpoint_name(25))
        adds = checkpoint.column("add").drop_null().to_pylist()
        return {
            "add": sorted((a["path"], a["size"], a["modificationTime"], a["dataChange"], a["stats"]) for a in adds),
            "txn": sorted((t["appId"], t["version"]) for t in checkpoint.column("txn").drop_null().to_pylist()),
            "metaData": checkpoint.column("metaData").drop_null().to_pylist(),
            "protocol": checkpoint.column("protocol").drop_null().to_pylist(),
            "remove": checkpoint.column("remove").drop_null().to_pylist(),
        }

    assert actions(log_dir) == actions(theirs / "_delta_log")
    pointers = [json.loads((p / "_last_checkpoint").read_text()) for p in (log_dir, theirs / "_delta_log")]
    assert pointers[0]["size"] == pointers[1]["size"] and pointers[0]["numOfAddFiles"] == len(ours["files"])


def test_deltalake_writes_the_checkpoint_when_the_commits_since_hold_more_than_appends(tmp_path: Path) -> None:
    """A remove (compaction, erasure) or a property set since the last checkpoint is reconciled by
    deltalake; so is a table with no checkpoint yet."""
    lake = engine(tmp_path / "lake")
    table = Path(lake.path("t"))
    log_dir = table / "_delta_log"
    assert not write_appended_checkpoint(str(log_dir), 0)  # no checkpoint to start from
    _run(lake, 1, 12)
    DeltaTable(str(table)).delete("id = 'v11-app/a-0'")  # a remove and an add
    assert DeltaTable(str(table)).version() == 13
    assert not write_appended_checkpoint(str(log_dir), 13)
    DeltaTable(str(table)).alter.set_table_properties({"delta.logRetentionDuration": "interval 30 days"})
    assert not write_appended_checkpoint(str(log_dir), 14)
    again = engine(tmp_path / "lake")
    _run(again, 15, 24)
    assert _writer(log_dir, 24).startswith("parquet-rs")  # deltalake's: the remove is in its reach
    state = _state(str(table))
    assert state["version"] == 24 and state["configuration"]["delta.logRetentionDuration"] == "interval 30 days"
    assert state == _state(str(_only_the_checkpoint(table, tmp_path / "alone", 24)))
    _run(again, 25, 34)  # appends only since: this module's again
    assert _writer(log_dir, 34).startswith("parquet-cpp-arrow")
    assert _state(str(_only_the_checkpoint(table, tmp_path / "alone34", 34)))["files"] == _state(str(table))["files"]


def test_a_claim_resolved_by_deltalake_between_runs_keeps_the_checkpoint_appended(tmp_path: Path) -> None:
    """A claim a killed run left is committed at the start of the next one through deltalake's own
    write transaction, whose add spells out ``"baseRowId": null`` and the like: still a blind append."""
    lake = engine(tmp_path / "lake")
    table = Path(lake.path("t"))
    log_dir = table / "_delta_log"
    _run(lake, 1, 12)
    resolver = engine(tmp_path / "lake")
    assert resolver.commit_staged("t", resolver.stage("t", rows("claimed", 5)), "app/a", 13)
    version = DeltaTable(str(table)).version()
    entries = map(json.loads, (log_dir / f"{version:020d}.json").read_text().splitlines())
    nulls = [e["add"] for e in entries if "add" in e]
    assert nulls and any(v is None for add in nulls for v in add.values())  # the case this is about
    _run(engine(tmp_path / "lake"), version + 1, version + 10)
    last = json.loads((log_dir / "_last_checkpoint").read_text())["version"]
    assert last > version and _writer(log_dir, last).startswith("parquet-cpp-arrow")
    state = _state(str(table))
    assert state == _state(str(_only_the_checkpoint(table, tmp_path / "alone", last)))
    assert state["rows"] == DeltaTable(str(table)).to_pyarrow_table().num_rows and "claimed-4" in set(
        DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist()
    )


_KILLED_RUN = """
import sys
sys.path.insert(0, {lib!r})
import pyarrow as pa
from queuelake.lake.delta_rs.engine import DeltaRsEngine
schema = pa.schema([("id", pa.string()), ("n", pa.int64()), ("at", pa.timestamp("us", tz="UTC"))])

def rows(prefix, k):
    return pa.table({{"id": [f"{{prefix}}-{{i}}" for i in range(k)], "n": list(range(k)), "at": [None] * k}}, schema)

lake = DeltaRsEngine({root!r})
lake.create_table("t", schema)
for v in range(13, 26):
    apps = {apps!r}[: 1 + v % 3]
    lake.commit_staged_group("t", [(lake.stage("t", rows(f"v{{v}}-{{a}}", 1 + v % 3)), a, v) for a in apps])
lake.finish_staged("t")
"""


@pytest.mark.parametrize("step", [1, 2, 3], ids=["checkpoint-unrenamed", "pointer-unwritten", "pointer-unrenamed"])
def test_a_run_killed_inside_its_checkpoint_leaves_a_table_every_reader_reads(tmp_path: Path, step: int) -> None:
    """SIGKILL at each step of ``write_appended_checkpoint``: the checkpoint written but not renamed;
    renamed, ``_last_checkpoint`` not yet written; that written but not renamed. The table reads whole
    (from the older checkpoint and the commits, or from the new one), and the next run checkpoints."""
    lake = engine(tmp_path / "lake")
    table = Path(lake.path("t"))
    log_dir = table / "_delta_log"
    _run(lake, 1, 12)
    code = _KILLED_RUN.format(
        lib=str(Path(__file__).resolve().parents[2] / "lib"), root=str(tmp_path / "lake"), apps=APPS
    )
    env = {**os.environ, "QUEUELAKE_TEST_KILL_AT": f"checkpoint_step:{step}"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert (log_dir / checkpoint_name(25)).exists() == (step > 1)
    assert json.loads((log_dir / "_last_checkpoint").read_text())["version"] == 12  # the old pointer
    assert len(list(log_dir.glob(f"{TEMPORARY_PREFIX}*"))) == (0 if step == 2 else 1)  # swept after an hour
    state = _state(str(table))
    assert state["version"] == 25 and state["apps"] == {"app/a": 25, "app/b": 25, "app/c": 23}
    assert len(state["files"]) == sum(1 + v % 3 for v in range(1, 26))
    if step > 1:  # the checkpoint alone answers as the commits do
        assert _state(str(_only_the_checkpoint(table, tmp_path / "alone", 25))) == state
    _run(engine(tmp_path / "lake"), 26, 37)  # the next run starts from the old pointer and checkpoints
    after = json.loads((log_dir / "_last_checkpoint").read_text())["version"]
    assert after == 37 and _writer(log_dir, 37).startswith("parquet-cpp-arrow")
    final = _state(str(table))
    assert final == _state(str(_only_the_checkpoint(table, tmp_path / "alone37", 37)))
    assert len(final["files"]) == sum(1 + v % 3 for v in range(1, 38))


@pytest.mark.deltaspark
def test_delta_spark_reads_a_checkpoint_written_from_the_last_one(tmp_path: Path, spark) -> None:
    require_delta_jvm(spark)
    lake = engine(tmp_path / "lake")
    _run(lake, 1, 12)
    _run(engine(tmp_path / "lake"), 13, 25)
    table = Path(lake.path("t"))
    assert _writer(table / "_delta_log", 25).startswith("parquet-cpp-arrow")
    expected = DeltaTable(str(table)).to_pyarrow_table()
    alone = _only_the_checkpoint(table, tmp_path / "alone", 25)
    df = spark.read.format("delta").load(str(alone))
    assert df.count() == expected.num_rows
    assert sorted(r["id"] for r in df.select("id").collect()) == sorted(expected.column("id").to_pylist())
    # and the JVM's next commit and checkpoint build on it
    spark.createDataFrame([("jvm", 1, None)], "id string, n long, at timestamp").write.format("delta").mode(
        "append"
    ).save(str(alone))
    assert spark.read.format("delta").load(str(alone)).count() == expected.num_rows + 1
    assert DeltaTable(str(alone)).to_pyarrow_table().num_rows == expected.num_rows + 1

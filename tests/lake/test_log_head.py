"""A local log's head read without its file list (``lake/delta_rs/log_head.py``): the same version, metadata,
schema and app versions deltalake's load finds, across checkpoints, commits of both writers and a
column added; deltalake's load wherever the log is not laid out plainly; and the drain's journal
opened and checked with no deltalake load at all."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from queuelake.errors import LakeError
from queuelake.lake.delta_rs.engine import DeltaRsEngine
from queuelake.lake.delta_rs.log_head import read_log_head, read_table_head
from queuelake.lake.marks import ENGINE_PROPERTY

from tests.helpers.small_lake import SCHEMA, count_loads, engine, rows


def _as_deltalake_sees_it(path: str) -> dict:
    dt = DeltaTable(path)
    metadata = dt.metadata()
    return {
        "version": dt.version(),
        "configuration": dict(metadata.configuration),
        "partition_columns": list(metadata.partition_columns),
        "schema": pa.schema(dt.schema().to_arrow()),
        "apps": {a: dt.transaction_version(a) for a in ("app/a", "app/b", "app/c", "app/none")},
    }


def _as_the_head_reads_it(path: str) -> dict:
    head = read_table_head(path)
    assert head is not None
    return {
        "version": head.version,
        "configuration": head.configuration,
        "partition_columns": head.partition_columns,
        "schema": head.arrow_schema(),
        "apps": {a: head.apps.get(a) for a in ("app/a", "app/b", "app/c", "app/none")},
    }


def test_the_head_is_what_deltalake_loads(tmp_path: Path) -> None:
    lake = engine(tmp_path)
    path = lake.path("t")
    assert _as_the_head_reads_it(path) == _as_deltalake_sees_it(path)  # version 0: no checkpoint, one commit
    for v in range(1, 13):  # deltalake's commits: a checkpoint, then commits after it
        lake.commit_staged("t", lake.stage("t", rows(f"v{v}", 1)), "app/a" if v % 2 else "app/b", v)
    lake.commit_staged_group("t", [(lake.stage("t", rows("g", 2)), "app/c", 5)])  # the followed log's
    assert list((Path(path) / "_delta_log").glob("*.checkpoint.parquet"))  # deltalake's, every 10 versions
    assert _as_the_head_reads_it(path) == _as_deltalake_sees_it(path)
    lake.add_columns("t", [pa.field("extra", pa.string())])  # a metaData action after the checkpoint
    seen = _as_the_head_reads_it(path)
    assert seen == _as_deltalake_sees_it(path) and "extra" in seen["schema"].names
    assert seen["apps"] == {"app/a": 11, "app/b": 12, "app/c": 5, "app/none": None}


def test_deltalake_loads_what_the_head_does_not_read_plainly(tmp_path: Path) -> None:
    assert read_table_head(str(tmp_path / "nothing")) is None  # no table
    lake = engine(tmp_path / "lake")
    for v in range(1, 13):
        lake.commit_staged("t", lake.stage("t", rows(f"v{v}", 1)), "app/a", v)
    log_dir = Path(lake.path("t")) / "_delta_log"
    assert read_log_head(str(log_dir)) is not None

    gap = tmp_path / "gap"  # a commit file after the checkpoint gone: never taken for the log's end
    shutil.copytree(log_dir, gap)
    (gap / "00000000000000000011.json").unlink()
    assert read_log_head(str(gap)) is None

    parts = tmp_path / "parts"  # a newer checkpoint in parts: a kind this does not read
    shutil.copytree(log_dir, parts)
    (parts / "00000000000000000012.checkpoint.0000000001.0000000002.parquet").write_bytes(b"")
    assert read_log_head(str(parts)) is None

    features = tmp_path / "features"  # table features (commits may live elsewhere): deltalake reads them
    shutil.copytree(log_dir, features)
    protocol = {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["v2Checkpoint"]}}
    (features / "00000000000000000013.json").write_text(json.dumps(protocol) + "\n")
    assert read_log_head(str(features)) is None

    # a stale _last_checkpoint does not matter: the folder is listed, as deltalake lists it
    (log_dir / "_last_checkpoint").write_text(json.dumps({"version": 0}))
    head = read_log_head(str(log_dir))
    assert head is not None and head.version == 12 and head.apps == {"app/a": 12}


def test_the_journal_is_opened_and_checked_without_a_deltalake_load(tmp_path: Path, monkeypatch) -> None:
    """A drain's first steps on an existing local journal: ``create_table``'s check, the schema its
    batches are staged in, its workers' last versions, a group commit. None loads the table (at 10,000
    files a load cost 0.10-0.19 s of CPU); another engine's table is still refused, and partitioning
    still checked."""
    lake = engine(tmp_path)
    for v in range(1, 13):
        lake.commit_staged("t", lake.stage("t", rows(f"v{v}", 1)), "app/a", v)
    loads = count_loads(monkeypatch)
    again = DeltaRsEngine(str(tmp_path))
    again.create_table("t", SCHEMA)
    assert again.staged_schema("t").names == SCHEMA.names
    assert again.staged_version("t", "app/a") == 12
    assert again.commit_staged_group("t", [(again.stage("t", rows("z", 2)), "app/a", 13)]) == 1
    assert loads == []
    with pytest.raises(LakeError, match="partitioned by nothing"):
        again.create_table("t", SCHEMA, partition_by=["id"])
    monkeypatch.undo()

    # another engine's mark set since: refused from the head as from a load
    DeltaTable(again.path("t")).alter.set_table_properties({ENGINE_PROPERTY: "delta"}, raise_if_not_exists=False)
    with pytest.raises(LakeError, match="created by the delta engine") as refused:
        DeltaRsEngine(str(tmp_path)).create_table("t", SCHEMA)
    # the way out where the lake holds both engines' tables: auto (naming only the other engine sent a
    # user back and forth between two refusals, a review)
    assert "Set lake.engine: auto" in str(refused.value) and "lake.engine: delta if every table" in str(refused.value)

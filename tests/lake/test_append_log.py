"""The followed log (``lake/delta_rs/append_log.py``): group commits written as the log's next commit file, app
versions read from only the commits written since, on real Delta tables read back by deltalake and by
delta-spark, beside other writers (deltalake's own commits, a second followed log, threads racing for
the same versions) and a column added meanwhile."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from queuelake.lake.delta_rs.append_log import FOLLOWED_CHECKPOINT_INTERVAL, AppendLog
from queuelake.lake.delta_rs.commit_files import STALE_TEMPORARY_SECONDS
from queuelake.lake.delta_rs.engine import CHECKPOINT_INTERVAL, DeltaRsEngine

from tests.helpers.jvm import require_delta_jvm
from tests.helpers.small_lake import SCHEMA, count_loads, engine, rows


def log_entries(lake: DeltaRsEngine, version: int) -> list[dict]:
    text = Path(lake.path("t"), "_delta_log", f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line]


def test_group_commit_is_the_next_commit_file_and_readable_by_deltalake(tmp_path: Path) -> None:
    lake = engine(tmp_path)
    a, b = lake.stage("t", rows("a", 3)), lake.stage("t", rows("b", 2))
    assert lake.staged_version("t", "app/a") is None
    assert lake.commit_staged_group("t", [(a, "app/a", 1), (b, "app/b", 4)]) == 2

    entries = log_entries(lake, 1)  # written by the followed log, not deltalake
    info = entries[0]["commitInfo"]
    assert info["operation"] == "WRITE" and info["isBlindAppend"] is True
    assert info["engineInfo"].startswith("queuelake/"), info
    assert sorted(e["add"]["path"] for e in entries if "add" in e) == sorted(f.path for f in a.files + b.files)
    assert {e["txn"]["appId"]: e["txn"]["version"] for e in entries if "txn" in e} == {"app/a": 1, "app/b": 4}

    dt = DeltaTable(lake.path("t"))
    assert dt.version() == 1
    assert (dt.transaction_version("app/a"), dt.transaction_version("app/b")) == (1, 4)
    assert sorted(dt.to_pyarrow_table()["id"].to_pylist()) == sorted([f"a-{i}" for i in range(3)] + ["b-0", "b-1"])
    # the file statistics are in the log: a filter skips the files that cannot match
    assert dt.to_pyarrow_table(filters=[("id", "=", "b-1")]).num_rows == 1
    assert lake.staged_version("t", "app/a") == 1 and lake.staged_version("t", "app/b") == 4

    # exactly once: the same versions again carry nothing, in this engine and in a fresh one
    assert lake.commit_staged_group("t", [(a, "app/a", 1)]) == 0
    assert DeltaRsEngine(str(tmp_path)).commit_staged_group("t", [(b, "app/b", 4)]) == 0
    assert DeltaTable(lake.path("t")).version() == 1


def test_versions_follow_commits_other_writers_made(tmp_path: Path) -> None:
    """Asked after another writer committed (deltalake's commit_files, another process's followed log):
    the answer is theirs, read from the new commit files; a stale answer would drop a batch."""
    lake = engine(tmp_path)
    assert lake.staged_version("t", "app/x") is None  # the log is followed from here
    other = DeltaRsEngine(str(tmp_path))
    other.commit_staged("t", other.stage("t", rows("x", 1)), "app/x", 7, verify=True)  # deltalake's commit
    assert lake.staged_version("t", "app/x") == 7
    third = DeltaRsEngine(str(tmp_path))
    third.commit_staged_group("t", [(third.stage("t", rows("y", 1)), "app/y", 2)])  # a followed log's
    assert lake.staged_version("t", "app/y") == 2
    assert lake.commit_staged_group("t", [(lake.stage("t", rows("z", 1)), "app/z", 1)]) == 1
    dt = DeltaTable(lake.path("t"))
    assert dt.version() == 3 and dt.to_pyarrow_table().num_rows == 3
    assert [dt.transaction_version(a) for a in ("app/x", "app/y", "app/z")] == [7, 2, 1]


def test_writers_racing_for_the_same_versions_lose_nothing_and_double_nothing(tmp_path: Path) -> None:
    """Four engines (four followed logs) on four threads commit 25 groups each, all at once: every
    version a writer lost it reads and tries the next. Every group lands once, versions are contiguous."""
    lake = engine(tmp_path)
    writers = [DeltaRsEngine(str(tmp_path)) for _ in range(4)]
    staged = {(w, g): writers[w].stage("t", rows(f"w{w}g{g}", 2)) for w in range(4) for g in range(25)}
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def write(w: int) -> None:
        try:
            start.wait()
            for g in range(25):
                # each group carries this writer's next version; every 5th is sent twice (a retry)
                assert writers[w].commit_staged_group("t", [(staged[w, g], f"app/{w}", g + 1)]) == 1
                if g % 5 == 0:
                    assert writers[w].commit_staged_group("t", [(staged[w, g], f"app/{w}", g + 1)]) == 0
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    dt = DeltaTable(lake.path("t"))
    assert dt.version() == 100
    ids = dt.to_pyarrow_table()["id"].to_pylist()
    assert len(ids) == len(set(ids)) == 200
    assert [dt.transaction_version(f"app/{w}") for w in range(4)] == [25] * 4
    assert all(log_entries(lake, v)[0]["commitInfo"]["engineInfo"].startswith("queuelake/") for v in range(1, 101))
    log_dir = Path(lake.path("t"), "_delta_log")
    assert not list(log_dir.glob("*.tmp")), "a temporary commit file was left behind"
    # a checkpoint every 100 versions, not the table's 10: the followed log's commits replay nothing
    assert [p.name for p in log_dir.glob("*.checkpoint.parquet")] == [f"{100:020d}.checkpoint.parquet"]
    assert json.loads((log_dir / "_last_checkpoint").read_text())["version"] == 100
    assert DeltaTable(lake.path("t")).metadata().configuration["delta.checkpointInterval"] == str(CHECKPOINT_INTERVAL)
    assert FOLLOWED_CHECKPOINT_INTERVAL == 100


def test_a_column_added_meanwhile_is_followed(tmp_path: Path) -> None:
    """A metadata commit between two group commits: the followed log loads the table again, the next
    commit keeps the new schema (files staged before read the new column as null)."""
    lake = engine(tmp_path)
    first = lake.stage("t", rows("a", 1))
    assert lake.commit_staged_group("t", [(first, "app/a", 1)]) == 1
    DeltaRsEngine(str(tmp_path)).add_columns("t", [pa.field("extra", pa.string())])
    assert lake.commit_staged_group("t", [(lake.stage("t", rows("b", 1)), "app/a", 2)]) == 1
    dt = DeltaTable(lake.path("t"))
    assert "extra" in dt.schema().to_arrow().names
    table = dt.to_pyarrow_table()
    assert sorted(table["id"].to_pylist()) == ["a-0", "b-0"] and table["extra"].null_count == 2
    assert lake.staged_version("t", "app/a") == 2


def test_object_storage_and_unknown_protocols_are_left_to_deltalake(tmp_path: Path) -> None:
    lake = engine(tmp_path)
    followed = AppendLog(lake.path("t"), "t", lake.name)
    files = lake.stage("t", rows("a", 1)).files
    assert followed.appendable(files)
    followed._protocol_ok = False  # a writer version above 2: features this writer does not honour
    assert not followed.appendable(files)
    assert followed.append_group([(files, "app/a", 1)], "w") is None  # nothing written
    assert DeltaTable(lake.path("t")).version() == 0


def test_delta_spark_reads_what_the_followed_log_committed(tmp_path: Path, spark) -> None:
    require_delta_jvm(spark)
    lake = engine(tmp_path)
    last = FOLLOWED_CHECKPOINT_INTERVAL + 2
    for v in range(1, last + 1):  # past a checkpoint the followed log wrote
        lake.commit_staged_group("t", [(lake.stage("t", rows(f"v{v}", 2)), "app/a", v)])
    assert Path(lake.path("t"), "_delta_log", f"{FOLLOWED_CHECKPOINT_INTERVAL:020d}.checkpoint.parquet").exists()
    df = spark.read.format("delta").load(lake.path("t"))
    assert df.count() == 2 * last
    assert df.where(f"id = 'v{last}-1'").count() == 1
    history = spark.sql(f"DESCRIBE HISTORY delta.`{lake.path('t')}`").collect()
    assert max(h["version"] for h in history) == last


@pytest.mark.parametrize("count", [1, 3])
def test_a_group_left_out_whole_when_every_batch_is_in_the_log(tmp_path: Path, count: int) -> None:
    lake = engine(tmp_path)
    batches = [(lake.stage("t", rows(f"b{i}", 1)), f"app/{i}", 1) for i in range(count)]
    assert lake.commit_staged_group("t", batches) == count
    assert lake.commit_staged_group("t", batches) == 0
    fresh = DeltaRsEngine(str(tmp_path))
    assert fresh.commit_staged_group("t", batches) == 0
    assert DeltaTable(lake.path("t")).to_pyarrow_table().num_rows == count


def test_a_deltalake_writer_that_loaded_before_our_commit_commits_after_it(tmp_path: Path) -> None:
    """deltalake's conflict check reads the commit file the followed log wrote: a stale writer's blind
    append lands as the next version, both app versions kept, every row once."""
    from deltalake import CommitProperties, Transaction

    lake = engine(tmp_path)
    stale = DeltaTable(lake.path("t"))  # loaded at version 0
    theirs = lake.stage("t", rows("theirs", 2))
    assert lake.commit_staged_group("t", [(lake.stage("t", rows("ours", 3)), "app/ours", 1)]) == 1
    stale.create_write_transaction(
        [f.add_action() for f in theirs.files],
        "append",
        stale.schema(),
        commit_properties=CommitProperties(app_transactions=[Transaction("app/theirs", 5)]),
    )
    dt = DeltaTable(lake.path("t"))
    assert dt.version() == 2
    assert (dt.transaction_version("app/ours"), dt.transaction_version("app/theirs")) == (1, 5)
    assert sorted(dt.to_pyarrow_table()["id"].to_pylist()) == sorted(
        [f"ours-{i}" for i in range(3)] + ["theirs-0", "theirs-1"]
    )
    assert lake.staged_version("t", "app/theirs") == 5


def test_a_workers_question_does_not_wait_for_the_commit_being_written(tmp_path: Path) -> None:
    """A queue's workers ask their app ids' versions while the committer writes, syncs and
    checkpoints a group (a commit holds the table's snapshot lock and the log's write lock): they
    read the commits already in the log, and the commit in progress is not theirs."""
    lake = engine(tmp_path)
    first = lake.stage("t", rows("a", 2))
    assert lake.commit_staged_group("t", [(first, "app/a", 1)]) == 1
    followed = lake._followed["t"]
    answers: list[int | None] = []
    with lake._snapshot_lock("t"), followed._writing:  # a group commit in progress
        asking = threading.Thread(target=lambda: answers.append(lake.staged_version("t", "app/a")))
        asking.start()
        asking.join(timeout=10)
        assert not asking.is_alive(), "staged_version waited for the commit in progress"
    assert answers == [1]
    # the committer's next group lands after answers read meanwhile, and is read by the next question
    second = lake.stage("t", rows("b", 2))
    assert lake.commit_staged_group("t", [(second, "app/a", 2)]) == 1
    assert lake.staged_version("t", "app/a") == 2
    assert DeltaTable(lake.path("t")).transaction_version("app/a") == 2


def test_a_run_checkpoints_every_hundred_versions_and_at_its_end(tmp_path: Path) -> None:
    """The journal's interval is 10 (deltalake's commits replay the log on every commit); a run's
    group commits replay nothing, so they checkpoint every 100 versions, and ``finish_staged`` once at
    the run's end when 10 have passed since the last checkpoint: what readers replay stays as before."""
    lake = engine(tmp_path)
    log_dir = Path(lake.path("t"), "_delta_log")

    def checkpoints() -> list[int]:
        return sorted(int(p.name.split(".")[0]) for p in log_dir.glob("*.checkpoint.parquet"))

    lake.finish_staged("t")  # nothing followed, nothing committed: nothing to do
    for v in range(1, 13):
        lake.commit_staged_group("t", [(lake.stage("t", rows(f"v{v}", 1)), "app/a", v)])
    assert checkpoints() == []  # not at 10: the run is still committing
    lake.finish_staged("t")
    assert checkpoints() == [12]
    assert json.loads((log_dir / "_last_checkpoint").read_text())["version"] == 12
    for v in range(13, 18):  # 5 more: under the table's interval since the last checkpoint
        lake.commit_staged_group("t", [(lake.stage("t", rows(f"v{v}", 1)), "app/a", v)])
    lake.finish_staged("t")
    assert checkpoints() == [12]
    again = engine(tmp_path)  # the next run: a new load, which knows the last checkpoint
    for v in range(18, 23):
        again.commit_staged_group("t", [(again.stage("t", rows(f"v{v}", 1)), "app/a", v)])
    again.finish_staged("t")
    assert checkpoints() == [12, 22]
    dt = DeltaTable(lake.path("t"))
    assert dt.version() == 22 and dt.transaction_version("app/a") == 22
    assert dt.to_pyarrow_table().num_rows == 22


def test_every_app_version_is_read_in_one_pass_across_checkpoint_and_commits(tmp_path: Path) -> None:
    """A new run's followed log reads the app versions of the table it loaded from the last checkpoint's
    ``txn`` column and the commit files after it, once, instead of asking deltalake about each app id
    (0.75 ms a question; a run of 500 queues asks 500): the same answers, with no question to deltalake."""
    lake = engine(tmp_path)
    for v in range(1, 13):  # deltalake's commits of app/0 .. app/3: a checkpoint at 9, then more commits
        lake.commit_staged("t", lake.stage("t", rows(f"v{v}", 1)), f"app/{v % 4}", (v + 3) // 4)
    lake.commit_staged_group("t", [(lake.stage("t", rows("g", 1)), "app/9", 7)])  # the followed log's commit
    log_dir = Path(lake.path("t"), "_delta_log")
    assert json.loads((log_dir / "_last_checkpoint").read_text())["version"] < 13  # a checkpoint, then commits
    dt = DeltaTable(lake.path("t"))
    expected = {f"app/{i}": dt.transaction_version(f"app/{i}") for i in (0, 1, 2, 3, 9)}
    assert expected["app/9"] == 7 and None not in expected.values()

    followed = AppendLog(lake.path("t"), "t", lake.name)
    assert followed._snapshot is None  # read from the log's head (``log_head``): deltalake never loaded it
    assert {a: followed.app_version(a) for a in expected} == expected
    assert followed.app_version("app/never") is None


def test_temporary_commit_files_a_killed_writer_left_are_removed_at_a_runs_end(tmp_path: Path) -> None:
    """A writer killed between writing its temporary commit file and linking it leaves the file in
    ``_delta_log`` (deltalake's writers leave the same kind). The run's end removes those older than
    an hour, when it writes its checkpoint; a younger one may be a live writer's, about to be linked,
    and stays."""
    lake = engine(tmp_path)
    log_dir = Path(lake.path("t"), "_delta_log")
    stale, recent = log_dir / "_commit_dead.json.tmp", log_dir / "_commit_live.json.tmp"
    for path in (stale, recent):
        path.write_text('{"commitInfo": {}}\n')
    hours_ago = time.time() - STALE_TEMPORARY_SECONDS - 60
    os.utime(stale, (hours_ago, hours_ago))
    lake.finish_staged("t")  # nothing committed by this log: nothing touched
    assert stale.exists() and recent.exists()
    for v in range(1, 11):  # the table's interval: the run's end writes a checkpoint
        lake.commit_staged_group("t", [(lake.stage("t", rows(f"v{v}", 2)), "app/a", v)])
    lake.finish_staged("t")
    assert (log_dir / "00000000000000000010.checkpoint.parquet").exists()
    assert not stale.exists() and recent.exists()
    assert [p.name for p in log_dir.glob("_commit_*.json.tmp")] == [recent.name]  # none of its own left
    assert DeltaTable(lake.path("t")).to_pyarrow_table().num_rows == 20


def test_the_followed_log_starts_from_the_load_create_table_made(tmp_path: Path, monkeypatch) -> None:
    """A drain's first step checks the journal (``create_table``: it exists, it is ours); its followed
    log starts from what that check read (the log's head, ``log_head``) instead of loading the table
    (40-55 ms at 10,000 files), and still reads what other writers committed after it."""

    DeltaRsEngine(str(tmp_path)).create_table("t", SCHEMA)
    lake = DeltaRsEngine(str(tmp_path))
    lake.create_table("t", SCHEMA)  # the table exists: the check reads its log's head, and keeps it
    other = DeltaRsEngine(str(tmp_path))
    other.commit_staged("t", other.stage("t", rows("x", 1)), "app/x", 7, verify=True)  # after that read

    loads = count_loads(monkeypatch)
    assert lake.staged_version("t", "app/x") == 7  # the other writer's commit, read after the kept load
    assert lake.commit_staged_group("t", [(lake.stage("t", rows("z", 2)), "app/z", 1)]) == 1
    assert loads == []  # the followed log did not load the table
    monkeypatch.undo()
    dt = DeltaTable(lake.path("t"))
    assert dt.version() == 2 and dt.to_pyarrow_table().num_rows == 3
    assert (dt.transaction_version("app/x"), dt.transaction_version("app/z")) == (7, 1)

"""A batch taken as committed because its app id already holds its version must be one whose files the
log named (``StagedWrites.check_landed``, ``delta_rs/log_files.py``): otherwise another writer committed
that version, and clearing the batch's claim would lose its rows without a word."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable
from queuelake.errors import LakeError
from queuelake.lake.delta_rs.engine import DeltaRsEngine
from queuelake.lake.delta_rs.log_files import named_files
from queuelake.pipeline.drain.claims import land_claim
from queuelake.transport.claims import Claim

from tests.helpers.small_lake import engine, rows


def stored_ids(lake: DeltaRsEngine) -> list[str]:
    return sorted(DeltaTable(lake.path("t")).to_pyarrow_table()["id"].to_pylist())


def test_a_version_another_writer_committed_with_other_files_fails_loudly(tmp_path: Path) -> None:
    lake = engine(tmp_path)
    mine, theirs = lake.stage("t", rows("mine", 3)), lake.stage("t", rows("theirs", 2))
    assert lake.commit_staged_group("t", [(theirs, "app/q", 1)]) == 1

    with pytest.raises(LakeError, match=r"\(app/q, 1\) is in the log, but not its batch's 1 file.* 3 row") as err:
        lake.commit_staged_group("t", [(mine, "app/q", 1)])
    assert mine.files[0].path in str(err.value)
    with pytest.raises(LakeError, match="another writer committed that version"):
        DeltaRsEngine(str(tmp_path)).commit_staged("t", mine, "app/q", 1, verify=True)
    claim = Claim("app/q", 1, "Sales", "t", 3, mine.to_json())
    with pytest.raises(LakeError, match="the batch's 3 row"):
        land_claim(DeltaRsEngine(str(tmp_path)), claim, "Sales")
    # nothing was deleted: the rows are still in the batch's own files, for whoever resolves it
    assert all((Path(lake.path("t")) / f.path).exists() for f in mine.files)
    assert stored_ids(lake) == ["theirs-0", "theirs-1"]


def test_a_batch_whose_own_files_landed_is_left_out_quietly_even_after_compaction(tmp_path: Path) -> None:
    lake = engine(tmp_path)
    first, second = lake.stage("t", rows("a", 3)), lake.stage("t", rows("b", 2))
    assert lake.commit_staged_group("t", [(first, "app/q", 1), (second, "app/r", 1)]) == 2
    assert lake.commit_staged_group("t", [(first, "app/q", 1)]) == 0  # a retry: its files are named
    lake.maintain("t")  # compacted: the batches' files are removed, their tombstones kept
    DeltaTable(lake.path("t")).create_checkpoint()  # the tombstones are now in a checkpoint
    live = DeltaTable(lake.path("t")).get_add_actions(flatten=True).column("path").to_pylist()
    assert len(live) == 1 and live[0] not in {f.path for f in first.files + second.files}

    again = DeltaRsEngine(str(tmp_path))
    assert again.commit_staged_group("t", [(first, "app/q", 1), (second, "app/r", 1)]) == 0
    assert again.commit_staged("t", first, "app/q", 1) is False
    land_claim(again, Claim("app/q", 1, "Sales", "t", 3, first.to_json()), "Sales")
    assert len(stored_ids(again)) == 5


def test_files_neither_named_nor_stored_were_vacuumed_and_tell_nothing(tmp_path: Path) -> None:
    lake = engine(tmp_path)
    gone, theirs = lake.stage("t", rows("gone", 1)), lake.stage("t", rows("theirs", 1))
    lake.commit_staged_group("t", [(theirs, "app/q", 1)])
    lake.discard_staged("t", gone)
    assert lake.commit_staged_group("t", [(gone, "app/q", 1)]) == 0


def test_the_named_files_are_every_add_and_remove_the_log_holds(tmp_path: Path) -> None:
    lake = engine(tmp_path)
    batches = [lake.stage("t", rows(f"p{i}", 2)) for i in range(3)]
    for i, staged in enumerate(batches):
        lake.commit_staged_group("t", [(staged, "app/q", i + 1)])
    paths = {f.path for staged in batches for f in staged.files}
    assert named_files(lake.path("t")) == paths
    lake.maintain("t")
    DeltaTable(lake.path("t")).create_checkpoint()
    after = named_files(lake.path("t"))
    assert after is not None and paths < after and len(after) == len(paths) + 1  # the compacted file too
    assert named_files(str(tmp_path / "nothing")) is None
    # a commit file after the newest checkpoint gone: not a log this reads plainly, and nothing is told
    later = [lake.stage("t", rows(f"l{i}", 1)) for i in range(2)]
    for i, staged in enumerate(later):
        lake.commit_staged_group("t", [(staged, "app/q", 10 + i)])
    newest = DeltaTable(lake.path("t")).version()
    (Path(lake.path("t")) / "_delta_log" / f"{newest - 1:020d}.json").unlink()
    assert named_files(lake.path("t")) is None


def test_claims_a_killed_commit_left_are_checked_in_one_read_of_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A killed group commit leaves up to 512 claims whose versions landed: each read the whole log
    again (~1 s on S3 with a month of log, a review); one read for all of them now."""
    from queuelake.lake.delta_rs import staging
    from queuelake.pipeline.drain.claims import landed_before

    lake = engine(tmp_path)
    batches = [(lake.stage("t", rows(f"b{v}", 2)), "app/q", v) for v in (1, 2, 3)]
    assert lake.commit_staged_group("t", batches) == 3
    waiting = lake.stage("t", rows("w", 2))
    reads: list[str] = []
    real = staging.named_files
    monkeypatch.setattr(staging, "named_files", lambda *a, **k: reads.append("log") or real(*a, **k))
    claims = [Claim("app/q", v, "Sales", "t", 2, staged.to_json()) for staged, _, v in batches]
    claims.append(Claim("app/q", 4, "Sales", "t", 2, waiting.to_json()))
    assert landed_before(DeltaRsEngine(str(tmp_path)), claims) == {("t", "app/q", v) for v in (1, 2, 3)}
    assert reads == ["log"]
    # another writer's version among them is still refused
    theirs = lake.stage("t", rows("theirs", 1))
    assert lake.commit_staged_group("t", [(theirs, "app/r", 1)]) == 1
    mine = lake.stage("t", rows("mine", 1))
    with pytest.raises(LakeError, match="another writer committed that version"):
        landed_before(DeltaRsEngine(str(tmp_path)), [*claims[:3], Claim("app/r", 1, "Sales", "t", 1, mine.to_json())])


def test_a_batch_compacted_past_its_tombstones_life_is_taken_as_landed(tmp_path: Path) -> None:
    """A batch that landed and was compacted, whose tombstones a later checkpoint dropped (older than
    ``delta.deletedFileRetentionDuration``) while a vacuum had not yet removed its files: named by no
    log entry, still stored. Its claim was refused, failing the queue until the next vacuum (a review)."""
    import time

    lake = engine(tmp_path)
    path = lake.path("t")
    DeltaTable(path).alter.set_table_properties({"delta.deletedFileRetentionDuration": "interval 2 seconds"})
    first, second = lake.stage("t", rows("a", 3)), lake.stage("t", rows("b", 2))
    assert lake.commit_staged_group("t", [(first, "app/q", 1), (second, "app/q", 2)]) == 2
    lake.maintain("t")  # compacted; maintain's own vacuum keeps files a week
    time.sleep(3)
    DeltaTable(path).create_checkpoint()  # drops the expired tombstones
    assert all((Path(path) / f.path).exists() for f in first.files)
    land_claim(DeltaRsEngine(str(tmp_path)), Claim("app/q", 1, "Sales", "t", 3, first.to_json()), "Sales")
    assert len(stored_ids(lake)) == 5


def test_how_long_a_log_keeps_tombstones() -> None:
    from queuelake.lake.delta_rs.log_files import DEFAULT_TOMBSTONE_SECONDS, tombstone_seconds

    assert tombstone_seconds({"delta.deletedFileRetentionDuration": "interval 1 week"}) == 604800
    assert tombstone_seconds({"delta.deletedFileRetentionDuration": "interval 36 hours"}) == 129600
    assert tombstone_seconds({"delta.deletedFileRetentionDuration": "INTERVAL 2 SECONDS"}) == 2
    assert tombstone_seconds({}) == tombstone_seconds({"delta.deletedFileRetentionDuration": "soon"})
    assert tombstone_seconds({}) == DEFAULT_TOMBSTONE_SECONDS

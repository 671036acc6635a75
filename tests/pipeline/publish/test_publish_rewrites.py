"""An outbound table another job rewrote (overwrite, MERGE, UPDATE) is not published again: a round sends
the rows the table gained, as a set of rows, not the files its commits added (``publish.carried``)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from queuelake.lake.engines import open_lake
from queuelake.nsb import headers as hdr

from tests.helpers.jvm import require_delta_jvm
from tests.helpers.publish import BASE, OUTBOUND, config, drain_all, row, setup_db, subscribe, write_outbound
from tests.helpers.stages import publish

OUTPUT = "outbound_events"


def _setup(uri: str, tmp_path: Path, spark, engine: str = "delta-rs"):
    cfg = config(uri, tmp_path / "lake", [OUTPUT], [], batch_size=7)
    cfg = dataclasses.replace(cfg, lake=dataclasses.replace(cfg.lake, engine=engine))
    setup_db(cfg, ["Valid"])
    subscribe(cfg, "Valid", "Valid", BASE)
    return cfg, open_lake(cfg.lake, spark)


def _rows(keys: list[str], **changed: bytes) -> pa.Table:
    return pa.Table.from_pylist(
        [row(k, body=changed.get(k, orjson.dumps({"key": k})), headers={"h": k}) for k in keys], schema=OUTBOUND
    )


def _sent(cfg) -> list[tuple[str, bytes]]:
    return sorted((orjson.loads(r.body)["key"], r.body) for r in drain_all(cfg, "Valid"))


def _keys(n: int, start: int = 0) -> list[str]:
    return [f"k{i:03d}" for i in range(start, start + n)]


def _first_round(cfg, spark, lake, keys: list[str]) -> None:
    lake.append(OUTPUT, _rows(keys), f"test/{OUTPUT}", 1)
    assert publish(cfg, spark, lake)["published"] == len(keys)
    assert len(_sent(cfg)) == len(keys)


def test_an_overwrite_sends_the_rows_it_gained_not_the_rows_it_kept(
    fresh_pg_uri: str, tmp_path: Path, spark, caplog: pytest.LogCaptureFixture
) -> None:
    """The table overwritten with the same rows, 10 new and 5 changed: exactly those 15 go out (every row
    went out again, with the same MessageId: a review's 500 duplicates)."""
    from deltalake import write_deltalake

    cfg, lake = _setup(fresh_pg_uri, tmp_path, spark)
    _first_round(cfg, spark, lake, _keys(40))
    changed = {k: orjson.dumps({"key": k, "v": 2}) for k in _keys(5, 10)}
    write_deltalake(lake.path(OUTPUT), _rows(_keys(50), **changed), mode="overwrite")
    with caplog.at_level(logging.INFO, logger="queuelake"):
        summary = publish(cfg, spark, lake)
    assert summary["status"] == "ok", summary
    assert summary["published"] == 15, summary
    assert summary["outputs"][0]["unchanged"] == 35, summary
    sent = _sent(cfg)
    assert [k for k, _ in sent] == sorted([*changed, *_keys(10, 40)])
    assert all(body == changed[k] for k, body in sent if k in changed)
    assert "version 2 rewrote the table (WRITE); 35 row(s) carried over unchanged, not sent again" in caplog.text
    assert publish(cfg, spark, lake)["published"] == 0


def test_update_and_merge_send_only_the_rows_they_changed_and_a_delete_none(
    fresh_pg_uri: str, tmp_path: Path, spark
) -> None:
    """An UPDATE or a MERGE rewrites whole files: only the rows it changed or inserted go out."""
    from deltalake import DeltaTable

    cfg, lake = _setup(fresh_pg_uri, tmp_path, spark)
    _first_round(cfg, spark, lake, _keys(30))
    table = DeltaTable(lake.path(OUTPUT))
    table.update(predicate="key = 'k003' OR key = 'k017'", updates={"ttbr_ms": "60000"})
    summary = publish(cfg, spark, lake)
    assert (summary["published"], summary["outputs"][0]["unchanged"]) == (2, 28), summary
    assert [k for k, _ in _sent(cfg)] == ["k003", "k017"]

    source = _rows(["k005", "k021", "k100"], k005=b'{"key": "k005", "v": 2}')
    (
        DeltaTable(lake.path(OUTPUT))
        .merge(source, predicate="t.key = s.key", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    summary = publish(cfg, spark, lake)
    assert summary["published"] == 2, summary  # k021 merged in unchanged: not sent
    assert [k for k, _ in _sent(cfg)] == ["k005", "k100"]

    DeltaTable(lake.path(OUTPUT)).delete("key = 'k007'")
    assert publish(cfg, spark, lake)["published"] == 0
    assert _sent(cfg) == []


def test_a_first_round_over_an_overwritten_history_sends_every_row(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    from deltalake import write_deltalake

    cfg, lake = _setup(fresh_pg_uri, tmp_path, spark)
    write_outbound(lake, OUTPUT, [row(k) for k in _keys(5)])
    write_deltalake(lake.path(OUTPUT), _rows(_keys(8)), mode="overwrite")
    summary = publish(cfg, spark, lake)
    assert (summary["published"], summary["outputs"][0]["unchanged"]) == (8, 0), summary
    assert [k for k, _ in _sent(cfg)] == _keys(8)


def test_a_rewrite_whose_removed_files_are_vacuumed_sends_every_row_said_and_fails_a_resumed_round(
    fresh_pg_uri: str, tmp_path: Path, spark, caplog: pytest.LogCaptureFixture
) -> None:
    from deltalake import DeltaTable, write_deltalake
    from queuelake.errors import PublishError
    from queuelake.pipeline.publish.carried import carried_over

    cfg, lake = _setup(fresh_pg_uri, tmp_path, spark)
    _first_round(cfg, spark, lake, _keys(6))
    write_deltalake(lake.path(OUTPUT), _rows(_keys(7)), mode="overwrite")
    DeltaTable(lake.path(OUTPUT)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    files = lake.added_files(OUTPUT, 1, 2)
    with pytest.raises(PublishError, match="no longer in storage.*Restore those files"):
        carried_over(lake, OUTPUT, 1, 2, files, resumed=True)
    with caplog.at_level(logging.WARNING, logger="queuelake"):
        summary = publish(cfg, spark, lake)
    assert summary["published"] == 7, summary
    assert "are no longer in storage (vacuumed)" in caplog.text
    assert len(_sent(cfg)) == 7


def test_a_table_spark_overwrote_and_updated_sends_only_what_changed(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """The same with the JVM engine's table, overwritten and UPDATEd by Spark (its log's own spelling)."""
    require_delta_jvm(spark)
    cfg, lake = _setup(fresh_pg_uri, tmp_path, spark, engine="delta-spark")
    _first_round(cfg, spark, lake, _keys(20))
    changed = {"k002": orjson.dumps({"key": "k002", "v": 2})}
    frame = spark.createDataFrame(_rows(_keys(23), **changed))
    frame.write.format("delta").mode("overwrite").save(lake.path(OUTPUT))
    summary = publish(cfg, spark, lake)
    assert (summary["published"], summary["outputs"][0]["unchanged"]) == (4, 19), summary
    assert [k for k, _ in _sent(cfg)] == ["k002", "k020", "k021", "k022"]
    spark.sql(f"UPDATE delta.`{lake.path(OUTPUT)}` SET ttbr_ms = 1000 WHERE key = 'k011'")
    summary = publish(cfg, spark, lake)  # the rows of the file(s) it rewrote but k011: carried over
    assert summary["published"] == 1 and summary["outputs"][0]["unchanged"] > 0, summary
    assert [k for k, _ in _sent(cfg)] == ["k011"]


def _vacuumed_rewrite(cfg, spark, lake) -> list[str]:
    """A first round of 6 rows sent, then the table overwritten with 20 rows (version 2) and 8 more
    appended (version 3), the files the overwrite removed vacuumed: a round (1, 3] of two files."""
    from deltalake import DeltaTable, write_deltalake

    _first_round(cfg, spark, lake, _keys(6))
    write_deltalake(lake.path(OUTPUT), _rows(_keys(20)), mode="overwrite")
    lake.append(OUTPUT, _rows(_keys(8, 20)), f"test/{OUTPUT}", 2)
    DeltaTable(lake.path(OUTPUT)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    return _keys(28)


def _interrupt_after_first_batch(monkeypatch: pytest.MonkeyPatch, from_rows: int | None) -> None:
    """The round stops after its first batch (the driver's: a stop asked; from Spark tasks: the tasks of
    the first file only ran, then the job died)."""
    from queuelake import stopping
    from queuelake.pipeline.publish import driver, executors

    if from_rows is None:
        real_insert = driver.DriverSender.insert_batch

        def insert_batch(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            stopping.request()  # the signal handler's doing, during the first batch
            return real_insert(self, *args, **kwargs)

        monkeypatch.setattr(driver.DriverSender, "insert_batch", insert_batch)
        return
    real_send = executors.send_units

    def send_units(session, job, units):  # type: ignore[no-untyped-def]
        real_send(session, job, units[:1])
        raise RuntimeError("a worker was lost")

    monkeypatch.setattr(executors, "send_units", send_units)


@pytest.mark.parametrize("from_rows", [None, 1], ids=["driver", "executors"])
def test_a_round_started_without_its_vacuumed_unchanged_rows_resumes_and_sends_each_row_once(
    fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch, from_rows: int | None
) -> None:
    """The files a rewrite removed vacuumed, a round starts without its unchanged rows (every row sent,
    said) and is interrupted after its first batch: its resume failed, "its batches cannot be cut again",
    and so did every later run, with no way on short of editing the ledger. The round records that it
    was cut without them; its resume cuts the same batches and sends every other row once."""
    from queuelake import stopping

    cfg, lake = _setup(fresh_pg_uri, tmp_path, spark)
    cfg = dataclasses.replace(cfg, publish=dataclasses.replace(cfg.publish, executors_from_rows=from_rows))
    keys = _vacuumed_rewrite(cfg, spark, lake)
    _interrupt_after_first_batch(monkeypatch, from_rows)
    try:
        first = publish(cfg, spark, lake)["outputs"][0]
    finally:
        stopping.reset()
    monkeypatch.undo()
    assert first["status"] in ("interrupted", "failed") and 0 < first["published"] < len(keys), first
    for _ in range(2):  # resumed, then nothing new
        summary = publish(cfg, spark, lake)
        assert summary["status"] == "ok", summary
    sent = drain_all(cfg, "Valid")
    assert sorted(orjson.loads(r.body)["key"] for r in sent) == keys
    assert len({hdr.decode(r.headers, r.id).message_id for r in sent}) == len(keys)


def test_a_whole_round_row_is_no_batch_to_the_ledgers_readers() -> None:
    """The ``whole:`` row beside a round's batch keys: every reader of the keys passes it over, as it does
    the ``table:`` row (a round's batches, the table the plain keys are of, what a resume skips)."""
    from queuelake.pipeline.batches.keys import Round, RoundKeys, whole_key
    from queuelake.pipeline.publish.rounds import last_round, table_tag

    rnd, tagged = Round(4, 9, 7), Round(None, 3, 2, table="aaaaaaaabbbb")
    assert (whole_key(rnd), whole_key(tagged)) == ("whole:4-9", "whole:aaaaaaaabbbb~-3")
    keys = [whole_key(rnd), Round(None, 4, 7).key(0, 1), rnd.key(0, 3), whole_key(tagged)]
    assert last_round(keys) == (rnd, {0}, False)
    assert last_round(keys, "aaaaaaaabbbb") == (None, set(), True)
    assert table_tag(keys, "11111111-2222-3333-4444-555555555555", 9)[0] == ""
    assert RoundKeys(rnd, 3).index(whole_key(rnd)) is None and RoundKeys(rnd, 3).index(rnd.key(2, 3)) == 2


def test_a_round_cut_without_its_unchanged_rows_fails_resumed_once_they_are_vacuumed_until_restored(
    fresh_pg_uri: str, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files a rewrite removed vacuumed after its round started without the rows they carried over:
    the batches left cannot be cut again, so the resume fails, sends nothing, and names the files; once
    they are restored, the round resumes and every row goes out once."""
    import shutil

    from deltalake import DeltaTable, write_deltalake
    from queuelake import stopping

    cfg, lake = _setup(fresh_pg_uri, tmp_path, spark)
    _first_round(cfg, spark, lake, _keys(6))
    write_deltalake(lake.path(OUTPUT), _rows(_keys(20)), mode="overwrite")
    removed = [Path(p.removeprefix("file://")) for p in lake.rewrite(OUTPUT, 1, 2).removed]
    kept = tmp_path / "kept"
    kept.mkdir()
    for path in removed:
        shutil.copy(path, kept / path.name)
    _interrupt_after_first_batch(monkeypatch, None)
    try:
        first = publish(cfg, spark, lake)["outputs"][0]
    finally:
        stopping.reset()
    monkeypatch.undo()
    assert (first["status"], first["published"], first["unchanged"]) == ("interrupted", 7, 6), first
    DeltaTable(lake.path(OUTPUT)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    for _ in range(2):
        out = publish(cfg, spark, lake)["outputs"][0]
        assert out["status"] == "failed" and out["published"] == 0, out
        assert "Restore those files" in out["error"] and removed[0].name in out["error"], out
    for path in removed:
        shutil.copy(kept / path.name, path)
    out = publish(cfg, spark, lake)["outputs"][0]
    assert (out["status"], out["published"]) == ("ok", 7), out
    assert [k for k, _ in _sent(cfg)] == _keys(14, 6)

"""``queuelake erase``: the selected journal rows and the rows derived from them are removed, their
files purged (time travel included) without touching the drain's staged files; a dry run changes
nothing; beside a real drain exactly the rows matching in the erase's snapshot go."""

from __future__ import annotations

import datetime as dt
import json
import signal
import threading
import time
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.errors import ArgumentError, LakeError
from queuelake.lake import pending
from queuelake.lake.engines import open_lake
from queuelake.lake.increments import added_files
from queuelake.lake.marks import description_for
from queuelake.lake.reading import read_table
from queuelake.lake.record_tables import REPLAY_SKIPPED
from queuelake.lake.round_files import open_file
from queuelake.lake.stage_tables import BODY_SCHEMA_CHANGES as CHANGES
from queuelake.pipeline.find.search import find
from queuelake.pipeline.store.erase import erase
from queuelake.transport import db, installer
from queuelake.transport.table_refs import queue_ref

from tests.helpers.cli import run_cli, signalled_when_held
from tests.helpers.journal_rows import UTC, append, batch
from tests.helpers.typed_lake import ORDERS, ids_of, typed_lake

NOW = dt.datetime.now(UTC)
SALES = '"public"."Sales"'
AUDIT = '"public"."audit"'


def config(root: Path):
    return from_dict({"transport": {"connection": "x"}, "lake": {"root": str(root), "engine": "delta-rs"}}, env={})


def ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i:05d}" for i in range(n)]


def seeded(root: Path):
    """Three journal files (one all-erased, one mixed, one untouched), a compaction's tombstones,
    replay_skipped rows for some of them, and a staged (uncommitted) file of an in-flight claim."""
    cfg = config(root)
    lake = open_lake(cfg.lake)
    append(lake, batch(SALES, range(0, 50), NOW, message_ids=ids("gone", 50)))
    append(lake, batch(SALES, range(50, 100), NOW, message_ids=ids("gone", 100)[50:70] + ids("kept", 30)))
    append(lake, batch(AUDIT, range(0, 40), NOW, message_ids=ids("audit", 40)))
    skipped = pa.table(
        {
            "replay_id": ["r1"] * 4,
            "queue": [SALES, SALES, SALES, AUDIT],
            "seq": [1, 60, 90, 1],  # seq 90 is a kept row (kept-00020), audit 1 another queue's
            "id": ["gone-00001", "gone-00060", "kept-00020", "audit-00001"],  # their journal rows' ids
            "message_id": [None] * 4,
            "message_type": [None] * 4,
            "destination": [None] * 4,
            "reason": ["x"] * 4,
            "recorded_at": [NOW] * 4,
        },
        schema=REPLAY_SKIPPED.schema,
    )
    lake.append(REPLAY_SKIPPED.name, skipped, "t", 1)
    staged = lake.stage("messages", batch(SALES, range(100, 110), NOW, message_ids=ids("gone-staged", 10)))
    return cfg, lake, staged


PREDICATE = "message_id LIKE 'gone-%'"


def data_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*.parquet") if "_delta_log" not in p.parts]


def message_ids_on_disk(folder: Path) -> set[str]:
    found: set[str] = set()
    for path in data_files(folder):
        found |= set(pq.read_table(path, columns=["message_id"]).column("message_id").to_pylist())
    return found


def test_erase_removes_the_rows_their_derived_rows_and_every_file_holding_them(tmp_path: Path) -> None:
    cfg, lake, staged = seeded(tmp_path)
    lake.maintain("messages")  # compaction: older versions' files become tombstones too
    versions_before = lake.table_version("messages")
    erased = set(ids("gone", 70))
    assert erased <= message_ids_on_disk(tmp_path / "messages")

    dry = erase(cfg, lake, PREDICATE, dry_run=True)
    assert dry["tables"]["messages"]["rows"] == 70 and dry["tables"]["replay_skipped"]["rows"] == 2, dry
    assert lake.table_version("messages") == versions_before  # the dry run changed nothing

    done = erase(cfg, lake, PREDICATE)
    journal = done["tables"]["messages"]
    assert journal["rows"] == 70 and journal["files_vacuumed"] >= 1, done
    assert done["tables"]["replay_skipped"]["rows"] == 2, done
    left = set(lake.read_arrow("messages", columns=["message_id"]).column("message_id").to_pylist())
    assert left == set(ids("kept", 30)) | set(ids("audit", 40))
    skipped = lake.read_arrow("replay_skipped", columns=["queue", "seq"]).to_pylist()
    assert sorted((r["queue"], r["seq"]) for r in skipped) == sorted([(AUDIT, 1), (SALES, 90)])

    # physically gone: no data file in the folder holds an erased id, but the staged file is intact
    on_disk = message_ids_on_disk(tmp_path / "messages")
    assert not (on_disk & erased), sorted(on_disk & erased)[:5]
    assert set(ids("gone-staged", 10)) <= on_disk  # a full vacuum would have deleted the in-flight claim's file
    assert all((tmp_path / "messages" / f.path).exists() for f in staged.files)
    # time travel: every earlier version fails to read (its files are gone) or lacks the erased rows
    for version in range(lake.table_version("messages") + 1):
        try:
            table = lake.read_arrow("messages", version=version, columns=["message_id"])
        except Exception:  # noqa: BLE001 - a purged file: the version can no longer be read
            continue
        assert not (set(table.column("message_id").to_pylist()) & erased), version

    # every reader reads the files the erase rewrote (delta-rs writes their text as string_view)
    rewritten = [p for p in data_files(tmp_path / "messages") if "string_view" in str(pq.read_schema(p))]
    assert rewritten, "the erase rewrote no file as delta-rs 1.x does: this check would prove nothing"
    assert find(lake, "message", "kept-00001").rows.column("message_id").to_pylist() == ["kept-00001"]
    assert lake.lookup("messages", "queue", [AUDIT]).rows.num_rows == 40
    for uri in lake.added_files("messages", None, lake.table_version("messages")):
        assert not any("view" in str(f.type) for f in open_file(uri).read().schema)

    # the log's record of the deletes names keys, not what was erased: a delete by --where kept the
    # predicate, and with it the erased ids, in commitInfo for the log's 30 days (a review)
    commits = [
        orjson.loads(line)
        for f in sorted((tmp_path / "messages" / "_delta_log").glob("*.json"))
        for line in f.read_bytes().splitlines()
    ]
    deletes = [c["commitInfo"] for c in commits if c.get("commitInfo", {}).get("operation") == "DELETE"]
    assert deletes and not [c for c in deletes if "gone" in orjson.dumps(c).decode()], deletes

    again = erase(cfg, lake, PREDICATE)  # nothing left to erase
    assert again["tables"]["messages"]["rows"] == 0


def test_erase_splits_a_derived_tables_delete_into_lists_deltalake_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deltalake's DELETE crashes the process (a segfault) on an IN list of ~20,000-30,000 values, so the
    derived rows of an erase are named ``MAX_IN_LIST`` keys a delete (here 1: two deletes for the two
    replay_skipped rows), and together remove exactly what one delete did."""
    from queuelake.pipeline.store import erase as erase_module

    monkeypatch.setattr(erase_module, "MAX_IN_LIST", 1)
    cfg, lake, _ = seeded(tmp_path)
    before = lake.table_version("replay_skipped")
    assert before is not None
    dry = erase(cfg, lake, PREDICATE, dry_run=True)
    assert dry["tables"]["replay_skipped"]["rows"] == 2, dry
    done = erase(cfg, lake, PREDICATE)
    assert done["tables"]["messages"]["rows"] == 70 and done["tables"]["replay_skipped"]["rows"] == 2, done
    from deltalake import DeltaTable

    history = DeltaTable(str(tmp_path / "replay_skipped")).history()
    deletes = [h for h in history if h["operation"] == "DELETE" and h["version"] > before]
    assert len(deletes) == 2  # one delete commit per list
    skipped = lake.read_arrow("replay_skipped", columns=["queue", "seq"]).to_pylist()
    assert sorted((r["queue"], r["seq"]) for r in skipped) == sorted([(AUDIT, 1), (SALES, 90)])


def test_an_erase_keeps_the_rows_of_a_recreated_queue_table_that_share_the_erased_seqs(tmp_path: Path) -> None:
    """A queue table dropped and re-created starts its seqs again: the journal holds two rows of one
    (queue, seq). The erase removes the selected row and its derived rows, not its namesake's (the
    journal was deleted by (queue, seq) and took all 40 rows for 20 selected); the Delta log's
    predicates name the kept rows' ids, never an erased one."""
    from queuelake.lake.record_tables import MESSAGE_KEYS

    cfg = config(tmp_path)
    lake = open_lake(cfg.lake)
    append(lake, batch(SALES, range(1, 21), NOW, message_ids=ids("old", 20)))
    append(lake, batch(SALES, range(1, 21), NOW, message_ids=ids("new", 20)))  # the table re-created
    skipped = pa.table(
        {
            "replay_id": ["r1"] * 3,
            "queue": [SALES] * 3,
            "seq": [3, 3, 4],
            "id": ["old-00002", "new-00002", None],  # the last recorded before rows carried their id
            "message_id": [None] * 3,
            "message_type": [None] * 3,
            "destination": [None] * 3,
            "reason": ["x"] * 3,
            "recorded_at": [NOW] * 3,
        },
        schema=REPLAY_SKIPPED.schema,
    )
    lake.append(REPLAY_SKIPPED.name, skipped, "t", 1)
    index = pa.table(
        {
            "key": ["old-00002", "new-00002", "conv-1", "conv-2"],
            "kind": ["message_id", "message_id", "conversation_id", "conversation_id"],
            "queue": [SALES] * 4,
            "seq": [3, 3, 3, 3],
            "upto": [2] * 4,
            "rewrite": [0] * 4,
        },
        schema=MESSAGE_KEYS.schema,
    )
    lake.append(MESSAGE_KEYS.name, index, "t", 1)

    done = erase(cfg, lake, "message_id LIKE 'old-%'")

    assert done["tables"]["messages"]["rows"] == 20, done
    left = lake.read_arrow("messages", columns=["seq", "message_id"]).to_pylist()
    assert sorted((r["seq"], r["message_id"]) for r in left) == [(i + 1, f"new-{i:05d}") for i in range(20)]
    kept = lake.read_arrow(REPLAY_SKIPPED.name, columns=["seq", "id"]).to_pylist()
    assert kept == [{"seq": 3, "id": "new-00002"}]  # the null id went by (queue, seq): an erased seq
    keys = sorted(lake.read_arrow(MESSAGE_KEYS.name, columns=["key"]).column("key").to_pylist())
    assert keys == ["conv-1", "conv-2", "new-00002"]  # conversations the erased row is not in stay
    assert find(lake, "message", "new-00002").rows.column("seq").to_pylist() == [3]
    from deltalake import DeltaTable

    for table in ("messages", REPLAY_SKIPPED.name, MESSAGE_KEYS.name):
        deletes = [h for h in DeltaTable(str(tmp_path / table)).history() if h["operation"] == "DELETE"]
        assert deletes and "old-" not in orjson.dumps(deletes).decode(), (table, deletes)


def test_erase_edges(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    lake = open_lake(cfg.lake)
    assert erase(cfg, lake, PREDICATE)["note"] == "no journal yet: nothing to do"
    append(lake, batch(SALES, range(0, 5), NOW))
    for bad, words in (
        ("colour = 'red'", "unknown column"),
        ("lower(queue) = 'x'", "erase takes comparisons"),
        ("queue = 'x'; drop table t", "single boolean expression"),
        ("seq > rand()", "random"),
    ):
        with pytest.raises(ArgumentError, match=words):
            erase(cfg, lake, bad, dry_run=True)
    assert (
        erase(cfg, lake, "seq >= 3 AND time_sent IS NULL AND drained_at <= '2999-01-01'")["tables"]["messages"]["rows"]
        == 2
    )


FIRST_INSTANT = dt.datetime(1, 1, 1, tzinfo=UTC)  # .NET's DateTime.MinValue
LAST_INSTANT = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)  # DateTime.MaxValue, to the microsecond


def test_erase_by_times_at_the_ends_of_the_calendar(tmp_path: Path) -> None:
    """Times of year 1 and of the last microsecond of 9999 are erased by time as the dry run counts them.
    The delete's literal was written with strftime, whose ``%Y`` gives ``1-01-01`` for year 1: the dry run
    counted the rows and the delete failed to parse its own condition."""
    cfg = config(tmp_path)
    lake = open_lake(cfg.lake)
    rows = batch(SALES, range(0, 6), NOW)
    sent = [FIRST_INSTANT, dt.datetime(999, 12, 30, 23, 0, tzinfo=UTC), NOW, NOW, LAST_INSTANT, None]
    append(
        lake,
        rows.set_column(
            rows.schema.get_field_index("time_sent"), "time_sent", pa.array(sent, rows.schema.field("time_sent").type)
        ),
    )

    def erased(where: str) -> int:
        assert erase(cfg, lake, where, dry_run=True)["tables"]["messages"]["rows"] == (want := len(match(where)))
        assert erase(cfg, lake, where)["tables"]["messages"]["rows"] == want, where
        assert not match(where), where
        return want

    def match(where: str) -> list[int]:
        table = lake.read_arrow("messages", columns=["seq", "time_sent"])
        return [r["seq"] for r in table.to_pylist() if _matches(where, r["time_sent"])]

    assert erased("time_sent < '0999-12-31'") == 2
    assert erased("time_sent = '9999-12-31T23:59:59.999999Z'") == 1
    assert erased("time_sent >= '0001-01-01T02:00:00+02:00'") == 2  # year 1's first instant, in UTC
    assert sorted(lake.read_arrow("messages", columns=["seq"]).column("seq").to_pylist()) == [5]


def _matches(where: str, value: dt.datetime | None) -> bool:
    """The three conditions above, in Python."""
    if value is None:
        return False
    if where.startswith("time_sent < "):
        return value < dt.datetime(999, 12, 31, tzinfo=UTC)
    if where.startswith("time_sent = "):
        return value == LAST_INSTANT
    return value >= FIRST_INSTANT


def cli(args: list[str], uri: str, cwd: Path) -> tuple[dict, str, int]:
    result = run_cli(args, uri, cwd=cwd)
    assert result.summary, result
    return result.summary, result.stderr, result.returncode


def write_config(path: Path, root: Path, **drain) -> Path:
    path.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
                "lake": {"root": str(root), "engine": "delta-rs"},
                "drain": {"queues": ["Sales"], **drain},
            }
        )
    )
    return path


@pytest.mark.slow
def test_erase_cli_dry_run_then_erase_recorded_in_runs(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    cfg, lake, _ = seeded(root)
    conf = write_config(tmp_path / "job.yaml", root)
    version = lake.table_version("messages")
    dry, log, code = cli(["erase", "-c", str(conf), "--where", PREDICATE, "--dry-run"], "x", tmp_path)
    assert code == 0 and dry["status"] == "ok" and dry["dry_run"] is True, (dry, log)
    assert dry["tables"]["messages"] == {
        **dry["tables"]["messages"],
        "rows": 70,
        "files_removed": 2,
        "files_rewritten": 1,
    }
    assert lake.table_version("messages") == version and not lake.exists("runs")

    done, log, code = cli(["erase", "-c", str(conf), "--where", PREDICATE], "x", tmp_path)
    assert code == 0 and done["tables"]["messages"]["rows"] == 70, (done, log)
    runs = read_table(str(root / "runs")).to_pylist()
    by_table = {r["table"]: r for r in runs if r["command"] == "erase"}
    assert by_table["messages"]["rows_removed"] == 70 and by_table["messages"]["predicate"] == PREDICATE
    assert by_table["replay_skipped"]["rows_removed"] == 2
    assert "gone-00001" not in json.dumps(done) + log  # counts and the predicate, never content

    bad, log, code = cli(["erase", "-c", str(conf), "--where", "colour = 'red'"], "x", tmp_path)
    assert code == 1 and bad["status"] == "failed" and bad["error_kind"] == "arguments", bad
    assert "unknown column(s) colour" in bad["error"], bad

    # a predicate true of every row erases nothing without --all, even as a dry run
    left = lake.read_arrow("messages").num_rows
    for everything in ("TRUE", "1 = 1", "seq > 5 OR NOT FALSE"):
        refused, log, code = cli(["erase", "-c", str(conf), "--where", everything, "--dry-run"], "x", tmp_path)
        assert code == 1 and refused["error_kind"] == "arguments" and "--all" in refused["error"], refused
    assert lake.read_arrow("messages").num_rows == left
    counted, log, code = cli(["erase", "-c", str(conf), "--where", "TRUE", "--all", "--dry-run"], "x", tmp_path)
    assert code == 0 and counted["tables"]["messages"]["rows"] == left, (counted, log)


def ids_on_disk(folder: Path, column: str) -> set[str]:
    found: set[str] = set()
    for path in data_files(folder):
        found |= set(pq.read_table(path, columns=[column]).column(column).to_pylist())
    return found


@pytest.mark.slow
@pytest.mark.parametrize("point", ["erase_derived_removed", "erase_journal_removed", "erase_purged"])
def test_an_erase_killed_at_any_step_is_finished_by_the_next(tmp_path: Path, point: str) -> None:
    """An erase SIGKILLed after its derived rows went (the journal's still there), after every delete
    committed but before the purge, or after the purge before its record was cleared. Either way the
    same erase run again leaves no erased row in any table nor any erased value in any file on disk
    (time travel included). Before, the journal went first: a kill after it left the derived rows for
    good (a second erase selected nothing), and a kill before the purge left the removed files
    readable. The record a kill leaves names the tables the erase touched, not a typed table it did
    not (after the journal's delete it named every typed table again: a review)."""
    root = tmp_path / "lake"
    cfg, lake, _ = seeded(root)
    untouched = "body_untouched"  # a typed table none of the erased messages has a row in
    lake.append(untouched, pa.table({"message_id": ["someone-else"]}), "t", 1)
    lake.append(CHANGES.name, pa.Table.from_pylist([{"table": untouched, "change": "created"}], CHANGES.schema), "t", 1)
    conf = write_config(tmp_path / "job.yaml", root)
    args = ["erase", "-c", str(conf), "--where", PREDICATE]
    killed = run_cli(args, "x", cwd=tmp_path, QUEUELAKE_TEST_KILL_AT=point)
    assert killed.returncode == -9, killed.stderr[-3000:]
    [record] = (root / "_queuelake" / "pending" / "erase").glob("*.json")
    purge = json.loads(record.read_text())["purge"]
    assert (untouched in purge) == (point == "erase_derived_removed"), purge  # before: every typed table
    journal_left = lake.read_arrow("messages", columns=["message_id"]).column("message_id").to_pylist()
    gone_left = [m for m in journal_left if m.startswith("gone-")]
    assert len(gone_left) == (70 if point == "erase_derived_removed" else 0)
    on_disk = ids_on_disk(root / "messages", "message_id") & set(ids("gone", 70))
    assert bool(on_disk) == (point != "erase_purged"), "nothing was left to purge, or the purge left some"

    done, log, code = cli(args, "x", tmp_path)
    assert code == 0 and done["status"] == "ok", (done, log)
    left = set(lake.read_arrow("messages", columns=["message_id"]).column("message_id").to_pylist())
    assert left == set(ids("kept", 30)) | set(ids("audit", 40))
    skipped = lake.read_arrow("replay_skipped", columns=["queue", "seq"]).to_pylist()
    assert sorted((r["queue"], r["seq"]) for r in skipped) == sorted([(AUDIT, 1), (SALES, 90)])
    assert not ids_on_disk(root / "messages", "message_id") & set(ids("gone", 70))
    kept = {"kept-00020", "audit-00001"}
    assert ids_on_disk(root / "replay_skipped", "id") == kept, "the derived table's removed file stayed"
    assert not list((root / "_queuelake" / "pending" / "erase").glob("*.json")), "the pending record stayed"


@pytest.mark.slow
def test_an_erase_stopped_by_ctrl_c_says_what_it_had_deleted(tmp_path: Path) -> None:
    """Ctrl-C after an erase's derived deletes: its summary said only "interrupted", though rows were gone
    (a review). It names each table's rows deleted so far; the next erase finishes the rest."""
    root = tmp_path / "lake"
    _, lake, _ = seeded(root)
    conf = write_config(tmp_path / "job.yaml", root)
    args = ["erase", "-c", str(conf), "--where", PREDICATE]
    stopped = signalled_when_held(args, "x", hold="erase_derived_removed:30", signals=[signal.SIGINT], cwd=tmp_path)
    summary = stopped.summary
    assert stopped.returncode == 130 and summary["status"] == "interrupted", stopped
    assert summary["tables"] == {"replay_skipped": {"rows": 2, "files_removed": 1, "files_rewritten": 1}}, summary
    assert "the next erase (this one, or any other) finishes it first" in stopped.stderr, stopped
    done, log, code = cli(args, "x", tmp_path)  # the stopped one is run again first: it removes the rows
    assert code == 0 and done["rows_removed_for_an_unfinished_erase"]["messages"] == 70, (done, log)
    assert done["tables"]["messages"]["rows"] == 0, done  # nothing of the same selection left for this one
    left = lake.read_arrow("messages", columns=["message_id"]).column("message_id").to_pylist()
    assert not [m for m in left if m.startswith("gone-")]


def test_an_erase_refuses_another_engines_table_before_its_first_delete(tmp_path: Path) -> None:
    """Under an explicit ``lake.engine``, an erase reaching a typed table the other engine created deleted
    the derived rows first, then was refused at that table, and left a pending record every later erase
    ran into and was refused by (a review). Every table it will delete from is checked first: refused,
    it has changed nothing and left no record."""
    root = tmp_path / "lake"
    cfg, lake, _ = seeded(root)
    foreign = "body_made_by_spark"
    rows = pa.table({"message_id": ["gone-00001", "kept-00001"]})
    write_deltalake(str(root / foreign), rows, description=description_for("delta-spark"))
    lake.append(CHANGES.name, pa.Table.from_pylist([{"table": foreign, "change": "created"}], CHANGES.schema), "t", 1)
    versions = {t: lake.table_version(t) for t in ("messages", REPLAY_SKIPPED.name, foreign)}

    refused = f"{foreign}.*created by the delta-spark engine.*lake.engine: auto"
    with pytest.raises(LakeError, match=refused):  # the dry run said "ok" (a review)
        erase(cfg, lake, PREDICATE, dry_run=True)
    with pytest.raises(LakeError, match=refused):
        erase(cfg, lake, PREDICATE)
    assert {t: lake.table_version(t) for t in versions} == versions  # no delete committed anywhere
    assert lake.read_arrow(REPLAY_SKIPPED.name).num_rows == 4
    assert not list(pending.recorded(str(root), "erase")), "a refused erase left a record for later erases"


def test_an_erase_dry_run_under_delta_spark_refuses_what_the_real_erase_refuses(tmp_path: Path) -> None:
    """``erase --dry-run`` reads without Spark (delta-rs) and said "ok" of an erase whose real run, under an
    explicit ``lake.engine: delta-spark``, refuses the typed table delta-rs made (a review). The dry run
    checks each of the lake's own tables against the engine the real run writes with."""
    import dataclasses

    root = tmp_path / "lake"
    cfg, lake, _ = seeded(root)
    typed_table = "body_orders"  # made by delta-rs, as the demo's are
    lake.append(typed_table, pa.table({"message_id": ["gone-00001", "kept-00001"]}), "t", 1)
    lake.append(
        CHANGES.name, pa.Table.from_pylist([{"table": typed_table, "change": "created"}], CHANGES.schema), "t", 1
    )
    spark_cfg = dataclasses.replace(cfg, lake=dataclasses.replace(cfg.lake, engine="delta-spark"))
    with pytest.raises(
        LakeError, match=f"{typed_table}.*created by the delta-rs engine and this job writes with delta-spark"
    ):
        erase(spark_cfg, lake, PREDICATE, dry_run=True)
    assert erase(cfg, lake, PREDICATE, dry_run=True)["tables"][typed_table]["rows"] == 1  # delta-rs: as it will
    # maintain's retention dry run, the same way (it said "ok" of a retention the real run refused)
    from queuelake.pipeline.store import retention

    rules = {"root": str(root), "engine": "delta-spark", "retention": {"rules": [{"queue": "Sales", "days": 0}]}}
    with pytest.raises(LakeError, match=f"{typed_table}.*created by the delta-rs engine"):
        retention.apply(from_dict({"transport": {"connection": "x"}, "lake": rules}, env={}), lake, dry_run=True)


def test_retention_refuses_another_engines_unparsed_table_before_its_first_delete(tmp_path: Path) -> None:
    """Retention under an explicit engine checked the typed tables first, not ``body_unparsed``: it deleted
    the typed rows, then was refused there, and the messages stayed in the journal without their typed
    rows for good (a review). Every table it deletes from is checked first: refused, nothing changed."""
    from queuelake.lake.stage_tables import BODY_UNPARSED
    from queuelake.pipeline.store import retention

    root = tmp_path / "lake"
    cfg, lake, _ = seeded(root)
    typed_table = "body_orders"
    lake.append(typed_table, pa.table({"message_id": ["gone-00001", "kept-00001"]}), "t", 1)
    lake.append(
        CHANGES.name, pa.Table.from_pylist([{"table": typed_table, "change": "created"}], CHANGES.schema), "t", 1
    )
    unparsed = pa.Table.from_pylist([{"queue": SALES, "seq": 3, "id": "gone-00003"}], BODY_UNPARSED.schema)
    write_deltalake(str(root / BODY_UNPARSED.name), unparsed, description=description_for("delta-spark"))
    versions = {t: lake.table_version(t) for t in ("messages", typed_table, BODY_UNPARSED.name)}
    rules = {"root": str(root), "engine": "delta-rs", "retention": {"rules": [{"queue": "Sales", "days": 0}]}}

    retention_cfg = from_dict({"transport": {"connection": "x"}, "lake": rules}, env={})
    with pytest.raises(LakeError, match=f"{BODY_UNPARSED.name}.*created by the delta-spark engine"):
        retention.apply(retention_cfg, lake, dry_run=True)  # as the real run is (it said "ok")
    with pytest.raises(LakeError, match=f"{BODY_UNPARSED.name}.*created by the delta-spark engine"):
        retention.apply(retention_cfg, lake)
    assert {t: lake.table_version(t) for t in versions} == versions  # the typed rows were deleted first


@pytest.mark.slow
def test_an_erase_stopped_after_its_index_deletes_is_run_again_by_any_later_erase(tmp_path: Path) -> None:
    """An erase stopped after its derived deletes (the id index's among them) left rows in the journal that
    find reported as found nowhere (it trusted the index), and a later erase of other rows cleared its
    record: the rows stayed for good (a review). Meanwhile find reads the journal without the index; the
    next erase, whatever it selects, runs the stopped one again whole."""
    from queuelake.pipeline.key_index.build import update as build_index
    from queuelake.pipeline.key_index.search import journal_rows

    root = tmp_path / "lake"
    cfg, lake, _ = seeded(root)
    build_index(lake)
    conf = write_config(tmp_path / "job.yaml", root)
    killed = run_cli(
        ["erase", "-c", str(conf), "--where", PREDICATE],
        "x",
        cwd=tmp_path,
        QUEUELAKE_TEST_KILL_AT="erase_derived_removed",
    )
    assert killed.returncode == -9, killed.stderr[-3000:]
    found, figures = journal_rows(lake, "message_id", ["gone-00003"])
    assert found.rows.num_rows == 1 and not figures["used"] and "erase" in figures["why"], figures
    other, log, code = cli(["erase", "-c", str(conf), "--where", "message_id = 'audit-00002'"], "x", tmp_path)
    assert code == 0 and other["status"] == "ok", (other, log)
    assert "run again whole" in log, log[-2000:]
    left = set(lake.read_arrow("messages", columns=["message_id"]).column("message_id").to_pylist())
    assert left == set(ids("kept", 30)) | set(ids("audit", 40)) - {"audit-00002"}
    assert not ids_on_disk(root / "messages", "message_id") & set(ids("gone", 70))
    assert not list((root / "_queuelake" / "pending" / "erase").glob("*.json")), "a pending record stayed"
    _, figures = journal_rows(lake, "message_id", ["kept-00001"])
    assert figures["used"], figures  # the index is trusted again


@pytest.mark.slow
def test_an_erase_an_older_version_left_unfinished_has_the_index_read_again(tmp_path: Path) -> None:
    """An older version's record holds no predicate: today's erase cleared it as finished, and the rows that
    erase had left in the journal (its index rows gone) were found nowhere, for good (a review of an
    upgrade). Meanwhile find and where read the journal without the index; the next erase reads the
    index again from the journal and says to run that erase again."""
    from queuelake.pipeline.key_index.build import update as build_index
    from queuelake.pipeline.key_index.search import journal_rows

    root = tmp_path / "lake"
    _, lake, _ = seeded(root)
    build_index(lake)
    conf = write_config(tmp_path / "job.yaml", root)
    args = ["erase", "-c", str(conf), "--where", PREDICATE]
    killed = run_cli(args, "x", cwd=tmp_path, QUEUELAKE_TEST_KILL_AT="erase_derived_removed")
    assert killed.returncode == -9, killed.stderr[-3000:]
    [record] = (root / "_queuelake" / "pending" / "erase").glob("*.json")
    older = {k: v for k, v in json.loads(record.read_text()).items() if k != "where"}  # as round 47 wrote it
    assert "journal_version" in older, older
    record.write_text(json.dumps(older))
    found, figures = journal_rows(lake, "message_id", ["gone-00003"])
    assert found.rows.num_rows == 1 and not figures["used"], figures

    other, log, code = cli(["erase", "-c", str(conf), "--where", "message_id = 'audit-00002'"], "x", tmp_path)
    assert code == 0 and other["status"] == "ok", (other, log)
    assert "left by an older version of queuelake" in log and "run that erase again" in log, log[-3000:]
    assert not list((root / "_queuelake" / "pending" / "erase").glob("*.json")), "the record stayed"
    found, figures = journal_rows(lake, "message_id", ["gone-00003"])
    assert figures["used"] and found.rows.num_rows == 1, figures  # the index names the row the journal holds


def test_an_erase_clears_only_the_records_of_erases_that_are_gone(tmp_path: Path) -> None:
    """Two erases at once: the second one purged the first one's tables and cleared its record, so the
    first, killed afterwards, left its removed files for good. A record of a live process (on this host),
    or one another host wrote lately, stays; a dead process's, or an old one from another host, goes. So
    does one whose pid another process has now: a killed erase's record stayed for good when each later
    erase got the same pid (a container restarted keeps its host name: a review)."""
    import os
    import socket
    import subprocess
    import sys

    from queuelake.lake import pending
    from queuelake.pipeline.store.erase import PENDING, finish_pending

    cfg = from_dict({"transport": {"connection": "x"}, "lake": {"root": str(tmp_path), "engine": "delta-rs"}}, env={})
    lake = open_lake(cfg.lake)
    append(lake, batch(SALES, range(0, 5), NOW))
    folder = tmp_path / "_queuelake" / "pending" / PENDING
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    here = socket.gethostname()
    owners = {
        "running-here": {"host": here, "pid": os.getppid()},
        "running-here-since": {"host": here, "pid": os.getppid(), "started": pending._started(os.getppid())},
        "killed-here": {"host": here, "pid": int(dead.stdout)},
        # a killed erase whose pid another process has now (a container restarted: pid 1 or 2 again)
        "killed-pid-reused": {"host": here, "pid": os.getppid(), "started": "another-boot:1"},
        "killed-pid-now-ours": {"host": here, "pid": os.getpid(), "started": "another-boot:1"},
        "running-elsewhere": {"host": "another-host", "pid": 1},
        "killed-elsewhere": {"host": "another-host", "pid": 1},
    }
    for name, owner in owners.items():
        pending.record(str(tmp_path), PENDING, name, {"purge": ["messages"]})
        path = folder / f"{name}.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "_owner": owner}))
    old = time.time() - pending.STALE_SECONDS - 60
    os.utime(folder / "killed-elsewhere.json", (old, old))
    # records a killed command was writing aside: an old one goes, a fresh one may still be moved in place
    (folder / "killed.json.123.tmp").write_text("{")
    os.utime(folder / "killed.json.123.tmp", (old, old))
    (folder / "writing.json.456.tmp").write_text("{")

    finish_pending(cfg, lake)
    assert sorted(p.stem for p in folder.glob("*.json")) == ["running-elsewhere", "running-here", "running-here-since"]
    assert [p.name for p in folder.glob("*.tmp")] == ["writing.json.456.tmp"]


@pytest.mark.slow
def test_erase_beside_a_running_drain_removes_exactly_the_selected_rows(fresh_pg_uri: str, tmp_path: Path) -> None:
    """A real drain (subprocess, 40 batches) lands Sales while an erase removes `seq < 8000`. The erase
    removes exactly the matching rows of the snapshot it read; matching rows the drain landed after
    it stay (not selected), and every other drained row is in the journal once."""
    root = tmp_path / "lake"
    conf = write_config(tmp_path / "job.yaml", root, batch_size=500, workers_per_queue=2)
    cfg = config(root)
    lake = open_lake(cfg.lake)
    setup = from_dict({"transport": {"connection": fresh_pg_uri}, "drain": {"queues": ["Sales"]}}, env={})
    with db.connect(setup.transport) as conn:
        installer.install(conn, installer.plan(setup))
        conn.commit()
        traffic.seed(conn, queue_ref("Sales", setup.transport), traffic.order_events(20000, seed=9))
    outcome: dict = {}

    def erase_once_rows_landed() -> None:
        while (lake.table_version("messages") or 0) < 5:
            time.sleep(0.05)
        outcome.update(erase(cfg, lake, "seq < 8000"))

    eraser = threading.Thread(target=erase_once_rows_landed)
    eraser.start()
    drained, log, code = cli(["drain", "-c", str(conf)], fresh_pg_uri, tmp_path)
    eraser.join()
    assert code == 0 and drained["dequeued"] == 20000, (drained, log)
    journal = outcome["tables"]["messages"]
    snapshot = journal["journal_version"]
    assert journal["rows"] > 0

    seqs = lake.read_arrow("messages", columns=["seq"]).column("seq")
    assert len(seqs) == len(set(seqs.to_pylist()))  # no row twice
    left = set(seqs.to_pylist())
    assert {s for s in range(1, 20001) if s >= 8000} <= left  # nothing unselected went
    # the matching rows still there were all landed after the erase's snapshot
    later = added_files(lake.path("messages"), snapshot, lake.table_version("messages"))
    later_seqs: set[int] = set()
    for uri in later:
        later_seqs |= set(pq.read_table(uri.replace("file://", ""), columns=["seq"]).column("seq").to_pylist())
    assert {s for s in left if s < 8000} <= later_seqs
    assert len(left) + journal["rows"] == 20000  # every drained row: in the journal, or erased once
    assert pc.min(seqs).as_py() >= 1


@pytest.mark.slow
def test_erase_reaches_the_typed_body_tables(fresh_pg_uri: str, tmp_path: Path, spark, lake_engine: str) -> None:
    root = tmp_path / "lake"
    cfg, lake = typed_lake(fresh_pg_uri, root, spark, lake_engine)
    orders = ids_of(lake, ORDERS)
    gone = orders[0]
    assert orders.count(gone) == 1 and gone in ids_of(lake, "messages")
    assert gone in message_ids_on_disk(root / ORDERS)
    version = lake.table_version(ORDERS)

    dry = erase(cfg, lake, f"message_id = '{gone}'", dry_run=True)
    assert dry["tables"]["messages"]["rows"] == 1 and dry["tables"][ORDERS]["rows"] == 1, dry
    assert lake.table_version(ORDERS) == version  # the dry run changed nothing

    done = erase(cfg, lake, f"message_id = '{gone}'")
    assert done["tables"]["messages"]["rows"] == 1 and done["tables"][ORDERS]["rows"] == 1, done
    assert done["tables"][ORDERS]["files_vacuumed"] >= 1, done
    assert gone not in ids_of(lake, "messages") and gone not in ids_of(lake, ORDERS)
    assert sorted(ids_of(lake, ORDERS)) == sorted(orders[1:])  # the others stay
    assert gone not in message_ids_on_disk(root / ORDERS)  # purged: no file of the table holds it
    assert gone not in message_ids_on_disk(root / "messages")
    again = erase(cfg, lake, f"message_id = '{gone}'")
    assert again["tables"]["messages"]["rows"] == 0 and ORDERS not in again["tables"], again

    # an unparsed body's record goes with its journal row, by (queue, seq)
    unparsed = lake.read_arrow("body_unparsed", columns=["queue", "seq"]).to_pylist()
    queue, seq = unparsed[0]["queue"], unparsed[0]["seq"]
    where = "queue = '" + queue.replace("'", "''") + f"' AND seq = {seq}"
    done = erase(cfg, lake, where)
    assert done["tables"]["messages"]["rows"] == 1 and done["tables"]["body_unparsed"]["rows"] >= 1, done
    left = lake.read_arrow("body_unparsed", columns=["queue", "seq"]).to_pylist()
    assert (queue, seq) not in {(r["queue"], r["seq"]) for r in left} and len(left) < len(unparsed)


@pytest.mark.slow
def test_erase_under_auto_writes_each_table_with_the_engine_that_made_it(
    fresh_pg_uri: str, tmp_path: Path, spark
) -> None:
    """``lake.engine: auto`` with the Delta JVM (delta-spark by default) over typed tables delta-rs made: the
    check before the first delete refused them, by the run's default engine, though auto writes each table
    with its maker (a review of that check). Erase and retention reach them."""
    from queuelake.config import LakeConfig
    from queuelake.pipeline.store import retention

    from tests.helpers.jvm import require_delta_jvm

    require_delta_jvm(spark)
    root = tmp_path / "lake"
    cfg, made = typed_lake(fresh_pg_uri, root, spark, "delta-rs")
    auto = open_lake(LakeConfig(root=str(root), engine="auto"), spark)
    assert auto.name == "delta-spark" and made.written_by(ORDERS) == "delta-rs"
    orders = ids_of(made, ORDERS)
    done = erase(cfg, auto, f"message_id = '{orders[0]}'")
    assert done["tables"][ORDERS]["rows"] == 1 and orders[0] not in ids_of(made, ORDERS), done
    lake = {"root": str(root), "engine": "auto", "retention": {"rules": [{"queue": "Sales", "days": 0}]}}
    applied = retention.apply(from_dict({"transport": {"connection": fresh_pg_uri}, "lake": lake}, env={}), auto)
    assert applied.rules and applied.rules[0]["typed"].get(ORDERS, {}).get("rows") == len(orders) - 1, applied
    assert ids_of(made, ORDERS) == []


def test_the_spark_condition_of_a_row_filter_quotes_identifiers_not_text() -> None:
    from queuelake.lake.delta_spark.engine import spark_condition

    assert spark_condition("\"message_id\" IN ('a', 'b\"c')") == "`message_id` IN ('a', 'b\"c')"
    assert spark_condition("(\"queue\" = 'x''y' AND \"seq\" IN (1, 2))") == "(`queue` = 'x\\'y' AND `seq` IN (1, 2))"


def test_a_backslash_in_a_literal_is_refused_saying_why_and_a_quote_goes_in_double_quotes() -> None:
    """Spark reads ``\\'`` and ``\\\\`` as escapes, the delete's engines do not: such a literal was
    refused as if the predicate were not a comparison at all (a review)."""
    from queuelake.pipeline.store.erase_predicate import row_filter

    schema = pa.schema([("message_id", pa.string()), ("queue", pa.string()), ("seq", pa.int64())])
    for where in ("message_id = 'it\\'s'", 'message_id = "a \\\\ b"'):
        with pytest.raises(ArgumentError, match="no backslash in its literals"):
            row_filter(where, schema)
    quoted = row_filter('message_id = "it\'s"', schema)
    assert quoted.sql == "\"message_id\" = 'it''s'"
    # SQL's doubled quote is two literals joined in Spark's SQL: said as such, not as "not a comparison"
    with pytest.raises(ArgumentError, match="'' is not a quote inside a literal here.*in double quotes"):
        row_filter("message_id = 'it''s'", schema)


def test_an_erase_names_runs_of_consecutive_seqs_as_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    """A million drained rows of one queue are one ``BETWEEN``, not 200 deletes of 5,000 listed keys
    (each rewriting the file the next one removed: 279 s where one delete took 2.6 s, a review); the
    rows standing alone or in pairs are listed; a filter names at most ``MAX_IN_LIST`` values, and its
    arrow expression selects what its SQL says."""
    from queuelake.pipeline.store import erase as erase_module

    many = pa.table({"queue": [SALES] * 1_000_000, "seq": pa.array(range(1_000_000), pa.int64())})
    few = pa.table({"queue": [AUDIT] * 14, "seq": pa.array([5, 7, 8, *range(20, 31)], pa.int64())})
    [one] = erase_module._packed(pa.concat_tables([few, many]))
    where = erase_module._key_filter(one, ["queue", "seq"])
    assert '"seq" BETWEEN 0 AND 999999' in where.sql and '"seq" IN (5, 7, 8) OR "seq" BETWEEN 20 AND 30' in where.sql
    probe = pa.table({"queue": [SALES, SALES, AUDIT, AUDIT, AUDIT, AUDIT], "seq": [0, 1_000_000, 6, 7, 20, 31]})
    assert probe.filter(where.arrow).to_pylist() == [
        {"queue": SALES, "seq": 0},
        {"queue": AUDIT, "seq": 7},
        {"queue": AUDIT, "seq": 20},
    ]
    monkeypatch.setattr(erase_module, "MAX_IN_LIST", 4)
    sparse = pa.table({"queue": [SALES] * 9, "seq": pa.array([1, 3, 5, 7, 9, 10, 11, 12, 13], pa.int64())})
    parts = erase_module._packed(sparse)
    assert [p.column("seq").to_pylist() for p in parts] == [[1, 3, 5, 7], [9, 10, 11, 12, 13]]


def test_an_erase_whose_catch_up_looks_run_out_leaves_the_last_rows_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drain landing a matching row after each of the erase's journal deletes (and a ``maintain``
    indexing it): the rows a look found go whole, journal and index; the rows landed after the last
    look stay whole, found by ``find``. Before, the last look's rows lost their index rows and stayed in
    the journal (a review)."""
    from queuelake.lake.delta_rs.engine import DeltaRsEngine
    from queuelake.pipeline.key_index.build import update as build_index
    from queuelake.pipeline.store import erase as erase_module

    cfg = config(tmp_path)
    lake = open_lake(cfg.lake)
    append(lake, batch(SALES, range(0, 10), NOW, message_ids=ids("gone", 5) + ids("kept", 5)))
    build_index(lake)
    real = DeltaRsEngine.delete_rows
    landed: list[str] = []

    def delete_then_a_drain_lands(self, table, where):  # type: ignore[no-untyped-def]
        out = real(self, table, where)
        if table == "messages":
            landed.append(f"gone-late-{len(landed)}")
            append(lake, batch(SALES, range(100 + len(landed), 101 + len(landed)), NOW, message_ids=landed[-1:]))
            build_index(lake)
        return out

    monkeypatch.setattr(DeltaRsEngine, "delete_rows", delete_then_a_drain_lands)
    erase(cfg, lake, PREDICATE)
    monkeypatch.undo()
    left = lake.read_arrow("messages", columns=["message_id"]).column("message_id").to_pylist()
    late = sorted(m for m in left if m.startswith("gone-late"))
    assert late == landed[erase_module.CATCH_UP_ROUNDS - 1 :], (late, landed)  # each look's rows went
    assert late and all(find(lake, "message", m).rows.num_rows == 1 for m in late)


def test_an_erase_of_many_seqs_a_recreated_table_shares_names_them_in_a_few_terms(tmp_path: Path) -> None:
    """Each seq a re-created table's new row shares with an erased old one was a term of its own in one
    OR: at 5,000 such seqs deltalake's DELETE crashed the process (SIGSEGV), at 2,000 it took 190 s (a
    review). The journal's filter names them in one condition and one list of the kept rows' ids; the
    derived tables' filters hold at most ``SHARED_TERMS`` per-seq terms."""
    from queuelake.lake.record_tables import MESSAGE_KEYS
    from queuelake.pipeline.store import erase as erasing

    n = 600
    cfg = config(tmp_path)
    lake = open_lake(cfg.lake)
    append(lake, batch(SALES, range(1, n + 1), NOW, message_ids=ids("old", n)))
    append(lake, batch(SALES, range(1, n + 1), NOW, message_ids=ids("new", n)))  # the table re-created
    index = pa.table(
        {
            "key": [*ids("old", n), *ids("new", n)],
            "kind": ["message_id"] * (2 * n),
            "queue": [SALES] * (2 * n),
            "seq": [*range(1, n + 1), *range(1, n + 1)],
            "upto": [2] * (2 * n),
            "rewrite": [0] * (2 * n),
        },
        schema=MESSAGE_KEYS.schema,
    )
    lake.append(MESSAGE_KEYS.name, index, "t", 1)
    journal = erasing.table_engine(lake, "messages")
    selected = erasing.row_filter("id LIKE 'old-%'", journal.schema("messages"))
    keys = journal.matching_rows("messages", selected, erasing.KEYS)
    filters = erasing.journal_filters(journal, keys)
    assert max(f.sql.count(" OR ") for f in filters) < 5, [f.sql[:300] for f in filters]
    derived = erasing.key_filters(lake, MESSAGE_KEYS, keys)
    # a term per shared seq, each with one OR of its own ("id" IS NULL OR ...)
    assert max(f.sql.count(" OR ") for f in derived) < 2 * erasing.SHARED_TERMS, len(derived)

    done = erase(cfg, lake, "id LIKE 'old-%'")

    assert done["tables"]["messages"]["rows"] == n, done
    assert sorted(lake.read_arrow("messages", columns=["id"]).column("id").to_pylist()) == ids("new", n)
    assert sorted(lake.read_arrow(MESSAGE_KEYS.name, columns=["key"]).column("key").to_pylist()) == ids("new", n)


def test_a_namesake_is_kept_when_a_selected_row_is_already_gone(tmp_path: Path) -> None:
    """The namesakes were looked for only when a filter reached more rows than it named: a selected row
    another erase (or retention) had removed meanwhile offset a namesake, which was deleted (a review)."""
    from queuelake.pipeline.store import erase as erasing

    cfg = config(tmp_path)
    lake = open_lake(cfg.lake)
    append(lake, batch(SALES, range(1, 3), NOW, message_ids=["old-1", "old-2"]))
    append(lake, batch(SALES, range(1, 2), NOW, message_ids=["new-1"]))  # the table re-created
    journal = erasing.table_engine(lake, "messages")
    selected = erasing.row_filter("id LIKE 'old-%'", journal.schema("messages"))
    keys = journal.matching_rows("messages", selected, erasing.KEYS)
    erase(cfg, lake, "id = 'old-2'")  # meanwhile
    for where in erasing.journal_filters(journal, keys):
        journal.delete_rows("messages", where)
    assert lake.read_arrow("messages", columns=["id"]).column("id").to_pylist() == ["new-1"]


def test_an_erase_keeps_the_index_rows_a_kept_namesake_shares(tmp_path: Path) -> None:
    """A truncated error table whose retries failed again in the same order: the new rows share the old
    ones' seqs, MessageIds and conversation. An erase of the old rows removed the index rows of those
    MessageIds at those seqs, the new rows' too: ``find`` lost them (a review)."""
    from queuelake.lake.record_tables import MESSAGE_KEYS

    cfg = config(tmp_path)
    lake = open_lake(cfg.lake)
    for prefix in ("old", "new"):
        rows = batch(SALES, range(1, 3), NOW, message_ids=[f"{prefix}-1", f"{prefix}-2"])
        rows = rows.set_column(rows.schema.get_field_index("message_id"), "message_id", pa.array(["m-1", "m-2"]))
        append(lake, rows)
    index = pa.table(
        {
            "key": ["m-1", "m-1", "m-2", "m-2", "old-1", "old-2", "new-1", "new-2"],
            "kind": ["message_id"] * 4 + ["id"] * 4,
            "queue": [SALES] * 8,
            "seq": [1, 1, 2, 2, 1, 2, 1, 2],
            "upto": [2] * 8,
            "rewrite": [0] * 8,
        },
        schema=MESSAGE_KEYS.schema,
    )
    lake.append(MESSAGE_KEYS.name, index, "t", 1)

    counted = erase(cfg, lake, "id LIKE 'old-%'", dry_run=True)["tables"]
    erased = erase(cfg, lake, "id LIKE 'old-%'")["tables"]
    # the dry run counts what the erase removes (it counted the shared index rows too: 6, a review)
    assert counted[MESSAGE_KEYS.name]["rows"] == erased[MESSAGE_KEYS.name]["rows"] == 2, (counted, erased)
    assert sorted(lake.read_arrow("messages", columns=["id"]).column("id").to_pylist()) == ["new-1", "new-2"]
    left = {(r["key"], r["seq"]) for r in lake.read_arrow(MESSAGE_KEYS.name).to_pylist()}
    assert left == {("m-1", 1), ("m-2", 2), ("new-1", 1), ("new-2", 2)}, left


def test_an_erase_whose_step_locks_went_with_their_connection_deletes_no_journal_row(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An erase holds the bodies and transform steps off while it deletes. Its lock sessions ended (a
    restart) after its typed deletes, a bodies step typed the erased messages back, and once their journal
    rows were gone no erase could find them again (a review). It now fails before the journal's delete,
    and the same erase again removes everything."""
    from queuelake import kill_points
    from queuelake.errors import TransportError
    from queuelake.pipeline import step_locks

    cfg = from_dict(
        {"transport": {"connection": fresh_pg_uri}, "lake": {"root": str(tmp_path), "engine": "delta-rs"}}, env={}
    )
    lake = open_lake(cfg.lake)
    append(lake, batch(SALES, range(0, 50), NOW, message_ids=ids("gone", 50)))
    real = kill_points.reached

    def restarted_after_the_derived_deletes(point: str) -> None:
        if point == "erase_derived_removed":
            with db.connect(cfg.transport) as admin:
                admin.raw.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name LIKE 'queuelake-%-lock'"
                )
                admin.commit()
        real(point)

    monkeypatch.setattr(kill_points, "reached", restarted_after_the_derived_deletes)
    with step_locks.steps_stopped(cfg, "erase", 5.0):
        with pytest.raises(TransportError, match="erase: its hold on the transform step went with its database"):
            erase(cfg, lake, PREDICATE)
    assert read_table(str(tmp_path / "messages")).num_rows == 50, "a journal row was deleted"
    monkeypatch.undo()
    with step_locks.steps_stopped(cfg, "erase", 5.0):
        assert erase(cfg, lake, PREDICATE)["tables"]["messages"]["rows"] == 50
    assert read_table(str(tmp_path / "messages")).num_rows == 0


class _WholeReadRefused:
    """A lake whose ``read_arrow`` of ``refused`` fails: what an erase reads of a big table must go
    through its filter, batch by batch (``matching_reduced``), never the table's whole column."""

    def __init__(self, lake: object, refused: set[str]) -> None:
        self._lake = lake
        self._refused = refused

    def read_arrow(self, table: str, *args: object, **kwargs: object) -> pa.Table:
        assert table not in self._refused, f"{table} read whole"
        return self._lake.read_arrow(table, *args, **kwargs)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._lake, name)


def test_the_keys_of_a_few_erased_rows_are_found_without_reading_a_derived_table_whole(tmp_path: Path) -> None:
    """An erase of 5 ids on a journal of 10M rows peaked at 2.5 GB: the id index's keys (20M rows) and
    each typed table's message ids were read whole to find the few erased (a review). They are read
    through a filter on the erased keys, each batch reduced as it is read; the filters found are the
    same, naming only what the tables hold."""
    from queuelake.lake.record_tables import MESSAGE_KEYS
    from queuelake.pipeline.store import erase as erasing
    from queuelake.pipeline.store import typed

    n = 3_000
    cfg = config(tmp_path)
    lake = open_lake(cfg.lake)
    for part in range(3):  # three files
        seqs = range(part * n + 1, (part + 1) * n + 1)
        append(lake, batch(SALES, seqs, NOW, message_ids=[f"m-{s}" for s in seqs]))
    every = range(1, 3 * n + 1)
    index = pa.table(
        {
            "key": [f"m-{s}" for s in every],
            "kind": ["message_id"] * (3 * n),
            "queue": [SALES] * (3 * n),
            "seq": list(every),
            "upto": [3] * (3 * n),
            "rewrite": [0] * (3 * n),
        },
        schema=MESSAGE_KEYS.schema,
    )
    lake.append(MESSAGE_KEYS.name, index, "t", 1)
    orders = pa.table({"message_id": [f"m-{s}" for s in every], "total": [float(s) for s in every]})
    lake.append("body_orders", orders, "t", 1)
    guarded = _WholeReadRefused(lake, {MESSAGE_KEYS.name, "body_orders"})
    journal = erasing.table_engine(lake, "messages")
    wanted = ["m-7", "m-2999", "m-3001", "m-8999"]
    selected = erasing.row_filter(f"message_id IN ({', '.join(repr(w) for w in wanted)})", journal.schema("messages"))
    keys = journal.matching_rows("messages", selected, erasing.KEYS)

    derived = erasing.key_filters(guarded, MESSAGE_KEYS, keys)
    typed_filters = typed.message_filters(guarded, "body_orders", pa.array([*wanted, "m-unknown", None]))

    assert [lake.count_rows(MESSAGE_KEYS.name, f).rows for f in derived] == [4]
    assert typed_filters and sum(lake.count_rows("body_orders", f).rows for f in typed_filters) == 4
    assert typed.message_filters(guarded, "body_orders", pa.array(["m-unknown"])) == []
    done = erase(cfg, lake, f"message_id IN ({', '.join(repr(w) for w in wanted)})")
    assert done["tables"]["messages"]["rows"] == 4, done
    assert lake.read_arrow(MESSAGE_KEYS.name, columns=["key"]).num_rows == 3 * n - 4

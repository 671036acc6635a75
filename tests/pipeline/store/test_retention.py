"""Retention (``maintain`` with ``lake.retention``): journal rows past their age leave the journal,
whole files dropped, mixed files rewritten, nothing younger touched; a dry run changes nothing; and
beside a real drain nothing drained is lost."""

from __future__ import annotations

import datetime as dt
import json
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.errors import ConfigError
from queuelake.lake.engines import open_lake
from queuelake.lake.increments import added_files
from queuelake.lake.reading import read_table
from queuelake.pipeline.store import retention
from queuelake.pipeline.store.typed import body_tables as typed_tables
from queuelake.transport import db, installer
from queuelake.transport.table_refs import queue_ref

from tests.helpers.cli import run_cli
from tests.helpers.journal_rows import UTC, append, batch
from tests.helpers.jvm import require_delta_jvm
from tests.helpers.typed_lake import ORDERS, ids_of, typed_lake

NOW = dt.datetime.now(UTC)
AUDIT = '"public"."audit"'
ERROR = '"public"."error"'
SALES = '"public"."Sales"'
BILLING = '"public"."Billing"'


def days_ago(days: float) -> dt.datetime:
    return NOW - dt.timedelta(days=days)


def config(root: Path, rules: list[dict], default_days: int | None = None, **more):
    lake = {"root": str(root), "engine": "delta-rs", "retention": {"rules": rules, "default_days": default_days}}
    return from_dict({"transport": {"connection": "x"}, "lake": lake, **more}, env={})


RULES = [
    {"queue": "audit", "outcome": "landed", "days": 400},  # a short address, canonicalised as the drain does
    {"outcome": "expired", "days": 30},  # expired rows' identities; error rows: no rule, kept for ever
]


def seeded(root: Path):
    """Five files: audit all old, audit mixed, audit young, error very old, expired rows old."""
    cfg = config(root, RULES)
    lake = open_lake(cfg.lake)
    append(lake, batch(AUDIT, range(0, 100), days_ago(500)))
    append(lake, batch(AUDIT, range(100, 200), [days_ago(500 if i < 40 else 399) for i in range(100)]))
    append(lake, batch(AUDIT, range(200, 300), days_ago(1)))
    append(lake, batch(ERROR, range(0, 50), days_ago(3000)))
    append(lake, batch(BILLING, range(0, 20), days_ago(31), outcome="expired"))
    append(lake, batch(BILLING, range(20, 30), days_ago(29), outcome="expired"))
    return cfg, lake


def keys(lake) -> set[tuple[str, int]]:
    table = lake.read_arrow("messages", columns=["queue", "seq"])
    return set(zip(table.column("queue").to_pylist(), table.column("seq").to_pylist(), strict=True))


def test_rules_remove_what_is_past_its_age_whole_files_unrewritten(tmp_path: Path) -> None:
    cfg, lake = seeded(tmp_path)
    before_version = lake.table_version("messages")
    before = keys(lake)

    dry = retention.apply(cfg, lake, dry_run=True).summary()
    assert lake.table_version("messages") == before_version and keys(lake) == before  # changed nothing
    audit, expired = dry["rules"]
    assert audit["rule"] == 'queue="public"."audit" outcome=landed days=400'
    assert (audit["rows"], audit["files_removed"], audit["files_rewritten"]) == (140, 2, 1)
    assert (expired["rows"], expired["files_removed"], expired["files_rewritten"]) == (20, 1, 0)

    done = retention.apply(cfg, lake).summary()
    audit, expired = done["rules"]
    # the all-old file leaves the log unrewritten; the mixed one is rewritten with its 60 young rows
    assert (audit["rows"], audit["files_removed"], audit["files_rewritten"]) == (140, 2, 1)
    assert (expired["rows"], expired["files_removed"], expired["files_rewritten"]) == (20, 1, 0)
    gone = {(AUDIT, s) for s in range(140)} | {(BILLING, s) for s in range(20)}
    assert keys(lake) == before - gone  # nothing younger than its limit, no error row, touched

    again = retention.apply(cfg, lake).summary()  # idempotent: nothing is past its age any more
    assert again["rows_removed"] == 0 and lake.table_version("messages") == before_version + 2


def test_rewritten_rows_are_not_new_to_increments(tmp_path: Path) -> None:
    """A delete re-adds a rewritten file's kept rows with dataChange: true; transform and publish must
    not see them as new journal rows."""
    cfg, lake = seeded(tmp_path)
    version = lake.table_version("messages")
    retention.apply(cfg, lake)
    assert added_files(lake.path("messages"), version, lake.table_version("messages")) == []
    append(lake, batch(AUDIT, range(300, 310), NOW))
    assert len(added_files(lake.path("messages"), version, lake.table_version("messages"))) == 1


def test_first_matching_rule_decides_and_default_applies_to_the_rest(tmp_path: Path) -> None:
    cfg, lake = seeded(tmp_path)
    cfg = config(tmp_path, [{"queue": "error", "days": None}, *RULES], default_days=100)
    figures = retention.apply(cfg, lake, dry_run=True).summary()
    assert [r["rule"] for r in figures["rules"]] == [
        'queue="public"."audit" outcome=landed days=400',
        "outcome=expired days=30",
        "default days=100",
    ]
    assert figures["rules"][2]["rows"] == 0  # the error rows (3000 days) are kept by the first rule
    cfg = config(tmp_path, RULES, default_days=100)
    assert retention.apply(cfg, lake, dry_run=True).summary()["rules"][2]["rows"] == 50  # now they are not


def test_zero_days_and_no_journal_and_bad_rules(tmp_path: Path) -> None:
    cfg = config(tmp_path, [{"queue": "audit", "days": 0}])
    lake = open_lake(cfg.lake)
    assert retention.apply(cfg, lake).note == "no journal yet: nothing to do"
    assert retention.apply(config(tmp_path, []), lake).note.startswith("no retention rule")
    append(lake, batch(AUDIT, range(0, 10), days_ago(0.001)))
    append(lake, batch(SALES, range(0, 10), days_ago(900)))
    assert retention.apply(cfg, lake).summary()["rows_removed"] == 10  # 0 days: everything drained before now
    assert keys(lake) == {(SALES, s) for s in range(10)}
    for bad, words in (
        ({"days": -1}, "0 or more"),
        ({"days": "thirty"}, "whole number"),  # "30" as text is read as 30, as every number key is
        ({"outcome": "lost", "days": 3}, "outcome must be"),
        ({"queue": "audit"}, "give days"),
        ({"queue": "audit", "days": 3, "age": 1}, "unknown key"),
    ):
        with pytest.raises(ConfigError, match=words):
            config(tmp_path, [bad])


def test_ages_back_to_year_one_and_beyond(tmp_path: Path) -> None:
    """A rule whose age reaches back before year 1 removes nothing (``days: 800000`` failed every
    ``maintain`` with an OverflowError); one reaching back into the first millennium removes the rows
    drained before it (its cutoff was written ``'931-03-03...'``, which the delete could not parse)."""
    cfg = config(tmp_path, [{"queue": "audit", "days": 800_000}, {"queue": "Sales", "days": 400_000}])
    lake = open_lake(cfg.lake)
    ancient = dt.datetime(1, 1, 1, tzinfo=UTC)
    append(lake, batch(AUDIT, range(0, 4), ancient))
    append(lake, batch(SALES, range(0, 4), [ancient, ancient, NOW, dt.datetime(931, 1, 1, tzinfo=UTC)]))
    before = keys(lake)
    dry = retention.apply(cfg, lake, dry_run=True).summary()
    assert [rule["rows"] for rule in dry["rules"]] == [0, 3], dry
    done = retention.apply(cfg, lake).summary()
    assert [rule["rows"] for rule in done["rules"]] == [0, 3], done
    assert done["rules"][0]["cutoff"] == "0001-01-01T00:00:00+00:00"
    assert keys(lake) == before - {(SALES, 0), (SALES, 1), (SALES, 3)}


REPO = Path(__file__).resolve().parents[3]


def cli(args: list[str], uri: str, cwd: Path) -> tuple[dict, str, int]:
    result = run_cli(args, uri, cwd=cwd)
    assert result.summary, result
    return result.summary, result.stderr, result.returncode


def write_config(path: Path, root: Path, rules: list[dict], **drain) -> Path:
    path.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
                "lake": {"root": str(root), "engine": "delta-rs", "retention": {"rules": rules}},
                "drain": {"queues": ["Sales"], **drain},
            }
        )
    )
    return path


@pytest.mark.slow
def test_maintain_cli_dry_run_then_retention_recorded_in_runs(tmp_path: Path) -> None:
    from queuelake.pipeline.key_index import build

    cfg, lake = seeded(tmp_path / "lake")
    build.update(lake)  # the id index an earlier maintain built
    conf = write_config(tmp_path / "job.yaml", tmp_path / "lake", RULES)
    before = keys(lake)
    dry, log, code = cli(["maintain", "-c", str(conf), "--dry-run"], "x", tmp_path)
    assert code == 0 and dry["status"] == "ok" and dry["dry_run"] is True, dry
    assert dry["retention"]["rows_removed"] == 160 and dry["retention"]["files_removed"] == 3, dry
    assert dry["retention"]["index_rows_removed"] == 160, dry
    assert "would remove 140 row(s)" in log, log
    assert "retention message_keys: 140 row(s) of the removed journal rows counted" in log, log
    assert keys(lake) == before and not lake.exists("runs")  # nothing changed, nothing recorded

    done, log, code = cli(["maintain", "-c", str(conf)], "x", tmp_path)
    assert code == 0 and done["retention"]["rows_removed"] == 160, done
    assert done["retention"]["index_rows_removed"] == 160, done
    assert "retention message_keys: 140 row(s) of the removed journal rows removed" in log, log
    assert len(keys(lake)) == len(before) - 160
    assert index_keys(lake) == keys(lake)
    runs = read_table(str(tmp_path / "lake" / "runs"))
    row = runs.filter(pc.equal(runs.column("table"), "messages")).to_pylist()[0]
    assert (row["rows_removed"], row["files_removed"], row["files_rewritten"]) == (160, 3, 1)
    # the id index's row says what retention removed of it too (only the journal's did: a review)
    index_row = runs.filter(pc.equal(runs.column("table"), "message_keys")).to_pylist()[0]
    assert index_row["rows_removed"] == 160, index_row


def test_a_maintain_failing_after_its_retention_says_what_retention_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Retention's deletes are committed before the compaction and the id index: a maintain that failed
    there (a store's reset) reported nothing of the 160 rows already gone from the journal (a review)."""
    from queuelake import cli as cli_mod
    from queuelake.errors import LakeError
    from queuelake.pipeline.key_index import build

    _, lake = seeded(tmp_path / "lake")
    conf = write_config(tmp_path / "job.yaml", tmp_path / "lake", RULES)
    monkeypatch.setenv("QUEUELAKE_CONNECTION", "x")

    def reset(_lake: object) -> None:
        raise LakeError("lake table message_keys: object storage error: connection reset")

    monkeypatch.setattr(build, "update", reset)
    assert cli_mod.main(["maintain", "-c", str(conf)]) == 1
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["status"] == "failed" and "connection reset" in summary["error"], summary
    assert summary["retention"]["rows_removed"] == 160 and summary["retention"]["files_removed"] == 3, summary
    assert len(keys(lake)) == 300 + 50 + 30 - 160
    # recorded in runs too: the journal's row with what retention removed, and the failure
    runs = read_table(str(tmp_path / "lake" / "runs"))
    rows = runs.filter(pc.equal(runs.column("run_id"), summary["run_id"])).to_pylist()
    journal = next(r for r in rows if r["table"] == "messages")
    assert journal["rows_removed"] == 160 and journal["status"] == "ok", rows
    assert [r["status"] for r in rows if r["table"] == "(maintain)"] == ["failed"], rows


def test_a_maintain_stopped_after_its_compaction_says_what_it_had_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C while maintain brings the id index up to date: the interrupted summary said nothing of the
    tables already compacted (a review). It names them, beside what retention removed."""
    from queuelake import cli as cli_mod
    from queuelake.pipeline.key_index import build

    seeded(tmp_path / "lake")
    conf = write_config(tmp_path / "job.yaml", tmp_path / "lake", RULES)
    monkeypatch.setenv("QUEUELAKE_CONNECTION", "x")

    def stopped(_lake: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(build, "update", stopped)
    assert cli_mod.main(["maintain", "-c", str(conf)]) == 130
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["status"] == "interrupted", summary
    assert summary["retention"]["rows_removed"] == 160, summary
    assert list(summary["tables"]) == ["messages"] and summary["tables"]["messages"]["files_compacted"] == 4, summary
    # a stopped maintain left no runs row, its retention's deletions recorded nowhere (a review)
    runs = read_table(str(tmp_path / "lake" / "runs"))
    rows = runs.filter(pc.equal(runs.column("run_id"), summary["run_id"])).to_pylist()
    assert sorted((r["table"], r["status"]) for r in rows) == [("(maintain)", "interrupted"), ("messages", "ok")], rows
    assert next(r for r in rows if r["table"] == "messages")["rows_removed"] == 160, rows


def test_a_retention_stopped_between_its_rules_says_which_were_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C during retention's second rule: the first rule's rows were gone, and the summary said nothing,
    nor did ``runs``."""
    from queuelake import cli as cli_mod
    from queuelake.lake.delta_rs.engine import DeltaRsEngine

    seeded(tmp_path / "lake")
    conf = write_config(tmp_path / "job.yaml", tmp_path / "lake", RULES)
    monkeypatch.setenv("QUEUELAKE_CONNECTION", "x")
    delete_rows = DeltaRsEngine.delete_rows
    journal_deletes: list[int] = []

    def stopped_at_the_second_rule(self: DeltaRsEngine, table: str, where: object) -> object:
        if table == "messages":
            if journal_deletes:
                raise KeyboardInterrupt
            journal_deletes.append(1)
        return delete_rows(self, table, where)  # type: ignore[arg-type]

    monkeypatch.setattr(DeltaRsEngine, "delete_rows", stopped_at_the_second_rule)
    assert cli_mod.main(["maintain", "-c", str(conf)]) == 130
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["status"] == "interrupted", summary
    [applied] = summary["retention"]["rules"]
    assert applied["rows"] == 140 and summary["retention"]["rows_removed"] == 140, summary
    # recorded in runs too: the journal's row with the first rule's rows (none was written: a review)
    runs = read_table(str(tmp_path / "lake" / "runs"))
    rows = runs.filter(pc.equal(runs.column("run_id"), summary["run_id"])).to_pylist()
    assert [(r["table"], r["status"], r["rows_removed"]) for r in rows] == [("messages", "interrupted", 140)], rows


@pytest.mark.slow
def test_runs_made_before_the_retention_columns_gain_them(tmp_path: Path) -> None:
    """A ``runs`` table an older version made (without the new columns) takes maintain's row."""
    from queuelake.lake.record_tables import RUNS

    cfg, lake = seeded(tmp_path / "lake")
    old = pa.schema(
        [f for f in RUNS.schema if f.name not in ("rows_removed", "files_removed", "files_rewritten", "predicate")]
    )
    lake.create_table("runs", old)
    conf = write_config(tmp_path / "job.yaml", tmp_path / "lake", RULES)
    done, _, code = cli(["maintain", "-c", str(conf)], "x", tmp_path)
    assert code == 0, done
    assert "rows_removed" in lake.schema("runs").names


@pytest.mark.slow
def test_retention_beside_a_running_drain_loses_nothing(fresh_pg_uri: str, tmp_path: Path) -> None:
    """A real drain (subprocess, many batches) lands Sales while retention keeps deleting: old audit
    rows (whole files and a mixed one) and, with a 0-day rule, Sales rows already landed. Afterwards
    the journal holds every drained row except exactly those retention reports it removed."""
    root = tmp_path / "lake"
    cfg, lake = seeded(root)
    rules = [{"queue": "audit", "outcome": "landed", "days": 400}, {"queue": "Sales", "outcome": "landed", "days": 0}]
    conf = write_config(tmp_path / "job.yaml", root, rules, batch_size=500, workers_per_queue=2)
    cfg = config(root, rules, drain={"queues": ["Sales"]})
    setup = from_dict({"transport": {"connection": fresh_pg_uri}, "drain": {"queues": ["Sales"]}}, env={})
    with db.connect(setup.transport) as conn:
        installer.install(conn, installer.plan(setup))
        conn.commit()
        traffic.seed(conn, queue_ref("Sales", setup.transport), traffic.order_events(20000, seed=3))
    old_audit = {(AUDIT, s) for s in range(140)}
    before = keys(lake)

    removed: list[dict] = []
    stop = threading.Event()

    def keep_deleting() -> None:
        while not stop.is_set():
            removed.append(retention.apply(cfg, lake).summary())

    deleter = threading.Thread(target=keep_deleting)
    deleter.start()
    try:
        drained, log, code = cli(["drain", "-c", str(conf)], fresh_pg_uri, tmp_path)
    finally:
        stop.set()
        deleter.join()
    assert code == 0 and drained["status"] == "ok", (drained, log)
    dequeued = drained["dequeued"]
    assert dequeued == 20000

    def removed_by(rule: str) -> int:
        return sum(r["rows"] for s in removed for r in s["rules"] if r["rule"].startswith(rule))

    after = keys(lake)
    sales_left = {k for k in after if k[0] == SALES}
    assert removed_by('queue="public"."audit"') == 140 and not (after & old_audit)
    assert after - {k for k in after if k[0] == SALES} == before - old_audit  # young audit, error, expired kept
    # every drained row is in the journal or was removed by retention, once
    table = lake.read_arrow("messages", columns=["queue", "seq"])
    assert table.num_rows == len(after)  # no duplicates
    assert len(sales_left) + removed_by('queue="public"."Sales"') == dequeued
    assert removed_by('queue="public"."Sales"') > 0  # the 0-day rule removed landed rows mid-drain
    assert len(removed) > 1  # retention ran during the drain


@pytest.mark.slow
@pytest.mark.deltaspark
def test_maintain_with_retention_on_a_delta_spark_lake(tmp_path: Path, spark) -> None:
    """Under lake.engine delta-spark the journal is still delta-rs's: retention deletes there, and the
    delta-spark tables are compacted and vacuumed as before."""
    import argparse

    from queuelake.commands.maintain import maintain
    from queuelake.lake.engines import journal_engine

    require_delta_jvm(spark)
    root = tmp_path / "lake"
    conf = tmp_path / "job.yaml"
    conf.write_text(
        json.dumps(
            {
                "transport": {"connection": "x"},
                "lake": {"root": str(root), "engine": "delta-spark", "retention": {"rules": RULES}},
            }
        )
    )
    cfg = from_dict(json.loads(conf.read_text()), env={})
    lake = open_lake(cfg.lake, spark)
    assert lake.name == "delta-spark"
    rs = journal_engine(lake)
    for table in (batch(AUDIT, range(0, 100), days_ago(500)), batch(AUDIT, range(100, 150), days_ago(1))):
        append(rs, table)
    for version in (1, 2):
        lake.append("outbound_x", pa.table({"key": [f"k{version}"], "body": ["{}"]}), "t", version)
    summary = maintain(argparse.Namespace(config=str(conf), dry_run=False))
    assert summary["retention"]["rows_removed"] == 100, summary
    assert summary["tables"]["outbound_x"]["engine"] == "delta-spark", summary
    assert summary["tables"]["messages"]["engine"] == "delta-rs", summary
    assert lake.read_arrow("messages").num_rows == 50 and lake.read_arrow("outbound_x").num_rows == 2
    assert lake.written_by("outbound_x") == "delta-spark"


@pytest.mark.slow
def test_retention_removes_the_typed_rows_of_the_journal_rows_it_removes(
    fresh_pg_uri: str, tmp_path: Path, spark, lake_engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dry run counts each typed table's files once: counted per delete's list of ids, a table of 2
    files said 600 (a review); here a list holds 3 ids, so the table's rows make several lists."""
    from deltalake import DeltaTable
    from queuelake.lake.engines import table_engine
    from queuelake.pipeline.key_index import build
    from queuelake.pipeline.store import typed as typed_store

    monkeypatch.setattr(typed_store, "MAX_IN_LIST", 3)
    cfg, lake = typed_lake(fresh_pg_uri, tmp_path / "lake", spark, lake_engine, retention={"default_days": 0})
    typed = typed_tables(lake)
    build.update(lake)  # the id index (delta-rs's under either engine), as maintain builds it
    index = table_engine(lake, "message_keys")
    indexed = index.read_arrow("message_keys").num_rows
    assert indexed >= len(ids_of(lake, "messages"))
    assert ORDERS in typed and all(ids_of(lake, t) for t in typed)
    journal = len(ids_of(lake, "messages"))
    unparsed = lake.read_arrow("body_unparsed").num_rows
    assert unparsed > 0  # the corpus has bodies that do not parse

    dry = retention.apply(cfg, lake, dry_run=True).summary()
    counted = dry["rules"][0]["typed"]
    assert dry["rows_removed"] == journal and counted[ORDERS]["rows"] == len(ids_of(lake, ORDERS)), dry
    assert len(ids_of(lake, ORDERS)) > 3, "the rows make one list of ids: the test could not fail"
    assert counted[ORDERS]["files_removed"] == len(DeltaTable(str(tmp_path / "lake" / ORDERS)).file_uris()), dry
    assert counted["body_unparsed"]["rows"] == unparsed, dry
    assert dry["index_rows_removed"] == indexed, dry
    assert all(ids_of(lake, t) for t in typed)  # the dry run changed nothing
    assert index.read_arrow("message_keys").num_rows == indexed

    done = retention.apply(cfg, lake).summary()
    assert done["rows_removed"] == journal, done
    removed = done["rules"][0]["typed"]
    assert set(removed) >= set(typed) and removed[ORDERS]["rows"] == counted[ORDERS]["rows"], done
    assert ids_of(lake, "messages") == [] and all(ids_of(lake, t) == [] for t in typed)
    assert removed["body_unparsed"]["rows"] == unparsed and lake.read_arrow("body_unparsed").num_rows == 0, done
    assert done["index_rows_removed"] == indexed and index.read_arrow("message_keys").num_rows == 0, done


@pytest.mark.slow
def test_a_maintain_killed_inside_retention_is_finished_by_the_next(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """``maintain`` SIGKILLed after a rule's typed, unparsed and index rows went, its journal rows not yet:
    they are still there, so the next ``maintain`` finds them again and removes them; nothing of theirs
    is left anywhere. (When the journal went first, a kill after it left the typed rows for good: the
    next run's rule matched nothing.)"""
    from queuelake.lake.engines import table_engine
    from queuelake.pipeline.key_index import build

    root = tmp_path / "lake"
    cfg, lake = typed_lake(fresh_pg_uri, root, spark, "delta-rs", retention={"default_days": 0})
    build.update(lake)
    typed = typed_tables(lake)
    journal = len(ids_of(lake, "messages"))
    assert ORDERS in typed and journal and lake.read_arrow("body_unparsed").num_rows
    conf = write_config(tmp_path / "job.json", root, [{"days": 0}])
    killed = run_cli(
        ["maintain", "-c", str(conf)], "x", cwd=tmp_path, QUEUELAKE_TEST_KILL_AT="retention_derived_removed"
    )
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert len(ids_of(lake, "messages")) == journal  # the journal's rows are still there
    assert all(ids_of(lake, t) == [] for t in typed) and lake.read_arrow("body_unparsed").num_rows == 0

    done, log, code = cli(["maintain", "-c", str(conf)], "x", tmp_path)
    assert code == 0 and done["retention"]["rows_removed"] == journal, (done, log)
    assert ids_of(lake, "messages") == [] and all(ids_of(lake, t) == [] for t in typed)
    assert table_engine(lake, "message_keys").read_arrow("message_keys").num_rows == 0


def index_keys(lake) -> set[tuple[str, int]]:
    table = lake.read_arrow("message_keys", columns=["queue", "seq"])
    return set(zip(table.column("queue").to_pylist(), table.column("seq").to_pylist(), strict=True))


def interleaved(root: Path):
    """Sales 100 days old, its quarantined rows kept by a longer rule between landed ones that go (four
    runs of removed seqs); audit all old; error young; the index built over all but the last file."""
    from queuelake.pipeline.key_index import build

    cfg = config(root, [{"outcome": "quarantined", "days": 1000}], default_days=30)
    lake = open_lake(cfg.lake)
    old = days_ago(100)
    for seqs, outcome in (
        (range(0, 10), "landed"),
        (range(10, 12), "quarantined"),
        (range(12, 50), "landed"),
        (range(50, 51), "quarantined"),
        (range(51, 80), "landed"),
        (range(80, 81), "quarantined"),
        (range(81, 100), "landed"),
    ):
        append(lake, batch(SALES, seqs, old, outcome=outcome))
    append(lake, batch(AUDIT, range(0, 40), old))
    append(lake, batch(ERROR, range(0, 5), days_ago(1)))
    build.update(lake)
    append(lake, batch(AUDIT, range(40, 50), old))  # drained since the last maintain: not indexed yet
    return cfg, lake


def ids_at(lake, queue: str, seqs: list[int]) -> list[str]:
    rows = lake.read_arrow("messages", columns=["queue", "seq", "message_id"]).to_pylist()
    return [r["message_id"] for r in rows if r["queue"] == queue and r["seq"] in seqs]


@pytest.mark.parametrize("max_ranges", [16, 2])
def test_retention_removes_the_index_rows_of_the_rows_it_removes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, max_ranges: int
) -> None:
    """With 2 ranges a queue at most, Sales's narrower gaps are bridged: their kept rows are excluded
    by the NOT IN list of the delete's SQL instead."""
    from queuelake.pipeline.find.search import find
    from queuelake.pipeline.key_index import build
    from queuelake.pipeline.store import index_ranges
    from queuelake.pipeline.where import run as where

    monkeypatch.setattr(index_ranges, "MAX_RANGES", max_ranges)
    ranges = {16: 4 + 1, 2: 2 + 1}[max_ranges]  # Sales cut by its three kept stretches; audit one range
    cfg, lake = interleaved(tmp_path)
    kept_ids = ids_at(lake, SALES, [10, 50, 80]) + ids_at(lake, ERROR, [2])
    gone_ids = ids_at(lake, SALES, [0, 49, 99]) + ids_at(lake, AUDIT, [0, 45])
    indexed = index_keys(lake)
    assert len(indexed) == 145 and (AUDIT, 45) not in indexed
    journal_version = lake.table_version("messages")

    dry = retention.apply(cfg, lake, dry_run=True).summary()
    assert dry["rows_removed"] == 146 and dry["index_rows_removed"] == 146 - 10, dry  # audit 40..49: no index row yet
    assert dry["rules"][1]["message_keys"]["ranges"] == ranges, dry
    assert index_keys(lake) == indexed and lake.table_version("messages") == journal_version  # changed nothing

    with caplog.at_level("INFO", logger="queuelake"):
        done = retention.apply(cfg, lake).summary()
    assert done["rows_removed"] == 146 and done["index_rows_removed"] == 146, done
    assert done["rules"][1]["message_keys"]["ranges"] == ranges, done
    assert done["rules"][1]["message_keys"]["seqs_kept_inside"] == {16: 0, 2: 2}[max_ranges], done
    assert (
        f"retention message_keys: 146 row(s) of the removed journal rows removed, named by {ranges} seq range(s)"
        in caplog.text
    )
    assert (
        index_keys(lake)
        == keys(lake)
        == {(SALES, 10), (SALES, 11), (SALES, 50), (SALES, 80)} | {(ERROR, s) for s in range(5)}
    )

    build.update(lake)  # the next maintain's build: the removed rows drained since the last one stay out
    assert index_keys(lake) == keys(lake)
    for kept in kept_ids:  # answered through the index: the kept rows' files are covered by it
        found = find(lake, "message", kept)
        assert found.rows.num_rows == 1 and found.index["used"] and found.index["candidates"] == 1, found.index
        answer = where.where(cfg, lake, None, where.Query(by="message", text=kept, peek=False))
        assert [p.place for p in answer.places] and answer.journal["index"]["used"], answer
    for gone in gone_ids:
        found = find(lake, "message", gone)
        assert found.rows.num_rows == 0 and found.index["used"] and found.index["candidates"] == 0, found.index
    again = retention.apply(cfg, lake).summary()
    assert again["rows_removed"] == 0 and again["index_rows_removed"] == 0


def test_index_rows_without_an_index_and_after_a_rewrite(tmp_path: Path) -> None:
    """No index: retention says nothing of one. A rewritten index (files of disjoint key ranges, where a
    range's rows mix queues and seqs) loses exactly the removed rows' rows too."""
    from queuelake.pipeline.key_index import build, rewrite

    cfg, lake = seeded(tmp_path)
    assert "message_keys" not in retention.apply(cfg, lake, dry_run=True).summary()["rules"][0]
    build.update(lake)
    assert rewrite.rewrite(lake).files_written >= 1
    done = retention.apply(cfg, lake).summary()
    assert done["rows_removed"] == done["index_rows_removed"] == 160, done
    assert index_keys(lake) == keys(lake)


def copies_lake(uri: str, root: Path, spark, engine: str):
    """Six orders sent to Sales (their business copies), three of them also audited, and a body that does
    not parse sent to both: drained and through ``bodies``. Retention removes Sales's rows only."""
    from queuelake.pipeline.bodies import run as bodies_run

    from tests.helpers.bodies import send
    from tests.helpers.bodies_corpus import corpus as c
    from tests.helpers.stages import drain

    cfg = from_dict(
        {
            "transport": {"connection": uri},
            "lake": {"root": str(root), "engine": engine, "retention": {"rules": [{"queue": "Sales", "days": 0}]}},
            "drain": {"queues": ["Sales", "audit"], "batch_size": 50},
        },
        env={},
    )
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        conn.commit()
    orders = [c.message(c.ORDER_V1, c.system_text_json(i, 1), "application/json", i) for i in range(6)]
    broken = c.message(c.ORDER_V1, b'{"OrderId": "broken"', "application/json", 99)
    send(cfg, "Sales", orders + [broken])
    send(cfg, "audit", [traffic.audit_copy(m, "Billing", c.START, 30) for m in orders[:3] + [broken]])
    lake = open_lake(cfg.lake, spark)
    assert drain(cfg, lake)["status"] == "ok"
    assert bodies_run.bodies(cfg, spark, lake)["status"] == "ok"
    return cfg, lake


@pytest.mark.slow
def test_a_typed_row_goes_only_with_the_last_journal_copy_of_its_message(
    fresh_pg_uri: str, tmp_path: Path, spark, lake_engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rule on the business queue alone leaves the audited orders' typed rows (their audit copies stay:
    ``where --field`` still finds them) and takes the others'; ``body_unparsed`` loses the removed rows'
    own rows. The dry run counts what the run removes, also when another rule takes the last copy. The
    copies are looked up by more ids than the lookup's SQL text lists (it is never run)."""
    from queuelake.pipeline.where import run as where

    monkeypatch.setattr(retention, "_SQL_IDS", 3)
    cfg, lake = copies_lake(fresh_pg_uri, tmp_path / "lake", spark, lake_engine)
    assert len(ids_of(lake, ORDERS)) == 6
    unparsed = lake.read_arrow("body_unparsed", columns=["queue"]).column("queue").to_pylist()
    assert unparsed == [SALES], unparsed  # one row a message too, keyed by its business copy's (queue, seq)
    broken = set(ids_of(lake, "body_unparsed"))

    both = from_dict(
        {
            "transport": {"connection": fresh_pg_uri},
            "lake": {
                "root": str(tmp_path / "lake"),
                "engine": lake_engine,
                "retention": {"rules": [{"queue": "Sales", "days": 0}, {"queue": "audit", "days": 0}]},
            },
        },
        env={},
    )
    dry_both = retention.apply(both, lake, dry_run=True).summary()
    assert [r["typed"][ORDERS]["rows"] for r in dry_both["rules"]] == [3, 3], dry_both  # the last copy decides
    assert [r["typed_messages_kept"] for r in dry_both["rules"]] == [4, 0], dry_both

    dry = retention.apply(cfg, lake, dry_run=True).summary()
    assert dry["rows_removed"] == 7 and dry["rules"][0]["typed"][ORDERS]["rows"] == 3, dry
    assert dry["rules"][0]["typed"]["body_unparsed"]["rows"] == 1, dry
    assert len(ids_of(lake, ORDERS)) == 6  # the dry run changed nothing

    done = retention.apply(cfg, lake).summary()
    assert done["rows_removed"] == 7 and done["rules"][0]["typed"][ORDERS]["rows"] == 3, done
    assert done["rules"][0]["typed"]["body_unparsed"]["rows"] == 1 and done["rules"][0]["typed_messages_kept"] == 4
    audited = {r["message_id"] for r in lake.read_arrow("messages", columns=["message_id"]).to_pylist()}
    assert len(audited) == 4 and set(ids_of(lake, ORDERS)) == audited - broken
    assert lake.read_arrow("body_unparsed").num_rows == 0  # went with its journal row

    for order, places in (("order-1", [AUDIT]), ("order-4", [])):
        answer = where.where(cfg, lake, None, where.Query(by="key", text=order, field="OrderId", peek=False))
        assert [p.location for p in answer.places if p.source == "journal"] == places, answer


def test_each_derived_tables_rows_removed_summed_over_the_rules() -> None:
    """maintain's ``runs`` rows of the typed tables, body_unparsed and the id index say what retention
    removed of them (only the journal's row did: a review); a table nothing was removed from has none."""
    result = retention.RetentionResult(dry_run=False)
    result.rules = [
        {"rows": 7, "typed": {ORDERS: {"rows": 3}, "body_unparsed": {"rows": 1}}, "message_keys": {"rows": 7}},
        {"rows": 5, "typed": {ORDERS: {"rows": 2}, "body_other": {"rows": 0}}, "message_keys": {"rows": 5}},
        {"rows": 0, "typed": {}},
    ]
    assert result.derived_rows() == {ORDERS: 5, "body_unparsed": 1, "message_keys": 12}

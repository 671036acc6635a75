"""Honest run records: every command writes its ``runs`` rows, each with the counts that apply to it
(the catalogue's RUNS_COLUMNS_BY_COMMAND), and no column of the schema stays null for ever."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.lake import catalogue, record_tables, stage_tables
from queuelake.lake.reading import read_table
from queuelake.pipeline.runs import append_runs
from queuelake.transport import db, installer, queues
from queuelake.transport.queues import OutgoingMessage
from queuelake.transport.table_refs import queue_ref

from tests.helpers.cli import REPO, cli, cli_logged, signalled_when_held

# null unless something went wrong: a run that failed, a round a user's expectations blocked
ON_FAILURE_ONLY = {"error", "failed_expectations"}


def test_a_command_cannot_record_a_count_that_is_not_its_own(tmp_path: Path) -> None:
    from queuelake.lake.engines import open_lake

    cfg = from_dict({"transport": {"connection": "x"}, "lake": {"root": str(tmp_path), "engine": "delta-rs"}}, env={})
    with pytest.raises(ValueError, match=r"transform does not record \['dequeued'\]"):
        append_runs(open_lake(cfg.lake), "r1", "transform", [{"dequeued": 3, "status": "ok"}])


@pytest.mark.slow
def test_every_command_records_its_runs(fresh_pg_uri: str, tmp_path: Path) -> None:
    lake_root = tmp_path / "lake"
    conf = tmp_path / "job.yaml"
    conf.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
                "lake": {
                    "root": str(lake_root),
                    "engine": "delta-rs",
                    "retention": {"rules": [{"outcome": "quarantined", "days": 400}]},  # maintain's counts
                },
                "spark": {"master": "local[1]", "conf": {"spark.sql.shuffle.partitions": "1"}},
                "drain": {"queues": ["Sales"], "batch_size": 100},
                "transforms": [
                    {
                        "name": "activity",
                        "sql": str(REPO / "sql/transforms/messages_per_endpoint.sql"),
                        "output": "outbound_activity",
                    },
                ],
                "publish": {"endpoint": "Lakehouse", "outputs": ["outbound_activity"]},
            }
        )
    )
    cfg = from_dict({"transport": {"connection": fresh_pg_uri}, "drain": {"queues": ["Sales"]}}, env={})
    sales = queue_ref("Sales", cfg.transport)
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=["Monitoring"]))
        conn.commit()
        traffic.seed(conn, sales, traffic.order_events(120, seed=5))

    ran, log = cli_logged(["run", "-c", str(conf)], fresh_pg_uri, tmp_path)
    assert ran["status"] == "ok", ran
    # each stage says what it did, per queue, table or output (issue 59: progress in every stage)
    assert '"public"."Sales": 120 message(s)' in log or "drain: 120 message(s)" in log, log
    assert "bodies: 120 row(s) read" in log and "transform activity: " in log, log
    assert "publish outbound_activity: batch 1 of 1 sent" in log, log
    with db.connect(cfg.transport) as conn:  # rows that expire before anyone receives them
        queues.send(conn, sales, [OutgoingMessage("{}", b"x", ttbr_ms=1) for _ in range(4)])
        conn.commit()
    time.sleep(0.05)
    purged, log = cli_logged(["purge-expired", "-c", str(conf)], fresh_pg_uri, tmp_path)
    assert purged["total"] == 4 and "removed 4 expired message(s)" in log, (purged, log)
    replayed, log = cli_logged(
        ["replay", "-c", str(conf), "--where", "queue like '%Sales%'", "--to", "Monitoring", "--limit", "3"],
        fresh_pg_uri,
        tmp_path,
    )
    assert replayed["status"] == "ok", replayed
    assert f"replay {replayed['replay_id']} batch 1/1: 3 rows" in log, log
    maintained, log = cli_logged(["maintain", "-c", str(conf)], fresh_pg_uri, tmp_path)
    assert maintained["status"] == "ok", maintained
    assert all(f"maintain {t} (table " in log for t in maintained["tables"]), log
    erased = cli(["erase", "-c", str(conf), "--where", "seq < 0"], fresh_pg_uri, tmp_path)  # selects nothing
    assert erased["status"] == "ok" and erased["tables"]["messages"]["rows"] == 0, erased

    rows = read_table(str(lake_root / record_tables.RUNS.name)).to_pylist()
    by_command: dict[str, list[dict]] = {}
    for row in rows:
        by_command.setdefault(row["command"], []).append(row)
    assert set(by_command) == set(record_tables.RUNS_COLUMNS_BY_COMMAND), sorted(by_command)
    for command, columns in record_tables.RUNS_COLUMNS_BY_COMMAND.items():
        mine = by_command[command]
        assert all(r["status"] == "ok" and r["seconds"] is not None for r in mine), (command, mine)
        for column in set(columns) - ON_FAILURE_ONLY:
            assert any(r[column] is not None for r in mine), f"{command} never records {column}"
        others = set(record_tables.RUNS.schema.names) - set(columns) - {"run_id", "command", "started_at", "ended_at"}
        for column in others - {"seconds", "status", "error"}:
            assert all(r[column] is None for r in mine), f"{command} records {column}, not one of its counts"
    always_null = {name for name in record_tables.RUNS.schema.names if all(r[name] is None for r in rows)}
    assert always_null <= ON_FAILURE_ONLY, always_null

    assert by_command["drain"][0]["dequeued"] == 120
    assert by_command["purge-expired"][0]["purged"] == 4
    idle, log = cli_logged(["purge-expired", "-c", str(conf)], fresh_pg_uri, tmp_path)  # says its steps: a review
    assert idle["total"] == 0 and 'purge-expired "public"."Sales": nothing to do' in log, (idle, log)
    assert by_command["transform"][0]["table"] == "outbound_activity" and by_command["transform"][0]["rows_in"] == 120
    assert by_command["publish"][0]["table"] == "outbound_activity" and by_command["publish"][0]["published"] == 1
    assert sum(r["published"] for r in by_command["replay"]) == 3
    assert {r["table"] for r in by_command["maintain"]} >= {"messages", "runs", "outbound_activity"}


def test_the_catalogue_names_every_table_the_docs_list() -> None:
    """docs/lake.md (the README's "Lake tables" once) describes every catalogued table."""
    page = (REPO / "docs" / "lake.md").read_text(encoding="utf-8")
    assert "Outbound tables" in page  # stage_tables.OUTBOUND: the transforms' own
    for table in catalogue.CATALOGUE:
        if table is stage_tables.OUTBOUND:
            continue
        shown = table.name.replace("{output}", "<output>").replace("{type}", "<type>")
        assert f"`{shown}`" in page, f"docs/lake.md does not describe {shown}"


def test_statuses_are_the_words_runs_and_summaries_hold() -> None:
    """``Status`` members are the words: equal to them, and written as them by JSON and Arrow."""
    import json

    import orjson
    import pyarrow as pa
    from queuelake.status import Status, worst

    assert Status.OK == "ok" and Status("incomplete") is Status.INCOMPLETE
    assert json.dumps({"s": Status.FAILED}) == '{"s": "failed"}'
    assert orjson.dumps({"s": Status.FAILED}) == b'{"s":"failed"}'
    assert pa.array([Status.BLOCKED], pa.string()).to_pylist() == ["blocked"]
    # the run's status: failed (or blocked) > incomplete > interrupted > ok; skipped counts as ok
    assert worst([Status.OK, Status.SKIPPED]) is Status.OK
    assert worst([Status.OK, Status.INTERRUPTED, Status.INCOMPLETE]) is Status.INCOMPLETE
    assert worst(["ok", "blocked", "incomplete"]) is Status.FAILED
    assert worst([]) is Status.OK


def test_runs_rows_not_written_fail_a_command_unless_it_was_stopped(monkeypatch) -> None:
    """A full disk at the runs rows: the summary's failure is the lake's, and a stopped command stays
    interrupted (its exit code is the stop's; it said "failed", exit 1: a review)."""
    from queuelake.pipeline import runs as runs_mod
    from queuelake.status import Status

    def full(*_args: object, **_kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runs_mod, "append_runs", full)
    failure = runs_mod.Run("drain").record_after_work(None, [{"table": "x"}])  # type: ignore[arg-type]
    assert failure["status"] == Status.FAILED and failure["error_kind"] == "lake", failure
    assert "No space left on device" in failure["error"]
    kept = runs_mod.unless_stopped(failure, Status.INTERRUPTED)
    assert "status" not in kept and kept["error"] == failure["error"]
    assert runs_mod.unless_stopped(failure, Status.OK) == failure
    # a command whose work failed keeps its own error; it said "the work is done" (a review)
    assert runs_mod.unless_stopped(failure, Status.FAILED) == {
        "runs_error": "OSError: [Errno 28] No space left on device"
    }
    assert runs_mod.unless_stopped({}, Status.FAILED) == {}


def test_a_stopped_purge_keeps_its_counts(fresh_pg_uri: str, tmp_path: Path) -> None:
    """SIGTERM after purge-expired's first batch: its log said 10,000 removed, its summary and runs rows
    said nothing (a review). It stops after the batch in hand, with its counts."""
    from queuelake.lake.engines import open_lake

    conf = tmp_path / "job.yaml"
    conf.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
                "lake": {"root": str(tmp_path / "lake")},
                "drain": {"queues": ["Sales"]},
            }
        )
    )
    cfg = from_dict({"transport": {"connection": fresh_pg_uri}, "drain": {"queues": ["Sales"]}}, env={})
    sales = queue_ref("Sales", cfg.transport)
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        queues.send(conn, sales, [OutgoingMessage("{}", b"x", ttbr_ms=1) for _ in range(25_000)])
        conn.commit()
    time.sleep(0.05)
    stopped = signalled_when_held(
        ["purge-expired", "-c", str(conf)], fresh_pg_uri, hold="purge_batch_done:30", cwd=tmp_path
    )
    summary = stopped.summary
    assert stopped.returncode == 143 and summary["status"] == "interrupted", stopped
    assert summary["total"] == 10_000 and summary["purged"] == {sales.canonical: 10_000}, summary
    runs = open_lake(from_dict(json.loads(conf.read_text()), env={"QUEUELAKE_CONNECTION": fresh_pg_uri}).lake)
    rows = [r for r in runs.read_arrow("runs").to_pylist() if r["command"] == "purge-expired"]
    assert [(r["purged"], r["status"]) for r in rows] == [(10_000, "interrupted")], rows

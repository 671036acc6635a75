"""One bodies step and one transform step per lake at a time (``pipeline/step_locks.py``), against a real
PostgreSQL: overlapping runs wrote the rows of the journal versions they shared twice, and an erase
while bodies ran left the erased bodies in the typed tables (found by a review)."""

from __future__ import annotations

import threading
from pathlib import Path

from queuelake.config import from_dict
from queuelake.pipeline import step_locks
from queuelake.transport import db, locks


def _config(uri: str, root: Path | str):
    return from_dict({"transport": {"connection": uri}, "lake": {"root": str(root)}}, env={})


def test_a_step_another_process_runs_on_the_same_lake_is_skipped(fresh_pg_uri: str, tmp_path: Path) -> None:
    cfg = _config(fresh_pg_uri, tmp_path / "lake")
    ran: list[str] = []
    with db.connect(cfg.transport) as other:  # a bodies step of another process, on this lake
        assert locks.try_lock(other, step_locks.lock_name(cfg, step_locks.BODIES))
        out = step_locks.one_at_a_time(cfg, step_locks.BODIES, lambda: ran.append("bodies") or {"status": "ok"})
        assert ran == [] and out["status"] == "ok" and "another bodies step" in out["skipped"]
        # the transform step, and the bodies step of another lake, are not held back
        assert step_locks.one_at_a_time(cfg, step_locks.TRANSFORM, lambda: {"status": "ok", "ran": True})["ran"]
        elsewhere = _config(fresh_pg_uri, tmp_path / "another lake")
        assert step_locks.one_at_a_time(elsewhere, step_locks.BODIES, lambda: {"status": "ok", "ran": True})["ran"]
    assert step_locks.one_at_a_time(cfg, step_locks.BODIES, lambda: {"status": "ok", "ran": True})["ran"]


def test_a_command_that_waits_takes_the_lock_once_the_running_step_ends(fresh_pg_uri: str, tmp_path: Path) -> None:
    """What erase does: it waits for a running bodies step, and holds the lock while it works."""
    cfg = _config(fresh_pg_uri, tmp_path / "lake")
    name = step_locks.lock_name(cfg, step_locks.BODIES)
    taken, release = threading.Event(), threading.Event()

    def running_bodies() -> None:
        with db.connect(cfg.transport) as other:
            assert locks.try_lock(other, name)
            taken.set()
            release.wait(60)

    worker = threading.Thread(target=running_bodies)
    worker.start()
    assert taken.wait(60)
    threading.Timer(1.0, release.set).start()
    with step_locks.held(cfg, step_locks.BODIES, wait_seconds=60) as got:
        assert got and release.is_set()
        with db.connect(cfg.transport) as third:  # held now: nobody else gets it
            assert not locks.try_lock(third, name)
    worker.join(60)


def test_without_a_shared_database_the_step_runs_unlocked(fresh_pg_uri: str, tmp_path: Path) -> None:
    """The embedded database is a server of the command's own; a database out of reach is said, not fatal."""
    embedded = from_dict({"transport": {"embedded": str(tmp_path / "pg")}, "lake": {"root": str(tmp_path)}}, env={})
    with step_locks.held(embedded, step_locks.BODIES) as got:
        assert got and not (tmp_path / "pg").exists(), "no server started for a lock"
    # a connection given wins over embedded (no server is started): the shared database locks
    both = from_dict(
        {"transport": {"connection": fresh_pg_uri, "embedded": str(tmp_path / "pg")}, "lake": {"root": str(tmp_path)}},
        env={},
    )
    with db.connect(both.transport) as other:
        assert locks.try_lock(other, step_locks.lock_name(both, step_locks.BODIES))
        with step_locks.held(both, step_locks.BODIES) as got:
            assert not got, "held by the other process"
    away = _config("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2", tmp_path)
    with step_locks.held(away, step_locks.TRANSFORM) as got:
        assert got


def test_one_lake_has_one_lock_however_its_root_is_written(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    names = {
        step_locks.lock_name(_config("x", root), step_locks.BODIES)
        for root in ("lake", str(tmp_path / "lake"), f"file://{tmp_path}/lake")
    }
    assert len(names) == 1
    s3 = {
        step_locks.lock_name(_config("x", root), step_locks.BODIES)
        for root in ("s3://b/lake", "s3://b/lake/", "s3a://b/lake")
    }
    assert len(s3) == 1 and not s3 & names
    azure = {
        step_locks.lock_name(_config("x", root), step_locks.BODIES)
        for root in ("abfss://c@acct.dfs.core.windows.net/lake", "abfs://c@acct.dfs.core.windows.net/lake/")
    }
    assert len(azure) == 1


def test_a_lock_whose_connection_is_lost_leaves_the_steps_outcome(fresh_pg_uri: str, tmp_path: Path) -> None:
    """A failover or an idle-session timeout ends the lock's session: its release failed, and that
    error replaced the step's result ("failed", exit 1, after the work was done: a review)."""
    cfg = _config(fresh_pg_uri, tmp_path / "lake")

    def step() -> dict:
        with db.connect(cfg.transport) as admin:
            admin.raw.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'queuelake-bodies-lock'"
            )
            admin.commit()
        return {"status": "ok", "ran": True}

    assert step_locks.one_at_a_time(cfg, step_locks.BODIES, step) == {"status": "ok", "ran": True}


def test_a_login_the_lock_statement_refuses_still_runs_the_step(fresh_pg_uri: str, tmp_path: Path) -> None:
    """A step that ran before the lock existed must not fail for it: a login refused the lock's statement
    (here a session whose advisory-lock function is revoked) runs the step unlocked, with a warning."""
    cfg = _config(fresh_pg_uri, tmp_path / "lake")
    with db.connect(cfg.transport) as admin:
        admin.raw.execute("DROP ROLE IF EXISTS no_locks")
        admin.raw.execute("CREATE ROLE no_locks LOGIN")
        admin.raw.execute("REVOKE EXECUTE ON FUNCTION pg_try_advisory_lock(bigint) FROM PUBLIC")
        admin.commit()
    try:
        user = fresh_pg_uri.replace("postgresql://postgres", "postgresql://no_locks", 1)
        assert user != fresh_pg_uri
        restricted = _config(user, tmp_path / "lake")
        assert step_locks.one_at_a_time(restricted, step_locks.BODIES, lambda: {"status": "ok", "ran": True})["ran"]
        # what publish is told (it then publishes unlocked too): the lock, in words, not a refusal of rows
        import pytest
        from queuelake.errors import RowsRefused, TransportError

        with db.connect(restricted.transport) as conn, pytest.raises(TransportError) as info:
            locks.try_lock(conn, "queuelake.publish:Lakehouse/outbound", what="publish outbound")
        assert not isinstance(info.value, RowsRefused)
        assert str(info.value).startswith("the session lock for publish outbound could not be taken: permission denied")
    finally:
        with db.connect(cfg.transport) as admin:
            admin.raw.execute("GRANT EXECUTE ON FUNCTION pg_try_advisory_lock(bigint) TO PUBLIC")
            admin.commit()


def test_erase_waits_for_a_running_transform_step_as_for_bodies(fresh_pg_uri: str, tmp_path: Path, monkeypatch) -> None:
    """Erase's purge removed journal files a running transform step read, which then failed
    (``PATH_NOT_FOUND``, found by a review): erase waits for either step, and says which one it
    waited for when it gives up, having erased nothing."""
    import argparse
    import json

    import pytest
    from queuelake.commands import erase
    from queuelake.errors import PipelineError

    conf = tmp_path / "erase.json"
    conf.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
                "lake": {"root": str(tmp_path), "engine": "delta-rs"},
            }
        )
    )
    monkeypatch.setenv("QUEUELAKE_CONNECTION", fresh_pg_uri)
    monkeypatch.setattr(erase, "ERASE_WAITS_SECONDS", 1.5)
    cfg = _config(fresh_pg_uri, tmp_path)
    args = argparse.Namespace(config=str(conf), where='queue = \'"public"."Sales"\'', dry_run=False, all=False)
    for step in (step_locks.TRANSFORM, step_locks.BODIES):
        with db.connect(cfg.transport) as other:  # that step, running in another process
            assert locks.try_lock(other, step_locks.lock_name(cfg, step))
            with pytest.raises(PipelineError, match=f"a {step} step has been running"):
                erase.erase(args)
    from queuelake import stopping

    with db.connect(cfg.transport) as other:  # a stop asked while it waits is said as a stop
        assert locks.try_lock(other, step_locks.lock_name(cfg, step_locks.TRANSFORM))
        stopping.request()
        try:
            with pytest.raises(stopping.Interrupted, match="waiting for the transform step"):
                erase.erase(args)
        finally:
            stopping.reset()
    with db.connect(cfg.transport) as other:  # erase gave both locks back
        assert all(
            locks.try_lock(other, step_locks.lock_name(cfg, s)) for s in (step_locks.BODIES, step_locks.TRANSFORM)
        )


def test_a_transform_catching_the_typed_tables_up_waits_for_a_running_bodies_step(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch
) -> None:
    """A transform that reads typed tables ran the bodies step itself without the lock: beside another
    bodies step (typed rows twice) and beside an erase, which then found no step to wait for, so the
    erased bodies were written back (found by a review). Its catch-up waits for the lock now."""
    import pytest
    from queuelake.errors import PipelineError
    from queuelake.lake.engines import open_lake
    from queuelake.pipeline.bodies import reader

    monkeypatch.setattr(reader, "CATCH_UP_WAITS_SECONDS", 1.5)
    cfg = from_dict(
        {"transport": {"connection": fresh_pg_uri}, "lake": {"root": str(tmp_path / "lake"), "engine": "delta-rs"}},
        env={},
    )
    lake = open_lake(cfg.lake)
    with db.connect(cfg.transport) as other:  # a bodies step, or an erase, of another process
        assert locks.try_lock(other, step_locks.lock_name(cfg, step_locks.BODIES))
        with pytest.raises(PipelineError, match="a bodies step has been running on this lake"):
            reader.BodyTables(cfg, None, lake)._catch_up()  # type: ignore[arg-type]
    reader.BodyTables(cfg, None, lake)._catch_up()  # type: ignore[arg-type]  # free: it runs (no journal yet)


def test_maintain_retention_waits_for_running_steps(fresh_pg_uri: str, tmp_path: Path, monkeypatch) -> None:
    """Retention beside a bodies step: bodies committed typed rows of the messages retention had just
    removed, with no journal row left for an erase to find them by (found by a review). Maintain's
    retention waits for a running bodies or transform step; without a retention rule it waits for none."""
    import argparse
    import json

    import pytest
    from queuelake.commands import maintain
    from queuelake.errors import PipelineError

    def conf(retention: dict) -> str:
        path = tmp_path / f"maintain{len(retention)}.json"
        lake = {"root": str(tmp_path / "lake"), "engine": "delta-rs", "retention": retention}
        path.write_text(json.dumps({"transport": {"connection": "${QUEUELAKE_CONNECTION}"}, "lake": lake}))
        return str(path)

    monkeypatch.setenv("QUEUELAKE_CONNECTION", fresh_pg_uri)
    monkeypatch.setattr(maintain, "MAINTAIN_WAITS_SECONDS", 1.5)
    (tmp_path / "lake").mkdir()
    cfg = _config(fresh_pg_uri, tmp_path / "lake")
    with db.connect(cfg.transport) as other:  # a bodies step of another process
        assert locks.try_lock(other, step_locks.lock_name(cfg, step_locks.BODIES))
        with pytest.raises(PipelineError, match="maintain: a bodies step has been running"):
            maintain.maintain(argparse.Namespace(config=conf({"default_days": 30}), dry_run=False))
        assert maintain.maintain(argparse.Namespace(config=conf({}), dry_run=False))["retention"] is not None


def test_a_stop_while_a_transform_waits_for_the_bodies_step_keeps_the_transforms_done(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch
) -> None:
    """A stop asked while the second transform's catch-up waited for a bodies step ended the command
    with the first transform's output committed but no ``runs`` row and no word of it in the summary (a
    review). The transforms done now keep both."""
    import pytest
    from queuelake import stopping
    from queuelake.lake.engines import open_lake
    from queuelake.pipeline import transform as transform_mod
    from queuelake.pipeline.bodies import reader
    from queuelake.pipeline.journal.schema import MESSAGES

    cfg = from_dict(
        {
            "transport": {"connection": fresh_pg_uri},
            "lake": {"root": str(tmp_path / "lake"), "engine": "delta-rs"},
            "transforms": [
                {"name": "t1", "function": "os:getcwd", "output": "out_t1"},
                {"name": "t2", "function": "os:getcwd", "output": "out_t2"},
                {"name": "t3", "function": "os:getcwd", "output": "out_t3"},
            ],
        },
        env={},
    )
    lake = open_lake(cfg.lake)

    def run_transform(spark, lake, t, suite=None, run_id="", config=None):  # type: ignore[no-untyped-def]
        if t.name == "t2":  # its function's first read of a typed table
            reader.BodyTables(config, spark, lake)._catch_up()
        return {"transform": t.name, "output": t.output, "status": "ok", "rows_in": 10, "rows_out": 10}

    monkeypatch.setattr(transform_mod, "run_transform", run_transform)
    monkeypatch.setattr(transform_mod.expectations, "load_journal", lambda config: {})
    real_exists = type(lake).exists
    monkeypatch.setattr(type(lake), "exists", lambda self, table: table == MESSAGES or real_exists(self, table))
    with db.connect(cfg.transport) as other:  # a bodies step of another process
        assert locks.try_lock(other, step_locks.lock_name(cfg, step_locks.BODIES))
        timer = threading.Timer(1.0, stopping.request)  # the scheduler's first SIGTERM, during the wait
        timer.start()
        try:
            with pytest.raises(stopping.Interrupted) as info:
                transform_mod.transform(cfg, None, lake)  # type: ignore[arg-type]
        finally:
            timer.cancel()
            stopping.reset()
    done = stopping.done_before(info.value)["transform"]
    assert [r["transform"] for r in done["transforms"]] == ["t1"], done
    assert done["interrupted_transform"] == "t2" and done["skipped"] == ["t3"], done
    assert real_exists(lake, "runs")
    assert [r["table"] for r in lake.read_arrow("runs").to_pylist()] == ["out_t1"]


def test_a_step_confirms_its_lock_before_each_commit(fresh_pg_uri: str, tmp_path: Path) -> None:
    """``confirm``: nothing to confirm without the lock (the embedded database), quiet while the lock's
    connection answers, a ``TransportError`` once a restart ended it (an erase may have run since)."""
    import pytest
    from queuelake.errors import TransportError

    cfg = _config(fresh_pg_uri, tmp_path / "lake")
    step_locks.confirm(step_locks.TRANSFORM)  # not held by this process: nothing to ask
    with step_locks.held(cfg, step_locks.TRANSFORM) as got:
        assert got
        step_locks.confirm(step_locks.TRANSFORM)
        step_locks.confirm(step_locks.TRANSFORM)  # and again: the check leaves no transaction open
        with db.connect(cfg.transport) as admin:
            admin.raw.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'queuelake-transform-lock'"
            )
            admin.commit()
        with pytest.raises(TransportError, match="transform: its lock on this lake went with its database connection"):
            step_locks.confirm(step_locks.TRANSFORM)
    step_locks.confirm(step_locks.TRANSFORM)  # released: nothing held any more
    with db.connect(cfg.transport) as other:  # and nobody holds it
        assert locks.try_lock(other, step_locks.lock_name(cfg, step_locks.TRANSFORM))


def test_a_catch_up_that_failed_for_one_table_fails_only_the_transforms_reading_it(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch
) -> None:
    """One type's table that its bodies step could not rewrite (the JVM out of heap) failed every transform
    reading any typed table, run after run (a review): only a transform reading that table fails now."""
    import pyarrow as pa
    import pytest
    from queuelake.errors import PipelineError
    from queuelake.lake.engines import open_lake
    from queuelake.pipeline.bodies import reader

    cfg = from_dict(
        {"transport": {"connection": fresh_pg_uri}, "lake": {"root": str(tmp_path / "lake"), "engine": "delta-rs"}},
        env={},
    )
    lake = open_lake(cfg.lake)
    lake.create_table("messages", pa.schema([("id", pa.string())]))  # a journal the typed tables are behind
    step: dict = {
        "status": "failed",
        "journal_version": 0,  # its last slice: the journal's head
        "tables": [{"table": "body_a_doc", "error": "OutOfMemoryError"}, {"table": "body_a_order"}],
    }
    monkeypatch.setattr(reader.stage, "checkpoint", lambda lake: None)
    monkeypatch.setattr(reader.stage, "bodies", lambda config, spark, lake: step)
    monkeypatch.setattr(reader.stage, "claimed", lambda lake: {"A.Doc": "body_a_doc", "A.Order": "body_a_order"})
    tables = reader.BodyTables(cfg, None, lake)  # type: ignore[arg-type]
    assert tables.name_of("A.Order") == "body_a_order"
    with pytest.raises(PipelineError, match="the typed table body_a_doc is behind the journal: OutOfMemoryError"):
        tables.name_of("A.Doc")
    step["tables"] = []  # a step that failed as a whole: every reader fails, as before
    with pytest.raises(PipelineError, match="the bodies step failed, so the typed tables are behind"):
        reader.BodyTables(cfg, None, lake).name_of("A.Order")  # type: ignore[arg-type]
    # a slice that failed as a whole (its Spark job out of memory): the step's error, and its increment's row
    # the one failed entry; every reader fails (it read the increment's row as one behind table: a review)
    step.update(
        error="Py4JJavaError: java.lang.OutOfMemoryError: Java heap space",
        tables=[{"table": "body_increments", "error": "Py4JJavaError: java.lang.OutOfMemoryError"}],
    )
    with pytest.raises(PipelineError, match="behind the journal: Py4JJavaError"):
        reader.BodyTables(cfg, None, lake).name_of("A.Order")  # type: ignore[arg-type]
    # one table failed in a slice before the last: the slices after it did not run, every table lacks them
    del step["error"]
    step.update(journal_version=-1, tables=[{"table": "body_a_doc", "error": "OutOfMemoryError"}])
    with pytest.raises(PipelineError, match="behind the journal: body_a_doc: OutOfMemoryError"):
        reader.BodyTables(cfg, None, lake).name_of("A.Order")  # type: ignore[arg-type]


def test_the_bodies_and_transform_commands_end_incomplete_when_their_lock_is_held(
    fresh_pg_uri: str, tmp_path: Path
) -> None:
    """An erase (or maintain's retention, or a run's step) held the lock: ``run`` ended "incomplete" (exit 1)
    naming the step, while the standalone ``bodies`` and ``transform`` commands ended "ok", exit 0, with only
    ``skipped``, and a scheduler read the step as done (a review). They end as ``run`` does for that step;
    with the lock free and nothing new in the journal, they are ok."""
    from tests.helpers.cli import run_cli

    cfg = _config(fresh_pg_uri, tmp_path / "lake")
    path = tmp_path / "queuelake.yaml"
    path.write_text(
        f"transport:\n  connection: ${{QUEUELAKE_CONNECTION}}\nlake:\n  root: {tmp_path / 'lake'}\n", encoding="utf-8"
    )
    for step in (step_locks.BODIES, step_locks.TRANSFORM):
        with db.connect(cfg.transport) as other:  # an erase holds both steps' locks
            assert locks.try_lock(other, step_locks.lock_name(cfg, step))
            out = run_cli([step, "--config", path], connection=fresh_pg_uri, cwd=tmp_path)
        assert out.code == 1 and out.summary["status"] == "incomplete", out.stderr
        assert out.summary["held_steps"] == [step] and f"the {step} step did not run" in out.summary["error"], out
        assert "an erase" in out.summary["skipped"], out
        free = run_cli([step, "--config", path], connection=fresh_pg_uri, cwd=tmp_path)
        assert free.code == 0 and free.summary["status"] == "ok" and "held_steps" not in free.summary, free

"""A bodies step whose lock went with its database connection commits nothing more.

Why: the lock is the database session's. A restart of PostgreSQL under a running bodies step freed it,
an ``erase`` took it and erased messages, and the step then committed typed rows built from the journal
before the erase: the erased bodies were back (found by a review). The step now asks, before each commit,
that its lock's connection still answers. Real PostgreSQL, Spark and Delta."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from queuelake.lake.engines import open_lake
from queuelake.pipeline import step_locks
from queuelake.pipeline.bodies import run as bodies_run
from queuelake.transport import db, installer

from tests.helpers.bodies import config, rows, send
from tests.helpers.bodies_corpus import corpus as c
from tests.helpers.stages import drain

STOCK = "body_stock_contracts_stockcounted"


def _end_the_lock_session(cfg) -> None:
    """What a restart does to the lock's session (the test's own connection stays)."""
    with db.connect(cfg.transport) as admin:
        ended = admin.raw.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'queuelake-bodies-lock'"
        ).fetchall()
        admin.commit()
    assert ended == [(True,)], ended


@pytest.mark.slow
def test_a_bodies_step_whose_lock_went_with_its_connection_commits_nothing(
    fresh_pg_uri: str, tmp_path: Path, spark
) -> None:
    cfg = config(fresh_pg_uri, tmp_path / "lake", "delta-rs")
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        conn.commit()
    bodies = [{"Sku": f"P-{i}", "Count": i} for i in range(4)]
    messages = [c.message(c.STOCK, json.dumps(b).encode(), "application/json", i) for i, b in enumerate(bodies)]
    # a body kept as sent in body_unparsed: its append committed after the lock went (a review), an erased
    # message's bytes back in the lake
    messages.append(c.message(c.STOCK, b"\xff\xfe card 4111-1111 \xff", "application/json", 9))
    send(cfg, "Sales", messages)
    lake = open_lake(cfg.lake, spark)
    assert drain(cfg, lake)["status"] == "ok"
    with step_locks.held(cfg, step_locks.BODIES) as got:
        assert got
        _end_the_lock_session(cfg)
        out = bodies_run.bodies(cfg, spark, lake)
    assert out["status"] == "failed", out
    assert "its lock on this lake went with its database connection" in json.dumps(out), out
    assert {t.get("error_kind") for t in out["tables"] if t["status"] == "failed"} == {"transport"}, out
    assert not lake.exists(STOCK) or rows(lake, STOCK) == [], "nothing typed is committed"
    assert not lake.exists("body_unparsed") or rows(lake, "body_unparsed") == [], "nothing unparsed is committed"
    assert bodies_run.checkpoint(lake) is None, "the increment is left for the next run"
    with step_locks.held(cfg, step_locks.BODIES) as got:  # the next run, its lock held: each row once
        assert got
        again = bodies_run.bodies(cfg, spark, lake)
    assert again["status"] == "ok", again
    assert sorted(r["Sku"] for r in rows(lake, STOCK)) == [f"P-{i}" for i in range(4)]
    assert [r["reason"] for r in rows(lake, "body_unparsed")] == ["the body's bytes are not UTF-8"]

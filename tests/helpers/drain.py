"""A drain's test set-up on real PostgreSQL and a delta-rs lake: its config (in memory or as a file whose
connection comes from ``${QUEUELAKE_CONNECTION}``), the queues installed and seeded with order events, and
what it left: the journal, a queue's depth, the claims table's rows, the journal commits' spacing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import psycopg
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.lake.reading import read_table
from queuelake.transport import db, installer
from queuelake.transport.claims import claims_ref
from queuelake.transport.table_refs import queue_ref


def make_config(uri: str, lake_root: Path, queues_: list[str], **drain: object) -> object:
    return from_dict(
        {
            "transport": {"connection": uri},
            "lake": {"root": str(lake_root), "engine": "delta-rs"},
            "drain": {"queues": queues_, "batch_size": drain.pop("batch_size", 500), **drain},
        },
        env={},
    )


def write_config(
    path: Path, lake_root: Path, queues_: list[str], batch_size: int, workers: int = 2, **drain: object
) -> Path:
    path.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
                "lake": {"root": str(lake_root), "engine": "delta-rs"},
                "drain": {"queues": queues_, "batch_size": batch_size, "workers_per_queue": workers, **drain},
            }
        )
    )
    return path


def commit_spacing(lake_root: Path) -> list[float]:
    """Seconds between the consecutive journal commits that added files (their ``commitInfo`` times)."""
    times = []
    for path in sorted((lake_root / "messages" / "_delta_log").glob("*.json")):
        entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if any("add" in e for e in entries):
            times.append(next(e["commitInfo"]["timestamp"] for e in entries if "commitInfo" in e) / 1000)
    return [b - a for a, b in zip(times, times[1:])]


def install(cfg: object) -> None:
    with db.connect(cfg.transport) as conn:  # type: ignore[attr-defined]
        installer.install(conn, installer.plan(cfg))  # type: ignore[arg-type]


def journal(lake_root: Path):
    return read_table(str(lake_root / "messages"))


def seed_ids(cfg: object, queue: str, count: int, seed: int = 1) -> set[str]:
    ref = queue_ref(queue, cfg.transport)  # type: ignore[attr-defined]
    msgs = list(traffic.order_events(count, seed=seed))
    with db.connect(cfg.transport) as conn:  # type: ignore[attr-defined]
        traffic.seed(conn, ref, msgs)
    return {m.id for m in msgs}  # type: ignore[misc]


def queue_depth(cfg: object, queue: str) -> int:
    ref = queue_ref(queue, cfg.transport)  # type: ignore[attr-defined]
    with db.connect(cfg.transport) as conn:  # type: ignore[attr-defined]
        rows = conn.raw.execute(f"SELECT count(*) FROM {ref.qualified}").fetchall()
        return rows[0][0]


def claim_count(cfg: object) -> int:
    """The rows of the claims table: batches a run claimed and has not yet committed to the journal."""
    ref = claims_ref(cfg.transport)  # type: ignore[attr-defined]
    with db.connect(cfg.transport) as conn:  # type: ignore[attr-defined]
        return conn.raw.execute(f"SELECT count(*) FROM {ref.qualified}").fetchone()[0]


def lock_sessions_ended_at_batch(uri: str, nth: int, reached: Callable[[str], None]) -> Callable[[str], None]:
    """A ``kill_points.reached`` that ends the drain's lock sessions (``queuelake-drain-lock``: a DBA's
    ``pg_terminate_backend``, an ``idle_session_timeout``) once the ``nth`` batch is staged, then goes on
    as ``reached``."""
    staged = {"n": 0}

    def reach(point: str) -> None:
        if point == "after_stage":
            staged["n"] += 1
            if staged["n"] == nth:
                with psycopg.connect(uri, autocommit=True) as admin:
                    admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = 'queuelake-drain-lock' AND pid <> pg_backend_pid()"
                    )
        reached(point)

    return reach

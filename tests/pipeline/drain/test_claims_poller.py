"""The driver's claims poller (``drain.on: executors``), against real PostgreSQL and a real delta-rs
journal: what a job's end waits for (``release``)."""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from queuelake.lake.engines import journal_engine, open_lake
from queuelake.pipeline.drain import poller as poller_module
from queuelake.pipeline.drain.executors import ExecutorRun, count_what_the_driver_committed, end_run
from queuelake.pipeline.drain.poller import ClaimsPoller
from queuelake.pipeline.drain.result import QueueResult
from queuelake.pipeline.drain.worker import worker_app_id
from queuelake.pipeline.journal.build import build_batch
from queuelake.pipeline.journal.schema import MESSAGES, MESSAGES_SCHEMA
from queuelake.status import Status
from queuelake.transport import claims, db, queues
from queuelake.transport.claims import Claim
from queuelake.transport.database import QueueDatabase
from queuelake.transport.table_refs import queue_ref

from tests.helpers.drain import claim_count, install, journal, make_config, seed_ids


def test_a_jobs_queues_are_released_together_and_their_claims_committed_first(
    fresh_pg_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's end releases all its queues at once, and does not wait out an idle poll: one by one,
    each after up to two idle polls, a job of 80 small queues waited 30 s after its task had ended.
    An idle poll here lasts 600 s, so a release that waits for one never returns within the test.
    What a task claimed of a released queue is in the journal when the release returns."""
    names = [f"q{i:02d}" for i in range(20)]
    cfg = make_config(fresh_pg_uri, tmp_path / "lake", names)
    install(cfg)
    seeded = seed_ids(cfg, "q07", 5)
    lake = journal_engine(open_lake(cfg.lake))  # type: ignore[attr-defined]
    lake.create_table(MESSAGES, MESSAGES_SCHEMA)
    canonical = [queue_ref(n, cfg.transport).canonical for n in names]  # type: ignore[attr-defined]
    monkeypatch.setattr(poller_module, "POLL_SECONDS", 600.0)
    database = QueueDatabase(cfg.transport)  # type: ignore[attr-defined]
    poller = ClaimsPoller(database, lake, 0.0, on_failure=lambda _exc: None).start()
    try:
        for queue in canonical:
            poller.watch(queue)
        # a task's batch: received, built, staged, claimed with the DELETE, while the poller idles
        ref = queue_ref("q07", cfg.transport)  # type: ignore[attr-defined]
        with db.connect(cfg.transport) as conn:  # type: ignore[attr-defined]
            received = queues.receive_batch_arrow(conn, ref, 10)
            app_id = worker_app_id(ref.canonical, 0)
            table, _ = build_batch(received, ref.canonical, f"{app_id}:1", dt.datetime.now(dt.timezone.utc))
            staged = lake.stage(MESSAGES, table)
            claim = Claim(app_id, 1, ref.canonical, MESSAGES, table.num_rows, staged.to_json())
            claims.insert(conn, claims.claims_ref(cfg.transport), claim)  # type: ignore[attr-defined]
            conn.commit()
        with pytest.raises(TypeError, match="not the string"):  # one name is not taken letter by letter
            poller.release(canonical[0])
        releasing = threading.Thread(target=poller.release, args=(canonical,), daemon=True)
        releasing.start()
        releasing.join(timeout=60)  # a deadlock guard: an idle poll would take 600 s
        assert not releasing.is_alive(), "the release waited for an idle poll"
        assert poller.watched() == set()
        assert claim_count(cfg) == 0
        assert set(journal(tmp_path / "lake")["id"].to_pylist()) == seeded
        assert poller.error is None
    finally:
        poller.close()


def test_what_the_poller_landed_after_a_job_counted_its_queues_is_counted_at_the_runs_end() -> None:
    """A poll that began before a job's release took its queue off the watch landed one more batch
    (a cancelled task's Python worker claimed it as it ended) after the job had counted the queue:
    the summary said 3,750 rows and the journal held 3,900 (a CI run). The run's end counts again."""
    poller = ClaimsPoller(SimpleNamespace(claims="claims"), None, 0.0, on_failure=lambda _exc: None)  # type: ignore[arg-type]
    interrupted = QueueResult("public.sales", status=Status.INTERRUPTED, workers=2)
    poller.rows["public.sales"], poller.queue_batches["public.sales"] = 3_750, 25
    poller.outcomes["public.sales"] = Counter(landed=3_740, expired=10, quarantined=0)
    count_what_the_driver_committed(interrupted, poller)  # the job's own count, as run_job does
    assert (interrupted.dequeued, interrupted.landed) == (3_750, 3_740)
    poller._count("public.sales", 150, {"landed": 150, "expired": 0, "quarantined": 0})  # the late poll's batch
    out = end_run(ExecutorRun(), [interrupted], {}, poller)
    (result,) = out.results
    assert (result.dequeued, result.landed, result.expired, result.batches) == (3_900, 3_890, 10, 26)
    assert result.status == Status.INTERRUPTED

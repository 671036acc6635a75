"""What the SIGKILL tests share: the claim protocol's kill points (``QUEUELAKE_TEST_KILL_AT``), live traffic
with a competing receiver on the queue being drained, the drain's sessions a killed driver's tasks may
still hold, and a ``replay --canary`` to kill in each of its phases."""

from __future__ import annotations

import contextlib
import random
import threading
import time
import uuid
from collections.abc import Iterator

import psycopg
from queuelake.commands.demo import traffic
from queuelake.transport import db, queues
from queuelake.transport.table_refs import queue_ref

# every step of the protocol: receive, staged, claimed (before/after the DB commit), inside the Delta
# commit, after it, after the claim is cleared
PROTOCOL_POINTS = [
    "before_receive",
    "after_stage",
    "before_db_commit",
    "after_db_commit",
    "lake_before_commit",
    "after_delta_commit",
    "after_claim_cleared",
]
# each step of the claim protocol a task's worker passes (the Delta commit is the driver's)
TASK_POINTS = ["before_receive", "after_stage", "before_db_commit", "after_db_commit"]


class Traffic:
    """Live sends and a competing one-row-per-statement receiver (the transport's own receive)."""

    def __init__(self, cfg: object, queue: str, pause: float = 0.05, take_pause: float = 0.002) -> None:
        self.cfg, self.ref = cfg, queue_ref(queue, cfg.transport)  # type: ignore[attr-defined]
        self.pause = pause  # between two sends of 20 messages
        self.take_pause = take_pause  # between two rows the competitor receives
        self.sent: list[str] = []
        self.taken: list[str] = []
        self.done = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._guard, args=(f,)) for f in (self._send, self._compete)]
        # held by each thread for one send or one take at a time (``paused``)
        self._sending, self._taking = threading.Lock(), threading.Lock()

    def __enter__(self) -> Traffic:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        for t in self.threads:
            t.join()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Neither sends nor takes inside (a send or take under way finishes first): the queue holds what
        the test puts there, rows the competitor cannot take until the block ends."""
        with self._sending, self._taking:
            yield

    def _guard(self, target) -> None:  # type: ignore[no-untyped-def]
        try:
            target()
        except BaseException as exc:  # surfaced by the test
            self.errors.append(exc)

    def _send(self) -> None:
        rng = random.Random(7)
        with db.connect(self.cfg.transport) as conn:  # type: ignore[attr-defined]
            while not self.done.is_set():
                with self._sending:
                    msgs = list(traffic.order_events(20, seed=rng.randrange(1 << 30)))
                    msgs = [m.__class__(m.headers, m.body, id=str(uuid.uuid4())) for m in msgs]
                    queues.send(conn, self.ref, msgs)
                    conn.commit()
                    self.sent.extend(m.id for m in msgs)  # type: ignore[misc]
                time.sleep(self.pause)

    def _compete(self) -> None:
        with db.connect(self.cfg.transport) as conn:  # type: ignore[attr-defined]
            while not self.done.is_set():
                with self._taking:
                    row = queues.receive_one(conn, self.ref)
                    conn.commit()
                    if row is not None:
                        self.taken.append(row.id)
                time.sleep(0.01 if row is None else self.take_pause)


PROBE = "queuelake-tests-probe"  # the application name of ``drain_sessions``' own connections


def drain_sessions(uri: str) -> int:
    """The drain's connections still open (a killed driver's tasks until their executors are gone):
    the named ones, and ADBC's, which carry no application name. This question's own connection is
    named: unnamed, the one before it was counted while its backend was still exiting (one call in
    about 25 on a loaded machine, failing ``wait_for_no_drain`` right after it saw none)."""
    with psycopg.connect(uri, autocommit=True, application_name=PROBE) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            " AND (application_name LIKE 'queuelake-drain%' OR application_name = '')"
        ).fetchone()
    return count


def end_sessions(uri: str, application_name: str) -> int:
    """``pg_terminate_backend`` of every session of that application name (a DBA's, a restart's): how many."""
    with psycopg.connect(uri, autocommit=True, application_name=PROBE) as admin:
        row = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            (application_name,),
        ).fetchone()
    return int(row[0]) if row else 0


def wait_for_no_drain(uri: str, timeout: float = 120) -> None:
    """Until no drain session is open (the last count seen is the one asserted)."""
    deadline = time.monotonic() + timeout
    while (left := drain_sessions(uri)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == 0, f"a killed drain's tasks or processes still hold {left} connection(s)"


# ``replay --canary`` in a process of its own, without Spark, polling fast: argv is the config file, the
# predicate, the replay id, the canary's size and the batch size; prints the summary as JSON. The canary
# kill tests (tests/pipeline/replay/test_canary.py) SIGKILL it at a phase's kill point, then run it again.
CANARY_REPLAY_SCRIPT = """
import json, sys
from queuelake.config import load
from queuelake.lake.engines import open_lake
from queuelake.pipeline.replay.plan import ReplayOptions
from queuelake.context import open_database
from queuelake.pipeline.replay.replayer import replay
def no_spark():
    raise AssertionError("this replay needed Spark")
cfg = load(sys.argv[1])
options = ReplayOptions(
    sys.argv[2], replay_id=sys.argv[3], canary=int(sys.argv[4]), batch_size=int(sys.argv[5]),
    canary_wait=120, canary_poll=0.3,
)
print(json.dumps(replay(cfg, open_database(cfg), None, open_lake(cfg.lake), options, no_spark), default=str))
"""

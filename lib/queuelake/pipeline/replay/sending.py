"""A planned replay's batches not in the ledger, sent: from the driver, each batch's inserts and its
ledger row in one DB transaction (the next batch read and built meanwhile), or from Spark tasks when
the replay is large."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from queuelake import stopping
from queuelake.config import ReplayConfig
from queuelake.errors import error_kind
from queuelake.pipeline.batches.keys import ReplayKeys, replay_batch_index
from queuelake.pipeline.batches.sender import FAILED, STOPPED, Batch, Sent, send_batches
from queuelake.pipeline.batches.settle import settled
from queuelake.pipeline.replay import executors
from queuelake.pipeline.replay.ahead import ahead
from queuelake.pipeline.replay.plan import Plan, ReplayOptions
from queuelake.pipeline.replay.planned import Planned
from queuelake.pipeline.replay.result import ReplayResult
from queuelake.pipeline.replay.rows import Content, Row
from queuelake.pipeline.replay.steps import Steps
from queuelake.report import log
from queuelake.spark_progress import StoppedBeforeTasks, cancelled_on_stop, heartbeat, kill_timeout
from queuelake.status import Status
from queuelake.transport import binary_copy, ledger
from queuelake.transport.database import QueueDatabase
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class Sender:
    """Sends one run's batches, counting them into ``result`` and ``sent_per_destination``."""

    def __init__(
        self,
        database: QueueDatabase,
        settings: ReplayConfig,
        options: ReplayOptions,
        result: ReplayResult,
        steps: Steps,
        sent_per_destination: collections.Counter[str],
        session: Callable[[], SparkSession],
        on_refused: Callable[[str, str, list[int]], None],
    ) -> None:
        self.database = database
        self.settings = settings
        self.ledger = database.ledger
        self.options = options
        self.result = result
        self.steps = steps
        self.sent_per_destination = sent_per_destination
        self.session = session  # the Spark session, started if need be (only to send from executors)
        # a table that refused a batch's rows for what they are (``errors.RowsRefused``: a CHECK
        # constraint, a trigger that raised): ``on_refused(table, error, batches left)`` records its
        # rows in those batches as skipped and takes them out of the plan; the batches go on without it
        self.on_refused = on_refused
        self.refused_tables: set[str] = set()

    def send(
        self,
        conn: Connection,
        replay_id: str,
        plan: Plan,
        done: set[int],
        planned: Planned,
        files: list[str],
        only: Collection[int] | None = None,
    ) -> None:
        """The batches not in the ledger (of ``only``, when given: a canary's batch 0), in order; the
        next one read and built while this one is sent (``ahead``). (With a COPY written row by row in
        Python there was nothing to overlap: tried in round 16, the medians of five runs were equal.)"""
        opts, result = self.options, self.result
        n, size = plan.batches, plan.batch_size
        threshold = self.settings.executors_from_rows
        # by the rows left to send: a rerun with a few (or none) left sends them here, without starting Spark
        left = planned.rows_left(plan.cut, done) if threshold is not None else 0
        if threshold is not None and left >= threshold and opts.max_rate is None and only is None:
            self._send_on_executors(replay_id, plan, done, planned, files)
            return
        content = Content(files)

        binary = conn.driver.binary_copy

        def prepare(k: int) -> tuple[list[Row], dict[str, tuple[TableRef, executors.Ready]]]:
            batch = planned.batch(k, plan.cut)
            return batch, self._messages(replay_id, batch, content, binary)

        keys = ReplayKeys(n, size)
        todo = [k for k in range(n) if k not in done and (only is None or k in only)]
        started = time.monotonic()
        sent = 0
        sent_before = result.rows_sent  # a canary's batch, sent by an earlier call of this run

        paced_from: list[float] = []  # the pace's clock: from the first batch ready to commit

        def pace(batch: Sent) -> None:
            """With --max-rate, the commit waits until the batch is due, so the rows become visible on pace.
            The clock starts when the first batch is ready, not before it was read and built: the build's
            time was spent as catch-up, and the first batches committed back to back (6,000 messages in
            0.42 s at 4,000 msg/s: a review)."""
            if opts.max_rate is not None:
                if not paced_from:
                    paced_from.append(time.monotonic())
                wait = paced_from[0] + (sent + batch.rows) / opts.max_rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)

        book = executors.book(self.ledger, replay_id, keys)
        sent_now: set[int] = set()
        while todo:
            # the next batch read and built while this one is sent
            built = ahead(todo, prepare)
            outcomes = send_batches(
                conn,
                book,
                (Batch(k, prepared) for k, prepared in built),
                executors.send_built,
                done,
                stop=stopping.requested,
                pace=pace,
                timed=self.steps.timed,
            )
            refusal = None
            for outcome in outcomes:
                if outcome.status == STOPPED:
                    result.status = Status.INTERRUPTED
                    break
                if outcome.status == FAILED and outcome.refused and outcome.refused not in self.refused_tables:
                    refusal = outcome  # that table's rows are skipped from here on; this batch is sent again
                    break
                if outcome.status == FAILED:
                    result.status = Status.FAILED
                    result.failed_batches.append(outcome.key)
                    result.error, result.error_kind = outcome.error, outcome.error_kind
                    continue
                assert outcome.content is not None
                batch = outcome.content[0]
                k = outcome.k
                sent_now.add(k)
                sent += len(batch)
                result.rows_sent = sent_before + sent
                result.total_sent += len(batch)
                result.batches_sent += 1
                for r in batch:
                    self.sent_per_destination[r.target.canonical] += 1  # type: ignore[union-attr]
                elapsed = time.monotonic() - started
                result.seconds_sending = round(elapsed, 3)
                result.rate = round(sent / elapsed, 1) if elapsed else 0.0
                left = sum(1 for j in todo if j > k)
                log.info(
                    "replay %s batch %d/%d: %d rows in %.2fs; %d sent at %.0f msg/s, %d batch(es) left",
                    replay_id,
                    k + 1,
                    n,
                    len(batch),
                    outcome.seconds,
                    sent,
                    result.rate,
                    left,
                )
            outcomes.close()
            built.close()  # waits for the batch being built ahead (it held the refused table's rows)
            if refusal is None or refusal.refused is None:
                return
            todo = [j for j in todo if j >= refusal.k and j not in sent_now]
            self.refused_tables.add(refusal.refused)
            # every batch still to send, beyond this call's own (a canary's call sends batch 0 only;
            # the rest, sent by a later call, must not meet the table again)
            unsent = [j for j in range(n) if j >= refusal.k and j not in done and j not in sent_now]
            self.on_refused(refusal.refused, refusal.error, unsent)

    def _count_stopped(
        self, replay_id: str, final: dict[int, dict[str, Any]], cancelled: set[int], kill_timeout: float | None
    ) -> None:
        """The Spark tasks cancelled as asked: the earlier passes' outcomes, and the batches of the cancelled
        pass that the ledger holds once the tasks have ended (``settle``; their outcomes are lost with
        them, and by destination they are not counted)."""
        result = self.result
        self._count_outcomes({k: o for k, o in final.items() if k not in cancelled})
        pipeline = f"replay/{replay_id}"
        with self.database.connect("queuelake-replay") as conn:

            def committed() -> int:
                count = len(ledger.rows_of_pipeline(conn, self.ledger, pipeline))
                conn.rollback()
                return count

            if kill_timeout is not None:  # None: no task was submitted, none can still commit
                settled(committed, kill_timeout, f"replay {replay_id}")
            recorded = ledger.rows_of_pipeline(conn, self.ledger, pipeline)
            conn.rollback()
        for row in recorded:
            k = replay_batch_index(row.batch_key)
            if k is not None and k in cancelled:
                result.rows_sent += row.rows_sent
                result.total_sent += row.rows_sent
                result.batches_sent += 1
        result.status = Status.INTERRUPTED
        log.info(
            "replay %s: stopped as asked, %d batch(es) sent; a rerun with this replay id sends the rest",
            replay_id,
            result.batches_sent,
        )

    def _count_outcomes(self, outcomes: dict[int, dict[str, Any]]) -> None:
        """The Spark tasks' batch outcomes (the last of each batch) into the result."""
        result = self.result
        for k in sorted(outcomes):
            outcome = outcomes[k]
            if outcome["status"] == "failed":
                result.status = Status.FAILED
                result.failed_batches.append(outcome["key"])
                result.error, result.error_kind = outcome["error"], outcome.get("error_kind")
            elif outcome["status"] == "sent":
                result.rows_sent += outcome["rows"]
                result.total_sent += outcome["rows"]
                result.batches_sent += 1
                self.sent_per_destination.update(outcome["destinations"])

    def _messages(
        self, replay_id: str, rows: list[Row], content: Content, binary: bool
    ) -> dict[str, tuple[TableRef, executors.Ready]]:
        """The batch's messages grouped by destination: its rows' content read from the journal's
        files, headers rewritten, each destination's COPY stream assembled (``binary``: where the
        driver takes binary COPY; only Expires waits for the batch's transaction)."""
        rows = executors.by_destination(rows)  # each destination's rows together: sliced, not taken
        with self.steps.timed("read"):
            contents = content.read(rows)
        with self.steps.timed("headers"):
            built = executors.grouped(replay_id, rows, contents, self.options.ack_queue)
        with self.steps.timed("assemble"):
            return {name: (ref, binary_copy.prepared(batch, binary)) for name, (ref, batch) in built.items()}

    def _send_on_executors(
        self, replay_id: str, plan: Plan, done: set[int], planned: Planned, files: list[str]
    ) -> None:
        """The batches not in the ledger, sent by Spark tasks (``executors.py``); the outcomes are
        counted here as the driver's loop counts its own. A table that refused a task's batch
        (``errors.RowsRefused``) has its rows in the failed batches recorded as skipped
        (``on_refused``), and those batches are sent again without them."""
        from queuelake.lake.round_files import access

        result = self.result
        n, size = plan.batches, plan.batch_size
        job = executors.Job(
            database=self.database,
            replay_id=replay_id,
            ledger=self.ledger,
            keys=ReplayKeys(n, size),
            files=tuple(files),
            ack_queue=self.options.ack_queue,
            targets=planned.targets,
            log_level=executors.log_level(),
            storage=access(files),
        )
        started = time.monotonic()
        final: dict[int, dict[str, Any]] = {}
        todo = [k for k in range(n) if k not in done]
        while todo:
            units = [executors.Unit(k, planned.slice(k, plan.cut)) for k in todo]
            log.info("replay %s: %d batch(es) sent by Spark tasks", replay_id, len(units))
            with self.steps.timed("executors"):
                try:
                    session = self.session()
                    with heartbeat(session, f"replay {replay_id}", len(units), unit="batch(es)"):
                        with cancelled_on_stop(session, f"replay {replay_id}"):
                            outcomes = executors.send_units(session, job, units)
                except Exception as exc:  # a task died (killed worker, lost connection): the ledger knows
                    if stopping.requested():  # the tasks cancelled as asked (``cancelled_on_stop``)
                        ran = not isinstance(exc, StoppedBeforeTasks)
                        self._count_stopped(replay_id, final, set(todo), kill_timeout(session) if ran else None)
                        return
                    self._count_outcomes(final)
                    result.status, result.error = Status.FAILED, executors.task_error(exc)
                    result.error_kind = error_kind(exc)
                    log.error("replay %s: %s", replay_id, result.error)
                    return
            final.update((outcome["k"], outcome) for outcome in outcomes)
            refusals: dict[str, str] = {}
            for outcome in outcomes:
                table = outcome.get("refused")
                if outcome["status"] == "failed" and table and table not in self.refused_tables:
                    refusals.setdefault(table, outcome["error"])
            if refusals and stopping.requested():  # asked during the tasks: no second pass (a rerun sends it)
                self._count_outcomes(final)
                result.status = Status.INTERRUPTED
                log.info("replay %s: stopped as asked; a rerun with this replay id sends the rest", replay_id)
                return
            todo = sorted(k for k, outcome in final.items() if outcome["status"] == "failed") if refusals else []
            for table, error in refusals.items():
                self.refused_tables.add(table)
                self.on_refused(table, error, todo)
        self._count_outcomes(final)
        elapsed = time.monotonic() - started
        result.seconds_sending = round(elapsed, 3)
        result.rate = round(result.rows_sent / elapsed, 1) if elapsed else 0.0
        log.info(
            "replay %s: %d row(s) in %d batch(es) sent from executors at %.0f msg/s",
            replay_id,
            result.rows_sent,
            result.batches_sent,
            result.rate,
        )

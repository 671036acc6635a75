"""The publish command: per configured output, the round to send, its validation, then the round
sent from the driver or, when large, from Spark tasks; the summary, and one ``runs`` row per output.
``pending`` says, without Spark, which outputs have anything to send."""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import TYPE_CHECKING, Any

from queuelake import stopping
from queuelake.config import Config
from queuelake.errors import QueuelakeError
from queuelake.lake import stage_tables
from queuelake.lake.port import LakeEngine
from queuelake.pipeline.batches.keys import whole_key
from queuelake.pipeline.publish import executors
from queuelake.pipeline.publish.carried import carried_over
from queuelake.pipeline.publish.driver import DriverSender
from queuelake.pipeline.publish.result import OutputResult
from queuelake.pipeline.publish.rounds import Round, last_round, next_round, table_tag
from queuelake.pipeline.publish.routing import Router
from queuelake.pipeline.publish.rows import count_accepted
from queuelake.pipeline.publish.undeliverable import BadDestinations
from queuelake.pipeline.publish.validate import validate
from queuelake.pipeline.runs import Run
from queuelake.quality import expectations
from queuelake.report import log
from queuelake.status import Status, worst
from queuelake.transport import ledger, locks
from queuelake.transport.database import QueueDatabase
from queuelake.transport.db import Connection

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class Publisher:
    def __init__(
        self, config: Config, database: QueueDatabase, lake: LakeEngine, spark: SparkSession, run_id: str | None = None
    ) -> None:
        self.config = config
        self.database = database
        self.lake = lake
        self.spark = spark
        self.run_id = run_id or str(uuid.uuid4())
        # loaded (and checked against GX's registry) before any output is touched: a typo in one
        # suite is a config error, not a half-published run; {} and no GX import when none is set
        self.suites = expectations.load(config)
        self.endpoint = config.publish.endpoint
        self.ledger = database.ledger
        self.router = Router(config)
        self.bad = BadDestinations()  # warned about once per run, whichever output found them
        self.sending: OutputResult | None = None  # the output being sent, its counts batch by batch
        self.driver_sender = DriverSender(lake, self.router, self.ledger, self.bad)
        self.executor_sender = executors.ExecutorSender(database, spark, lake, self.router, self.ledger, self.bad)

    def _validate(
        self, output: str, files: list[str], rnd: Round, resumed: bool = False
    ) -> tuple[set[str], int, expectations.Outcome | None]:
        """``validate.validate`` with the output's suite. A resumed round (some batches already
        sent) passed its suite when it started: it is not validated again, so it cannot be left half
        sent by a suite edited in between."""
        suite = None if resumed else self.suites.get(output)
        return validate(self.spark, self.lake, self.run_id, output, files, rnd, suite)

    def publish_output(self, output: str) -> OutputResult:
        """The output's next round (or the unfinished one), sent. One publish per output at a time,
        across processes: a session lock in the queue database (``transport.locks``), held by this
        connection until the round is done. Why: a round is known to others only once a batch of it
        is in the ledger; a second publish (an overlapping scheduled run) planned a longer round over
        the rows the first was sending, and every row went out twice (found by a review). The second
        skips the output; the next run sends what is left."""
        pipeline = f"{self.endpoint}/{output}"
        with self.database.connect("queuelake-publish") as conn:
            lock = f"queuelake.publish:{pipeline}"
            try:
                got = locks.try_lock(conn, lock, what=f"publish {output}")
            except QueuelakeError as exc:  # a login the lock statement refuses: it published before, and still does
                log.warning("publish %s: %s; going on without it", output, exc)
                conn.rollback()
                return self._publish_output(conn, output, pipeline)
            if not got:
                log.warning(
                    "publish %s: another publish is sending this output; skipped (the next run sends the rest)", output
                )
                return OutputResult(output, status=Status.SKIPPED, error="another publish is sending this output")
            try:
                return self._publish_output(conn, output, pipeline)
            finally:
                try:
                    locks.unlock(conn, lock, what=f"publish {output}")
                except QueuelakeError as exc:  # a connection lost holds no lock: the outcome stands
                    log.warning("publish %s: its lock's connection was lost (%s)", output, exc)

    def _publish_output(self, conn: Connection, output: str, pipeline: str) -> OutputResult:
        result = OutputResult(output)
        self.sending = result  # filled batch by batch: what a stop now keeps of this output
        rnd, done, table_row, whole = next_round(
            conn, self.lake, self.ledger, output, pipeline, self.config.publish.batch_size
        )
        result.round = rnd.key(0, 0).split(":")[0]
        if rnd.after is not None and rnd.after >= rnd.upto:
            log.info("publish %s: nothing new since the last round (version %d), nothing to do", output, rnd.upto)
            return result
        files = self.lake.added_files(output, rnd.after, rnd.upto)
        t0 = time.monotonic()
        # rows an overwrite/MERGE/UPDATE of the table carried over unchanged were sent before: not again
        carried, result.unchanged, cut_whole = carried_over(
            self.lake, output, rnd.after, rnd.upto, files, resumed=bool(done), whole=whole
        )
        rejected, result.rejected, outcome = (
            self._validate(output, files, rnd, resumed=bool(done)) if files else (set(), 0, None)
        )
        bad_keys = rejected | carried if carried else rejected
        if outcome is not None:
            result.expectations = outcome.evaluated
            result.failed_expectations = outcome.failed
            if not outcome.success:
                # blocked: nothing sent, no ledger row, so the next run validates this round again
                result.status = Status.BLOCKED
                result.error = f"expectations failed: {expectations.summary(outcome.failed)}"
                log.error("publish %s: blocked, nothing sent: %s", output, result.error)
                return result
        total_rows, published_types = count_accepted(files, bad_keys)
        if not done:  # a new round: its rows per batch fixed now, in its ledger keys (``@B``)
            rnd = self._fitted(conn, output, rnd, published_types)
        log.info(
            "publish %s: %d new row(s) to send, %d rejected (checked in %.1fs)",
            output,
            total_rows,
            result.rejected,
            time.monotonic() - t0,
        )
        log.debug("publish %s: round %s, %d file(s)", output, result.round, len(files))
        n = (total_rows + rnd.batch_size - 1) // rnd.batch_size
        if table_row is not None:  # the table the ledger's plain round keys are of, from its first round on
            ledger.record(conn, self.ledger, pipeline, output, table_row, 0, 0)
            conn.commit()
        if cut_whole and not whole and n > 0:  # cut without its unchanged rows: its resume must cut so too
            ledger.record(conn, self.ledger, pipeline, output, whole_key(rnd), 0, 0)
            conn.commit()
        if n == 0:
            if 0 not in done:
                ledger.record(conn, self.ledger, pipeline, output, rnd.key(0, 0), 0, 0)
                conn.commit()
            return result
        threshold = self.config.publish.executors_from_rows
        if rnd.layout == executors.LAYOUT or (not done and threshold is not None and total_rows >= threshold):
            # a round resumes in the layout it started in, whatever the threshold says now
            self.executor_sender.send_round(
                conn,
                pipeline,
                output,
                dataclasses.replace(rnd, layout=executors.LAYOUT),
                files,
                bad_keys,
                done,
                result,
            )
            result.bad_destinations = self.bad.names()
            return result
        self.driver_sender.send_round(conn, pipeline, output, rnd, n, files, bad_keys, done, result)
        result.bad_destinations = self.bad.names()
        return result

    def _fitted(self, conn: Connection, output: str, rnd: Round, published_types: set[str]) -> Round:
        """The round with ``publish.batch_size`` rows per batch, fewer when a batch's messages, every
        subscriber's copy counted, would pass ``publish.batch_copies``: an event of 300 subscribers in
        batches of 5,000 rows made 1,500,000 copies in one transaction, built in memory at once (a
        review). The widest fan-out of the round's event types decides."""
        widest = max((len(self.router.subscribers(conn, t)) for t in published_types), default=1)
        conn.rollback()  # the subscriptions' read: no transaction held open into the send
        cap = self.config.publish.batch_copies
        rows = max(1, min(rnd.batch_size, cap // max(widest, 1)))
        if rows < rnd.batch_size:
            log.info(
                "publish %s: %d row(s) per batch: up to %d subscriber(s) each, within publish.batch_copies %d",
                output,
                rows,
                widest,
                cap,
            )
        return dataclasses.replace(rnd, batch_size=rows)


def written_tables(config: Config) -> list[str]:
    """The tables a publish may write besides ``runs``: each output's rejects and undeliverables, and
    the expectations' results (``commands.sessions``: whether it may run without a Spark session)."""
    per_output = [
        t.name_for(o) for o in config.publish.outputs for t in (stage_tables.REJECTED, stage_tables.UNDELIVERABLE)
    ]
    return [*per_output, stage_tables.EXPECTATION_RESULTS.name]


def pending(config: Config, database: QueueDatabase, lake: LakeEngine) -> list[str]:
    """The outputs with a round to send: versions past the last round, or a round not finished
    (cheap: the ledger's keys and a Delta log lookup each, no Spark). An idle scheduled run asks
    this before starting a Spark session for nothing."""
    outputs = [o for o in config.publish.outputs if lake.exists(o)]
    if not outputs:
        return []
    names = []
    with database.connect("queuelake-publish") as conn:
        for output in outputs:
            try:
                keys = ledger.batch_keys(conn, database.ledger, f"{config.publish.endpoint}/{output}", output)
            except QueuelakeError:
                names.append(output)  # publish itself says what is wrong
                continue
            finally:
                conn.rollback()
            upto = lake.table_version(output)
            latest, _, finished = last_round(keys, table_tag(keys, lake.table_id(output), upto)[0])
            if latest is None or not finished or (upto is not None and latest.upto < upto):
                names.append(output)
    return names


def publish(config: Config, database: QueueDatabase, spark: SparkSession, lake: LakeEngine) -> dict[str, Any]:
    """Send every configured output's new round through ``database``, the queue database's handle
    the command opened (``context.open_database``): what the driver's connections and the Spark
    tasks' connect with."""
    run = Run("publish")
    publisher = Publisher(config, database, lake, spark, run.run_id)
    results: list[OutputResult] = []
    if not config.publish.outputs:
        log.info("publish: no outputs configured (publish.outputs), nothing to do")
    try:
        for output in config.publish.outputs:
            if stopping.requested():  # a stop asked (SIGTERM, Ctrl-C): the outputs left wait for the next run
                log.info("publish: asked to stop; %s not sent", ", ".join(config.publish.outputs[len(results) :]))
                break
            t0 = time.monotonic()
            if not lake.exists(output):
                if any(transform.output == output for transform in config.transforms):
                    log.info(
                        "publish %s: the table does not exist yet (its transform has not run), nothing to do", output
                    )
                else:  # a table another job writes, or a misspelled name: say which
                    log.warning(
                        "publish %s: the table does not exist, and no transform in this config writes it (transforms"
                        " output); a table another job writes, or a misspelled name? nothing to do",
                        output,
                    )
                results.append(OutputResult(output, status=Status.SKIPPED, error=f"{output} does not exist yet"))
            else:
                try:
                    results.append(publisher.publish_output(output))
                except QueuelakeError as exc:
                    log.error("publish %s failed: %s", output, exc)
                    results.append(OutputResult(output, status=Status.FAILED, error=str(exc), error_kind=exc.kind))
            results[-1].seconds = round(time.monotonic() - t0, 3)
    except BaseException as exc:
        # a stop now (a second signal): the outputs sent keep their runs rows and go with it to the
        # summary, which said only "interrupted" while batches had gone out (a review)
        stop = exc if isinstance(exc, (stopping.Interrupted, KeyboardInterrupt)) else stopping.stop_within(exc)
        sending = publisher.sending
        if stop is not None and sending is not None and all(r is not sending for r in results):
            sending.status = Status.INTERRUPTED  # the output in hand: the batches it sent count (a review)
            results.append(sending)
        if stop is not None:
            try:
                run.record(lake, [row for r in results for row in r.runs_rows()])
            except Exception as failed:  # noqa: BLE001 - the stop is what the command reports
                log.warning("publish: the runs rows of the outputs sent before the stop were not written: %s", failed)
            stopping.partial(stop, {"publish": {**_summary(run, results), "status": Status.INTERRUPTED}})
        raise
    rows = [row for r in results for row in r.runs_rows()]
    if stopping.requested():  # the outputs not started have their row too (a stop while Spark started left none)
        left = config.publish.outputs[len(results) :]
        stopped = [OutputResult(o, status=Status.INTERRUPTED, error="asked to stop before it was sent") for o in left]
        rows += [row for r in stopped for row in r.runs_rows()]
    run.record(lake, rows)
    return _summary(run, results)


def _summary(run: Run, results: list[OutputResult]) -> dict[str, Any]:
    # a blocked round (failed expectations) fails the run too: the data needs a person's attention
    status = worst([r.status for r in results])
    summary = [{k: v for k, v in r.__dict__.items() if k != "error_kind" or v is not None} for r in results]
    return {
        "status": status,
        "run_id": run.run_id,
        "published": sum(r.published for r in results),
        "copies": sum(r.copies for r in results),
        "rejected": sum(r.rejected for r in results),
        "undeliverable": sum(r.undeliverable for r in results),
        "outputs": summary,
    }

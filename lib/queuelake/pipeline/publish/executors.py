"""Publish a large round from Spark executors: each task sends its own batches, each with its ledger row.

Why this layout: on the driver a round is one stream of rows cut into batches, so one Python process
builds every message. Here the round is cut at Parquet row groups instead: the driver plans the
batches (row group g of file f holds batches first..first+n-1 of the round, from the accepted-row
counts, reading only the ``key`` column), and Spark runs one task per row group. A batch is still
sent with its ledger row ``P-V:k/N@Bg`` in one DB transaction (the ``g`` says the batches follow row
groups, so a rerun resumes a round in the layout it started in), and each task reads the ledger
itself before sending, so a task Spark retries, or a rerun after a kill at any instant, skips what
is already there: each row reaches each destination exactly once, as from the driver.

Every destination is decided on the driver before any task runs (the ``Router`` is then frozen and
shipped), and the copies that cannot be delivered are written to ``<output>_undeliverable`` before
anything is sent, since tasks cannot write to the lake: no copy is ever dropped unrecorded.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from queuelake import stopping
from queuelake.errors import error_kind
from queuelake.lake import round_files
from queuelake.lake.round_files import open_file
from queuelake.nsb.times import format_time
from queuelake.pipeline.batches.keys import Round, RoundKeys
from queuelake.pipeline.batches.sender import DROPPED, FAILED, SKIPPED, Book, Sent, dropped, ready, send_batches
from queuelake.pipeline.batches.settle import settled
from queuelake.pipeline.publish.result import OutputResult
from queuelake.pipeline.publish.routing import Router
from queuelake.pipeline.publish.rows import accepted, accepted_batches, in_batches, without_rejected_values
from queuelake.pipeline.publish.undeliverable import BadDestinations, record_round, undeliverable_record
from queuelake.report import log
from queuelake.spark_progress import StoppedBeforeTasks, cancelled_on_stop, heartbeat, kill_timeout
from queuelake.status import Status
from queuelake.transport import ledger, queues
from queuelake.transport.database import QueueDatabase
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from queuelake.lake.port import LakeEngine

LAYOUT = "g"  # the batch-key mark of a round sent from executors (batches follow row groups)
_ROUTING_COLUMNS = ["key", "intent", "destination", "message_type"]


@dataclass(frozen=True)
class Unit:
    """One Spark task's share of a round: the accepted rows of one row group, as whole batches."""

    uri: str
    row_group: int
    first: int  # the round-wide index of its first batch
    batches: int


@dataclass(frozen=True)
class Job:
    """What every task needs, pickled once per task: no Spark session, no lake handle."""

    database: QueueDatabase
    router: Router
    pipeline: str
    output: str
    ledger: TableRef
    round: Round
    total: int  # batches in the round
    bad_keys: frozenset[str]
    log_level: int
    storage: tuple[str, dict[str, str]] | None  # the lake root's storage options (object stores)


def plan(files: list[str], bad_keys: set[str], size: int) -> tuple[list[Unit], int]:
    """The round's batches by row group, in the round's fixed order (files by path, groups in file
    order). Returns (units, batches in the round)."""
    units: list[Unit] = []
    total = 0
    frozen = frozenset(bad_keys)  # its Arrow array built once (``rows.excluded``)
    for uri in files:
        parquet = open_file(uri)
        for group in range(parquet.metadata.num_row_groups):
            keys = parquet.read_row_group(group, columns=["key"])["key"]
            sent = int(pc.sum(accepted(keys, frozen)).as_py() or 0)
            batches = (sent + size - 1) // size
            if batches:
                units.append(Unit(uri, group, total, batches))
                total += batches
    return units, total


def _unit_batches(unit: Unit, bad_keys: frozenset[str], size: int) -> Iterator[pa.Table]:
    """The unit's accepted rows in file order, ``size`` at a time, as columns; one Parquet batch
    in memory."""
    return in_batches(accepted_batches(open_file(unit.uri), bad_keys, [unit.row_group]), size)


def route_round(
    conn: Connection,
    router: Router,
    units: list[Unit],
    bad_keys: set[str],
    rnd: Round,
    total: int,
    done: set[int],
) -> list[dict[str, Any]]:
    """Decide every destination of the round's batches not yet sent (``done``: sent ones) on the
    driver, filling the router's caches, and return the undeliverable records: one per copy not sent,
    with the key of its batch. Reads only the routing columns; a row is looked at one by one only in
    a row group with a bad route."""
    now = queues.db_utc_now(conn)
    records: list[dict[str, Any]] = []
    frozen = frozenset(bad_keys)  # its Arrow array built once (``rows.excluded``)
    for unit in units:
        if all(k in done for k in range(unit.first, unit.first + unit.batches)):
            continue
        parquet = open_file(unit.uri)
        names = set(parquet.schema_arrow.names)
        columns = [c for c in _ROUTING_COLUMNS if c in names] + (["deliver_at"] if "deliver_at" in names else [])
        table = parquet.read_row_group(unit.row_group, columns=columns)
        mask = accepted(table["key"], frozen)
        delayed = pc.is_valid(table["deliver_at"]) if "deliver_at" in names else pa.repeat(False, table.num_rows)
        send = pc.equal(table["intent"], "Send")
        nothing = pa.nulls(table.num_rows, pa.string())
        destination = table["destination"].cast(pa.string()) if "destination" in names else nothing
        message_type = table["message_type"].cast(pa.string())
        routes = pa.table(
            {
                "send": send,
                "destination": pc.if_else(send, destination, nothing),
                "message_type": pc.if_else(send, nothing, message_type),
                "delayed": delayed,
            }
        ).filter(mask)
        bad_routes = set()
        for route in routes.group_by(["send", "destination", "message_type", "delayed"]).aggregate([]).to_pylist():
            intent = "Send" if route["send"] else "Publish"
            _, lost = router.routes(conn, intent, route["destination"], route["message_type"], route["delayed"])
            if lost:
                bad_routes.add((route["send"], route["destination"], route["message_type"], route["delayed"]))
        if not bad_routes:
            continue
        rows = without_rejected_values(table, mask).to_pylist()
        ordinal = np.cumsum(mask.to_numpy(zero_copy_only=False)) - 1
        for i, (row, ok) in enumerate(zip(rows, mask.to_pylist())):
            is_send = row["intent"] == "Send"
            route = (is_send, row.get("destination") if is_send else None, None if is_send else row["message_type"])
            is_delayed = row.get("deliver_at") is not None
            if not ok or (*route, is_delayed) not in bad_routes:
                continue
            k = unit.first + int(ordinal[i]) // rnd.batch_size
            if k in done:
                continue
            batch_key = rnd.key(k, total)
            _, lost = router.routes(conn, row["intent"], row.get("destination"), row["message_type"], is_delayed)
            records.extend(undeliverable_record(row, address, reason, batch_key, now) for address, reason in lost)
    conn.rollback()
    return records


class ExecutorSender:
    """Sends large rounds from Spark tasks: the driver plans the units and decides every route, then
    the tasks send."""

    def __init__(
        self,
        database: QueueDatabase,
        spark: SparkSession,
        lake: LakeEngine,
        router: Router,
        ledger_ref: TableRef,
        bad: BadDestinations,
    ) -> None:
        self.database = database
        self.spark = spark
        self.lake = lake
        self.router = router
        self.ledger = ledger_ref
        self.bad = bad

    def send_round(
        self,
        conn: Connection,
        pipeline: str,
        output: str,
        rnd: Round,
        files: list[str],
        bad_keys: set[str],
        done: set[int],
        result: OutputResult,
    ) -> None:
        """Send the round from Spark tasks, one per row group (the module's docstring says why).

        A table that refuses its copies for what they are (``errors.RowsRefused``: a CHECK constraint,
        a trigger that raised) fails the tasks' batches that have a copy for it; the driver then makes
        it undeliverable for the run (``Router.refuse``), records those batches' copies for it, and
        sends the units holding them again: every other destination gets its copies, as from the
        driver (before, such a table failed those batches on every run)."""
        started = time.monotonic()
        units, total = plan(files, bad_keys, rnd.batch_size)
        job = Job(
            database=self.database,
            router=self.router,
            pipeline=pipeline,
            output=output,
            ledger=self.ledger,
            round=rnd,
            total=total,
            bad_keys=frozenset(bad_keys),
            log_level=log_level(),
            storage=round_files.access(files),
        )
        outcomes: dict[int, dict[str, Any]] = {}
        todo = units
        refused_now: set[str] | None = None  # the reasons of the tables refused after the last pass
        while True:
            sent = done | {k for k, o in outcomes.items() if o["status"] != "failed"}
            if not self._send_units(conn, job, todo, sent, result, outcomes, refused_now):
                self._count_committed(conn, job, done, result)
                return
            refusals = self._refusals(outcomes)
            if not refusals:
                break
            if stopping.requested():  # asked during the tasks: no second pass (the next run sends the rest)
                self._count({k: o for k, o in outcomes.items() if o["status"] != "failed"}, result)
                result.status = Status.INTERRUPTED
                log.info("publish %s: stopped as asked; the next run sends the batches left", output)
                return
            for table, reason in refusals.items():
                # as its record says: a table dropped during the run was logged as refusing the copies (a review)
                said = (
                    "is gone (dropped during the run)"
                    if reason.startswith(DROPPED)
                    else "refused the copies sent to it"
                )
                log.warning("publish %s: table %s %s; sending its batches again without it", output, table, said)
                self.router.refuse(table, reason)
            refused_now = set(refusals.values())
            failed = {k for k, o in outcomes.items() if o["status"] == "failed"}
            todo = [u for u in units if failed & set(range(u.first, u.first + u.batches))]
        self._count(outcomes, result)
        elapsed = time.monotonic() - started
        log.info(
            "publish %s: %d row(s) sent as %d message(s) from executors in %.1fs (%.0f msg/s), %d batch(es) "
            "were already sent, %d failed",
            output,
            result.published,
            result.copies,
            elapsed,
            result.copies / elapsed if elapsed else 0,
            result.batches_skipped,
            len(result.failed_batches),
        )

    def _send_units(
        self,
        conn: Connection,
        job: Job,
        units: list[Unit],
        done: set[int],
        result: OutputResult,
        outcomes: dict[int, dict[str, Any]],
        refused_now: set[str] | None,
    ) -> bool:
        """Record the units' undeliverable copies, then send their batches not in ``done`` from Spark
        tasks (with the router's verdicts so far), each batch's outcome into ``outcomes`` (a batch
        failed before is replaced by its new outcome). False when a task died (``result`` then says
        what the ledger holds). The first pass counts every undeliverable copy of the batches it
        sends (a resumed round's were recorded by the killed run already); a pass after a refusal
        counts the copies of the tables just refused (``refused_now``: their reasons), recorded
        before or not (a killed run may have)."""
        started = time.monotonic()
        output, rnd, total = job.output, job.round, job.total
        records = route_round(conn, self.router, units, set(job.bad_keys), rnd, total, done)
        if records:
            record_round(self.lake, output, result.round or "", records)
            if refused_now is None:
                result.undeliverable += len(records)
            else:  # the others were counted by the first pass
                result.undeliverable += sum(1 for r in records if r["reason"] in refused_now)
            for record in records:
                self.bad.report(output, record["destination"], record["reason"])
        job = dataclasses.replace(job, router=frozen(self.router))
        log.info(
            "publish %s: %d batch(es) from %d row group(s) sent by Spark tasks (routes checked in %.1fs)",
            output,
            sum(u.batches for u in units),
            len(units),
            time.monotonic() - started,
        )
        try:
            with heartbeat(self.spark, f"publish {output}", total, unit="batch(es)"):
                with cancelled_on_stop(self.spark, f"publish {output}"):
                    sent = send_units(self.spark, job, units)
        except Exception as exc:  # a task died (killed worker, lost connection): the ledger knows what went
            if stopping.requested():  # the tasks cancelled as asked (``cancelled_on_stop``): counted once ended
                result.status = Status.INTERRUPTED

                def committed() -> int:
                    count = len(ledger.rows_of_pipeline(conn, self.ledger, job.pipeline))
                    conn.rollback()
                    return count

                if not isinstance(exc, StoppedBeforeTasks):  # none submitted: none can still commit
                    settled(committed, kill_timeout(self.spark), f"publish {output}")
                return False
            result.status = Status.FAILED
            result.error, result.error_kind = task_error(exc), error_kind(exc)
            return False
        for outcome in sent:
            if outcome["k"] not in outcomes or outcomes[outcome["k"]]["status"] == "failed":
                outcomes[outcome["k"]] = outcome
        return True

    def _count_committed(self, conn: Connection, job: Job, done: set[int], result: OutputResult) -> None:
        """After a task died: what the tasks had committed when the failure was seen, from the ledger
        (the next run skips it); ``done``: what was sent before this run."""
        keys = RoundKeys(job.round, job.total)
        for row in ledger.rows_of_pipeline(conn, self.ledger, job.pipeline):
            k = keys.index(row.batch_key)
            if row.output_table == job.output and k is not None and k not in done:
                result.batches += 1
                result.rows += row.rows_sent  # the rows handled, as the driver counts them (it said 0: a review)
                result.published += row.rows_sent
                result.copies += row.copies_sent  # a failed round said 18 rows published in 0 copies
        conn.rollback()
        if result.status == Status.INTERRUPTED:
            log.info(
                "publish %s: stopped as asked, %d batch(es) sent; the next run sends the rest",
                job.output,
                result.batches,
            )
            return
        log.error("publish %s: %s (%d batch(es) had been sent)", job.output, result.error, result.batches)

    def _refusals(self, outcomes: dict[int, dict[str, Any]]) -> dict[str, str]:
        """Tables that refused a failed batch's copies and are not refused yet, with the reason."""
        found: dict[str, str] = {}
        for outcome in outcomes.values():
            table = outcome.get("refused")
            if outcome["status"] == "failed" and table and table not in self.router.refused:
                said = DROPPED if dropped(outcome["error"]) else "the table refused the copies"
                found.setdefault(table, f"{said}: {outcome['error']}")
        return found

    @staticmethod
    def _count(outcomes: dict[int, dict[str, Any]], result: OutputResult) -> None:
        """The batches' outcomes into the output's result."""
        for k in sorted(outcomes):
            outcome = outcomes[k]
            result.rows += outcome["rows"]
            if outcome["status"] == "skipped":
                result.batches_skipped += 1
            elif outcome["status"] == "failed":
                result.status = Status.FAILED
                result.failed_batches.append(outcome["batch_key"])
                result.error, result.error_kind = outcome["error"], outcome.get("error_kind")
            else:
                result.batches += 1
                result.published += outcome["rows"]
                result.copies += outcome["copies"]


def send_units(spark: SparkSession, job: Job, units: list[Unit]) -> list[dict[str, Any]]:
    """Run the units as Spark tasks, a few per core (each task opens one DB connection for its
    units, so a round of many small files is not a connection per file); returns one outcome per
    batch (sent, skipped or failed)."""
    slices = min(len(units), max(1, spark.sparkContext.defaultParallelism * 2))
    rdd = spark.sparkContext.parallelize(units, slices)
    spark.sparkContext.setJobDescription(f"queuelake publish {job.output} round {job.round.key(0, 0)}")
    return rdd.mapPartitions(partial(_run_units, job)).collect()


def _run_units(job: Job, units: Iterator[Unit]) -> Iterator[dict[str, Any]]:
    """A task: send each batch of its units not yet in the ledger, each in its own transaction
    (``batches.sender``; a batch that fails is looked up again, in case another run sent it)."""
    if not log.handlers:  # a fresh Python worker: progress to its stderr (the executor's log)
        from queuelake.report import setup_logging

        setup_logging(job.log_level)
    round_files.grant(job.storage)  # this worker never opened the lake: give it the root's options
    size = job.round.batch_size
    book = _book(job)
    batches = (
        ready(unit.first + j, rows, len(rows))
        for unit in units
        for j, rows in enumerate(_unit_batches(unit, job.bad_keys, size))
    )
    with job.database.connect("queuelake-publish") as conn:
        done = book.done(conn)
        started = time.monotonic()
        sent_rows = 0
        for outcome in send_batches(conn, book, batches, partial(_send, job), done, recheck=True):
            k = outcome.k
            if outcome.status == SKIPPED:
                yield {"k": k, "rows": outcome.rows, "status": "skipped"}
                continue
            if outcome.status == FAILED:
                failed = {
                    "status": "failed",
                    "error": outcome.error,
                    "error_kind": outcome.error_kind,
                    "batch_key": outcome.key,
                    "refused": outcome.refused,
                }
                yield {"k": k, "rows": outcome.rows, **failed}
                continue
            sent_rows += outcome.rows
            elapsed = time.monotonic() - started
            log.info(
                "publish %s: batch %d of %d sent from an executor, %d row(s) as %d message(s); "
                "this task %d row(s) at %.0f rows/s",
                job.output,
                k + 1,
                job.total,
                outcome.rows,
                outcome.copies,
                sent_rows,
                sent_rows / elapsed if elapsed else 0,
            )
            yield {"k": k, "rows": outcome.rows, "status": "sent", "copies": outcome.copies}


def _book(job: Job) -> Book:
    """Where the round's batches are recorded, and their keys."""
    keys = RoundKeys(job.round, job.total)
    return Book(job.ledger, job.pipeline, job.output, keys, f"publish {job.output}", "publish")


def _send(job: Job, conn: Connection, batch_key: str, rows: pa.Table) -> Sent:
    """Every deliverable copy of the batch's rows, in its transaction (the sender adds the ledger
    row and commits)."""
    queues.immediate_constraints(conn)
    now = queues.db_utc_now(conn)
    sent = format_time(now)
    out, _lost = job.router.build(None, job.pipeline, rows, now, sent)  # lost: recorded by the driver already
    out.insert(conn)
    return Sent(rows.num_rows, out.copies)


def frozen(router: Router) -> Router:
    """A copy of the router that only reads the verdicts made so far (what tasks get)."""
    return dataclasses.replace(
        router, verdicts=dict(router.verdicts), subscribers_of=dict(router.subscribers_of), frozen=True
    )


def log_level() -> int:
    return log.level or logging.INFO


def task_error(exc: BaseException) -> str:
    """A failed Spark job as one line, without the JVM's stack (or anything a task printed)."""
    text = str(exc)
    for line in text.splitlines():
        if "QueuelakeError" in line or "TransportError" in line:
            return f"a publish task failed: {line.strip()[:300]}"
    return f"a publish task failed ({type(exc).__name__}); its batches not in the ledger are sent by the next run"

"""Publish outbound tables to queues and subscribers, exactly once.

Per output table, a *round* covers the rows its commits added in Delta versions (P, V]. The round's
rows are read in a fixed order (files sorted by path, rows in file order) and cut into batches of
``publish.batch_size``; batch k's inserts into every destination and its ledger row
``P-V:k/N@B`` commit in one DB transaction. A rerun (after a crash at any instant) finds the round in
the ledger and skips the batches already there, so each row reaches each destination exactly once.
Message ids are uuid5(pipeline, key, destination): the same copy always has the same MessageId.

Destinations come from outbound rows and from SubscriptionRouting, which every endpoint writes and
queuelake does not own. Each is parsed and checked (a queue table with the transport's columns)
before a batch is sent; a copy whose destination cannot be delivered is not sent but recorded in
``<output>_undeliverable`` with its reason (idempotently, before the batch's DB commit), so one bad
row never blocks delivery to everyone else.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from queuelake import hooks
from queuelake.config import Config
from queuelake.context import connect
from queuelake.errors import QueuelakeError
from queuelake.lake import storage as lake_storage
from queuelake.lake import tables
from queuelake.lake.port import LakeEngine
from queuelake.lake.storage import filesystem as lake_filesystem
from queuelake.lake.storage import parquet_file
from queuelake.nsb.times import format_time
from queuelake.pipeline import publish_executors as executors
from queuelake.pipeline.outgoing import Router, accepted_rows, in_batches
from queuelake.pipeline.rounds import Round, parse_round, undeliverable_record
from queuelake.quality import expectations
from queuelake.quality import outbound as quality
from queuelake.report import log
from queuelake.transport import ledger, queues
from queuelake.transport.db import Connection
from queuelake.transport.tables import bridge_ref

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OPTIONAL = {
    "destination": pa.string(),
    "headers": pa.map_(pa.string(), pa.string()),
    "ttbr_ms": pa.int64(),
    "deliver_at": pa.timestamp("us", tz="UTC"),
    "correlation_id": pa.string(),
    "conversation_id": pa.string(),
}


UNDELIVERABLE_SCHEMA: pa.Schema = tables.UNDELIVERABLE.schema


@dataclass
class OutputResult:
    output: str
    status: str = "ok"
    rows: int = 0
    rejected: int = 0
    published: int = 0
    copies: int = 0
    batches: int = 0
    batches_skipped: int = 0
    undeliverable: int = 0
    bad_destinations: list[str] = field(default_factory=list)
    failed_batches: list[str] = field(default_factory=list)
    error: str | None = None
    round: str | None = None
    expectations: int = 0  # user expectations evaluated on the round (0: none configured)
    failed_expectations: list[dict[str, Any]] = field(default_factory=list)  # GX's details, when blocked


class Publisher:
    def __init__(self, config: Config, lake: LakeEngine, spark: SparkSession, run_id: str | None = None) -> None:
        self.config = config
        self.lake = lake
        self.spark = spark
        self.run_id = run_id or str(uuid.uuid4())
        # loaded (and checked against GX's registry) before any output is touched: a typo in one
        # suite is a config error, not a half-published run; {} and no GX import when none is set
        self.suites = expectations.load(config)
        self.endpoint = config.publish.endpoint
        self.ledger = bridge_ref(config.transport.ledger_table, config.transport)
        self.router = Router(config)
        self._reported: set[str] = set()

    # -- rounds -----------------------------------------------------------------------------------

    def _next_round(self, conn: Connection, output: str, pipeline: str) -> tuple[Round, set[int]]:
        keys = ledger.batch_keys(conn, self.ledger, pipeline, output)
        conn.rollback()
        latest, done, finished = last_round(keys)
        if latest is not None and not finished:
            return latest, done  # resume an unfinished round, batch for batch
        upto = self.lake.table_version(output)
        if upto is None:
            raise QueuelakeError(f"outbound table {output} does not exist in the lake")
        after = latest.upto if latest is not None else None
        return Round(after, upto, self.config.publish.batch_size), set()

    # -- reading ----------------------------------------------------------------------------------

    def _validate(
        self, output: str, files: list[str], rnd: Round, resumed: bool = False
    ) -> tuple[set[str], int, expectations.Outcome | None]:
        """Reject rows failing the built-in contract (Spark row checks, written to
        ``<output>_rejected``), then run the user's expectations, if any, on the accepted rows.
        With no expectations to run, an Arrow pre-check of the same contract goes first: a round
        it finds clean (the usual one) starts no Spark job at all.

        Returns (keys not to send, rows rejected, the suite's outcome or None). A failed suite
        returns before anything is written for the round (not even the rejects): the round is
        blocked and starts again, on the fixed data, at the next run. A resumed round (some batches
        already sent) passed its suite when it started: it is not validated again, so it cannot be
        left half sent by a suite edited in between."""
        suite = None if resumed else self.suites.get(output)
        if suite is None and not quality.arrow_may_reject(files, parquet_file):
            return set(), 0, None  # every row passes: no Spark job for the round

        from pyspark.sql import functions as F

        from queuelake.lake.arrow_types import to_spark_schema

        schema = self._schema(output, rnd)
        df = self.spark.read.schema(to_spark_schema(schema)).parquet(*files)
        for name, kind in OPTIONAL.items():
            if name not in df.columns:
                df = df.withColumn(name, F.lit(None).cast(to_spark_schema(pa.schema([(name, kind)]))[0].dataType))
        full = quality.with_reasons(df)
        # one Spark job: the keys of rejected rows (narrow; the plan reads no bodies); rejects are
        # the exception, so their keys fit the driver, as the bad-key filter of _rows needs anyway
        rejected_keys = [r["key"] for r in full.where(F.size("reasons") > 0).select("key").collect()]
        n_rejected = len(rejected_keys)
        outcome = None
        round_name = rnd.key(0, 0).split(":")[0]
        if suite is not None:
            t_suite = time.monotonic()
            accepted = full.where(F.size("reasons") == 0).drop("reasons", "body_len")
            outcome = expectations.validate(accepted, suite)
            expectations.record(self.lake, self.run_id, output, round_name, suite, outcome)
            log.info(
                "publish %s: %d expectation(s) %s in %.1fs",
                output,
                outcome.evaluated,
                "passed" if outcome.success else f"FAILED ({len(outcome.failed)})",
                time.monotonic() - t_suite,
            )
            if not outcome.success:
                return set(), n_rejected, outcome
        if n_rejected:
            rejected_out = (
                full.where(F.size("reasons") > 0)
                .drop("body_len")
                .withColumn("rejected_at", F.current_timestamp())
                .withColumn("round", F.lit(round_name))
            )
            rejected_table = tables.REJECTED.name_for(output)
            self.lake.append_dataframe(rejected_table, rejected_out, f"queuelake.publish/{output}", rnd.upto)
            log.warning("publish %s: %d row(s) rejected, see %s", output, n_rejected, rejected_table)
        return {k for k in rejected_keys if k is not None}, n_rejected, outcome

    def _schema(self, output: str, rnd: Round) -> pa.Schema:
        return self.lake.schema(output, rnd.upto)  # the port opens the table (storage options)

    def _batches(self, files: list[str], bad_keys: set[str], size: int) -> Iterator[list[dict[str, Any]]]:
        """Accepted rows in the round's fixed order (files by path, rows in file order), in batches."""
        return in_batches((row for uri in files for row in accepted_rows(parquet_file(uri), bad_keys)), size)

    # -- sending ----------------------------------------------------------------------------------

    def _publish_batch(
        self, conn: Connection, pipeline: str, output: str, batch_key: str, rows: list[dict[str, Any]]
    ) -> tuple[int, int]:
        """One DB transaction: every deliverable copy of every row, and the ledger row. Copies that
        cannot be delivered are recorded first (an idempotent lake append keyed by the batch), so a
        rerun after a crash records them once. Returns (copies sent, copies undeliverable)."""
        now = queues.db_utc_now(conn)
        sent = format_time(now)
        out, lost = self.router.build(conn, pipeline, rows, now, sent)
        bad: list[dict[str, Any]] = []
        for row, address, reason in lost:
            bad.append(undeliverable_record(row, address, reason, batch_key, now))
            self._report(output, address, reason)
        if bad:
            self.lake.append(
                tables.UNDELIVERABLE.name_for(output),
                pa.Table.from_pylist(bad, schema=UNDELIVERABLE_SCHEMA),
                f"queuelake.publish.undeliverable/{output}/{batch_key}",
                1,
            )
        out.insert(conn)
        ledger.record(conn, self.ledger, pipeline, output, batch_key, len(rows), out.copies)
        hooks.checkpoint("before_publish_commit")
        conn.commit()
        hooks.checkpoint("after_publish_commit")
        return out.copies, len(bad)

    def _publish_on_executors(
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
        """Send the round from Spark tasks, one per row group (publish_executors.py says why)."""
        started = time.monotonic()
        units, total = executors.plan(files, bad_keys, rnd.batch_size)
        records = executors.route_round(conn, self.router, units, bad_keys, rnd, total, done)
        if records:
            executors.record_undeliverable(self.lake, output, result.round or "", records)
            for record in records:
                self._report(output, record["destination"], record["reason"])
        result.undeliverable = len(records)
        job = executors.Job(
            config=self.config,
            router=executors.frozen(self.router),
            pipeline=pipeline,
            output=output,
            ledger=self.ledger,
            round=rnd,
            total=total,
            bad_keys=frozenset(bad_keys),
            log_level=executors.log_level(),
            storage=lake_storage.registered(files[0]) if files else None,
        )
        log.info(
            "publish %s: %d batch(es) from %d row group(s) sent by Spark tasks (routes checked in %.1fs)",
            output,
            total,
            len(units),
            time.monotonic() - started,
        )
        try:
            outcomes = executors.send_units(self.spark, job, units)
        except Exception as exc:  # a task died (killed worker, lost connection): the ledger knows what went
            result.status = "failed"
            result.error = executors.task_error(exc)
            # what the tasks had committed when the failure was seen (the next run skips it)
            for row in ledger.rows_of_pipeline(conn, self.ledger, pipeline):
                batch_round, k, _ = parse_round(row.batch_key)
                if row.output_table == output and batch_round == rnd and k not in done:
                    result.batches += 1
                    result.published += row.rows_sent
            conn.rollback()
            log.error("publish %s: %s (%d batch(es) had been sent)", output, result.error, result.batches)
            return
        for outcome in outcomes:
            result.rows += outcome["rows"]
            if outcome["status"] == "skipped":
                result.batches_skipped += 1
            elif outcome["status"] == "failed":
                result.status = "failed"
                result.failed_batches.append(outcome["batch_key"])
                result.error = outcome["error"]
            else:
                result.batches += 1
                result.published += outcome["rows"]
                result.copies += outcome["copies"]
        elapsed = time.monotonic() - started
        log.info(
            "publish %s: %d row(s) sent as %d message(s) from executors in %.1fs (%.0f rows/s), %d batch(es) "
            "were already sent, %d failed",
            output,
            result.published,
            result.copies,
            elapsed,
            result.published / elapsed if elapsed else 0,
            result.batches_skipped,
            len(result.failed_batches),
        )

    def _report(self, output: str, address: str | None, reason: str) -> None:
        """Once per bad address and run: a bad subscription row should be seen, not flood the log."""
        if address in self._reported:
            return
        self._reported.add(address)  # type: ignore[arg-type]
        log.warning(
            "publish %s: not delivering to %r: %s (copies recorded in %s_undeliverable)",
            output,
            address,
            reason,
            output,
        )

    def publish_output(self, output: str) -> OutputResult:
        result = OutputResult(output)
        pipeline = f"{self.endpoint}/{output}"
        with connect(self.config, "queuelake-publish") as conn:
            rnd, done = self._next_round(conn, output, pipeline)
            result.round = rnd.key(0, 0).split(":")[0]
            if rnd.after is not None and rnd.after >= rnd.upto:
                log.info("publish %s: nothing new since the last round (version %d), nothing to do", output, rnd.upto)
                return result
            files = self.lake.added_files(output, rnd.after, rnd.upto)
            t0 = time.monotonic()
            bad_keys, result.rejected, outcome = (
                self._validate(output, files, rnd, resumed=bool(done)) if files else (set(), 0, None)
            )
            if outcome is not None:
                result.expectations = outcome.evaluated
                result.failed_expectations = outcome.failed
                if not outcome.success:
                    # blocked: nothing sent, no ledger row, so the next run validates this round again
                    result.status = "blocked"
                    result.error = f"expectations failed: {expectations.summary(outcome.failed)}"
                    log.error("publish %s: blocked, nothing sent: %s", output, result.error)
                    return result
            total_rows = _count_accepted(files, bad_keys)
            log.info(
                "publish %s: %d new row(s) to send, %d rejected (checked in %.1fs)",
                output,
                total_rows,
                result.rejected,
                time.monotonic() - t0,
            )
            log.debug("publish %s: round %s, %d file(s)", output, result.round, len(files))
            n = (total_rows + rnd.batch_size - 1) // rnd.batch_size
            if n == 0:
                if 0 not in done:
                    ledger.record(conn, self.ledger, pipeline, output, rnd.key(0, 0), 0, 0)
                    conn.commit()
                return result
            threshold = self.config.publish.executors_from_rows
            if rnd.layout == executors.LAYOUT or (not done and threshold is not None and total_rows >= threshold):
                # a round resumes in the layout it started in, whatever the threshold says now
                self._publish_on_executors(
                    conn,
                    pipeline,
                    output,
                    dataclasses.replace(rnd, layout=executors.LAYOUT),
                    files,
                    bad_keys,
                    done,
                    result,
                )
                result.bad_destinations = sorted(str(a) for a in self._reported)
                return result
            started = time.monotonic()
            for k, rows in enumerate(self._batches(files, bad_keys, rnd.batch_size)):
                result.rows += len(rows)
                if k in done:
                    result.batches_skipped += 1
                    continue
                batch_key = rnd.key(k, n)
                try:
                    copies, lost = self._publish_batch(conn, pipeline, output, batch_key, rows)
                except QueuelakeError as exc:
                    conn.rollback()
                    result.status = "failed"
                    result.failed_batches.append(batch_key)
                    result.error = str(exc)
                    log.error("publish %s batch %s failed, nothing of it was sent: %s", output, batch_key, exc)
                    continue
                result.batches += 1
                result.published += len(rows)
                result.copies += copies
                result.undeliverable += lost
                elapsed = time.monotonic() - started
                log.info(
                    "publish %s: batch %d of %d sent, %d row(s) as %d message(s); %d so far at %.0f rows/s, "
                    "%d batch(es) left",
                    output,
                    k + 1,
                    n,
                    len(rows),
                    copies,
                    result.published,
                    result.published / elapsed if elapsed else 0,
                    n - k - 1,
                )
        result.bad_destinations = sorted(str(a) for a in self._reported)
        return result


def _count_accepted(files: list[str], bad_keys: set[str]) -> int:
    """Rows of the round that will be sent (reads only the key column)."""
    import pyarrow.compute as pc

    total = 0
    for uri in files:
        # files delta-rs rewrites (DELETE/UPDATE) store string_view, which is_in has no kernel for
        filesystem, path = lake_filesystem(uri)
        keys = pq.read_table(path, columns=["key"], filesystem=filesystem)["key"].cast(pa.string())
        total += len(keys) - keys.null_count
        if bad_keys:
            total -= pc.sum(pc.is_in(keys, pa.array(list(bad_keys), pa.string()))).as_py() or 0
    return total


def last_round(batch_keys: list[str]) -> tuple[Round | None, set[int], bool]:
    """(the latest round in the ledger, its batches sent, whether all of them were) from the
    ledger's batch keys of one output."""
    rounds: dict[Round, tuple[int, set[int]]] = {}
    for batch_key in batch_keys:
        rnd, k, n = parse_round(batch_key)
        rounds.setdefault(rnd, (n, set()))[1].add(k)
    if not rounds:
        return None, set(), True
    latest = max(rounds, key=lambda r: r.upto)
    total, done = rounds[latest]
    return latest, done, len(done) >= max(total, 1)


def pending(config: Config, lake: LakeEngine) -> list[str]:
    """The outputs with a round to send: versions past the last round, or a round not finished
    (cheap: the ledger's keys and a Delta log lookup each, no Spark). An idle scheduled run asks
    this before starting a Spark session for nothing."""
    outputs = [o for o in config.publish.outputs if lake.exists(o)]
    if not outputs:
        return []
    ledger_ref = bridge_ref(config.transport.ledger_table, config.transport)
    names = []
    with connect(config, "queuelake-publish") as conn:
        for output in outputs:
            try:
                keys = ledger.batch_keys(conn, ledger_ref, f"{config.publish.endpoint}/{output}", output)
            except QueuelakeError:
                names.append(output)  # publish itself says what is wrong
                continue
            finally:
                conn.rollback()
            latest, _, finished = last_round(keys)
            upto = lake.table_version(output)
            if latest is None or not finished or (upto is not None and latest.upto < upto):
                names.append(output)
    return names


def publish(config: Config, spark: SparkSession, lake: LakeEngine) -> dict[str, Any]:
    run_id = str(uuid.uuid4())
    publisher = Publisher(config, lake, spark, run_id)
    started = dt.datetime.now(dt.timezone.utc)
    results = []
    seconds: list[float] = []
    if not config.publish.outputs:
        log.info("publish: no outputs configured (publish.outputs), nothing to do")
    for output in config.publish.outputs:
        t0 = time.monotonic()
        if not lake.exists(output):
            log.info("publish %s: the table does not exist yet (its transform has not run), nothing to do", output)
            results.append(OutputResult(output, "skipped", error=f"{output} does not exist yet"))
        else:
            try:
                results.append(publisher.publish_output(output))
            except QueuelakeError as exc:
                log.error("publish %s failed: %s", output, exc)
                results.append(OutputResult(output, "failed", error=str(exc)))
        seconds.append(round(time.monotonic() - t0, 3))
    _record_runs(lake, run_id, started, results, seconds)
    # a blocked round (failed expectations) fails the run too: the data needs a person's attention
    status = "failed" if any(r.status in ("failed", "blocked") for r in results) else "ok"
    summary = [r.__dict__ for r in results]
    return {
        "status": status,
        "run_id": run_id,
        "published": sum(r.published for r in results),
        "copies": sum(r.copies for r in results),
        "rejected": sum(r.rejected for r in results),
        "undeliverable": sum(r.undeliverable for r in results),
        "outputs": summary,
    }


def _record_runs(
    lake: LakeEngine, run_id: str, started: dt.datetime, results: list[OutputResult], seconds: list[float]
) -> None:
    """One ``runs`` row per output (in the ``table`` column): rows published, copies sent
    (``fanned_out``), copies not deliverable, rows rejected, batches, status, and the failed
    expectations (JSON, GX's details) of a blocked round."""
    from queuelake.pipeline.runs import append_runs

    ended = dt.datetime.now(dt.timezone.utc)
    rows = [
        {
            "run_id": run_id,
            "command": "publish",
            "table": r.output,
            "started_at": started,
            "ended_at": ended,
            "published": r.published,
            "fanned_out": r.copies,
            "undeliverable": r.undeliverable,
            "rejected": r.rejected,
            "batches": r.batches,
            "seconds": s,
            "rate": round(r.published / s, 1) if s else 0.0,
            "status": r.status,
            "error": r.error,
            "failed_expectations": orjson.dumps(r.failed_expectations).decode() if r.failed_expectations else None,
        }
        for r, s in zip(results, seconds)
    ]
    append_runs(lake, run_id, "publish", rows)

"""Send journal rows back to queues: failed messages to the queue they failed in (a retry), or any
selection to one queue (a replay), exactly once per replay id.

A replay is planned once and then sent batch by batch:

1. *Selection.* ``--where`` is one Spark SQL boolean expression over ``messages``, evaluated at one
   Delta version V of the journal. Only ``landed`` rows can be sent (an expired row has no headers
   or body left, a quarantined one has headers nobody can read); the others are reported as skipped
   with their reason. The landed rows are ordered by (queue, seq, id), ``--limit`` keeps the first N.
2. *Plan.* The first run of a replay id writes a plan row into the publish ledger (pipeline
   ``replay/<id>``): V, the number of rows, the batch size and a fingerprint of the predicate,
   ``--to`` and ``--limit``. A rerun with the same id reads the plan back, evaluates the same
   predicate at the same V and cuts the same batches; a different predicate, or a selection that
   came out differently, is refused rather than guessed at.
3. *Destinations* are resolved before anything is sent: each address is parsed and its table checked
   (a queue table with the transport's columns). A row whose destination cannot be delivered (no or a
   malformed ``NServiceBus.FailedQ``, a table that does not exist) is not sent; it is recorded with its
   reason in ``replay_skipped`` before the first batch, and that record is final for the replay id.
4. *Batches.* Batch k's inserts into every destination and its ledger row commit in one DB
   transaction, as publish does; a rerun skips the batches that are in the ledger.

Headers follow what ServiceControl does on a retry (see the README for the table and its sources):
the failure headers are stripped (``HeaderFilter``), ``ServiceControl.Retry.UniqueMessageId`` is set
(``ReturnToSender`` also sets ``ServiceControl.Retry.AcknowledgementQueue``: here only when asked
for, since a successful retry then sends an acknowledgement to that queue). Every copy carries
``queuelake.Replay.*`` headers naming the replay. Expires is recomputed from
``NServiceBus.TimeToBeReceived`` by the database clock, never copied.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import gc
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from queuelake import stopping
from queuelake.config import Config
from queuelake.context import connect
from queuelake.errors import QueuelakeError
from queuelake.lake import tables
from queuelake.lake.engines import journal_engine
from queuelake.lake.port import LakeEngine
from queuelake.pipeline.journal.schema import MESSAGES
from queuelake.pipeline.replay import executors
from queuelake.pipeline.replay.ahead import ahead
from queuelake.pipeline.replay.arrow_predicate import arrow_predicate
from queuelake.pipeline.replay.arrow_selection import select_keys
from queuelake.pipeline.replay.plan import Plan, ReplayOptions, batch_key, new_replay_id
from queuelake.pipeline.replay.planned import Planned
from queuelake.pipeline.replay.predicate import validate_against
from queuelake.pipeline.replay.rows import EMPTY_KEYS, KEY_COLUMNS, Content, Row, Verdicts
from queuelake.pipeline.runs import RUNS, append_runs, record_engine
from queuelake.report import log
from queuelake.transport import binary_copy, ledger, locks
from queuelake.transport.db import Connection
from queuelake.transport.tables import TableRef, bridge_ref

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPLAYS = tables.REPLAYS.name
SKIPPED = tables.REPLAY_SKIPPED.name
REPLAYS_SCHEMA: pa.Schema = tables.REPLAYS.schema
SKIPPED_SCHEMA: pa.Schema = tables.REPLAY_SKIPPED.schema

# ---------------------------------------------------------------- the replay


@dataclass
class ReplayResult:
    replay_id: str | None
    status: str = "ok"
    dry_run: bool = False
    journal_version: int | None = None
    matched: int = 0  # journal rows the predicate matches, any outcome, before --limit
    selected_by: str | None = None  # arrow (no Spark) | spark: which evaluated --where
    selected: int = 0  # the landed rows of those that the replay plans to send (the first --limit)
    to_send: int = 0
    rows_sent: int = 0
    total_sent: int = 0
    batches: int = 0
    batches_sent: int = 0
    batches_done_before: int = 0
    failed_batches: list[str] = field(default_factory=list)
    skipped: int = 0
    skipped_reasons: dict[str, int] = field(default_factory=dict)
    destinations: dict[str, int] = field(default_factory=dict)
    message_types: dict[str, dict[str, int]] = field(default_factory=dict)
    seconds_sending: float = 0.0
    rate: float = 0.0
    error: str | None = None


class Replayer:
    def __init__(
        self,
        config: Config,
        spark: SparkSession | None,
        lake: LakeEngine,
        options: ReplayOptions,
        start_spark: Callable[[], SparkSession] | None = None,
    ) -> None:
        self.config = config
        self.spark = spark
        self.start_spark = start_spark  # when the predicate needs Spark and no session was given
        self.lake = lake
        self.journal = journal_engine(lake)
        self.options = options
        self.ledger = bridge_ref(config.transport.ledger_table, config.transport)
        self.verdicts = Verdicts(config)
        self.run_id = str(uuid.uuid4())
        self.started = dt.datetime.now(dt.timezone.utc)
        self.result = ReplayResult(options.replay_id)
        self.sending = False  # set once the plan is in the ledger: from then on the run is recorded
        self.sent_per_destination: collections.Counter[str] = collections.Counter()
        self._files: list[str] | None = None
        # seconds per step (select, plan, read, headers, send, ledger): where a replay's time goes
        self.steps: collections.defaultdict[str, float] = collections.defaultdict(float)

    # -- selection ------------------------------------------------------------------------------

    def _select(self, version: int) -> pa.Table:
        """The selection's small columns at journal version V, in (queue, seq, id) order, with each row's
        data file and row index, as Arrow on the driver: without Spark when the predicate allows
        (``arrow_predicate``), else in Spark. Which of the two depends on the predicate and the
        journal's columns only, so a rerun of the replay selects the same way."""
        schema = self.journal.schema(MESSAGES, version)
        predicate = arrow_predicate(self.options.predicate, schema, self._time_zone())
        if predicate is None:
            self.result.selected_by = "spark"
            keys = self._select_in_spark(version)
        else:
            self.result.selected_by = "arrow"
            keys, scan = select_keys(self.journal_files(version), schema, predicate)
            log.info(
                "replay: --where evaluated without Spark: %d of %d row group(s) in %d file(s) read, %d row(s); "
                "the others' statistics exclude it",
                scan.row_groups_read,
                scan.row_groups,
                scan.files,
                scan.rows_read,
            )
        # Sorted here, not by Spark: the keys are small, and a Spark sort costs a sampling job and a
        # shuffle of spark.sql.shuffle.partitions tasks. Arrow's sort is stable: rows equal in these
        # (a journal row twice) keep the files' order, the same in every run.
        return keys.sort_by([(c, "ascending") for c in ("queue", "seq", "id", "row_index")])

    def _time_zone(self) -> str:
        """The time zone Spark reads a time without one in (the session's, else queuelake's default)."""
        key = "spark.sql.session.timeZone"
        if self.spark is not None:
            return str(self.spark.conf.get(key, "UTC"))
        return self.config.spark.conf.get(key, "UTC")

    def _session(self) -> SparkSession:
        if self.spark is None:
            if self.start_spark is None:
                raise QueuelakeError(f"--where {self.options.predicate!r} needs Spark, and no session was given")
            self.spark = self.start_spark()
        return self.spark

    def _select_in_spark(self, version: int) -> pa.Table:
        from pyspark.sql import functions as F

        self._session()
        df = self.journal.read(MESSAGES, version)
        if not self.journal_files(version):  # an empty journal: no files, no _metadata
            validate_against(df, self.options.predicate)
            return EMPTY_KEYS.empty_table()
        selected = validate_against(df, self.options.predicate)
        failure = F.col("failed_queue").isNotNull() | F.col("exception_type").isNotNull()
        failure = failure | F.col("time_of_failure").isNotNull()
        audit = F.col("processing_started").isNotNull() | F.col("processing_ended").isNotNull()
        keys = selected.select(
            *KEY_COLUMNS,
            failure.alias("is_failure"),
            audit.alias("is_audit"),
            F.col("_metadata.file_path").alias("file"),
            F.col("_metadata.row_index").alias("row_index"),
        )
        arrow = keys.toArrow()
        file_at = arrow.schema.get_field_index("file")
        return arrow.set_column(file_at, "file", pc.dictionary_encode(arrow.column("file")))

    def _planned(self, keys: pa.Table) -> tuple[Planned, pa.Table]:
        """(the landed rows to plan, first --limit of them), and the other selected rows."""
        landed_mask = pc.equal(keys.column("outcome"), "landed")
        if pc.all(landed_mask).as_py() in (True, None):  # a retry's selection, mostly: no copy
            landed, others = keys, keys.slice(0, 0)
        else:
            landed, others = keys.filter(landed_mask), keys.filter(pc.invert(landed_mask))
        if self.options.limit is not None:
            landed = landed.slice(0, self.options.limit)
        return Planned.of(landed, self.options.to), others

    # -- ledger ---------------------------------------------------------------------------------

    def _ledger(self, conn: Connection, replay_id: str) -> tuple[Plan | None, set[int], int]:
        recorded = ledger.rows_of_pipeline(conn, self.ledger, f"replay/{replay_id}")
        conn.rollback()
        rows = [(r.output_table, r.batch_key, r.rows_sent) for r in recorded]
        plans = [Plan.parse(key) for _, key, _ in rows if key.startswith("plan:")]
        if len(plans) > 1:
            raise QueuelakeError(f"replay {replay_id} has {len(plans)} plans in the ledger; start a new replay id")
        done = {int(key.split("/")[0]) for _, key, _ in rows if not key.startswith("plan:")}
        sent = sum(int(n) for _, key, n in rows if not key.startswith("plan:"))
        return (plans[0] if plans else None), done, sent

    def _insert_ledger(self, conn: Connection, replay_id: str, key: str, rows_sent: int) -> None:
        ledger.record(conn, self.ledger, f"replay/{replay_id}", MESSAGES, key, rows_sent, rows_sent)

    # -- skipped rows ---------------------------------------------------------------------------

    def _recorded_skips(self, replay_id: str) -> set[tuple[str, int]]:
        if not self.lake.exists(SKIPPED):
            return set()
        table = self.lake.read_arrow(SKIPPED, columns=["replay_id", "queue", "seq"])
        table = table.filter(pc.equal(table.column("replay_id"), replay_id))
        return set(zip(table.column("queue").to_pylist(), table.column("seq").to_pylist(), strict=True))

    def _record_skips(self, replay_id: str, records: list[dict[str, Any]]) -> None:
        """Before the first batch of this run: the rows this replay will not send, with why. Final for
        the replay id (a rerun never sends a row recorded here)."""
        if not records:
            return
        lake = record_engine(self.lake, SKIPPED)
        version = (lake.last_version(SKIPPED, f"queuelake.replay.skipped/{replay_id}") or 0) + 1
        lake.append(
            SKIPPED,
            pa.Table.from_pylist(records, schema=SKIPPED_SCHEMA),
            f"queuelake.replay.skipped/{replay_id}",
            version,
        )

    # -- sending --------------------------------------------------------------------------------

    def _messages(
        self, replay_id: str, rows: list[Row], content: Content
    ) -> dict[str, tuple[TableRef, binary_copy.Messages]]:
        """The batch's messages grouped by destination: its rows' content read from the journal's
        files, headers rewritten."""
        with self.timed("read"):
            contents = content.read(rows)
        with self.timed("headers"):
            return executors.grouped(replay_id, rows, contents, self.options.ack_queue)

    def _send_batch(
        self,
        conn: Connection,
        replay_id: str,
        key: str,
        rows: list[Row],
        built: dict[str, tuple[TableRef, binary_copy.Messages]],
        due: float | None,
    ) -> None:
        """One DB transaction: the batch's inserts into every destination and its ledger row. With
        --max-rate, the commit waits until ``due`` (monotonic), so the rows become visible on pace."""
        with self.timed("send"):
            executors.send_messages(conn, built)
        if due is not None:
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        with self.timed("ledger"):
            executors.commit_batch(conn, self.ledger, replay_id, key, len(rows))

    @contextlib.contextmanager
    def timed(self, step: str) -> Iterator[None]:
        """Adds the block's seconds to ``steps[step]`` (the summary's ``seconds_by_step``)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.steps[step] += time.perf_counter() - started

    # -- the whole --------------------------------------------------------------------------------

    def run(self) -> ReplayResult:
        opts = self.options
        opts.check()
        if not self.journal.exists(MESSAGES):
            raise QueuelakeError("there is no journal (lake table messages) to replay from: run a drain first")
        replay_id = opts.replay_id or (None if opts.dry_run else new_replay_id())
        result = self.result = ReplayResult(replay_id, dry_run=opts.dry_run)
        with connect(self.config, "queuelake-replay") as conn:
            plan: Plan | None = None
            done: set[int] = set()
            if replay_id is not None:
                if not opts.dry_run:
                    self._lock(conn, replay_id)
                try:
                    plan, done, result.total_sent = self._ledger(conn, replay_id)
                except QueuelakeError:
                    if not opts.dry_run:
                        raise
                    conn.rollback()  # a dry run before `install`: no ledger, nothing sent yet
                if plan is not None and plan.fingerprint != opts.fingerprint():
                    raise QueuelakeError(
                        f"replay {replay_id} was started with a different --where, --to or --limit; rerun it with "
                        "the same ones to resume, or start a new replay (another --replay-id)"
                    )
            version = plan.version if plan is not None else self.journal.table_version(MESSAGES)
            assert version is not None
            result.journal_version = version
            t0 = time.monotonic()
            with self.timed("select"):
                keys = self._select(version)
                planned, others = self._planned(keys)
            result.matched = keys.num_rows
            log.info(
                "replay %s: %d journal row(s) match at version %d, %d of them landed; %d selected%s (%.1fs)",
                replay_id or "(dry run)",
                keys.num_rows,
                version,
                int(pc.sum(pc.equal(keys.column("outcome"), "landed")).as_py() or 0),
                planned.num_rows,
                "" if opts.limit is None else f" (--limit {opts.limit})",
                time.monotonic() - t0,
            )
            del keys  # the columns only the selection needed (the plan keeps its own)
            if plan is not None and plan.total != planned.num_rows:
                raise QueuelakeError(
                    f"replay {replay_id}: the predicate now selects {planned.num_rows} landed row(s) at journal "
                    f"version {version}, its plan {plan.total}: the selection is not reproducible; start a new replay"
                )
            plan_started = time.perf_counter()
            planned.resolve(conn, self.verdicts)
            conn.rollback()
            size = plan.batch_size if plan is not None else opts.effective_batch_size()
            result.selected = planned.num_rows
            result.batches = (planned.num_rows + size - 1) // size
            result.batches_done_before = len(done & set(range(result.batches)))
            records = self._skip_records(replay_id or "", planned, others)
            new, reasons, skip = self._settle_skips(replay_id, size, done, planned, records)
            planned.exclude(skip)
            self._count(result, planned, reasons)
            self.steps["plan"] += time.perf_counter() - plan_started
            if opts.dry_run:
                return result
            assert replay_id is not None
            if plan is None:
                plan = Plan(opts.fingerprint(), version, planned.num_rows, size)
                self._insert_ledger(conn, replay_id, plan.key(), 0)
                conn.commit()
            self.sending = True
            with self.timed("plan"):
                self._record_skips(replay_id, new)
            # What lives until the end (modules, the plan) is kept out of the garbage collector's full
            # passes, which walked it again and again while batches allocate.
            gc.freeze()
            try:
                self._send(conn, replay_id, plan, done, planned)
            finally:
                gc.unfreeze()
        return result

    def _lock(self, conn: Connection, replay_id: str) -> None:
        if not locks.try_lock(conn, f"queuelake.replay:{replay_id}"):
            raise QueuelakeError(f"replay {replay_id} is already running in another process")

    def _skip_records(self, replay_id: str, planned: Planned, others: pa.Table) -> list[dict[str, Any]]:
        now = dt.datetime.now(dt.timezone.utc)
        records = []
        for q, s, i, m, t, outcome, error in zip(
            *(others.column(c).to_pylist() for c in ("queue", "seq", "id", "message_id", "message_type")),
            others.column("outcome").to_pylist(),
            others.column("error").to_pylist(),
            strict=True,
        ):
            if outcome == "expired":
                reason = "expired: the journal keeps no headers or body of an expired message"
            else:
                reason = f"{outcome}: its headers could not be decoded ({error or 'no reason recorded'})"
            records.append(_skip(replay_id, q, s, i, m, t, None, reason, now))
        unsendable = planned.unsendable()
        columns = ("queue", "seq", "id", "message_id", "message_type", "address", "reason")
        for q, s, i, m, t, address, reason in zip(*(unsendable.column(c).to_pylist() for c in columns), strict=True):
            records.append(_skip(replay_id, q, s, i, m, t, address, reason, now))
        return records

    def _count(self, result: ReplayResult, planned: Planned, reasons: list[str]) -> None:
        counted = collections.Counter(reasons)
        result.skipped = sum(counted.values())
        result.skipped_reasons = dict(counted.most_common())
        result.destinations, result.message_types = planned.counts()
        result.to_send = sum(result.destinations.values())

    def _settle_skips(
        self, replay_id: str | None, size: int, done: set[int], planned: Planned, records: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[str], set[tuple[str, int]]]:
        """Which rows this run skips, and which of them are new to the record. The record is final: a
        row an earlier run recorded stays unsent; a row found undeliverable now is recorded only when
        its batch is still to be sent (one in a sent batch went out while its queue was there).
        Returns (new records, reasons to report, keys not to send)."""
        frozen = self._recorded_skips(replay_id) if replay_id else set()
        position = planned.batches_of(frozen | {(rec["queue"], rec["seq"]) for rec in records}, size)
        new, reasons, current = [], [], set()
        for rec in records:
            key = (rec["queue"], rec["seq"])
            current.add(key)
            if key in frozen:
                reasons.append(rec["reason"])
            elif key not in position or position[key] not in done:
                new.append(rec)
                reasons.append(rec["reason"])
        earlier = [k for k in frozen if k in position and k not in current]
        reasons += ["recorded as skipped by an earlier run of this replay"] * len(earlier)
        skip = frozen | {(rec["queue"], rec["seq"]) for rec in new}
        return new, reasons, skip

    def _send(self, conn: Connection, replay_id: str, plan: Plan, done: set[int], planned: Planned) -> None:
        """The batches not in the ledger, in order; the next one read and built while this one is sent
        (``ahead``). (With a COPY written row by row in Python there was nothing to overlap: tried
        in round 16, the medians of five runs were equal.)"""
        opts, result = self.options, self.result
        n, size = plan.batches, plan.batch_size
        threshold = self.config.replay.executors_from_rows
        if threshold is not None and planned.num_rows >= threshold and opts.max_rate is None:
            self._send_on_executors(replay_id, plan, done, planned)
            return
        content = Content(self.journal_files(plan.version))

        def prepare(k: int) -> tuple[list[Row], dict[str, tuple[TableRef, binary_copy.Messages]]]:
            batch = planned.batch(k, size)
            return batch, self._messages(replay_id, batch, content)

        todo = [k for k in range(n) if k not in done]
        started = time.monotonic()
        sent = 0
        for k, prepared in ahead(todo, prepare):
            if stopping.requested():
                result.status = "interrupted"
                break
            key, t_batch = batch_key(k, n, size), time.monotonic()
            try:
                batch, built = prepared()
                due = None if opts.max_rate is None else started + (sent + len(batch)) / opts.max_rate
                self._send_batch(conn, replay_id, key, batch, built, due)
            except QueuelakeError as exc:
                conn.rollback()
                result.status = "failed"
                result.failed_batches.append(key)
                result.error = str(exc)
                log.error("replay %s batch %s failed, nothing of it was sent: %s", replay_id, key, exc)
                continue
            sent += len(batch)
            result.rows_sent = sent
            result.total_sent += len(batch)
            result.batches_sent += 1
            for r in batch:
                self.sent_per_destination[r.target.canonical] += 1  # type: ignore[union-attr]
            elapsed = time.monotonic() - started
            result.seconds_sending = round(elapsed, 3)
            result.rate = round(sent / elapsed, 1) if elapsed else 0.0
            left = sum(1 for j in range(k + 1, n) if j not in done)
            log.info(
                "replay %s batch %d/%d: %d rows in %.2fs; %d sent at %.0f msg/s, %d batch(es) left",
                replay_id,
                k + 1,
                n,
                len(batch),
                time.monotonic() - t_batch,
                sent,
                result.rate,
                left,
            )

    def _send_on_executors(self, replay_id: str, plan: Plan, done: set[int], planned: Planned) -> None:
        """The batches not in the ledger, sent by Spark tasks (``executors.py``); the outcomes are
        counted here as the driver's loop counts its own."""
        from queuelake.lake.storage import registered

        result = self.result
        n, size = plan.batches, plan.batch_size
        units = [executors.Unit(k, batch_key(k, n, size), planned.slice(k, size)) for k in range(n) if k not in done]
        files = self.journal_files(plan.version)
        job = executors.Job(
            config=self.config,
            replay_id=replay_id,
            ledger=self.ledger,
            files=tuple(files),
            ack_queue=self.options.ack_queue,
            targets=planned.targets,
            log_level=executors.log_level(),
            storage=registered(files[0]) if files else None,
        )
        log.info("replay %s: %d batch(es) sent by Spark tasks", replay_id, len(units))
        started = time.monotonic()
        with self.timed("executors"):
            try:
                outcomes = executors.send_units(self._session(), job, units)
            except Exception as exc:  # a task died (killed worker, lost connection): the ledger knows
                result.status, result.error = "failed", executors.task_error(exc)
                log.error("replay %s: %s", replay_id, result.error)
                return
        for outcome in outcomes:
            if outcome["status"] == "failed":
                result.status = "failed"
                result.failed_batches.append(outcome["key"])
                result.error = outcome["error"]
            elif outcome["status"] == "sent":
                result.rows_sent += outcome["rows"]
                result.total_sent += outcome["rows"]
                result.batches_sent += 1
                self.sent_per_destination.update(outcome["destinations"])
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

    def journal_files(self, version: int) -> list[str]:
        if self._files is None:
            # through the lake port: it knows the storage options of the root
            self._files = self.journal.added_files(MESSAGES, None, version)
        return self._files

    # -- the record -----------------------------------------------------------------------------

    def record(self, result: ReplayResult) -> None:
        """A ``replays`` row and ``runs`` rows (one per destination) for this run."""
        ended = dt.datetime.now(dt.timezone.utc)
        opts = self.options
        replay = {
            "replay_id": result.replay_id,
            "run_id": self.run_id,
            "started_at": self.started,
            "ended_at": ended,
            "predicate": opts.predicate,
            "to_queue": opts.to,
            "limit": opts.limit,
            "journal_version": result.journal_version,
            "selected": result.selected,
            "destinations": list(result.destinations.items()),
            "rows_sent": result.rows_sent,
            "total_sent": result.total_sent,
            "batches": result.batches,
            "batches_done_before": result.batches_done_before,
            "failed_batches": len(result.failed_batches),
            "skipped": result.skipped,
            "skipped_reasons": list(result.skipped_reasons.items()),
            "max_rate": opts.max_rate,
            "rate": result.rate,
            "status": result.status,
            "error": result.error,
        }
        record_engine(self.lake, REPLAYS).append(
            REPLAYS, pa.Table.from_pylist([replay], schema=REPLAYS_SCHEMA), f"queuelake.replays/{self.run_id}", 1
        )
        # a replay that sent nothing still gets its one runs row
        per_destination: list[tuple[str | None, int]] = [*sorted(self.sent_per_destination.items())] or [(None, 0)]
        runs = [
            {
                "run_id": self.run_id,
                "command": "replay",
                "queue": destination,
                "started_at": self.started,
                "ended_at": ended,
                "published": count,
                "batches": result.batches_sent,
                "seconds": result.seconds_sending,
                "rate": result.rate,
                "status": result.status,
                "error": result.error,
            }
            for destination, count in per_destination
        ]
        append_runs(self.lake, self.run_id, "replay", runs)


def _skip(
    replay_id: str,
    queue: str,
    seq: int,
    row_id: str | None,
    message_id: str | None,
    message_type: str | None,
    destination: str | None,
    reason: str,
    now: dt.datetime,
) -> dict[str, Any]:
    return {
        "replay_id": replay_id,
        "queue": queue,
        "seq": seq,
        "id": row_id,
        "message_id": message_id,
        "message_type": message_type,
        "destination": destination,
        "reason": reason,
        "recorded_at": now,
    }


def replay(
    config: Config,
    spark: SparkSession | None,
    lake: LakeEngine,
    options: ReplayOptions,
    start_spark: Callable[[], SparkSession] | None = None,
) -> dict[str, Any]:
    """Run (or dry-run) one replay; returns the JSON summary. Once sending has begun, a run records
    itself in ``replays`` and ``runs`` however it ends (failed, interrupted). ``spark`` may be None
    when ``start_spark`` is given: a session is started only if the predicate needs one."""
    replayer = Replayer(config, spark, lake, options, start_spark)
    try:
        result = replayer.run()
    except QueuelakeError as exc:
        if not replayer.sending:
            raise
        result = replayer.result
        result.status, result.error = "failed", str(exc)
    except BaseException as exc:  # SIGTERM's Interrupted, Ctrl-C: record what was sent, then go on
        if replayer.sending:
            replayer.result.status, replayer.result.error = "interrupted", str(exc) or type(exc).__name__
            replayer.record(replayer.result)
        raise
    if not options.dry_run:
        with replayer.timed("record"):
            replayer.record(result)
    summary = dict(result.__dict__)
    summary["seconds_by_step"] = {step: round(s, 3) for step, s in replayer.steps.items()}
    if options.dry_run:
        for k in ("rows_sent", "total_sent", "batches_sent", "seconds_sending", "rate", "failed_batches"):
            summary.pop(k)
        summary["note"] = "dry run: nothing was sent or written"
    else:
        summary.pop("message_types")
        summary.pop("dry_run")
    return summary


def needs_spark(config: Config, lake: LakeEngine, options: ReplayOptions) -> bool:
    """Whether this replay needs a Spark session: its predicate is outside what ``arrow_predicate``
    evaluates, or a record table it writes was made by delta-spark (an older queuelake)."""
    journal = journal_engine(lake)
    if not journal.exists(MESSAGES):
        return False  # the run says there is no journal
    for table in (REPLAYS, SKIPPED, RUNS):
        if journal.exists(table) and journal.written_by(table) not in (None, journal.name):
            return True
    time_zone = config.spark.conf.get("spark.sql.session.timeZone", "UTC")
    return arrow_predicate(options.predicate, journal.schema(MESSAGES), time_zone) is None

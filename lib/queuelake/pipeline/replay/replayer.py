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
import functools
import gc
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc

from queuelake import stopping
from queuelake.config import Config, drained_as
from queuelake.errors import QueuelakeError, ReplayError, describe, error_kind
from queuelake.lake.engines import journal_engine
from queuelake.lake.port import LakeEngine
from queuelake.nsb.retry import REPLAY_ID
from queuelake.pipeline.batches.keys import is_plan_key, replay_batch_index
from queuelake.pipeline.batches.sender import DROPPED, dropped
from queuelake.pipeline.journal.schema import MESSAGES
from queuelake.pipeline.replay import canary, lineage, skips
from queuelake.pipeline.replay.arrow_predicate import arrow_predicate
from queuelake.pipeline.replay.plan import Cut, Plan, ReplayOptions, new_replay_id
from queuelake.pipeline.replay.planned import Planned
from queuelake.pipeline.replay.record import REPLAYS, record_run
from queuelake.pipeline.replay.result import ReplayResult
from queuelake.pipeline.replay.rows import Verdicts
from queuelake.pipeline.replay.selection import TIME_ZONE, Selection
from queuelake.pipeline.replay.sending import Sender
from queuelake.pipeline.replay.steps import Steps
from queuelake.pipeline.runs import RUNS
from queuelake.report import log
from queuelake.status import Status
from queuelake.transport import ledger, locks
from queuelake.transport.database import QueueDatabase
from queuelake.transport.db import Connection
from queuelake.transport.schema import require_table
from queuelake.transport.table_refs import endpoint_queue_address

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class Replayer:
    def __init__(
        self,
        config: Config,
        database: QueueDatabase,
        spark: SparkSession | None,
        lake: LakeEngine,
        options: ReplayOptions,
        start_spark: Callable[[], SparkSession] | None = None,
    ) -> None:
        self.config = config
        self.database = database
        self.lake = lake
        self.journal = journal_engine(lake)
        self.options = options
        time_zone = config.spark.conf.get(TIME_ZONE, "UTC")
        self.selection = Selection(self.journal, options, spark, start_spark, time_zone)
        self.ledger = database.ledger
        self.verdicts = Verdicts(database, drained=lambda address: drained_as(config, address))
        self.run_id = str(uuid.uuid4())
        self.started = dt.datetime.now(dt.timezone.utc)
        self.result = ReplayResult(options.replay_id)
        self.sending = False  # set once the plan is in the ledger: from then on the run is recorded
        self.resumed_at: int | None = None  # the journal version of the plan a rerun resumes
        self.sent_before: set[int] = set()  # the batches the ledger holds as sent when this run began
        self.sent_per_destination: collections.Counter[str] = collections.Counter()
        self.planned: Planned | None = None  # set once sending begins: the lineage is written from them
        self.cut: Cut | None = None
        # seconds per step (select, plan, read, headers, send, ledger): where a replay's time goes
        self.steps = Steps()

    # -- ledger ---------------------------------------------------------------------------------

    def _ledger(self, conn: Connection, replay_id: str) -> tuple[Plan | None, set[int], int]:
        recorded = ledger.rows_of_pipeline(conn, self.ledger, f"replay/{replay_id}")
        conn.rollback()
        rows = [(r.output_table, r.batch_key, r.rows_sent) for r in recorded]
        plans = [Plan.parse(key) for _, key, _ in rows if is_plan_key(key)]
        if len(plans) > 1:
            raise ReplayError(f"replay {replay_id} has {len(plans)} plans in the ledger; start a new replay id")
        done = {k for _, key, _ in rows if (k := replay_batch_index(key)) is not None}
        sent = sum(int(n) for _, key, n in rows if not is_plan_key(key))
        return (plans[0] if plans else None), done, sent

    def _insert_ledger(self, conn: Connection, replay_id: str, key: str, rows_sent: int) -> None:
        ledger.record(conn, self.ledger, f"replay/{replay_id}", MESSAGES, key, rows_sent, rows_sent)

    # -- the whole --------------------------------------------------------------------------------

    def run(self) -> ReplayResult:
        opts = self.options
        opts.check()
        if not self.journal.exists(MESSAGES):
            raise ReplayError("there is no journal (lake table messages) to replay from: run a drain first")
        replay_id = opts.replay_id or (None if opts.dry_run else new_replay_id())
        result = self.result = ReplayResult(replay_id, dry_run=opts.dry_run)
        with self.database.connect("queuelake-replay") as conn, contextlib.ExitStack() as held:
            plan: Plan | None = None
            done: set[int] = set()
            if replay_id is not None:
                if not opts.dry_run:
                    self._lock(conn, replay_id)
                    held.callback(self._unlock, conn, replay_id)
                try:
                    plan, done, result.total_sent = self._ledger(conn, replay_id)
                except QueuelakeError:
                    if not opts.dry_run:
                        raise
                    conn.rollback()  # a dry run before `install`: no ledger, nothing sent yet
                if plan is None and opts.replay_id is not None and not opts.dry_run:
                    # a mistyped id of a replay to resume starts a new one, which sends everything again
                    # (a review): said, since a scheduler's fixed id for a new replay is as legitimate
                    log.warning(
                        "replay %s: no replay of this id in the ledger: a new replay under it (to resume "
                        "one, give its id as its first run printed it)",
                        replay_id,
                    )
                if plan is None and opts.to is not None and not opts.dry_run:
                    # a new replay's --to must exist: a mistyped one recorded every row as skipped, for good
                    # under the replay id, and the command said "ok" (a review). A resumed one's table gone
                    # since is a destination gone (its rows left are skipped, said); a dry run lists them
                    require_table(conn, self.database.queue(opts.to))
                    conn.rollback()
                if plan is not None and plan.fingerprint != opts.fingerprint():
                    raise ReplayError(
                        f"replay {replay_id} was started with a different --where, --to or --limit; rerun it with "
                        "the same ones to resume, or start a new replay (another --replay-id)"
                    )
                if plan is not None and opts.canary is not None and plan.canary != opts.canary:
                    planned_with = f"--canary {plan.canary}" if plan.canary else "no canary"
                    raise ReplayError(
                        f"replay {replay_id} was planned with {planned_with}: resume it with that, or without "
                        "--canary to send what is left, or start a new replay (another --replay-id)"
                    )
            version = plan.version if plan is not None else self.journal.table_version(MESSAGES)
            self.resumed_at = plan.version if plan is not None else None
            self.sent_before = done
            assert version is not None
            result.journal_version = version
            t0 = time.monotonic()
            try:
                with self.steps.timed("select"):
                    keys = self.selection.select(version)
                    transport = self.database.transport
                    planned, others = self.selection.planned(keys, lambda e: endpoint_queue_address(e, transport))
            except FileNotFoundError:
                if plan is None or not done >= set(range(plan.cut.batches)):
                    raise  # something left to send from files that are gone (``_files_gone`` says so)
                return self._already_sent(result, plan)
            result.selected_by = self.selection.by
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
                raise ReplayError(
                    f"replay {replay_id}: the predicate now selects {planned.num_rows} landed row(s) at journal "
                    f"version {version}, its plan {plan.total}: the selection is not reproducible; start a new replay"
                )
            plan_started = time.perf_counter()
            planned.resolve(conn, self.verdicts)
            conn.rollback()
            size = plan.batch_size if plan is not None else opts.effective_batch_size()
            cut = plan.cut if plan is not None else Cut(planned.num_rows, size, opts.canary or 0)
            result.selected = planned.num_rows
            result.batches = cut.batches
            result.batches_done_before = len(done & set(range(result.batches)))
            records = skips.skip_records(replay_id or "", planned, others)
            records += self._already_replayed(result, replay_id, planned)
            new, reasons, skip = skips.settle_skips(self.lake, replay_id, cut, done, planned, records)
            planned.exclude(skip)
            self._count(result, planned, reasons, cut, done)
            self.steps.seconds["plan"] += time.perf_counter() - plan_started
            if stopping.requested():
                # asked to stop before the first batch (the selection of a large journal takes seconds): a
                # Ctrl-C then was honoured only by a second signal, after the selection (a review)
                log.warning("replay %s: asked to stop before sending; nothing was sent", replay_id or "(dry run)")
                result.status = Status.INTERRUPTED
                return result
            if opts.dry_run:
                return result
            assert replay_id is not None
            if plan is None:
                plan = Plan(opts.fingerprint(), version, planned.num_rows, size, opts.canary or 0)
                self._insert_ledger(conn, replay_id, plan.key(), 0)
                conn.commit()
            self.sending = True
            with self.steps.timed("plan"):
                skips.record_skips(self.lake, replay_id, new)
            # What lives until the end (modules, the plan) is kept out of the garbage collector's full
            # passes, which walked it again and again while batches allocate.
            gc.freeze()
            try:
                self.planned, self.cut = planned, plan.cut  # what the lineage is written from
                sender = Sender(
                    self.database,
                    self.config.replay,
                    opts,
                    result,
                    self.steps,
                    self.sent_per_destination,
                    self.selection.session,
                    functools.partial(self._refused, replay_id, planned, plan.cut),
                )
                files = self.selection.journal_files(plan.version)
                if opts.canary is not None:
                    self._with_canary(conn, sender, replay_id, plan, done, planned, files)
                else:
                    sender.send(conn, replay_id, plan, done, planned, files)
            finally:
                gc.unfreeze()
        return result

    def _already_replayed(self, result: ReplayResult, replay_id: str | None, planned: Planned) -> list[dict[str, Any]]:
        """Counts and says the selected rows an earlier replay sent that have not failed again since
        (``lineage.already_replayed``); returns their skip records under ``--skip-replayed``. Why: the same
        selection under a new replay id (a rerun of "retry yesterday's failures") sent every message a
        second time, with no word (a review). Sent again by default, as asked: a replay may mean it."""
        earlier = lineage.already_replayed(
            self.lake, replay_id, planned.table.select(["queue", "seq", "id", "message_id"])
        )
        if earlier.num_rows == 0:
            return []
        by = collections.Counter(earlier.column("replay_id").to_pylist())
        result.already_replayed = earlier.num_rows
        result.already_replayed_by = dict(by.most_common())
        times = skips.replay_times(earlier)
        named = ", ".join(f"{n} by replay {r} at {times[r]}" for r, n in by.most_common(5))
        more = f" and {len(by) - 5} other replay(s)" if len(by) > 5 else ""
        skip = self.options.skip_replayed
        # a resume was warned of when the replay started: said again as resumed, at info (it repeated the
        # warning on every resume of the same replay id)
        resumed = self.resumed_at is not None
        log.log(
            logging.INFO if resumed else logging.WARNING,
            "replay %s%s: %d of the %d selected row(s) were sent by an earlier replay and have not failed again "
            "since (%s%s): %s",
            replay_id or "(dry run)",
            " (resumed; said when it started)" if resumed else "",
            earlier.num_rows,
            planned.num_rows,
            named,
            more,
            "--skip-replayed leaves them out (counted as skipped)"
            if skip
            else "they are sent again; to leave them out, run with --skip-replayed (or narrow --where)",
        )
        return skips.replayed_records(replay_id or "", planned, earlier) if skip else []

    def _already_sent(self, result: ReplayResult, plan: Plan) -> ReplayResult:
        """A rerun of a replay whose every batch is in the ledger, its plan's journal version purged since
        (an erase, retention): nothing to send, so nothing to read. It failed with "cannot resume", and a
        scheduled retry of a finished replay went red for good after the first erase (two reviews)."""
        result.selected, result.batches = plan.total, plan.cut.batches
        result.batches_done_before = plan.cut.batches
        log.info(
            "replay %s: every one of its %d batch(es) was sent already, nothing to do (the journal at version %d, "
            "where it was planned, has been purged since by an erase or retention; its lineage stays as written)",
            result.replay_id,
            plan.cut.batches,
            plan.version,
        )
        return result

    # -- the canary -------------------------------------------------------------------------------

    def _with_canary(
        self,
        conn: Connection,
        sender: Sender,
        replay_id: str,
        plan: Plan,
        done: set[int],
        planned: Planned,
        files: list[str],
    ) -> None:
        """Batch 0 (the canaries) sent, unless the ledger has it; then the wait for their outcome
        (``canary.wait``); the other batches sent only when every canary was processed."""
        result, opts = self.result, self.options
        if plan.batches == 0:
            return
        sender.send(conn, replay_id, plan, done, planned, files, only={0})
        if result.status != Status.OK:
            return  # the canary batch failed or was stopped: nothing else is sent
        _, done, _ = self._ledger(conn, replay_id)
        with self.steps.timed("record"):
            result.lineage_recorded += lineage.record_lineage(self.lake, replay_id, planned, plan.cut, done)
        if plan.batches == 1:
            log.info("replay %s: the canary is the whole selection; nothing else to send", replay_id)
            result.canary = {"status": "whole-selection"}
            return
        now = dt.datetime.now(dt.timezone.utc)
        canaries = lineage.batch_rows(replay_id, planned, plan.cut, 0, now)
        with self.steps.timed("canary"):
            verdict = canary.wait(
                canary.drain_queues(self.database, self.config.drain.queues, set(planned.targets)),
                self.lake,
                canaries,
                opts.canary_wait,
                opts.canary_poll,
                drain=self._drain,
            )
        result.canary = verdict.summary()
        if verdict.status == canary.PASSED:
            log.info("replay %s: every canary was processed; sending the rest", replay_id)
            sender.send(conn, replay_id, plan, done, planned, files)
            return
        result.error = f"{verdict.reason()}; the rest is not sent (resume: --replay-id {replay_id})"
        result.status = {
            canary.FAILED: Status.CANARY_FAILED,
            canary.TIMEOUT: Status.CANARY_TIMEOUT,
        }.get(verdict.status, Status.INTERRUPTED)
        log.error("replay %s: %s", replay_id, result.error)

    def _drain(self, queues: list[str], seconds: float) -> None:
        """One drain of ``queues`` for at most ``seconds`` (what a canary's wait polls after)."""
        from queuelake.pipeline.drain.run import drain

        summary = drain(
            self.config,
            self.database,
            self.lake,
            queue_names=queues,
            max_seconds=seconds,
            start_spark=self.selection.session,
        )
        if summary.get("status") == Status.FAILED:
            raise ReplayError(f"the drain of {', '.join(queues)} failed: {summary.get('error')}")

    def _lock(self, conn: Connection, replay_id: str) -> None:
        if not locks.try_lock(conn, f"queuelake.replay:{replay_id}"):
            raise ReplayError(f"replay {replay_id} is already running in another process")

    def _unlock(self, conn: Connection, replay_id: str) -> None:
        """Released before the connection closes: a closed session's locks go only when its server
        process has ended, and a resume started at once found the replay "already running"."""
        with contextlib.suppress(Exception):  # a broken connection: its locks go with its session
            locks.unlock(conn, f"queuelake.replay:{replay_id}")

    def _refused(self, replay_id: str, planned: Planned, cut: Cut, table: str, error: str, batches: list[int]) -> None:
        """``table`` refused a batch's rows for what they are (a CHECK constraint, a trigger that
        raised: ``errors.RowsRefused``), which no check before the send can tell: its rows in the
        batches not sent yet are recorded as skipped, with the database's reason, before they are
        taken out of the plan, so the batches go on without them (killed in between, a rerun finds
        the record and skips them too). Before, every batch holding one of them failed, on every rerun."""
        reason = f"{DROPPED if dropped(error) else 'the table refused the message'}: {error}"
        records = skips.refused_records(replay_id, planned, cut, table, reason, batches)
        skips.record_skips(self.lake, replay_id, records)
        planned.exclude({skips.row_key(r) for r in records})
        result = self.result
        assert result is not None
        result.skipped += len(records)
        result.skipped_reasons[reason] = result.skipped_reasons.get(reason, 0) + len(records)
        result.destinations, result.message_types = planned.counts(cut, self.sent_before)
        result.to_send = sum(result.destinations.values())
        log.warning(
            "replay %s: %s refused the rows sent to it or is gone (%s); its %d row(s) in the batches left are skipped",
            replay_id,
            table,
            error,
            len(records),
        )

    def _count(self, result: ReplayResult, planned: Planned, reasons: list[str], cut: Cut, done: set[int]) -> None:
        counted = collections.Counter(reasons)
        result.skipped = sum(counted.values())
        result.skipped_reasons = dict(counted.most_common())
        result.destinations, result.message_types = planned.counts(cut, done)
        result.to_send = sum(result.destinations.values())

    def record(self, result: ReplayResult) -> None:
        """The lineage of the batches the ledger holds (``lineage.record_lineage``), a ``replays`` row
        and ``runs`` rows (one per destination) for this run."""
        if self.planned is not None and self.cut is not None and result.replay_id is not None:
            try:
                with self.database.connect("queuelake-replay") as conn:
                    _, done, _ = self._ledger(conn, result.replay_id)
                result.lineage_recorded += lineage.record_lineage(
                    self.lake, result.replay_id, self.planned, self.cut, done
                )
            except QueuelakeError as exc:  # the next run of the replay id writes it
                log.warning("replay %s: the lineage was not written: %s", result.replay_id, exc)
        result.sent_by_destination = dict(self.sent_per_destination.most_common())
        record_run(self.lake, self.run_id, self.started, self.options, result, self.sent_per_destination)


def replay(
    config: Config,
    database: QueueDatabase,
    spark: SparkSession | None,
    lake: LakeEngine,
    options: ReplayOptions,
    start_spark: Callable[[], SparkSession] | None = None,
) -> dict[str, Any]:
    """Run (or dry-run) one replay through ``database``, the queue database's handle the command
    opened (``context.open_database``); returns the JSON summary. Once sending has begun, a run records
    itself in ``replays`` and ``runs`` however it ends (failed, interrupted). ``spark`` may be None
    when ``start_spark`` is given: a session is started only if the predicate needs one."""
    replayer = Replayer(config, database, spark, lake, options, start_spark)
    try:
        try:
            result = replayer.run()
        except FileNotFoundError as exc:
            raise _files_gone(replayer, exc) from exc
    except Exception as exc:  # any error once sending began: the summary keeps the replay id (a review: a
        # deltalake error after a batch was sent left none, and the scheduler's rerun sent it again)
        if not replayer.sending:
            raise
        if stopping.stop_within(exc) is not None:  # an error a stop caused (a second signal in a Spark job)
            _interrupted(replayer, exc, options)
            raise
        result = replayer.result
        result.status, result.error = Status.FAILED, describe(exc)
        result.error_kind = error_kind(exc)
    except BaseException as exc:  # SIGTERM's Interrupted, Ctrl-C: record what was sent, then go on
        if replayer.sending:
            _interrupted(replayer, exc, options)
        raise
    if not options.dry_run:
        with replayer.steps.timed("record"):
            try:
                replayer.record(result)
            except Exception as exc:  # noqa: BLE001 - a lake's raw error too: the id must reach the summary
                # what was sent stays sent: the summary names the replay id, whose rerun sends nothing twice
                # and writes the records (a review: the error had no id, and the same command again
                # sent every message a second time)
                result.status, result.error_kind = Status.FAILED, error_kind(exc)
                result.error = (
                    f"the replay's records were not written ({describe(exc)}); what it sent stays sent: run it "
                    f"again with --replay-id {result.replay_id} to write them (it sends nothing twice)"
                )
                log.error("replay %s: %s", result.replay_id, result.error)
            except (stopping.Interrupted, KeyboardInterrupt) as stop:  # a second signal while they are written:
                # the counts and the replay id go with it, as a second signal's during a batch do (a review)
                _stopped_with(stop, _summary(replayer, result, options))
                raise
    return _summary(replayer, result, options)


def _interrupted(replayer: Replayer, exc: BaseException, options: ReplayOptions) -> None:
    """A replay stopped once sending began: what was sent recorded, and with the stop to the summary."""
    replayer.result.status, replayer.result.error = Status.INTERRUPTED, str(exc) or type(exc).__name__
    try:
        replayer.record(replayer.result)
    except QueuelakeError as failed:  # the stop is what the command reports
        log.warning("replay %s: its records were not written: %s", replayer.result.replay_id, failed)
    # a stop now (a second signal): what was sent goes with it to the summary, which said only
    # "interrupted" (a review); flat, as a first signal's summary is (it was under "replay": a review).
    # The status and error are the command's (the stop's)
    stop = exc if isinstance(exc, (stopping.Interrupted, KeyboardInterrupt)) else stopping.stop_within(exc)
    if stop is not None:
        _stopped_with(stop, _summary(replayer, replayer.result, options))


def _stopped_with(stop: BaseException, summary: dict[str, Any]) -> None:
    """``summary``'s counts attached to the stop ending the command (its status and error are the stop's)."""
    stopping.partial(stop, {k: v for k, v in summary.items() if k not in ("status", "error")})


def _files_gone(replayer: Replayer, exc: FileNotFoundError) -> ReplayError:
    """A journal file the replay reads is gone. Resuming, that is for good: the plan's version predates an
    erase (or retention) whose purge deleted its files, and versions before an erase can no longer be read
    (a review: the rerun failed with a bare FileNotFoundError, "unexpected")."""
    replay_id = replayer.options.replay_id
    if replayer.resumed_at is None:
        return ReplayError(
            f"replay: a journal file went while the replay read it ({exc}): an erase or retention purged it; "
            "run the replay again"
        )
    gone = (
        f"replay {replay_id} cannot resume: the journal's files at version {replayer.resumed_at}, where it was "
        f"planned, are gone (an erase or retention purged them since; versions before an erase cannot be read). "
    )
    unnamed = sorted(replayer.sent_before - lineage.recorded_batches(replayer.lake, replay_id or ""))
    if unnamed:  # a run killed before it wrote them: the lineage cannot be cut from the plan any more (a review)
        shown = ", ".join(map(str, unnamed[:10])) + (", ..." if len(unnamed) > 10 else "")
        return ReplayError(
            gone + f"{len(unnamed)} batch(es) it sent ({shown}) are NOT in replay_lineage: the run that sent them "
            "was stopped before it wrote their rows, which can no longer be named. Their copies carry the header "
            f"{REPLAY_ID}: {replay_id} (in the destination queues, and in the journal once drained from there); "
            "a new replay (another --replay-id) selects now and may send those messages again"
        )
    return ReplayError(
        gone + "The batches it sent stay sent (replay_lineage names their rows); start a new replay (another "
        "--replay-id): it selects now, the rows this one sent too unless its --where leaves them out"
    )


def _summary(replayer: Replayer, result: ReplayResult, options: ReplayOptions) -> dict[str, Any]:
    summary = dict(result.__dict__)
    summary["seconds_by_step"] = {step: round(s, 3) for step, s in replayer.steps.seconds.items()}
    if options.dry_run:
        for k in (
            "rows_sent",
            "total_sent",
            "batches_sent",
            "seconds_sending",
            "rate",
            "failed_batches",
            "canary",
            "lineage_recorded",
        ):
            summary.pop(k)
        summary["note"] = "dry run: nothing was sent or written"
    else:
        summary.pop("message_types")
        summary.pop("dry_run")
        if summary["canary"] is None:
            summary.pop("canary")
    return summary


def needs_spark(config: Config, lake: LakeEngine, options: ReplayOptions) -> bool:
    """Whether this replay needs a Spark session: its predicate is outside what ``arrow_predicate``
    evaluates, or a record table it writes was made by delta-spark (an older queuelake)."""
    journal = journal_engine(lake)
    if not journal.exists(MESSAGES):
        return False  # the run says there is no journal
    for table in (REPLAYS, skips.SKIPPED, lineage.LINEAGE, RUNS):
        if journal.exists(table) and journal.written_by(table) not in (None, journal.name):
            return True
    time_zone = config.spark.conf.get(TIME_ZONE, "UTC")
    return arrow_predicate(options.predicate, journal.schema(MESSAGES), time_zone) is None

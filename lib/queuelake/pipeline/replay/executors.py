"""Send a large replay's batches from Spark executors: each task sends its own batches, each with its
ledger row, as publish does for a large round.

Why: on the driver one Python process reads every selected row's headers and body and rewrites the
headers, and that work (not the database) bounds a replay's rate. Here the plan is made on the
driver as before (the selection at version V, the destinations checked, the skipped rows recorded in
``replay_skipped`` before anything is sent, the plan row in the ledger), then the batches are shipped
to Spark tasks, a few batches each. A task reads its rows' content from the journal's files itself,
builds the messages as the driver would (``messages.build``), and sends each batch with its ledger
row ``k/N@B`` in one transaction. Before sending, a task reads which batches the ledger already has,
so a task Spark retries, or a rerun after a kill at any instant, skips them: each selected row
reaches its destination exactly once, as from the driver. ``--max-rate`` replays stay on the driver
(the pace is one clock).
"""

from __future__ import annotations

import collections
import itertools
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from queuelake.lake import round_files
from queuelake.pipeline.batches.keys import ReplayKeys
from queuelake.pipeline.batches.sender import FAILED, SKIPPED, Batch, Book, Sent, send_batches
from queuelake.pipeline.journal.schema import MESSAGES
from queuelake.pipeline.replay import messages
from queuelake.pipeline.replay.ahead import ahead
from queuelake.pipeline.replay.planned import rows_of
from queuelake.pipeline.replay.rows import Content, Row
from queuelake.report import log
from queuelake.transport import binary_copy, queues
from queuelake.transport.database import QueueDatabase
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BATCHES_PER_TASK = 4  # a task opens one DB connection for its batches


@dataclass(frozen=True)
class Job:
    """What every task needs, pickled once per task: no Spark session, no lake handle."""

    database: QueueDatabase
    replay_id: str
    ledger: TableRef
    keys: ReplayKeys  # the batches' ledger keys
    files: tuple[str, ...]  # the journal's files at the planned version (rows name theirs)
    ack_queue: str | None
    targets: dict[str, TableRef]  # the destinations, by canonical name (the rows name theirs)
    log_level: int
    storage: tuple[str, dict[str, str]] | None  # the lake root's storage options (object stores)


@dataclass(frozen=True)
class Unit:
    """One batch of the plan: its index and its deliverable rows (``Planned.slice``: compact Arrow,
    turned into ``Row`` objects by the task)."""

    k: int
    rows: pa.Table


def send_units(spark: SparkSession, job: Job, units: list[Unit]) -> list[dict[str, Any]]:
    """Run the batches as Spark tasks; one outcome per batch (sent, skipped or failed)."""
    tasks = max(1, min(len(units), (len(units) + BATCHES_PER_TASK - 1) // BATCHES_PER_TASK))
    rdd = spark.sparkContext.parallelize(units, tasks)
    spark.sparkContext.setJobDescription(f"queuelake replay {job.replay_id}")
    return rdd.mapPartitions(partial(_run_units, job)).collect()


def book(ledger_ref: TableRef, replay_id: str, keys: ReplayKeys) -> Book:
    """Where a replay's batches are recorded: ledger rows of pipeline ``replay/<id>``, beside its plan."""
    return Book(ledger_ref, f"replay/{replay_id}", MESSAGES, keys, f"replay {replay_id}", "replay")


Ready = binary_copy.Messages | binary_copy.Stream  # a destination's batch: its messages, or its COPY stream


def send_messages(conn: Connection, built: Mapping[str, tuple[TableRef, Ready]]) -> None:
    """The batch's inserts into every destination (in the caller's transaction)."""
    for ref, batch in built.values():
        binary_copy.send(conn, ref, batch)


def send_built(conn: Connection, key: str, prepared: tuple[list[Row], Mapping[str, tuple[TableRef, Ready]]]) -> Sent:
    """A built batch's inserts, in its transaction (the sender adds its ledger row and commits)."""
    rows, built = prepared
    queues.immediate_constraints(conn)
    send_messages(conn, built)
    return Sent(len(rows), len(rows))


def by_destination(rows: list[Row]) -> list[Row]:
    """The rows grouped by destination, in the order destinations first appear, each group in the
    rows' order: read and built so, each destination's messages are a slice of the batch's, not a
    copy of its headers and bodies taken out of them."""
    groups: dict[str, list[Row]] = {}
    for row in rows:
        assert row.target is not None
        groups.setdefault(row.target.canonical, []).append(row)
    grouping = [row for group in groups.values() for row in group]
    return rows if all(a is b for a, b in zip(grouping, rows, strict=True)) else grouping  # grouped already


def grouped(
    replay_id: str, rows: list[Row], content: Content | pa.Table, ack_queue: str | None
) -> dict[str, tuple[TableRef, binary_copy.Messages]]:
    """The batch's messages by destination (``content``: the journal's files, or the rows' content
    already read from them, in the order of ``rows``)."""
    grouping = by_destination(rows)
    if isinstance(content, Content):
        read = content.read(grouping)
    elif grouping is rows:
        read = content
    else:
        place = {id(row): i for i, row in enumerate(rows)}
        read = content.take(pa.array([place[id(row)] for row in grouping], pa.int64()))
    built = messages.build(replay_id, grouping, read, ack_queue).messages
    out: dict[str, tuple[TableRef, binary_copy.Messages]] = {}
    start = 0
    while start < len(grouping):
        target = grouping[start].target
        assert target is not None
        stop = start
        while stop < len(grouping) and grouping[stop].target.canonical == target.canonical:  # type: ignore[union-attr]
            stop += 1
        out[target.canonical] = (target, built.slice(start, stop))
        start = stop
    return out


def _run_units(job: Job, units: Iterator[Unit]) -> Iterator[dict[str, Any]]:
    """A task: send each of its batches not yet in the ledger, each in its own transaction
    (``batches.sender``; a batch that fails is looked up again, in case another run sent it)."""
    if not log.handlers:  # a fresh Python worker: progress to its stderr (the executor's log)
        from queuelake.report import setup_logging

        setup_logging(job.log_level)
    round_files.grant(job.storage)  # this worker never opened the lake: give it the root's options
    content = Content(list(job.files))

    def prepare(unit: Unit) -> tuple[list[Row], dict[str, tuple[TableRef, binary_copy.Messages]]]:
        rows = rows_of(unit.rows, job.targets)
        return rows, grouped(job.replay_id, rows, content, job.ack_queue)

    mine = list(units)
    sending = book(job.ledger, job.replay_id, job.keys)
    with job.database.connect("queuelake-replay") as conn:
        done = sending.done(conn)
        todo = [unit for unit in mine if unit.k not in done]
        batches = itertools.chain(
            (Batch(unit.k, partial(prepare, unit), unit.rows.num_rows) for unit in mine if unit.k in done),
            # the next batch built while this one is sent
            (Batch(unit.k, prepared, unit.rows.num_rows) for unit, prepared in ahead(todo, prepare)),
        )
        started = time.monotonic()
        sent_rows = 0
        for outcome in send_batches(conn, sending, batches, send_built, done, recheck=True):
            if outcome.status == SKIPPED:
                yield {"k": outcome.k, "rows": outcome.rows, "status": "skipped"}
                continue
            if outcome.status == FAILED:
                yield {
                    "k": outcome.k,
                    "rows": outcome.rows,
                    "status": "failed",
                    "error": outcome.error,
                    "error_kind": outcome.error_kind,
                    "key": outcome.key,
                    "refused": outcome.refused,
                }
                continue
            assert outcome.content is not None
            rows = outcome.content[0]
            sent_rows += len(rows)
            elapsed = time.monotonic() - started
            log.info(
                "replay %s batch %s sent from an executor; this task %d row(s) at %.0f msg/s",
                job.replay_id,
                outcome.key,
                sent_rows,
                sent_rows / elapsed if elapsed else 0,
            )
            counts = collections.Counter(r.target.canonical for r in rows if r.target is not None)
            yield {"k": outcome.k, "rows": len(rows), "status": "sent", "destinations": dict(counts)}


def log_level() -> int:
    return log.level or logging.INFO


def task_error(exc: BaseException) -> str:
    """A failed Spark job as one line, without the JVM's stack."""
    for line in str(exc).splitlines():
        if "QueuelakeError" in line or "TransportError" in line:
            return f"a replay task failed: {line.strip()[:300]}"
    return f"a replay task failed ({type(exc).__name__}); its batches not in the ledger are sent by a rerun"

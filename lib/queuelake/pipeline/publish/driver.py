"""A round sent from the driver: its accepted rows in the round's fixed order, batch by batch, each
batch's copies and its ledger row in one DB transaction."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import pyarrow as pa

from queuelake.lake.port import LakeEngine
from queuelake.nsb.times import format_time
from queuelake.pipeline.batches.keys import RoundKeys
from queuelake.pipeline.batches.sender import FAILED, SKIPPED, Book, Sent, ready, send_batches
from queuelake.pipeline.publish.result import OutputResult
from queuelake.pipeline.publish.rounds import Round
from queuelake.pipeline.publish.routing import Router
from queuelake.pipeline.publish.rows import round_batches
from queuelake.pipeline.publish.undeliverable import BadDestinations, record_batch, undeliverable_record
from queuelake.report import log
from queuelake.status import Status
from queuelake.transport import queues
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef


class DriverSender:
    """Sends rounds from the driver, on the caller's connection."""

    def __init__(self, lake: LakeEngine, router: Router, ledger_ref: TableRef, bad: BadDestinations) -> None:
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
        n: int,
        files: list[str],
        bad_keys: set[str],
        done: set[int],
        result: OutputResult,
    ) -> None:
        """The round's ``n`` batches, skipping those ``done`` already; a batch that fails is rolled
        back whole and recorded in the result, and the next one goes on (``batches.sender``)."""
        book = Book(self.ledger, pipeline, output, RoundKeys(rnd, n), f"publish {output}", "publish")
        batches = (ready(k, rows, len(rows)) for k, rows in enumerate(round_batches(files, bad_keys, rnd.batch_size)))
        started = time.monotonic()
        for outcome in send_batches(conn, book, batches, partial(self.insert_batch, pipeline, output), done):
            result.rows += outcome.rows
            if outcome.status == SKIPPED:
                result.batches_skipped += 1
                continue
            if outcome.status == FAILED:
                result.status = Status.FAILED
                result.failed_batches.append(outcome.key)
                result.error = outcome.error
                continue
            result.batches += 1
            result.published += outcome.rows
            result.copies += outcome.copies
            result.undeliverable += outcome.lost
            elapsed = time.monotonic() - started
            log.info(
                "publish %s: batch %d of %d sent, %d row(s) as %d message(s); %d so far at %.0f rows/s, "
                "%d batch(es) left",
                output,
                outcome.k + 1,
                n,
                outcome.rows,
                outcome.copies,
                result.published,
                result.published / elapsed if elapsed else 0,
                n - outcome.k - 1,
            )

    def insert_batch(self, pipeline: str, output: str, conn: Connection, batch_key: str, rows: pa.Table) -> Sent:
        """Every deliverable copy of every row, in the batch's transaction (its ledger row and the
        commit follow, in the sender). Copies that cannot be delivered are recorded first (an
        idempotent lake append keyed by the batch), so a rerun after a crash records them once."""
        now = queues.db_utc_now(conn)
        sent = format_time(now)
        out, lost = self.router.build(conn, pipeline, rows, now, sent)
        bad: list[dict[str, Any]] = []
        for row, address, reason in lost:
            bad.append(undeliverable_record(row, address, reason, batch_key, now))
            self.bad.report(output, address, reason)
        if bad:
            record_batch(self.lake, output, batch_key, bad)
        out.insert(conn)
        return Sent(rows.num_rows, out.copies, len(bad))

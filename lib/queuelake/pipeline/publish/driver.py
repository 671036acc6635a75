"""A round sent from the driver: its accepted rows in the round's fixed order, batch by batch, each
batch's copies and its ledger row in one DB transaction."""

from __future__ import annotations

import time
from typing import Any

from queuelake import hooks
from queuelake.errors import QueuelakeError
from queuelake.lake.port import LakeEngine
from queuelake.nsb.times import format_time
from queuelake.pipeline.publish.result import OutputResult
from queuelake.pipeline.publish.rounds import Round
from queuelake.pipeline.publish.routing import Router
from queuelake.pipeline.publish.rows import round_batches
from queuelake.pipeline.publish.undeliverable import BadDestinations, record_batch, undeliverable_record
from queuelake.report import log
from queuelake.transport import ledger, queues
from queuelake.transport.db import Connection
from queuelake.transport.tables import TableRef


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
        back whole and recorded in the result, and the next one goes on."""
        started = time.monotonic()
        for k, rows in enumerate(round_batches(files, bad_keys, rnd.batch_size)):
            result.rows += len(rows)
            if k in done:
                result.batches_skipped += 1
                continue
            batch_key = rnd.key(k, n)
            try:
                copies, lost = self.send_batch(conn, pipeline, output, batch_key, rows)
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

    def send_batch(
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
            self.bad.report(output, address, reason)
        if bad:
            record_batch(self.lake, output, batch_key, bad)
        out.insert(conn)
        ledger.record(conn, self.ledger, pipeline, output, batch_key, len(rows), out.copies)
        hooks.checkpoint("before_publish_commit")
        conn.commit()
        hooks.checkpoint("after_publish_commit")
        return out.copies, len(bad)

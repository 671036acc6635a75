"""One queue's drain result: its counts, timing, status and error, for the summary and ``runs``."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from typing import Any

from queuelake.pipeline.runs import PartResult


@dataclass
class QueueResult(PartResult):
    queue: str
    dequeued: int = 0
    landed: int = 0
    expired: int = 0
    quarantined: int = 0
    claims_resolved: int = 0
    rows_resolved: int = 0  # the rows of those claims (``claims.Resolved``)
    batches: int = 0
    seconds: float = 0.0
    rate: float = 0.0
    backlog_left: int | None = None
    held_by_others: int = 0
    rows_without_seq: int = 0  # rows no receive can take: a NULL seq (a table not made by the transport)
    workers: int = 0  # given by backlog (0: the queue was empty, only its estimate was read)
    started_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("started_at")
        return out

    def runs_rows(self) -> list[dict[str, Any]]:
        counts = ("dequeued", "landed", "expired", "quarantined", "batches", "seconds", "rate", "backlog_left")
        row = {"queue": self.queue, **{k: getattr(self, k) for k in counts}}
        return [{**row, "status": self.status, "error": self.error}]

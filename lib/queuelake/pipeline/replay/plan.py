"""What a replay was asked (options) and what its first run decided (the plan in the ledger): a rerun
with the same replay id reads the plan back and cuts the same batches (the plan row's and the
batches' ledger keys: ``batches.keys``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import uuid
from dataclasses import dataclass

import orjson

from queuelake.errors import ArgumentError
from queuelake.pipeline.batches.keys import parse_plan_key, plan_key
from queuelake.pipeline.replay.predicate import check_predicate

DEFAULT_BATCH_SIZE = 5000
PACED_BATCH_SECONDS = 0.5  # under --max-rate a batch holds about this long's worth of messages


@dataclass
class ReplayOptions:
    predicate: str
    to: str | None = None
    dry_run: bool = False
    limit: int | None = None
    max_rate: float | None = None
    replay_id: str | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    ack_queue: str | None = None

    def check(self) -> None:
        self.predicate = check_predicate(self.predicate)
        if self.limit is not None and self.limit < 0:
            raise ArgumentError("--limit must be 0 or more")
        if self.max_rate is not None and self.max_rate <= 0:
            raise ArgumentError("--max-rate must be a positive number of messages per second")
        if self.batch_size < 1:
            raise ArgumentError("--batch-size must be at least 1")
        if self.replay_id is not None and not _REPLAY_ID.fullmatch(self.replay_id):
            raise ArgumentError(
                f"--replay-id {self.replay_id!r}: use 1-100 characters of letters, digits, '.', '_', ':' or '-'"
            )
        if self.to is not None and not self.to.strip():
            raise ArgumentError("--to is empty")

    def fingerprint(self) -> str:
        data = orjson.dumps({"where": self.predicate, "to": self.to, "limit": self.limit})
        return hashlib.sha256(data).hexdigest()[:16]

    def effective_batch_size(self) -> int:
        if self.max_rate is None:
            return self.batch_size
        return max(1, min(self.batch_size, round(self.max_rate * PACED_BATCH_SECONDS)))


_REPLAY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,99}")


def new_replay_id() -> str:
    now = dt.datetime.now(dt.timezone.utc)
    return f"replay-{now:%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class Plan:
    fingerprint: str
    version: int
    total: int
    batch_size: int

    def key(self) -> str:
        return plan_key(self.fingerprint, self.version, self.total, self.batch_size)

    @property
    def batches(self) -> int:
        return (self.total + self.batch_size - 1) // self.batch_size

    @staticmethod
    def parse(key: str) -> Plan:
        return Plan(*parse_plan_key(key))

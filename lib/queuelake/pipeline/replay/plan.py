"""What a replay was asked (options) and what its first run decided (the plan in the ledger): a rerun
with the same replay id reads the plan back and cuts the same batches (the plan row's and the
batches' ledger keys: ``batches.keys``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import re
import uuid
from dataclasses import dataclass

import orjson

from queuelake.errors import ArgumentError
from queuelake.pipeline.batches.keys import parse_plan_key, plan_key
from queuelake.pipeline.replay.predicate import check_predicate

DEFAULT_BATCH_SIZE = 5000
DEFAULT_CANARY_WAIT = 300.0  # --canary-wait: seconds to wait for the canaries' outcome
CANARY_POLL_SECONDS = 5.0  # between two looks at the journal (each after a drain) while waiting
PACED_BATCH_SECONDS = 0.5  # under --max-rate a batch holds about this long's worth of messages


_MOST = 2**63 - 1  # a limit is a LIMIT of a 64-bit count: past it, an OverflowError came out as "unexpected"


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
    canary: int | None = None  # send the first N first, the rest once they are processed (canary.py)
    canary_wait: float = DEFAULT_CANARY_WAIT
    canary_poll: float = CANARY_POLL_SECONDS
    # leave out the rows an earlier replay sent that have not failed again since (reported as skipped)
    skip_replayed: bool = False

    def check(self) -> None:
        self.predicate = check_predicate(self.predicate)
        if self.limit is not None and not 0 <= self.limit <= _MOST:
            raise ArgumentError(f"--limit must be 0 or more, at most {_MOST:,}")
        # NaN compares false with everything, infinity paced nothing: both ended as "unexpected" (a review)
        if self.max_rate is not None and not (0 < self.max_rate < math.inf):
            raise ArgumentError("--max-rate must be a positive number of messages per second")
        if self.batch_size < 1:
            raise ArgumentError("--batch-size must be at least 1")
        if self.replay_id is not None and not _REPLAY_ID.fullmatch(self.replay_id):
            raise ArgumentError(
                f"--replay-id {self.replay_id!r}: use 1-100 characters of letters, digits, '.', '_', ':' or '-'"
            )
        if self.to is not None and not self.to.strip():
            raise ArgumentError("--to is empty")
        if self.canary is not None and self.canary < 1:
            raise ArgumentError("--canary must be at least 1 message")
        if self.canary_wait <= 0 or self.canary_poll <= 0:
            raise ArgumentError("--canary-wait must be a positive number of seconds")
        if self.canary is not None and self.dry_run:
            raise ArgumentError("--canary sends messages: it cannot go with --dry-run")

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
class Cut:
    """How a plan's ``total`` rows (in plan order) are cut into batches: of ``batch_size`` rows, or,
    with a ``canary`` of C rows, batch 0 the first C rows and batches 1.. ``batch_size`` rows each.
    Part of the plan (its ledger key), so every run of a replay id cuts the same batches."""

    total: int
    batch_size: int
    canary: int = 0

    @property
    def batches(self) -> int:
        if not self.canary:
            return (self.total + self.batch_size - 1) // self.batch_size
        rest = max(0, self.total - self.canary)
        return (1 if self.total else 0) + (rest + self.batch_size - 1) // self.batch_size

    def bounds(self, k: int) -> tuple[int, int]:
        """Batch k's first position and its length (at most; the last batch may be shorter)."""
        if not self.canary:
            return k * self.batch_size, self.batch_size
        if k == 0:
            return 0, self.canary
        return self.canary + (k - 1) * self.batch_size, self.batch_size

    def batch_of(self, position: int) -> int:
        if not self.canary:
            return position // self.batch_size
        return 0 if position < self.canary else 1 + (position - self.canary) // self.batch_size


@dataclass(frozen=True)
class Plan:
    fingerprint: str
    version: int
    total: int
    batch_size: int
    canary: int = 0  # rows of batch 0, sent and checked first (--canary); 0: none

    def key(self) -> str:
        return plan_key(self.fingerprint, self.version, self.total, self.batch_size, self.canary)

    @property
    def cut(self) -> Cut:
        return Cut(self.total, self.batch_size, self.canary)

    @property
    def batches(self) -> int:
        return self.cut.batches

    @staticmethod
    def parse(key: str) -> Plan:
        return Plan(*parse_plan_key(key))

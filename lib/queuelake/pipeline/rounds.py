"""Rounds, batch keys and undeliverable records: what the driver's and the executors' publish share.

Why a module of its own: both ``publish.py`` (the driver, which hands large rounds to the executors)
and ``publish_executors.py`` write ledger rows ``P-V:k/N@B`` and ``<output>_undeliverable`` records,
and read the ledger back to resume a round. Kept here, the two agree on the format without the
executors reaching back into the module that calls them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Round:
    """Delta versions (after, upto] of an output, cut into batches of ``batch_size`` rows: one stream
    of rows (``layout`` "") or batches that follow Parquet row groups (``g``, sent from executors)."""

    after: int | None
    upto: int
    batch_size: int
    layout: str = ""

    def key(self, k: int, n: int) -> str:
        return f"{'' if self.after is None else self.after}-{self.upto}:{k}/{n}@{self.batch_size}{self.layout}"


def parse_round(batch_key: str) -> tuple[Round, int, int]:
    """``P-V:k/N@B`` (``@Bg`` from executors) -> (the round, k, N): how a rerun finds, in the ledger,
    the batches of a round already sent."""
    span, _, rest = batch_key.partition(":")
    after, _, upto = span.partition("-")
    kn, _, size = rest.partition("@")
    k, _, n = kn.partition("/")
    layout = size.lstrip("0123456789")
    size = size[: len(size) - len(layout)]
    return Round(int(after) if after else None, int(upto), int(size), layout), int(k), int(n)


def undeliverable_record(
    row: dict[str, Any], address: str | None, reason: str, batch_key: str, now: dt.datetime
) -> dict[str, Any]:
    """A row of ``<output>_undeliverable``: one copy not sent, and why."""
    return {
        "key": row["key"],
        "intent": row["intent"],
        "message_type": row["message_type"],
        "destination": address,
        "reason": reason,
        "round": batch_key.split(":")[0],
        "batch_key": batch_key,
        "recorded_at": now,
    }

"""The ledger's batch keys: every key publish and replay write, formatted and parsed here only.

The keys are persisted in users' ledgers, and a rerun finds what it has already sent by reading them
back: a format written here must never change, or a resumed round or replay would resend.

- a publish round's batch k of N: ``P-V:k/N@B`` (Delta versions (P, V] of the output, ``P`` empty for
  the first round, batches of B rows), ``@Bg`` when its batches follow Parquet row groups (sent from
  executors); ``T~P-V:k/N@B`` for a round of an output table the ledger's plain keys are not of (T: 12
  hex digits of its Delta table id), beside the row ``table:<id>`` naming the table the plain keys are
  of (``pipeline.publish.rounds``); and ``whole:[T~]P-V``, recorded before the first batch of a round
  cut with every row of its files (the files a rewrite of the range removed were vacuumed, so the rows
  it carried over unchanged could not be told: ``pipeline.publish.carried``), so that its resume cuts
  the same batches;
- a replay's batch k of N: ``k/N@B``, beside the replay's one plan row
  ``plan:<fingerprint>:v<V>:n<rows>:b<B>``, or ``...:b<B>:c<C>`` for a replay planned with a canary
  (``--canary C``: batch 0 holds the first C rows, batches 1.. B rows each).

``RoundKeys`` and ``ReplayKeys`` are what the batch sender (``sender``) is given: the key of batch
k, and which batch (if any of this round or replay) a key read from the ledger names.
"""

from __future__ import annotations

from dataclasses import dataclass

PLAN_PREFIX = "plan:"
TABLE_PREFIX = "table:"  # the row naming the output table a publish's plain round keys are of
WHOLE_PREFIX = "whole:"  # the row of a publish round cut with every row of its files (none carried over)


@dataclass(frozen=True)
class Round:
    """Delta versions (after, upto] of an output, cut into batches of ``batch_size`` rows: one stream
    of rows (``layout`` "") or batches that follow Parquet row groups (``g``, sent from executors)."""

    after: int | None
    upto: int
    batch_size: int
    layout: str = ""
    table: str = ""  # "": of the table the ledger's plain keys are of; else its tag (``T~``)

    def key(self, k: int, n: int) -> str:
        return f"{self.span()}:{k}/{n}@{self.batch_size}{self.layout}"

    def span(self) -> str:
        """``[T~]P-V``: the round's table and versions, whatever its batches."""
        tag = f"{self.table}~" if self.table else ""
        return f"{tag}{'' if self.after is None else self.after}-{self.upto}"


def is_table_key(batch_key: str) -> bool:
    return batch_key.startswith(TABLE_PREFIX)


def is_round_key(batch_key: str) -> bool:
    """Whether a publish ledger key is a round's batch (``[T~]P-V:k/N@B``), not a ``table:`` or a
    ``whole:`` row."""
    return not batch_key.startswith((TABLE_PREFIX, WHOLE_PREFIX))


def whole_key(rnd: Round) -> str:
    return f"{WHOLE_PREFIX}{rnd.span()}"


def table_key(table_id: str) -> str:
    return f"{TABLE_PREFIX}{table_id}"


def parse_round(batch_key: str) -> tuple[Round, int, int]:
    """``[T~]P-V:k/N@B`` (``@Bg`` from executors) -> (the round, k, N): how a rerun finds, in the ledger,
    the batches of a round already sent."""
    table, _, batch_key = batch_key.rpartition("~")
    span, _, rest = batch_key.partition(":")
    after, _, upto = span.partition("-")
    kn, _, size = rest.partition("@")
    k, _, n = kn.partition("/")
    layout = size.lstrip("0123456789")
    size = size[: len(size) - len(layout)]
    return Round(int(after) if after else None, int(upto), int(size), layout, table), int(k), int(n)


@dataclass(frozen=True)
class RoundKeys:
    """The keys of one publish round's ``total`` batches."""

    round: Round
    total: int

    def key(self, k: int) -> str:
        return self.round.key(k, self.total)

    def index(self, batch_key: str) -> int | None:
        """k when ``batch_key`` is a batch of this round (whatever N it was written with), else None."""
        if not is_round_key(batch_key):
            return None
        rnd, k, _ = parse_round(batch_key)
        return k if rnd == self.round else None


def replay_batch_key(k: int, n: int, size: int) -> str:
    return f"{k}/{n}@{size}"


def replay_batch_index(batch_key: str) -> int | None:
    """k of a replay's ``k/N@B`` key; None for its plan row."""
    return None if is_plan_key(batch_key) else int(batch_key.split("/")[0])


def is_plan_key(batch_key: str) -> bool:
    return batch_key.startswith(PLAN_PREFIX)


def plan_key(fingerprint: str, version: int, total: int, batch_size: int, canary: int = 0) -> str:
    key = f"{PLAN_PREFIX}{fingerprint}:v{version}:n{total}:b{batch_size}"
    return f"{key}:c{canary}" if canary else key


def parse_plan_key(batch_key: str) -> tuple[str, int, int, int, int]:
    """``plan:<fingerprint>:v<V>:n<rows>:b<B>[:c<C>]`` -> (fingerprint, V, rows, B, C); C is 0 for a
    plan without a canary."""
    _, fp, v, n, b, *rest = batch_key.split(":")
    canary = int(rest[0][1:]) if rest else 0
    return fp, int(v[1:]), int(n[1:]), int(b[1:]), canary


@dataclass(frozen=True)
class ReplayKeys:
    """The keys of one replay's ``total`` batches of ``batch_size`` rows."""

    total: int
    batch_size: int

    def key(self, k: int) -> str:
        return replay_batch_key(k, self.total, self.batch_size)

    def index(self, batch_key: str) -> int | None:
        return replay_batch_index(batch_key)

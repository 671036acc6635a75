"""Rounds and their batch keys: which round of an output to send, and which of its batches the
ledger already holds.

A round is Delta versions (P, V] of an output cut into batches; batch k of N is recorded in the
ledger as ``P-V:k/N@B`` (``@Bg`` when its batches follow Parquet row groups, sent from executors).
The driver's and the executors' sends write these keys and read them back to resume a round; the
grammar itself (``Round``, ``parse_round``) lives with the other ledger keys in ``batches.keys``.
"""

from __future__ import annotations

from queuelake.errors import PublishError
from queuelake.lake.port import LakeEngine
from queuelake.pipeline.batches.keys import Round, parse_round
from queuelake.transport import ledger
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef


def last_round(batch_keys: list[str]) -> tuple[Round | None, set[int], bool]:
    """(the latest round in the ledger, its batches sent, whether all of them were) from the
    ledger's batch keys of one output."""
    rounds: dict[Round, tuple[int, set[int]]] = {}
    for batch_key in batch_keys:
        rnd, k, n = parse_round(batch_key)
        rounds.setdefault(rnd, (n, set()))[1].add(k)
    if not rounds:
        return None, set(), True
    latest = max(rounds, key=lambda r: r.upto)
    total, done = rounds[latest]
    return latest, done, len(done) >= max(total, 1)


def next_round(
    conn: Connection, lake: LakeEngine, ledger_ref: TableRef, output: str, pipeline: str, batch_size: int
) -> tuple[Round, set[int]]:
    """The round to send and its batches already sent: an unfinished round resumes, batch for batch;
    else a new round covers the versions past the last one."""
    keys = ledger.batch_keys(conn, ledger_ref, pipeline, output)
    conn.rollback()
    latest, done, finished = last_round(keys)
    if latest is not None and not finished:
        return latest, done  # resume an unfinished round, batch for batch
    upto = lake.table_version(output)
    if upto is None:
        raise PublishError(f"outbound table {output} does not exist in the lake")
    after = latest.upto if latest is not None else None
    return Round(after, upto, batch_size), set()

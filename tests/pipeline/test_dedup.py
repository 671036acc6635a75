"""The duplicate guard's in-run bookkeeping: what another worker's failed batch means for a claim."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from queuelake.errors import TransportError
from queuelake.pipeline.dedup import DuplicateGuard
from queuelake.transport.queues import RECEIVED_SCHEMA


def claim(seqs: list[int]) -> pa.Table:
    n = len(seqs)
    return pa.Table.from_pydict(
        {
            "id": [f"id-{s}" for s in seqs],
            "seq": seqs,
            "expired": [False] * n,
            "expires": [None] * n,
            "headers": ["{}"] * n,
            "body": [b""] * n,
        },
        schema=RECEIVED_SCHEMA,
    )


def test_outcomes_of_another_workers_batch(tmp_path: Path) -> None:
    guard = DuplicateGuard(str(tmp_path / "messages"), "q")  # no journal yet
    # Delta committed, DB commit lost: the rows come back and are known
    guard.begin("w0", claim([1, 2]))
    guard.end("w0", delta_committed=True, db_committed=False)
    fresh, dups = guard.split(claim([1, 2, 3]), "w1")
    assert dups == 2 and fresh["seq"].to_pylist() == [3]
    # Delta did not commit: the rows come back and must land
    guard.begin("w0", claim([4]))
    guard.end("w0", delta_committed=False, db_committed=False)
    fresh, dups = guard.split(claim([4]), "w1")
    assert dups == 0 and fresh["seq"].to_pylist() == [4]
    # nobody knows: a claim meeting those rows neither lands nor drops them
    guard.begin("w0", claim([5]))
    guard.end("w0", delta_committed=None, db_committed=False)
    with pytest.raises(TransportError, match="unknown outcome"):
        guard.split(claim([5, 6]), "w1")
    # both committed: nothing is remembered
    guard.begin("w0", claim([7]))
    guard.end("w0", delta_committed=True, db_committed=True)
    assert guard.split(claim([7]), "w1")[1] == 0

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
from queuelake.pipeline.batches.keys import Round, is_round_key, is_table_key, parse_round, table_key, whole_key
from queuelake.report import log
from queuelake.transport import ledger
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef

# the table the plain keys of a ledger were of, where it cannot be known: rounds up to a version the
# output has not reached (its table was created again, or is another lake's), recorded before table ids
EARLIER_TABLE = "an-earlier-table"


def last_round(batch_keys: list[str], table: str = "") -> tuple[Round | None, set[int], bool]:
    """(the latest round in the ledger of the output table tagged ``table``, its batches sent,
    whether all of them were) from the ledger's batch keys of one output."""
    rounds: dict[Round, tuple[int, set[int]]] = {}
    for batch_key in batch_keys:
        if not is_round_key(batch_key):
            continue
        rnd, k, n = parse_round(batch_key)
        if rnd.table == table:
            rounds.setdefault(rnd, (n, set()))[1].add(k)
    if not rounds:
        return None, set(), True
    latest = max(rounds, key=lambda r: r.upto)
    total, done = rounds[latest]
    return latest, done, len(done) >= max(total, 1)


def table_tag(batch_keys: list[str], table_id: str | None, version: int | None) -> tuple[str, str | None]:
    """(the tag of the output table's round keys, the ``table:`` row to record first, if any). The
    plain keys are of the table a ``table:`` row names; any other table's rounds are tagged with its id.
    A ledger without that row (written before it was kept) is of this table unless its rounds reached a
    version this table has not. Why: the ledger knew an output by its name, and a table created again
    (or a new lake's, on the same queue database) had its rounds taken as sent: publish said "nothing
    new" and sent nothing until its versions passed the old ones, and then only the rows after them (a
    review)."""
    if table_id is None:
        return "", None
    owners = {k[len("table:") :] for k in batch_keys if is_table_key(k)}
    record = None
    if not owners:
        plain = [parse_round(k)[0].upto for k in batch_keys if is_round_key(k) and "~" not in k]
        owner = table_id if not plain or version is None or max(plain) <= version else EARLIER_TABLE
        owners, record = {owner}, table_key(owner)
    return ("" if table_id in owners else table_id.replace("-", "")[:12]), record


def next_round(
    conn: Connection, lake: LakeEngine, ledger_ref: TableRef, output: str, pipeline: str, batch_size: int
) -> tuple[Round, set[int], str | None, bool]:
    """The round to send, its batches already sent, the ledger's ``table:`` row to record before its
    first batch (``table_tag``; None: none), and whether the ledger says the round was cut with every
    row of its files (its ``whole:`` row, ``carried``): an unfinished round resumes, batch for batch;
    else a new round covers the versions past the last one of the same table."""
    keys = ledger.batch_keys(conn, ledger_ref, pipeline, output)
    conn.rollback()
    upto = lake.table_version(output)
    if upto is None:
        raise PublishError(f"outbound table {output} does not exist in the lake")
    table_id = lake.table_id(output)
    tag, record = table_tag(keys, table_id, upto)
    latest, done, finished = last_round(keys, tag)
    if tag and latest is None:
        log.info(
            "publish %s: this table (Delta id %s) is not the one the ledger's earlier rounds were of (a table "
            "created again, or another lake's): its rounds start from its first version",
            output,
            table_id,
        )
    if latest is not None and not finished:
        return latest, done, record, whole_key(latest) in keys  # resume an unfinished round, batch for batch
    after = latest.upto if latest is not None else None
    rnd = Round(after, upto, batch_size, table=tag)
    return rnd, set(), record, whole_key(rnd) in keys

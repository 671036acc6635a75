"""The rows a replay does not send, each recorded with why in ``replay_skipped`` before the first
batch; that record is final for the replay id."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from queuelake.lake import record_tables
from queuelake.lake.port import LakeEngine
from queuelake.pipeline.replay.plan import Cut
from queuelake.pipeline.replay.planned import Planned, RowKey
from queuelake.pipeline.runs import record_engine

SKIPPED = record_tables.REPLAY_SKIPPED.name
SKIPPED_SCHEMA: pa.Schema = record_tables.REPLAY_SKIPPED.schema


def recorded_skips(lake: LakeEngine, replay_id: str) -> set[RowKey]:
    if not lake.exists(SKIPPED):
        return set()
    table = lake.read_arrow(SKIPPED, columns=["replay_id", "queue", "seq", "id"])
    table = table.filter(pc.equal(table.column("replay_id"), replay_id))
    return set(zip(*(table.column(c).to_pylist() for c in ("queue", "seq", "id")), strict=True))


def row_key(record: dict[str, Any]) -> RowKey:
    """A skip record's row: (queue, seq, row id)."""
    return (record["queue"], record["seq"], record["id"])


def record_skips(lake: LakeEngine, replay_id: str, records: list[dict[str, Any]]) -> None:
    """Before the first batch of this run: the rows this replay will not send, with why. Final for
    the replay id (a rerun never sends a row recorded here)."""
    if not records:
        return
    lake = record_engine(lake, SKIPPED)
    version = (lake.last_version(SKIPPED, f"queuelake.replay.skipped/{replay_id}") or 0) + 1
    lake.append(
        SKIPPED,
        pa.Table.from_pylist(records, schema=SKIPPED_SCHEMA),
        f"queuelake.replay.skipped/{replay_id}",
        version,
    )


def skip_records(replay_id: str, planned: Planned, others: pa.Table) -> list[dict[str, Any]]:
    """A record per row not sent: the selected rows that did not land (``others``), and the planned
    rows whose destination cannot be delivered."""
    now = dt.datetime.now(dt.timezone.utc)
    records = []
    for q, s, i, m, t, outcome, error in zip(
        *(others.column(c).to_pylist() for c in ("queue", "seq", "id", "message_id", "message_type")),
        others.column("outcome").to_pylist(),
        others.column("error").to_pylist(),
        strict=True,
    ):
        if outcome == "expired":
            reason = "expired: the journal keeps no headers or body of an expired message"
        else:
            reason = f"{outcome}: its headers could not be decoded ({error or 'no reason recorded'})"
        records.append(skip_record(replay_id, q, s, i, m, t, None, reason, now))
    unsendable = planned.unsendable()
    columns = ("queue", "seq", "id", "message_id", "message_type", "address", "reason")
    for q, s, i, m, t, address, reason in zip(*(unsendable.column(c).to_pylist() for c in columns), strict=True):
        records.append(skip_record(replay_id, q, s, i, m, t, address, reason, now))
    return records


def replayed_records(replay_id: str, planned: Planned, earlier: pa.Table) -> list[dict[str, Any]]:
    """A record per planned row to be sent that an earlier replay sent and that has not failed again
    since (``lineage.already_replayed``'s ``earlier``): ``--skip-replayed`` leaves them out."""
    now = dt.datetime.now(dt.timezone.utc)
    first = replay_times(earlier)
    by_key = {
        (q, s, i): r
        for q, s, i, r in zip(*(earlier.column(c).to_pylist() for c in ("queue", "seq", "id", "replay_id")))
    }
    table = planned.table
    columns = ("queue", "seq", "id", "message_id", "message_type", "address")
    records = []
    for key, positions in planned.positions_of(set(by_key)).items():
        rid = by_key[key]
        reason = f"sent by replay {rid} at {first[rid]} and not failed again since (--skip-replayed)"
        for p in positions:
            if table.column("target")[p].as_py() is None:
                continue  # not sent anyway: its own reason is recorded
            q, s, i, m, t, address = (table.column(c)[p].as_py() for c in columns)
            records.append(skip_record(replay_id, q, s, i, m, t, address, reason, now))
    return records


def replay_times(earlier: pa.Table) -> dict[str, str]:
    """Each earlier replay of ``earlier`` with when its first row of the selection was sent, as text."""
    first = earlier.group_by("replay_id").aggregate([("recorded_at", "min")])  # a few replays, not 100,000 rows
    return {
        r: at.strftime("%Y-%m-%d %H:%M:%SZ")
        for r, at in zip(first.column("replay_id").to_pylist(), first.column("recorded_at_min").to_pylist())
    }


def refused_records(
    replay_id: str, planned: Planned, cut: Cut, table: str, reason: str, batches: list[int]
) -> list[dict[str, Any]]:
    """A record per planned row of ``batches`` sent to ``table`` (a canonical name), which refused a
    batch's rows for what they are (``errors.RowsRefused``): they are not sent by this replay."""
    now = dt.datetime.now(dt.timezone.utc)
    columns = ("queue", "seq", "id", "message_id", "message_type", "address")
    records = []
    for k in batches:
        part = planned.table.slice(*cut.bounds(k))
        part = part.filter(pc.fill_null(pc.equal(part.column("target"), table), False))
        for q, s, i, m, t, address in zip(*(part.column(c).to_pylist() for c in columns), strict=True):
            records.append(skip_record(replay_id, q, s, i, m, t, address, reason, now))
    return records


def settle_skips(
    lake: LakeEngine,
    replay_id: str | None,
    cut: Cut,
    done: set[int],
    planned: Planned,
    records: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[str], set[RowKey]]:
    """Which rows this run skips, and which of them are new to the record. The record is final: a
    row an earlier run recorded stays unsent; a row found undeliverable now is recorded only when
    its batch is still to be sent (one in a sent batch went out while its queue was there).
    Returns (new records, reasons to report, keys not to send)."""
    frozen = recorded_skips(lake, replay_id) if replay_id else set()
    found = planned.positions_of(frozen | {row_key(rec) for rec in records})
    position = {key: cut.batch_of(min(p)) for key, p in found.items()}
    new, reasons, current = [], [], set()
    for rec in records:
        key = row_key(rec)
        current.add(key)
        if key in frozen:
            reasons.append(rec["reason"])
        elif key not in position or position[key] not in done:
            new.append(rec)
            reasons.append(rec["reason"])
    earlier = [k for k in frozen if k in position and k not in current]
    reasons += ["recorded as skipped by an earlier run of this replay"] * len(earlier)
    skip = frozen | {row_key(rec) for rec in new}
    return new, reasons, skip


def skip_record(
    replay_id: str,
    queue: str,
    seq: int,
    row_id: str | None,
    message_id: str | None,
    message_type: str | None,
    destination: str | None,
    reason: str,
    now: dt.datetime,
) -> dict[str, Any]:
    return {
        "replay_id": replay_id,
        "queue": queue,
        "seq": seq,
        "id": row_id,
        "message_id": message_id,
        "message_type": message_type,
        "destination": destination,
        "reason": reason,
        "recorded_at": now,
    }

"""The copies that are not sent: one ``<output>_undeliverable`` record per copy, with its reason,
written idempotently before anything of its batch is committed; and one warning per bad address."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from queuelake.lake import stage_tables
from queuelake.lake.port import LakeEngine
from queuelake.report import log

UNDELIVERABLE_SCHEMA: pa.Schema = stage_tables.UNDELIVERABLE.schema


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


def record_batch(lake: LakeEngine, output: str, batch_key: str, records: list[dict[str, Any]]) -> int:
    """Append the undeliverable records of one batch sent from the driver, before its commit, each copy
    once: a rerun of a batch whose commit failed appends the copies its own attempt found undeliverable
    that the first did not record (a refusal that depends on the data or the hour refused other copies
    then; keyed by the batch alone, the rerun's were dropped with no record: a review)."""
    return _record_new(lake, output, batch_key, records, lambda r: r["batch_key"] == batch_key)


def record_round(lake: LakeEngine, output: str, round_name: str, records: list[dict]) -> int:
    """Append the round's undeliverable records once (a round sent from executors: the driver records
    them all before any task runs). The first run of a round writes them all (version 1 of the round's
    append id); a rerun of a round whose records are there already appends only those not yet there
    (its routes may have changed in between), so each copy is recorded once. Returns how many were
    appended."""
    return _record_new(lake, output, round_name, records, lambda r: r["round"] == round_name)


def _record_new(
    lake: LakeEngine, output: str, part: str, records: list[dict[str, Any]], mine: Callable[[dict[str, Any]], bool]
) -> int:
    """Append ``records`` under the append id of ``part`` (a batch, a round), less those a run before
    recorded (``mine``: a record of this part); returns how many were appended."""
    name = stage_tables.UNDELIVERABLE.name_for(output)
    app_id = f"queuelake.publish.undeliverable/{output}/{part}"
    last = lake.last_version(name, app_id)
    if last is not None:  # rare: a rerun of a part that recorded copies reads what it recorded
        seen = lake.read_arrow(name, columns=["round", "batch_key", "key", "destination"]).to_pylist()
        there = {(r["batch_key"], r["key"], r["destination"]) for r in seen if mine(r)}
        records = [r for r in records if (r["batch_key"], r["key"], r["destination"]) not in there]
    if records:
        lake.append(name, pa.Table.from_pylist(records, schema=UNDELIVERABLE_SCHEMA), app_id, (last or 0) + 1)
    return len(records)


class BadDestinations:
    """The run's undeliverable addresses, each warned about once per run: a bad subscription row
    should be seen, not flood the log."""

    def __init__(self) -> None:
        self._reported: set[str] = set()

    def report(self, output: str, address: str | None, reason: str) -> None:
        if address in self._reported:
            return
        self._reported.add(address)  # type: ignore[arg-type]
        log.warning(
            "publish %s: not delivering to %r: %s (copies recorded in %s_undeliverable)",
            output,
            address,
            reason,
            output,
        )

    def names(self) -> list[str]:
        """Every address reported so far in this run, sorted."""
        return sorted(str(a) for a in self._reported)

"""One place a message is or was, as ``queuelake where`` reports it, from a journal row, a queue row,
a delayed row or a replay's record.

The places, in the order a message's story reads (``RANK``):
- ``drained``: a copy that left a queue into the journal untouched (a send, a publish's copy);
- ``expired``: a copy whose time to be received ran out before anyone took it (the journal keeps its
  identity; drained as expired);
- ``quarantined``: a copy whose headers could not be decoded, kept raw;
- ``processed``: an audit copy: which endpoint handled it, when, how long;
- ``failed``: an error copy: which endpoint (its ``FailedQ``), the exception;
- ``retried`` / ``replayed``: a copy a replay sent back (``queuelake.Replay.*`` headers), drained from
  the queue it was sent to;
- ``replay-skipped``: a replay selected the message and did not send it (``replay_skipped``);
- ``erased``: an erase whose predicate names the id (erase keeps no per-message record);
- ``delayed``: in an endpoint's delayed-delivery table, due at a time;
- ``waiting``: in a queue table now (possibly expired by the database clock: a receiver or
  ``purge-expired`` drops it).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from queuelake.errors import HeaderError
from queuelake.nsb import headers as hdr
from queuelake.nsb.retry import REPLAY_ID, REPLAY_KIND, REPLAY_ORIGINAL_MESSAGE_ID
from queuelake.nsb.times import parse_time
from queuelake.pipeline.find.show import kind
from queuelake.transport.peek_rows import PeekedRow

RANK = {
    name: i
    for i, name in enumerate(
        (
            "drained",
            "expired",
            "quarantined",
            "processed",
            "failed",
            "retried",
            "replayed",
            "replay-skipped",
            "erased",
            "delayed",
            "waiting",
        )
    )
}
NOW = ("waiting", "delayed")  # places a message is in now; the others it was in
SENT = ("drained", "expired", "quarantined")  # how a copy left a queue untouched


@dataclass
class Place:
    """One place of one message. ``at``: the moment of it (drained, processed, failed, due ...)."""

    place: str
    message_id: str | None
    location: str | None  # a queue's canonical address, a delayed table, or a lake table
    at: dt.datetime | None = None
    endpoint: str | None = None
    detail: str | None = None
    time_sent: dt.datetime | None = None
    source: str = "journal"  # journal | queue | delayed | replay_skipped | runs
    facts: dict[str, Any] = field(default_factory=dict)

    def sort_key(self) -> tuple[Any, ...]:
        """Message by message (their TimeSent), each as its story reads: how it left its queues
        (drained, expired, quarantined), then what endpoints and replays did with it in time order,
        then where it is now (delayed, waiting)."""
        far = dt.datetime.max.replace(tzinfo=dt.timezone.utc)
        group = 0 if self.place in SENT else 2 if self.place in NOW else 1
        return (self.time_sent or far, group, self.at or far, RANK.get(self.place, 99), self.location or "")


def _utc(value: Any) -> dt.datetime | None:
    if not isinstance(value, dt.datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


def _wire_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return parse_time(value)
    except HeaderError:
        return None


def _db_time(text: str | None) -> dt.datetime | None:
    """A database's timestamp text (``2026-11-01 09:00:00.123``, ``...+00``, ``...T...``) as UTC."""
    if not text:
        return None
    try:
        value = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value.astimezone(dt.timezone.utc)


def _millis(start: dt.datetime | None, end: dt.datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds() * 1000, 3)


def replay_facts(headers: dict[str, str | None]) -> dict[str, Any]:
    """The ``queuelake.Replay.*`` headers a retried or replayed copy carries (none: empty)."""
    if not headers.get(REPLAY_ID):
        return {}
    out: dict[str, Any] = {"replay_id": headers.get(REPLAY_ID), "replay_kind": headers.get(REPLAY_KIND)}
    if headers.get(REPLAY_ORIGINAL_MESSAGE_ID):
        out["original_message_id"] = headers.get(REPLAY_ORIGINAL_MESSAGE_ID)
    return out


def _replay_detail(facts: dict[str, Any]) -> str:
    text = f"{facts.get('replay_kind') or 'replay'} by replay {facts['replay_id']}"
    if facts.get("original_message_id"):
        text += f" of {facts['original_message_id']}"
    return text


def from_journal(row: dict[str, Any]) -> Place:
    """A journal row's place (``find.show.kind`` says what the row is)."""
    what = kind(row)
    headers = dict(row.get("headers") or {})
    replay = replay_facts(headers)
    facts: dict[str, Any] = {"seq": row.get("seq"), "drained_at": row.get("drained_at"), "outcome": row["outcome"]}
    facts.update(replay)
    place = Place(
        place="drained",
        message_id=row.get("message_id"),
        location=row.get("queue"),
        at=_utc(row.get("drained_at")),
        endpoint=row.get("originating_endpoint"),
        time_sent=_utc(row.get("time_sent")),
        facts=facts,
    )
    if what == "audit":
        started, ended = _utc(row.get("processing_started")), _utc(row.get("processing_ended"))
        took = _millis(started, ended)
        place.place, place.endpoint, place.at = "processed", row.get("processing_endpoint"), ended or started
        facts.update({"processing_started": started, "processing_ended": ended, "processing_ms": took})
        place.detail = f"by {place.endpoint or '?'}" + (f" in {took:g} ms" if took is not None else "")
    elif what == "failed":
        place.place, place.at = "failed", _utc(row.get("time_of_failure"))
        place.endpoint = row.get("failed_queue") or row.get("processing_endpoint")
        facts.update(
            {
                "failed_queue": row.get("failed_queue"),
                "exception_type": row.get("exception_type"),
                "exception_message": row.get("exception_message"),
            }
        )
        place.detail = f"{row.get('exception_type') or '?'}: {row.get('exception_message') or ''}".rstrip(": ")
    elif what == "expired":
        place.place, place.detail = "expired", "its time to be received ran out; drained as expired"
        facts["expires"] = row.get("expires")
    elif what == "quarantined":
        place.place, place.detail = "quarantined", row.get("error")
    elif replay:
        place.place = "replayed" if replay.get("replay_kind") == "replay" else "retried"
        place.detail = _replay_detail(replay) + ", drained from this queue"
    else:
        place.detail = f"sent by {place.endpoint or '?'}, drained from this queue"
    if replay and what in ("audit", "failed"):
        place.detail = f"{place.detail} ({_replay_detail(replay)})"
    return place


def from_queue_row(table: str, row: PeekedRow, headers: dict[str, str | None], delayed: bool) -> Place:
    """A row still in a queue table (``waiting``) or in a delayed-delivery table (``delayed``)."""
    message_id = headers.get(hdr.MESSAGE_ID) or row.id
    replay = replay_facts(headers)
    facts: dict[str, Any] = {"seq": row.seq, "row_id": row.id}
    facts.update(replay)
    place = Place(
        place="delayed" if delayed else "waiting",
        message_id=message_id,
        location=table,
        endpoint=headers.get(hdr.ORIGINATING_ENDPOINT),
        time_sent=_wire_time(headers.get(hdr.TIME_SENT)),
        source="delayed" if delayed else "queue",
        facts=facts,
    )
    if delayed:
        place.at = _db_time(row.when)
        facts.update({"due": place.at or row.when, "due_now": row.flag})
        destination = headers.get(hdr.FORWARD_DESTINATION)
        facts["forward_destination"] = destination
        place.detail = f"due, to {destination or '?'}" if row.flag else f"to {destination or '?'}"
    else:
        place.at = place.time_sent
        facts.update({"expires": _db_time(row.when) or row.when, "expired": row.flag})
        if headers.get(hdr.FAILED_QUEUE):
            place.detail = f"an error copy: {headers.get(hdr.EXCEPTION_TYPE) or '?'} in {headers.get(hdr.FAILED_QUEUE)}"
        elif headers.get(hdr.PROCESSING_ENDED):
            place.detail = f"an audit copy: processed by {headers.get(hdr.PROCESSING_ENDPOINT) or '?'}"
        else:
            place.detail = "not yet received"
        if replay:
            place.detail = f"{place.detail} ({_replay_detail(replay)})"
        if row.flag:
            place.detail += "; expired by the database clock: a receiver or purge-expired drops it"
    return place


def state_of(places: list[Place]) -> Place:
    """Where a message is now: a queue or delayed table that holds it; else its latest place beyond
    ``drained`` (a copy drained from a queue only says it was sent; an audit or error copy's moment
    is the endpoint's, which comes before the drain that brought it); else where it was drained."""
    now = [p for p in places if p.place in NOW]
    if now:
        return now[0]
    beyond = [p for p in places if p.place != "drained"] or places
    far = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
    return max(beyond, key=lambda p: (p.at or far, RANK.get(p.place, 99)))

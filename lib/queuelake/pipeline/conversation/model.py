"""One conversation as ServiceInsight shows it: the endpoints it crossed, and its messages in time order,
each merged from every copy the journal holds of it.

Why merging: the journal keeps rows, and one message can be several rows: the copy drained from the
queue it was sent to, its audit copy (who processed it, for how long), one error copy per failed attempt.
Each knows part of the story; drawn one arrow per row, a conversation shows every message two or three
times. A message here is a delivery: its ``MessageId`` at one receiving endpoint, the identity
ServiceControl gives a processed message (its UniqueMessageId is MessageId + processing endpoint). A
published event has one ``MessageId`` for all its subscribers, so each subscriber's copy is a message.

Who received a row: the ``ProcessingEndpoint`` (audit and error copies), else the queue of its
``FailedQ``, else, for a row that carries neither processing nor failure headers (drained from a
business queue before anyone processed it), the queue it was drained from. An audit or error row that
names no receiver joins its ``MessageId``'s delivery when there is one.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from queuelake.dialects.address import parse_postgresql
from queuelake.nsb import headers as hdr
from queuelake.nsb.message_types import full_type_name
from queuelake.nsb.retry import REPLAY_ID, RETRY_UNIQUE_MESSAGE_ID

# the journal columns the model reads (the body is never needed)
COLUMNS = [
    "queue",
    "seq",
    "drained_at",
    "outcome",
    "headers",
    "message_id",
    "message_intent",
    "message_type",
    "originating_endpoint",
    "time_sent",
    "processing_started",
    "processing_ended",
    "processing_endpoint",
    "failed_queue",
    "exception_type",
    "exception_message",
    "time_of_failure",
]
UNKNOWN_ENDPOINT = "(unknown)"
RETRY_HEADERS = (RETRY_UNIQUE_MESSAGE_ID, REPLAY_ID)


def endpoint_name(address: str | None) -> str | None:
    """The endpoint (queue table) an address names, however the transport spells it: ``Sales``,
    ``Sales@[dbo]@[nsb]``, ``Sales@public``, ``"public"."Sales"``. For display: lenient, never raises."""
    if address is None or not address.strip():
        return None
    text = address.strip()
    if text.startswith('"'):
        try:
            return parse_postgresql(text).table
        except ValueError:
            return text
    at = text.find("@")
    return text if at <= 0 else text[:at]


def short_type_name(message_type: str | None) -> str:
    """``Sales.Messages.Commands.PlaceOrder, Sales.Messages, Version=...`` -> ``PlaceOrder``; a generic
    ``Ns.Envelope`1[[Ns.Inner, Asm]]`` -> ``Envelope<Inner>``; nested ``Ns.Outer+Inner`` stays so."""
    if not message_type:
        return "(no type)"
    name = full_type_name(message_type)
    bracket = name.find("[")
    head, args = (name, "") if bracket < 0 else (name[:bracket], name[bracket:])
    short = head.rsplit(".", 1)[-1].split("`", 1)[0]
    if args:
        inner = [short_type_name(a) for a in _generic_arguments(args)]
        short += "<" + ", ".join(inner) + ">" if inner else ""
    return short or name


def _generic_arguments(args: str) -> list[str]:
    """``[[A, Asm],[B, Asm]]`` -> ``["A, Asm", "B, Asm"]`` (the outer brackets' items)."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(args):
        if ch == "[":
            depth += 1
            if depth == 2:
                start = i + 1
        elif ch == "]":
            if depth == 2:
                items.append(args[start:i])
            depth -= 1
    return [item for item in items if item.strip()]


@dataclass
class Attempt:
    """One failed processing of a message: an error-queue copy."""

    exception_type: str | None
    exception_message: str | None
    when: dt.datetime | None


@dataclass
class Message:
    """One arrow: a message delivered to one endpoint, merged from its copies in the journal."""

    message_id: str
    receiver: str
    sender: str = UNKNOWN_ENDPOINT
    intent: str | None = None
    message_type: str | None = None  # the full type name as the journal holds it
    time_sent: dt.datetime | None = None
    processing_started: dt.datetime | None = None
    processing_ended: dt.datetime | None = None
    failures: list[Attempt] = field(default_factory=list)
    processed_after_failure: bool = False  # a successful processing seen after a failure
    retry_header: bool = False  # a copy carried ServiceControl's retry id or queuelake's replay id
    related_to: str | None = None
    copies: int = 0
    queues: list[str] = field(default_factory=list)  # the queues its copies were drained from
    expired: bool = False  # its only copy expired in the queue
    caused_by: int | None = None  # the row (index) of the message being handled when it was sent
    _last_success: dt.datetime | None = None
    _last_failure: dt.datetime | None = None

    @property
    def short_type(self) -> str:
        return short_type_name(self.message_type)

    @property
    def processing_time(self) -> dt.timedelta | None:
        """ProcessingEnded - ProcessingStarted of the (last) successful processing, where known."""
        if self.processing_started is None or self.processing_ended is None:
            return None
        return max(self.processing_ended - self.processing_started, dt.timedelta(0))

    @property
    def retried(self) -> bool:
        """Sent again after a failure: seen again after one (processed, or failed once more), or carrying
        a retry or replay header."""
        return self.retry_header or len(self.failures) > 1 or self.processed_after_failure

    @property
    def status(self) -> str:
        """``failed`` (its last known attempt failed), ``retried`` (failed, then processed on a retry),
        ``processed``, ``expired``, or ``sent`` (drained from its queue, nobody processed it)."""
        if self.failures and not self.processed_after_failure:
            return "failed"
        if self.failures:
            return "retried"
        if self.processing_ended is not None or self.processing_started is not None:
            return "processed"
        return "expired" if self.expired else "sent"

    @property
    def when(self) -> dt.datetime | None:
        """Where it stands in time: when it was sent, else when it was first handled."""
        first_failure = min((a.when for a in self.failures if a.when is not None), default=None)
        return self.time_sent or self.processing_started or first_failure


@dataclass
class Conversation:
    conversation_id: str
    messages: list[Message]  # in time order: one arrow per row of the drawing
    endpoints: list[str]  # lanes, in order of first appearance
    rows: int  # journal rows read

    @property
    def failures(self) -> int:
        return sum(1 for m in self.messages if m.failures)

    @property
    def failed(self) -> int:
        return sum(1 for m in self.messages if m.status == "failed")

    @property
    def retries(self) -> int:
        return sum(1 for m in self.messages if m.retried)


def _row_receiver(row: Mapping[str, Any], failed: bool) -> str | None:
    """Who received this copy (see the module docstring); None for an audit or error copy naming nobody."""
    named = endpoint_name(row.get("processing_endpoint")) or endpoint_name(row.get("failed_queue"))
    if named:
        return named
    handled = failed or row.get("processing_started") is not None or row.get("processing_ended") is not None
    return None if handled else endpoint_name(row.get("queue"))


def _headers(row: Mapping[str, Any]) -> dict[str, str | None]:
    value = row.get("headers")
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    return dict(value)  # Arrow's map as a list of (key, value)


def _sort_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """Copies in the order they happened: failures and processings by their own times."""
    epoch = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
    when = row.get("time_of_failure") or row.get("processing_started") or row.get("drained_at") or epoch
    return (when, str(row.get("queue")), row.get("seq") or 0)


def build(conversation_id: str, rows: Iterable[Mapping[str, Any]]) -> Conversation:
    """The conversation from its journal rows (``COLUMNS``; any order): messages merged, ordered, with
    lanes and causes. Quarantined rows carry no decoded headers and are left out."""
    copies = sorted((r for r in rows if r.get("outcome") != "quarantined"), key=_sort_key)
    by_id: dict[str, dict[str, Message]] = {}
    unnamed: list[tuple[Mapping[str, Any], dict[str, str | None], bool]] = []
    for row in copies:
        headers = _headers(row)
        failed = row.get("exception_type") is not None or row.get("failed_queue") is not None
        receiver = _row_receiver(row, failed)
        if receiver is None:
            unnamed.append((row, headers, failed))
            continue
        message_id = row.get("message_id") or f"row:{row.get('queue')}@{row.get('seq')}"
        deliveries = by_id.setdefault(message_id, {})
        message = deliveries.setdefault(receiver, Message(message_id=message_id, receiver=receiver))
        _merge(message, row, headers, failed)
    for row, headers, failed in unnamed:  # an audit or error copy naming no receiver
        message_id = row.get("message_id") or f"row:{row.get('queue')}@{row.get('seq')}"
        deliveries = by_id.setdefault(message_id, {})
        if not deliveries:
            deliveries[UNKNOWN_ENDPOINT] = Message(message_id=message_id, receiver=UNKNOWN_ENDPOINT)
        _merge(next(iter(deliveries.values())), row, headers, failed)
    messages = [m for deliveries in by_id.values() for m in deliveries.values()]
    messages.sort(key=_message_order)
    _link_causes(messages)
    return Conversation(conversation_id, messages, _lanes(messages), len(copies))


def _merge(message: Message, row: Mapping[str, Any], headers: Mapping[str, str | None], failed: bool) -> None:
    """What one copy adds to its message (copies come in the order they happened)."""
    message.copies += 1
    queue = str(row.get("queue"))
    if queue not in message.queues:
        message.queues.append(queue)
    sender = row.get("originating_endpoint")
    if sender and message.sender == UNKNOWN_ENDPOINT:
        message.sender = sender
    message.intent = message.intent or row.get("message_intent")
    message.message_type = message.message_type or row.get("message_type")
    sent = row.get("time_sent")
    if sent is not None and (message.time_sent is None or sent < message.time_sent):
        message.time_sent = sent
    message.related_to = message.related_to or headers.get(hdr.RELATED_TO)
    if any(headers.get(name) for name in RETRY_HEADERS):
        message.retry_header = True
    if row.get("outcome") == "expired":
        message.expired = message.copies == 1 or message.expired
    if failed:
        when = row.get("time_of_failure")
        message.failures.append(Attempt(row.get("exception_type"), row.get("exception_message"), when))
        if when is not None and (message._last_failure is None or when > message._last_failure):
            message._last_failure = when
        if message._last_success is not None and message._last_failure is not None:
            message.processed_after_failure = message._last_success > message._last_failure
        return
    if row.get("processing_started") is None and row.get("processing_ended") is None:
        return  # the copy as sent (drained from a business queue): nothing about its processing
    message.expired = False
    message.processing_started = row.get("processing_started")
    message.processing_ended = row.get("processing_ended")
    success = message.processing_ended or message.processing_started
    if success is not None and (message._last_success is None or success > message._last_success):
        message._last_success = success
    if message.failures:
        last_failure = message._last_failure
        message.processed_after_failure = last_failure is None or (success is not None and success > last_failure)


def _message_order(message: Message) -> tuple[Any, ...]:
    epoch = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
    return (message.when or epoch, message.processing_started or epoch, message.message_id, message.receiver)


def _link_causes(messages: list[Message]) -> None:
    """``caused_by``: the row of the message whose handling sent this one (``NServiceBus.RelatedTo``),
    the delivery of that message to this one's sender where the cause went to several endpoints."""
    rows_by_id: dict[str, list[int]] = {}
    for index, message in enumerate(messages):
        rows_by_id.setdefault(message.message_id, []).append(index)
    for message in messages:
        candidates = rows_by_id.get(message.related_to or "", [])
        at_sender = [i for i in candidates if messages[i].receiver == message.sender]
        chosen = at_sender or candidates
        message.caused_by = chosen[0] if chosen else None


def _lanes(messages: list[Message]) -> list[str]:
    """Endpoints in order of first appearance, the sender of the first message first (ServiceInsight's)."""
    lanes: dict[str, None] = {}
    for message in messages:
        lanes.setdefault(message.sender)
        lanes.setdefault(message.receiver)
    return list(lanes)

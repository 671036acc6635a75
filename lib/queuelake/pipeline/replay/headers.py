"""The headers a retried or replayed message carries: what ServiceControl strips and sets on a retry,
the queuelake.Replay.* headers naming the replay, and the TTBR read back from a .NET TimeSpan.
"""

from __future__ import annotations

import hashlib
import re

from queuelake.transport import headers as hdr

MAX_TTBR_MS = hdr.MAX_TTBR_MS  # TimeSpan.MaxValue and the like: no expiry

# What a ServiceControl retry strips: every header *starting with* one of these
# (ServiceControl src/ServiceControl/Recoverability/Retrying/HeaderFilter.cs).
STRIPPED_PREFIXES = (
    "NServiceBus.Retries",  # also NServiceBus.Retries.Timestamp
    "NServiceBus.FailedQ",
    "NServiceBus.TimeOfFailure",
    "NServiceBus.ExceptionInfo.",
    "ServiceControl.EditOf",
)
# ServiceControl's own staging headers, removed by ReturnToSender before the message is dispatched
# (src/ServiceControl/Recoverability/Retrying/Infrastructure/ReturnToSender.cs): never on the wire.
STAGING_HEADERS = (
    "ServiceControl.Retry.StagingId",
    "ServiceControl.Retry.Attempt.MessageId",
    "ServiceControl.TargetEndpointAddress",
)
RETRY_UNIQUE_MESSAGE_ID = "ServiceControl.Retry.UniqueMessageId"
RETRY_ACKNOWLEDGEMENT_QUEUE = "ServiceControl.Retry.AcknowledgementQueue"
REPLAY_ID = "queuelake.Replay.Id"
REPLAY_KIND = "queuelake.Replay.Kind"  # retry | redirect | replay
REPLAY_SOURCE = "queuelake.Replay.Source"  # the journal row: <queue>@<seq>
REPLAY_ORIGINAL_MESSAGE_ID = "queuelake.Replay.OriginalMessageId"  # replays get a new MessageId


_TIMESPAN = re.compile(r"^(-)?(?:(\d+)\.)?(\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,7}))?)?$")


def timespan_ms(text: str | None) -> int | None:
    """A .NET TimeSpan string (``00:00:10``, ``1.00:00:00``, ``00:00:01.5000000``) in milliseconds;
    None when absent, unreadable, not positive or practically infinite (TimeSpan.MaxValue)."""
    if not text:
        return None
    m = _TIMESPAN.match(text.strip())
    if m is None:
        return None
    sign, days, hours, minutes, seconds, fraction = m.groups()
    ms = (int(days or 0) * 86_400 + int(hours) * 3600 + int(minutes) * 60 + int(seconds or 0)) * 1000 + int(
        (fraction or "0").ljust(7, "0")
    ) // 10_000
    if sign or ms <= 0 or ms >= MAX_TTBR_MS:
        return None
    return ms


def _queue_part(address: str) -> str:
    at = address.find("@")
    return address if at < 0 else address[:at]


def unique_message_id(headers: dict[str, str | None]) -> str | None:
    """ServiceControl's id of a failed message: the ``ServiceControl.Retry.UniqueMessageId`` it already
    carries (a retry that failed again), else the MD5-based Guid of MessageId + processing endpoint
    name (ProcessingEndpoint, else the queue part of FailedQ, else of ReplyToAddress), as
    ``DeterministicGuid.MakeId`` builds it (.NET Guid byte order: ``bytes_le``)."""
    return unique_id_of(
        headers.get(RETRY_UNIQUE_MESSAGE_ID),
        headers.get(hdr.MESSAGE_ID),
        headers.get(hdr.PROCESSING_ENDPOINT),
        headers.get(hdr.FAILED_QUEUE),
        headers.get(hdr.REPLY_TO_ADDRESS),
    )


def unique_id_of(
    existing: str | None,
    message_id: str | None,
    endpoint: str | None,
    failed_queue: str | None,
    reply_to: str | None,
) -> str | None:
    """``unique_message_id`` from the header values it reads (a batch looks them up in bulk)."""
    if existing:
        return existing
    if endpoint is None and failed_queue is not None:
        endpoint = _queue_part(failed_queue)
    if endpoint is None and reply_to is not None:
        endpoint = _queue_part(reply_to)
    if message_id is None or endpoint is None:
        return None
    x = hashlib.md5(f"{message_id}{endpoint}".encode(), usedforsecurity=False).hexdigest()
    # str(uuid.UUID(bytes_le=digest)) without the object: the first three fields byte-swapped
    return f"{x[6:8]}{x[4:6]}{x[2:4]}{x[0:2]}-{x[10:12]}{x[8:10]}-{x[14:16]}{x[12:14]}-{x[16:20]}-{x[20:32]}"


_KEPT: dict[str, bool] = {}  # header name -> kept on a retry (names repeat across messages: decide once)


def _kept(name: str) -> bool:
    kept = _KEPT.get(name)
    if kept is None:
        kept = not name.startswith(STRIPPED_PREFIXES) and name not in STAGING_HEADERS
        if len(_KEPT) < 100_000:
            _KEPT[name] = kept
    return kept


def retry_headers(headers: dict[str, str | None], ack_queue: str | None) -> dict[str, str | None]:
    """The headers a ServiceControl retry sends: failure and staging headers stripped, the retry's
    unique id set, and the acknowledgement queue when one is configured."""
    unique = unique_message_id(headers)
    out = {k: v for k, v in headers.items() if _kept(k)}
    if unique is not None:
        out[RETRY_UNIQUE_MESSAGE_ID] = unique
    if ack_queue:
        out[RETRY_ACKNOWLEDGEMENT_QUEUE] = ack_queue
    return out

"""The headers a retried or replayed message carries: what ServiceControl strips and sets on a retry
(and the unique id it gives a failed message), and the queuelake.Replay.* headers naming the replay.

Why a module of its own: a replay sends messages as a ServiceControl retry would, and these are the
rules of ServiceControl's wire, not of the replay's selection or sending.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from queuelake.nsb import guids
from queuelake.nsb import headers as hdr

# What a ServiceControl retry strips: every header *starting with* one of these
# (ServiceControl src/ServiceControl/Recoverability/Retrying/HeaderFilter.cs).
STRIPPED_PREFIXES = (
    "NServiceBus.Retries",  # also NServiceBus.Retries.Timestamp
    "NServiceBus.FailedQ",
    "NServiceBus.TimeOfFailure",
    "NServiceBus.ExceptionInfo.",
    "ServiceControl.EditOf",
    "NServiceBus.Timeout.Expire",  # a deferred message's due time: the retry is due now
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
# and its row id: a queue table dropped and re-created numbers its rows from 1 again, so two journal
# rows can share a <queue>@<seq>; the id tells them apart (copies sent before it carry none)
REPLAY_SOURCE_ID = "queuelake.Replay.SourceId"
REPLAY_ORIGINAL_MESSAGE_ID = "queuelake.Replay.OriginalMessageId"  # replays get a new MessageId


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


def unique_ids(
    existing: pa.Array, message_ids: pa.Array, endpoints: pa.Array, failed_queues: pa.Array, reply_tos: pa.Array
) -> pa.Array:
    """``unique_id_of`` of each row of a batch, its header values given as string arrays: the Guids
    formatted by ``guids.texts_le`` and only the MD5 hashed in Python, once per row that needs one."""
    n = len(message_ids)
    endpoint = pc.coalesce(endpoints, _queue_parts(failed_queues), _queue_parts(reply_tos))
    keys = pc.binary_join_element_wise(message_ids, endpoint, "").to_pylist()  # null where either is
    hashed = [hashlib.md5(k.encode(), usedforsecurity=False).digest() for k in keys if k is not None]
    computed = guids.texts_le(np.frombuffer(b"".join(hashed), np.uint8).reshape(len(hashed), 16))
    valid = np.fromiter((k is not None for k in keys), dtype=bool, count=n)
    at = pa.array(np.cumsum(valid) - 1, pa.int64(), mask=~valid)  # each row's computed id, or null
    has_existing = pc.fill_null(pc.greater(pc.binary_length(existing), 0), False)
    return pc.if_else(has_existing, existing.cast(pa.string()), computed.take(at))


def _queue_parts(addresses: pa.Array) -> pa.Array:
    """``_queue_part`` of each address: the text before its first ``@``."""
    return pc.replace_substring_regex(addresses, pattern="(?s)@.*", replacement="", max_replacements=1)


_KEPT: dict[str, bool] = {}  # header name -> kept on a retry (names repeat across messages: decide once)


def _kept(name: str) -> bool:
    kept = _KEPT.get(name)
    if kept is None:
        kept = not name.startswith(STRIPPED_PREFIXES) and name not in STAGING_HEADERS
        if len(_KEPT) < 100_000:
            _KEPT[name] = kept
    return kept


def kept_mask(keys: pa.Array) -> np.ndarray:
    """True for each header name a retry keeps (not a failure or ServiceControl staging header): what
    ``retry_headers`` keeps, for a whole batch's names at once."""
    dropped = pc.is_in(keys, value_set=pa.array(STAGING_HEADERS, pa.string()))
    for prefix in STRIPPED_PREFIXES:
        dropped = pc.or_(dropped, pc.starts_with(keys, prefix))
    return np.asarray(pc.invert(pc.fill_null(dropped, False)).to_numpy(zero_copy_only=False), dtype=bool)


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

"""The journal's failed copies, read without Spark and in bounded memory, and the later copies that
name them as the source of a retry.

Why row group by row group: a failed copy's grouping keys are typed columns, but its stack trace is a
header, and the ``headers`` map is most of a journal's bytes. Each row group of each file the Delta log
lists at one version (``LakeEngine.added_files(messages, None, version)``, as replay reads) is read
first for its small columns alone; only a row group holding failed copies has its ``headers`` read,
and of those only the failed rows' stack trace and replay headers are kept. Memory holds one row
group's header map and the failed copies' small columns, never a body.

A failed copy is a ``landed`` row carrying ``NServiceBus.FailedQ`` or an exception type (what health
and replay call a failure). Expired and quarantined rows are not read: replay cannot send them.

Retries (``later_copies``): a queuelake retry or redirect keeps the failed message's ``MessageId`` and
says which journal row it came from (``queuelake.Replay.Source``: ``<queue>@<seq>``, and
``queuelake.Replay.SourceId``: the row's id, which tells apart the two rows a re-created queue table
numbers alike; copies sent before it carry none). A second pass
reads the ``message_id`` column of every file and, only in row groups holding one of the failed
messages' ids, the ``headers`` of those rows: each copy naming a failed row as its source is a retry of
it, processed (an audit copy) or failed again (an error copy). A ServiceControl retry keeps the
MessageId too and names no row: its copies carry ``ServiceControl.Retry.UniqueMessageId``, ServiceControl's
id of the failed message it retried (``nsb.retry.unique_id_of``: the MessageId and the endpoint that
failed it, or the failed copy's own retry id), which ``read_failed`` computes for each failed copy
(``retry_unique_id``) so that ``groups.group`` matches the two exactly. The MessageId alone does not
name a failure: a published event has one MessageId in every subscriber, so two subscribers' failures
of it share it. A replay ``--to`` another queue gives its copies new MessageIds, so it is not found here.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from queuelake.lake import record_tables, table_entry
from queuelake.lake.port import LakeEngine
from queuelake.lake.round_files import open_file
from queuelake.nsb import headers as hdr
from queuelake.nsb.retry import REPLAY_ID, REPLAY_SOURCE, REPLAY_SOURCE_ID, RETRY_UNIQUE_MESSAGE_ID, unique_id_of
from queuelake.pipeline.failures.fingerprint import fingerprints
from queuelake.pipeline.journal.schema import MESSAGES_SCHEMA

MESSAGES = record_tables.MESSAGES.name
STACK_TRACE = "NServiceBus.ExceptionInfo.StackTrace"
# the small columns read from every row group
SMALL = [
    "queue",
    "seq",
    "id",
    "outcome",
    "drained_at",
    "message_id",
    "message_type",
    "processing_endpoint",
    "failed_queue",
    "exception_type",
    "exception_message",
    "time_of_failure",
    "processing_ended",  # NServiceBus 4 and 5 stamp it on a failure too: a retry that keeps it is not processed
]
_RETRY_SMALL = [
    "queue",
    "seq",
    "id",
    "message_id",
    "failed_queue",
    "exception_type",
    "processing_ended",
    "time_of_failure",
    "drained_at",
]


@dataclass
class Failed:
    """The failed copies at one journal version, one row each: ``SMALL`` and ``at`` (TimeOfFailure,
    else drained_at), ``fingerprint``, ``is_retry`` (the copy is itself a retry's failure: it carries a
    replay id or ServiceControl's retry id) and ``retry_unique_id`` (ServiceControl's id of the failed
    message: what a ServiceControl retry of this copy carries as ``ServiceControl.Retry.UniqueMessageId``;
    null without a MessageId or an endpoint)."""

    rows: pa.Table
    version: int | None
    files: int = 0
    row_groups: int = 0
    row_groups_with_failures: int = 0
    rows_scanned: int = 0


@dataclass
class Progress:
    """How far a pass over the journal's files is, for the progress line a long one logs (``run.py``): a
    5,000,000-row journal took 5 minutes with nothing in the log (a review)."""

    files: int = 0
    files_read: int = 0
    rows_scanned: int = 0
    found: int = 0


def _failures(small: pa.Table) -> pa.Array:
    failed = pc.or_(pc.is_valid(small["failed_queue"]), pc.is_valid(small["exception_type"]))
    return pc.fill_null(pc.and_(pc.equal(small["outcome"], "landed"), failed), False)


def _header(headers: pa.ChunkedArray | pa.Array, name: str) -> list[str | None]:
    return _header_array(headers, name).to_pylist()


def _header_array(headers: pa.ChunkedArray | pa.Array, name: str) -> pa.Array | pa.ChunkedArray:
    return pc.map_lookup(headers, pa.scalar(name, pa.string()), "first")


def read_failed(lake: LakeEngine, version: int | None = None, progress: Progress | None = None) -> Failed:
    """The failed copies of the journal at ``version`` (None: the current one); ``progress`` counts the
    files read and the copies found as it goes."""
    version = lake.table_version(MESSAGES) if version is None else version
    if version is None:
        return Failed(_empty(), None)
    files = lake.added_files(MESSAGES, None, version)
    out = Failed(_empty(), version, files=len(files))
    progress = progress or Progress()
    progress.files, progress.files_read = len(files), 0
    parts: list[pa.Table] = []
    for uri in files:
        lake_file = open_file(uri)
        present = set(lake_file.schema_arrow.names)
        for group in range(lake_file.metadata.num_row_groups):
            out.row_groups += 1
            small = lake_file.read_row_group(group, [c for c in SMALL if c in present])
            out.rows_scanned += small.num_rows
            small = _complete(small)
            mask = _failures(small)
            if not pc.any(mask).as_py():
                continue
            out.row_groups_with_failures += 1
            failed = small.filter(mask)
            headers = lake_file.read_row_group(group, ["headers"])["headers"].filter(mask)
            stacks = _header(headers, STACK_TRACE)
            existing = _header(headers, RETRY_UNIQUE_MESSAGE_ID)
            retry = [a is not None or b is not None for a, b in zip(_header(headers, REPLAY_ID), existing)]
            unique = _unique_ids(failed, existing, _header(headers, hdr.REPLY_TO_ADDRESS))
            del headers
            at = pc.coalesce(failed["time_of_failure"], failed["drained_at"])
            failed = failed.append_column("at", at)
            failed = failed.append_column("fingerprint", pa.array(fingerprints(stacks), pa.string()))
            failed = failed.append_column("is_retry", pa.array(retry, pa.bool_()))
            failed = failed.append_column("retry_unique_id", pa.array(unique, pa.string()))
            parts.append(failed)
            progress.found += failed.num_rows
        progress.files_read += 1
        progress.rows_scanned = out.rows_scanned
    if parts:
        out.rows = pa.concat_tables(parts)
    return out


def _unique_ids(failed: pa.Table, existing: list[str | None], reply_to: list[str | None]) -> list[str | None]:
    """ServiceControl's unique id of each failed copy (``nsb.retry.unique_id_of``), from its columns
    (MessageId, ProcessingEndpoint, FailedQ) and headers (its own retry id, ReplyToAddress)."""
    columns = zip(
        existing,
        failed["message_id"].to_pylist(),
        failed["processing_endpoint"].to_pylist(),
        failed["failed_queue"].to_pylist(),
        reply_to,
    )
    return [unique_id_of(*values) for values in columns]


def _complete(small: pa.Table) -> pa.Table:
    """``SMALL``'s columns, a column a file predates read as nulls."""
    schema = MESSAGES_SCHEMA
    for name in SMALL:
        if name not in small.column_names:
            small = small.append_column(schema.field(name), pa.nulls(small.num_rows, schema.field(name).type))
    return small.select(SMALL)


def _empty() -> pa.Table:
    schema = MESSAGES_SCHEMA
    fields = [schema.field(c) for c in SMALL]
    fields += [
        pa.field("at", table_entry.UTC_TS),
        pa.field("fingerprint", pa.string()),
        pa.field("is_retry", pa.bool_()),
        pa.field("retry_unique_id", pa.string()),
    ]
    return pa.schema(fields).empty_table()


@dataclass(frozen=True)
class LaterCopy:
    """A retry's copy: the failed row it names as its source (a queuelake retry), or none (a
    ServiceControl retry: ``retry_unique_id``, and ``at`` or its own row, find the failure it retried);
    whether it was processed or failed again."""

    source: str | None  # <queue>@<seq> of the failed row; None: a ServiceControl retry
    failed_again: bool
    message_id: str | None = None
    at: dt.datetime | None = None  # TimeOfFailure or ProcessingEnded, else when it was drained
    retry_unique_id: str | None = None  # its ServiceControl.Retry.UniqueMessageId
    row: tuple[str, int, str] | None = None  # its own journal row (queue, seq, id)
    source_id: str | None = None  # the failed row's id (queuelake.Replay.SourceId; older copies: None)
    processed: bool = False  # an endpoint processed it: an audit copy (ProcessingEnded)
    processing_ended: dt.datetime | None = None  # its ProcessingEnded (a failure's own, kept by a retry: not processed)


class _Membership:
    """Which values of a column are among many message ids, asked once per row group of the journal.

    Why two ways: Arrow's ``is_in`` builds its hash table of the ids on every call, and with 345,000
    failed ids over 330 row groups that was most of a 75 s ``failures`` (a review); a Python set is
    built once and asked per row, the cheaper way from ``SET_FROM`` ids on."""

    SET_FROM = 20_000

    def __init__(self, ids: set[str]) -> None:
        self.ids = ids
        self.wanted = None if len(ids) >= self.SET_FROM else pa.array(sorted(ids), pa.string())

    def rows_of(self, column: pa.ChunkedArray | pa.Array) -> np.ndarray:
        """The positions of the values that are among the ids (nulls never are)."""
        if self.wanted is not None:
            mask = pc.fill_null(pc.is_in(column, value_set=self.wanted), False)
            return np.flatnonzero(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool))
        ids = self.ids
        return np.flatnonzero(np.fromiter((v in ids for v in column.to_pylist()), dtype=bool, count=len(column)))


def later_copies(
    lake: LakeEngine, version: int, message_ids: set[str], progress: Progress | None = None
) -> list[LaterCopy]:
    """Every copy at ``version`` whose ``message_id`` is one of ``message_ids`` and that a retry sent:
    its ``queuelake.Replay.Source`` names a journal row, or it carries ServiceControl's retry id
    (``progress`` counts the files read and the copies found as it goes)."""
    if not message_ids:
        return []
    held = _Membership(message_ids)
    out: list[LaterCopy] = []
    files = lake.added_files(MESSAGES, None, version)
    progress = progress or Progress()
    progress.files, progress.files_read, progress.rows_scanned, progress.found = len(files), 0, 0, 0
    for uri in files:
        progress.files_read += 1
        lake_file = open_file(uri)
        for group in range(lake_file.metadata.num_row_groups):
            small = lake_file.read_row_group(group, _RETRY_SMALL)
            progress.rows_scanned += small.num_rows
            rows = held.rows_of(small["message_id"])
            if not len(rows):
                continue
            picked = small.take(rows)
            headers = lake_file.read_row_group(group, ["headers"])["headers"].take(pa.array(rows))
            # only the copies a retry sent (a source or a retry id) become Python objects: the failed
            # copies themselves, held here too, are most of the rows and were most of the loop below
            named = [_header_array(headers, name) for name in (REPLAY_SOURCE, RETRY_UNIQUE_MESSAGE_ID)]
            sent = pc.fill_null(pc.or_kleene(*(pc.greater(pc.binary_length(a), 0) for a in named)), False)
            if not pc.any(sent).as_py():
                continue
            picked, headers = picked.filter(sent), headers.filter(sent)
            sources = _header(headers, REPLAY_SOURCE)
            source_ids = _header(headers, REPLAY_SOURCE_ID)
            servicecontrol = _header(headers, RETRY_UNIQUE_MESSAGE_ID)
            failed = pc.or_(pc.is_valid(picked["failed_queue"]), pc.is_valid(picked["exception_type"])).to_pylist()
            ended = picked["processing_ended"].to_pylist()
            at = pc.coalesce(picked["time_of_failure"], picked["processing_ended"], picked["drained_at"]).to_pylist()
            ids = picked["message_id"].to_pylist()
            own = zip(picked["queue"].to_pylist(), picked["seq"].to_pylist(), picked["id"].to_pylist())
            for source, source_id, retry_id, again, done, when, message_id, row in zip(
                sources, source_ids, servicecontrol, failed, ended, at, ids, own
            ):
                if source or retry_id:
                    out.append(
                        LaterCopy(
                            source or None,
                            bool(again),
                            message_id,
                            when,
                            retry_id,
                            row,
                            source_id or None,
                            processed=done is not None and not again,
                            processing_ended=done,
                        )
                    )
                    progress.found += 1
    return out

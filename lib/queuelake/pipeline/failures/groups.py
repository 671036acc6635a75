"""Failed copies grouped as ServicePulse groups them, and each group's ``replay --where``.

The grouping key is (exception type, message type, processing endpoint, stack-trace fingerprint):
ServicePulse's classifiers ("Exception Type and Stack Trace", "Message Type", "Endpoint Name") at once.
A generic message type is keyed without its arguments' assembly versions
(``nsb.message_types.without_versions``), so its releases failing alike are one group, as they are one
typed table; the group's ``--where`` lists each release's full name.
The columns are the journal's typed ones, as the drain decoded them (``nsb/columns.py``); a missing one
is a key of its own (null). The group id is the first 10 hex digits of the SHA-256 of the key (its JSON),
so a group keeps its id from run to run, and in every lake holding the same failures.

A message is what ServiceControl calls one failed message: its unique id (``nsb.retry.unique_id_of``,
the MessageId and the endpoint that failed it), so a published event failing at two subscribers is two
messages. Its failures are ordered as the drain took them when they lie in one error queue (when it
drained them, then the queue's ``seq``: a retry's failure is drained after the failure it retried,
even in a re-created table whose seqs start again), else by ``at`` (TimeOfFailure, set by whichever
machine failed it). As in ServicePulse, a message belongs to the group of its latest failure, across
groups: another group holding an earlier failure of it (a retry that failed with another exception)
lists it, as history, and does not select it.

The replay selection (``Group.replay_rows``): the latest failed copy of each message of the group whose
latest failure is in the group, so a message that failed, was retried and failed again the same way is
sent once; a message whose latest failure a retry has since processed is resolved, as ServicePulse
resolves it, and not selected: sending it again would process it twice. Which failure a retry's copy
retried: the row a queuelake retry names (``queuelake.Replay.Source``); for a ServiceControl retry, which
names no row, the failure of the same unique id (the copy's ``ServiceControl.Retry.UniqueMessageId``)
that it followed: for a copy that failed again, the failure of that id before its own row; for a
processed copy, the latest failure of that id before its ProcessingEnded (``_source``). A copy whose id
matches no failure before it (one the journal does not hold) retried nothing known: never guessed from
the MessageId and the time, which would take another subscriber's failure. Its ``--where``
(``Group.where``) names the key columns (readable, and they let row-group statistics prune) and then the
rows themselves by ``queue`` and ``seq``, per error queue either as ``seq IN (...)`` or as ``seq BETWEEN
lo AND hi`` less the other key-matching rows in that range, the shorter of the two. Rows are never
rewritten in the journal (a row is its queue, seq and id for good), so the predicate selects exactly these
rows at any later journal version: failures drained after it was printed are not added, and a rerun or a
second replay of it sends the same rows. A queue table dropped and re-created numbers its rows
from 1 again: a row of the same queue and seq as a selected one (its namesake) is left out by its id
(``id NOT IN (...)``), one drained later by ``drained_at <= '<the last selected row's>'``, and a
retry's copy names its source's id (``queuelake.Replay.SourceId``), so a new failure is never taken for
an old one retried. It is a predicate replay evaluates without Spark unless a key
holds a backslash or a quote (Spark then reads it).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa

from queuelake.lake import table_entry
from queuelake.nsb.message_types import without_versions
from queuelake.pipeline.failures.read import LaterCopy

RowKey = tuple[str, int, str]  # a journal row: queue, seq, id (a re-created table reuses seqs)

Key = tuple[str | None, str | None, str | None, str]  # exception type, message type, endpoint, fingerprint


def group_id(key: Key) -> str:
    return hashlib.sha256(json.dumps(list(key)).encode("utf-8")).hexdigest()[:10]


@dataclass(slots=True)  # no __dict__ per row: a journal holds hundreds of thousands of failures
class Row:
    queue: str
    seq: int
    message_id: str | None
    at: dt.datetime
    failed_queue: str | None
    exception_message: str | None
    is_retry: bool
    unique_id: str | None = None  # ServiceControl's id of the failed message (read.Failed's retry_unique_id)
    rank: int = 0  # its place among its message's failures (0: the first)
    message_type: str | None = None  # as the journal holds it (a generic's argument versions kept)
    id: str = ""  # the journal row's id
    drained_at: dt.datetime | None = None  # when the drain took it (the journal's column)
    processing_ended: dt.datetime | None = None  # NServiceBus 4 and 5 stamp a failure's too
    # (queue, seq, id), made once: the grouping looks rows up by it a dozen times each
    key: RowKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.key = (self.queue, self.seq, self.id)

    @property
    def seat(self) -> tuple[str, int]:
        """Its ``queue@seq``: what ``queuelake.Replay.Source`` names (two rows of a re-created table share it)."""
        return (self.queue, self.seq)

    @property
    def message(self) -> str:
        """The message it is a failure of: ServiceControl's unique id, else the MessageId, else the row."""
        return self.unique_id or self.message_id or f"{self.queue}@{self.seq}/{self.id}"


@dataclass(frozen=True)
class Later:
    """Where a message's latest failure is when it is not in the group listing an earlier one."""

    group: str
    row: RowKey
    resolved: bool  # a retry processed that latest failure since


@dataclass
class Group:
    key: Key
    rows: list[Row] = field(default_factory=list)
    retried: set[RowKey] = field(default_factory=set)  # rows a later copy retried
    retried_processed: set[RowKey] = field(default_factory=set)
    retried_failed_again: set[RowKey] = field(default_factory=set)
    elsewhere: dict[RowKey, Later] = field(default_factory=dict)  # latest_rows whose message failed later elsewhere
    where: str = ""
    _latest: tuple[int, list[Row]] | None = field(default=None, repr=False, compare=False)  # latest_rows'

    @property
    def id(self) -> str:
        return group_id(self.key)

    @property
    def exception_type(self) -> str | None:
        return self.key[0]

    @property
    def message_type(self) -> str | None:
        return self.key[1]

    @property
    def endpoint(self) -> str | None:
        return self.key[2]

    @property
    def fingerprint(self) -> str:
        return self.key[3]

    @property
    def first_seen(self) -> dt.datetime:
        return min(r.at for r in self.rows)

    @property
    def last_seen(self) -> dt.datetime:
        return max(r.at for r in self.rows)

    def message_ids(self) -> list[str]:
        """The distinct message ids a replay of the group sends, by when each last failed."""
        return [r.message_id or f"{r.queue}@{r.seq}" for r in self.replay_rows()]

    def replay_rows(self) -> list[Row]:
        """The latest failed copy of each message whose latest failure is in the group and not resolved
        since (``latest_rows`` less ``elsewhere`` and the rows a retry processed), by ``at`` (then queue,
        seq)."""
        return [r for r in self.latest_rows() if r.key not in self.retried_processed and r.key not in self.elsewhere]

    def resolved_rows(self) -> list[Row]:
        """The messages whose latest failure is in the group and a retry processed it since."""
        return [r for r in self.latest_rows() if r.key in self.retried_processed and r.key not in self.elsewhere]

    def latest_rows(self) -> list[Row]:
        """The latest failed copy in the group of each message with one here, by ``at`` (then queue, seq).
        Computed once (``group`` ranks every row before it first asks): a group's summary and its
        ``where`` asked for it seven times, each a sort of the group's rows."""
        if self._latest is None or self._latest[0] != len(self.rows):
            latest: dict[str, Row] = {}
            for r in self.rows:
                seen = latest.get(r.message)
                if seen is None or r.rank > seen.rank:
                    latest[r.message] = r
            self._latest = (len(self.rows), sorted(latest.values(), key=lambda r: (r.at, r.queue, r.seq)))
        return list(self._latest[1])

    def summary(self) -> dict[str, Any]:
        latest = max(self.rows, key=lambda r: (r.at, r.seq))
        return {
            "group": self.id,
            "exception_type": self.exception_type,
            "message_type": self.message_type,
            "endpoint": self.endpoint,
            "fingerprint": self.fingerprint,
            "failed_queues": sorted({r.failed_queue for r in self.rows if r.failed_queue}),
            "copies": len(self.rows),
            "messages": len(self.latest_rows()),
            "latest_failure_elsewhere": len(self.elsewhere),
            "resolved": len(self.resolved_rows()),
            "unresolved": len(self.replay_rows()),
            "first_seen": self.first_seen.isoformat(),
            "last_seen": self.last_seen.isoformat(),
            "retry_failures": sum(1 for r in self.rows if r.is_retry),
            "retried": len(self.retried),
            "retried_processed": len(self.retried_processed),
            "retried_failed_again": len(self.retried_failed_again),
            "latest_exception_message": latest.exception_message,
        }


@dataclass
class Grouping:
    groups: list[Group]
    unmatched_retry_copies: int = 0  # ServiceControl retry copies whose unique id names no failed copy


def group(failed: pa.Table, later: list[LaterCopy] | None = None) -> Grouping:
    """The groups of ``read.Failed.rows``, largest first (then by id), their ``where`` filled in."""
    groups: dict[Key, Group] = {}
    by_row: dict[RowKey, Group] = {}
    row_of: dict[RowKey, Row] = {}
    by_seat: dict[tuple[str, int], list[Row]] = defaultdict(list)
    releases: dict[str, str] = {}  # a message type -> its name across releases, worked out once
    for r in _rows(failed):
        message_type = r["message_type"]
        across_releases = None
        if message_type is not None:
            across_releases = releases.get(message_type) or releases.setdefault(
                message_type, without_versions(message_type)
            )
        key: Key = (r["exception_type"], across_releases, r["processing_endpoint"], r["fingerprint"])
        g = groups.get(key)
        if g is None:  # not setdefault: a Group made per row and thrown away was a tenth of the grouping
            g = groups[key] = Group(key)
        row = Row(
            r["queue"],
            r["seq"],
            r["message_id"],
            r["at"],
            r["failed_queue"],
            r["exception_message"],
            r["is_retry"],
            r.get("retry_unique_id"),
            message_type=message_type,
            id=r["id"],
            drained_at=r.get("drained_at"),
            processing_ended=r.get("processing_ended"),
        )
        g.rows.append(row)
        by_row[row.key] = g
        row_of[row.key] = row
        by_seat[row.seat].append(row)
    messages: dict[str, list[Row]] = defaultdict(list)
    for g in groups.values():
        for row in g.rows:
            messages[row.message].append(row)
    by_unique: dict[str, list[Row]] = {}
    for name, rows in messages.items():
        rows[:] = _in_order(rows)
        for rank, row in enumerate(rows):
            row.rank = rank
        if rows[0].unique_id is not None:
            by_unique[name] = rows
    unmatched = 0
    for copy in later or []:
        source = _source(copy, by_unique, by_seat)
        g_ = by_row.get(source) if source else None
        if g_ is None or source is None:
            unmatched += copy.source is None
            continue
        g_.retried.add(source)
        failure = row_of[source]
        # neither failed again nor processed: a copy taken from its queue before an endpoint handled it
        # (a drain of that queue): retried, still unresolved (it counted as processed: a review)
        if copy.failed_again:
            g_.retried_failed_again.add(source)
        elif copy.processed and copy.processing_ended != failure.processing_ended:
            # a ProcessingEnded equal to its failure's own is the failed attempt's, kept by the retry
            # (NServiceBus 4 and 5 stamp it on failure): drained from its queue, not processed (a review)
            g_.retried_processed.add(source)
    for g in groups.values():
        for row in g.latest_rows():
            last = messages[row.message][-1]
            if last is not row:
                owner = by_row[last.key]
                g.elsewhere[row.key] = Later(owner.id, last.key, last.key in owner.retried_processed)
    triples: dict[tuple[str | None, str | None, str | None], list[Row]] = defaultdict(list)
    for g in groups.values():
        triples[g.key[:3]].extend(g.rows)
    for g in groups.values():
        g.where = where(g, triples[g.key[:3]])
    return Grouping(sorted(groups.values(), key=lambda g: (-len(g.rows), g.id)), unmatched)


# the columns whose values repeat from failure to failure: one string each, shared by every row
_REPEATED = ("queue", "failed_queue", "message_type", "processing_endpoint", "exception_type", "exception_message")
_BATCH_ROWS = 10_000


def _rows(failed: pa.Table) -> Iterator[dict[str, Any]]:
    """The failed copies as dicts, a batch at a time, the repeated texts shared. Why: the whole table as
    dicts at once, each row its own copy of its queue, type and exception texts, peaked at 1.7 GB on
    500,000 failures (a review). Each batch is converted a column at a time (a repeated column through
    its distinct values, so its rows share one string each): a dict per row built by Arrow, and each
    of its texts looked up per row, were a third of ``failures``' time."""
    names = failed.column_names
    shared: dict[str, str] = {}
    for batch in failed.to_batches(max_chunksize=_BATCH_ROWS):
        columns = [
            _shared(batch.column(i), shared) if n in _REPEATED else _values(batch.column(i))
            for i, n in enumerate(names)
        ]
        for values in zip(*columns, strict=True):
            yield dict(zip(names, values, strict=True))


_UTC_EPOCH = dt.datetime(1970, 1, 1, tzinfo=ZoneInfo("UTC"))  # as pyarrow gives a UTC time: ZoneInfo("UTC")


def _values(column: pa.Array) -> list[Any]:
    """A column's values as Python objects; a UTC time in microseconds (the journal's times) by adding
    to the epoch, the very datetime ``to_pylist`` gives, 5 times faster: the times were a third of the
    conversion."""
    if column.type != table_entry.UTC_TS:
        return column.to_pylist()
    return [
        None if v is None else _UTC_EPOCH + dt.timedelta(microseconds=v) for v in column.cast(pa.int64()).to_pylist()
    ]


def _shared(column: pa.Array, shared: dict[str, str]) -> list[Any]:
    """A text column's values, each distinct text one string object (across batches too)."""
    encoded = column.dictionary_encode() if not pa.types.is_dictionary(column.type) else column
    distinct = [None if v is None else shared.setdefault(v, v) for v in encoded.dictionary.to_pylist()]
    return [None if i is None else distinct[i] for i in encoded.indices.to_pylist()]


def _in_order(rows: list[Row]) -> list[Row]:
    """One message's failures, first to last: when one error queue holds them all, in the order the
    drain took them (``drained_at``, then ``seq``: the queue's counter, exact within a table; but a
    table dropped and re-created numbers its rows from 1 again, and a retry's failure landing there
    came after the one it retried, which the drain had taken first: a review), else by ``at``
    (TimeOfFailure: the failing machines' clocks), then queue and seq."""
    if len({r.queue for r in rows}) == 1:
        return sorted(rows, key=lambda r: (r.drained_at or r.at, r.seq))
    return sorted(rows, key=lambda r: (r.at, r.queue, r.seq))


def _source(
    copy: LaterCopy, by_unique: dict[str, list[Row]], by_seat: dict[tuple[str, int], list[Row]]
) -> RowKey | None:
    """The failed row a retry's copy retried. A queuelake retry names it. A ServiceControl retry names
    its unique id: among the failures of that id (one message at one endpoint), a copy that failed again
    (itself one of them) retried the one before it, in the order of ``_in_order``; a processed copy
    retried the latest one that failed before its ProcessingEnded. Those two times come from the
    machines of one endpoint (NTP-synchronised, minutes apart: a retry goes through the error queue and
    back), while the drain order of the audit and the error queues is no order at all (each queue is
    drained on its own, an error queue maybe hours late). None when the id matches no failure: never a
    guess by MessageId and time, which would take another subscriber's failure of a published event.
    A queuelake retry's ``queue@seq`` names one of two rows when the table was re-created: the copy's
    source id picks it; a copy sent before the id was carried retried the one of them failed last
    before it (the older row: the new one's failure came after the retry)."""
    if copy.source is not None:
        queue, _, seq = copy.source.rpartition("@")
        if not seq.isdigit():
            return None
        seated = by_seat.get((queue, int(seq)), [])
        if copy.source_id is not None:
            return (queue, int(seq), copy.source_id)
        if len(seated) == 1 or (seated and copy.at is None):
            return seated[0].key
        before = sorted((r for r in seated if copy.at is not None and r.at <= copy.at), key=lambda r: r.at)
        return before[-1].key if before else None
    chain = by_unique.get(copy.retry_unique_id) if copy.retry_unique_id else None
    if not chain:
        return None
    if copy.failed_again and copy.row is not None:
        place = next((i for i, r in enumerate(chain) if r.key == copy.row), None)
        if place is not None:
            return chain[place - 1].key if place > 0 else None
    if copy.at is None:
        return None
    before = [r for r in chain if r.at < copy.at]
    return before[-1].key if before else None


def literal(text: str) -> str:
    """A Spark SQL text literal (Spark reads backslash escapes inside quotes)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _equals(column: str, value: str | None) -> str:
    return f"{column} IS NULL" if value is None else f"{column} = {literal(value)}"


def _message_types(g: Group, same_columns: list[Row]) -> str:
    """The group's message type as the journal's rows spell it: a generic type's releases (its
    arguments' assembly versions) are one group, and its rows carry each release's full name."""
    spelled = sorted({r.message_type for r in same_columns if r.message_type is not None})
    if g.message_type is None or len(spelled) <= 1:
        return _equals("message_type", spelled[0] if spelled else g.message_type)
    return f"message_type IN ({', '.join(map(literal, spelled))})"


def where(g: Group, same_columns: list[Row]) -> str:
    """The predicate selecting exactly ``g.replay_rows()``; ``same_columns``: every failed copy with the
    group's exception type, message type and endpoint (the rows the key columns alone select)."""
    parts = ["outcome = 'landed'"]
    if g.exception_type is None:
        parts += ["exception_type IS NULL", "failed_queue IS NOT NULL"]
    else:
        parts.append(_equals("exception_type", g.exception_type))
    parts += [_message_types(g, same_columns), _equals("processing_endpoint", g.endpoint)]
    chosen: dict[str, set[int]] = defaultdict(set)
    chosen_rows = {r.key for r in g.replay_rows()}
    for r in g.replay_rows():
        chosen[r.queue].add(r.seq)
    if not chosen:  # every message resolved: a predicate that selects no row
        return " AND ".join(parts + ["seq < 0"])
    matching: dict[str, set[int]] = defaultdict(set)
    namesakes: dict[str, set[str]] = defaultdict(set)  # a chosen seq's other rows (a re-created table)
    for r in same_columns:
        matching[r.queue].add(r.seq)
        if r.seq in chosen.get(r.queue, ()) and r.key not in chosen_rows:  # .get: no empty entry in chosen
            namesakes[r.queue].add(r.id)
    per_queue = []
    for queue in sorted(chosen):
        seqs = sorted(chosen[queue])
        listed = f"seq IN ({', '.join(map(str, seqs))})"
        lo, hi = seqs[0], seqs[-1]
        others = sorted(s for s in matching[queue] if lo <= s <= hi and s not in chosen[queue])
        ranged = f"seq BETWEEN {lo} AND {hi}" if lo != hi else f"seq = {lo}"
        if others:
            ranged += f" AND seq NOT IN ({', '.join(map(str, others))})"
        seqs_term = min(listed, ranged, key=len)
        if namesakes[queue]:
            seqs_term += f" AND id NOT IN ({', '.join(map(literal, sorted(namesakes[queue])))})"
        per_queue.append(f"(queue = {literal(queue)} AND {seqs_term})")
    rows = per_queue[0] if len(per_queue) == 1 else "(" + " OR ".join(per_queue) + ")"
    return " AND ".join(parts + [rows, *_drained_by(g.replay_rows())])


def _drained_by(rows: list[Row]) -> list[str]:
    """``drained_at <= '<the last of rows>'``: a queue table dropped and re-created later lands new
    rows at the selected seqs, and the predicate took them (a review); they are drained after it was
    printed. Empty when a row's time is unknown (not a journal's row)."""
    times = [r.drained_at for r in rows]
    if not times or any(t is None for t in times):
        return []
    last = max(t for t in times if t is not None).astimezone(dt.timezone.utc)
    return [f"drained_at <= '{last.strftime('%Y-%m-%dT%H:%M:%S.%fZ')}'"]

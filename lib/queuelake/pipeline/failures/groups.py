"""Failed copies grouped as ServicePulse groups them, and each group's ``replay --where``.

The grouping key is (exception type, message type, processing endpoint, stack-trace fingerprint):
ServicePulse's classifiers ("Exception Type and Stack Trace", "Message Type", "Endpoint Name") at once.
The columns are the journal's typed ones, as the drain decoded them (``nsb/columns.py``); a missing one
is a key of its own (null). The group id is the first 10 hex digits of the SHA-256 of the key (its JSON),
so a group keeps its id from run to run, and in every lake holding the same failures.

The replay selection (``Group.replay_rows``): the latest failed copy (highest ``at``, then ``seq``) of
each message of the group, so a message that failed, was retried and failed again the same way is sent
once; a message whose latest failure a retry has since processed (a queuelake retry naming the row, or a
ServiceControl retry: a later copy of the message with ServiceControl's retry id) is resolved, as
ServicePulse resolves it, and not selected: sending it again would process it twice. Its ``--where``
(``Group.where``) names the key columns (readable, and they let row-group statistics prune) and then the
rows themselves by ``queue`` and ``seq``, per error queue either as ``seq IN (...)`` or as ``seq BETWEEN
lo AND hi`` less the other key-matching rows in that range, the shorter of the two. Rows are never
rewritten in the journal (a row is its queue and seq for good), so the predicate selects exactly these
rows at any later journal version: failures drained after it was printed are not added, and a rerun or a
second replay of it sends the same rows. It is a predicate replay evaluates without Spark unless a key
holds a backslash or a quote (Spark then reads it).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from queuelake.pipeline.failures.read import LaterCopy

Key = tuple[str | None, str | None, str | None, str]  # exception type, message type, endpoint, fingerprint


def group_id(key: Key) -> str:
    return hashlib.sha256(json.dumps(list(key)).encode("utf-8")).hexdigest()[:10]


@dataclass
class Row:
    queue: str
    seq: int
    message_id: str | None
    at: dt.datetime
    failed_queue: str | None
    exception_message: str | None
    is_retry: bool


@dataclass
class Group:
    key: Key
    rows: list[Row] = field(default_factory=list)
    retried: set[tuple[str, int]] = field(default_factory=set)  # rows a later copy names as its source
    retried_processed: set[tuple[str, int]] = field(default_factory=set)
    retried_failed_again: set[tuple[str, int]] = field(default_factory=set)
    where: str = ""

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
        """The latest failed copy of each message not resolved since (``latest_rows`` less the rows a
        retry processed), by ``at`` (then queue, seq)."""
        return [r for r in self.latest_rows() if (r.queue, r.seq) not in self.retried_processed]

    def latest_rows(self) -> list[Row]:
        """The latest failed copy of each message, by ``at`` (then queue, seq)."""
        latest: dict[str, Row] = {}
        for r in self.rows:
            name = r.message_id or f"{r.queue}@{r.seq}"
            seen = latest.get(name)
            if seen is None or (r.at, r.seq) > (seen.at, seen.seq):
                latest[name] = r
        return sorted(latest.values(), key=lambda r: (r.at, r.queue, r.seq))

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
            "resolved": len(self.latest_rows()) - len(self.replay_rows()),
            "first_seen": self.first_seen.isoformat(),
            "last_seen": self.last_seen.isoformat(),
            "retry_failures": sum(1 for r in self.rows if r.is_retry),
            "retried": len(self.retried),
            "retried_processed": len(self.retried_processed),
            "retried_failed_again": len(self.retried_failed_again),
            "latest_exception_message": latest.exception_message,
        }


def group(failed: pa.Table, later: list[LaterCopy] | None = None) -> list[Group]:
    """The groups of ``read.Failed.rows``, largest first (then by id), their ``where`` filled in."""
    groups: dict[Key, Group] = {}
    by_row: dict[tuple[str, int], Group] = {}
    for r in failed.to_pylist():
        key: Key = (r["exception_type"], r["message_type"], r["processing_endpoint"], r["fingerprint"])
        g = groups.setdefault(key, Group(key))
        row = Row(
            r["queue"], r["seq"], r["message_id"], r["at"], r["failed_queue"], r["exception_message"], r["is_retry"]
        )
        g.rows.append(row)
        by_row[(row.queue, row.seq)] = g
    by_message: dict[str, list[Row]] = defaultdict(list)
    for g in groups.values():
        for row in g.rows:
            if row.message_id:
                by_message[row.message_id].append(row)
    for copy in later or []:
        source = _source(copy, by_message)
        g_ = by_row.get(source) if source else None
        if g_ is None or source is None:
            continue
        g_.retried.add(source)
        (g_.retried_failed_again if copy.failed_again else g_.retried_processed).add(source)
    triples: dict[tuple[str | None, str | None, str | None], list[Row]] = defaultdict(list)
    for g in groups.values():
        triples[g.key[:3]].extend(g.rows)
    for g in groups.values():
        g.where = where(g, triples[g.key[:3]])
    return sorted(groups.values(), key=lambda g: (-len(g.rows), g.id))


def _source(copy: LaterCopy, by_message: dict[str, list[Row]]) -> tuple[str, int] | None:
    """The failed row a retry's copy retried: the row it names (queuelake), else the message's latest
    failure before it (ServiceControl names none; its retries of one message follow one another)."""
    if copy.source is not None:
        queue, _, seq = copy.source.rpartition("@")
        return (queue, int(seq)) if seq.isdigit() else None
    if copy.message_id is None or copy.at is None:
        return None
    before = [r for r in by_message.get(copy.message_id, []) if r.at < copy.at]
    if not before:
        return None
    latest = max(before, key=lambda r: (r.at, r.seq))
    return (latest.queue, latest.seq)


def literal(text: str) -> str:
    """A Spark SQL text literal (Spark reads backslash escapes inside quotes)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _equals(column: str, value: str | None) -> str:
    return f"{column} IS NULL" if value is None else f"{column} = {literal(value)}"


def where(g: Group, same_columns: list[Row]) -> str:
    """The predicate selecting exactly ``g.replay_rows()``; ``same_columns``: every failed copy with the
    group's exception type, message type and endpoint (the rows the key columns alone select)."""
    parts = ["outcome = 'landed'"]
    if g.exception_type is None:
        parts += ["exception_type IS NULL", "failed_queue IS NOT NULL"]
    else:
        parts.append(_equals("exception_type", g.exception_type))
    parts += [_equals("message_type", g.message_type), _equals("processing_endpoint", g.endpoint)]
    chosen: dict[str, set[int]] = defaultdict(set)
    for r in g.replay_rows():
        chosen[r.queue].add(r.seq)
    if not chosen:  # every message resolved: a predicate that selects no row
        return " AND ".join(parts + ["seq < 0"])
    matching: dict[str, set[int]] = defaultdict(set)
    for r in same_columns:
        matching[r.queue].add(r.seq)
    per_queue = []
    for queue in sorted(chosen):
        seqs = sorted(chosen[queue])
        listed = f"seq IN ({', '.join(map(str, seqs))})"
        lo, hi = seqs[0], seqs[-1]
        others = sorted(s for s in matching[queue] if lo <= s <= hi and s not in chosen[queue])
        ranged = f"seq BETWEEN {lo} AND {hi}" if lo != hi else f"seq = {lo}"
        if others:
            ranged += f" AND seq NOT IN ({', '.join(map(str, others))})"
        per_queue.append(f"(queue = {literal(queue)} AND {min(listed, ranged, key=len)})")
    rows = per_queue[0] if len(per_queue) == 1 else "(" + " OR ".join(per_queue) + ")"
    return " AND ".join(parts + [rows])

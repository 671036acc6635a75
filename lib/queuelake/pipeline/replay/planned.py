"""The planned rows of a replay as one Arrow table: where each selected row goes, or why it does not,
and which batch it is in. Python objects (``Row``) are made for one batch at a time.

Why: the plan of a million-row replay held a ``Row`` object per row, about 2 GB, and every step
(destinations, skips, counts, the sends) walked them in Python. As columns the plan costs ~100 bytes
a row, the steps are Arrow kernels over the distinct destinations, and the driver's memory grows with
the batch, not with the selection.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from queuelake.pipeline.replay.plan import Cut
from queuelake.pipeline.replay.rows import Row, Verdicts
from queuelake.report import log
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef

# a header present but empty (or blank) is no queue either: said as such (it read "no ... header", a review)
NO_FAILED_QUEUE = "no NServiceBus.FailedQ header, or an empty one: the queue it failed in is unknown (use --to)"
NO_ENDPOINT = (
    "an audited message without NServiceBus.ProcessingEndpoint, or with an empty one: its queue is unknown (use --to)"
)

_NULL = pa.scalar(None, pa.string())
# the plan's columns beside the selection's identity: how each row is sent, where its content is
_PLAN_COLUMNS = ["queue", "seq", "id", "message_id", "message_type", "kind", "address", "file", "row_index"]


# a planned row: queue, seq and row id (None: every row of that queue and seq)
RowKey = tuple[str, int, "str | None"]


@dataclass
class Planned:
    """The landed rows a replay plans to send, in batch order: ``table`` has the columns of
    ``_PLAN_COLUMNS`` plus ``target`` (the destination's canonical name, null when not sent) and
    ``reason`` (why not), and ``sent_to``: the address's canonical name whenever it parses, sendable
    now or not, null for a row recorded as skipped (what the lineage of an earlier run's batch names,
    ``sent``); ``targets`` maps each canonical name to its table."""

    table: pa.Table
    targets: dict[str, TableRef]

    @classmethod
    def of(cls, landed: pa.Table, to: str | None, endpoint_queue: Callable[[str], str] | None = None) -> Planned:
        """Each landed row's kind and address: a retry to its FailedQ, a replay to the endpoint
        that processed it (or back to the queue it was drained from), or anything to ``--to``.
        ``endpoint_queue``: an endpoint's name as its input queue's address (``endpoint_queue_address``)."""
        n = landed.num_rows
        failure = pc.fill_null(landed.column("is_failure"), False)
        if to is not None:
            kind = pc.if_else(failure, "redirect", "replay")
            address = pa.repeat(pa.scalar(to, pa.string()), n)
            reason = pa.nulls(n, pa.string())
        else:
            failed_queue = landed.column("failed_queue")
            endpoint = landed.column("processing_endpoint")
            if endpoint_queue is not None:
                endpoint = _mapped(endpoint, endpoint_queue)
            has_failed_queue = pc.fill_null(pc.not_equal(pc.utf8_trim_whitespace(failed_queue), ""), False)
            has_endpoint = pc.fill_null(pc.not_equal(endpoint, ""), False)
            audited = pc.fill_null(landed.column("is_audit"), False)
            kind = pc.if_else(failure, "retry", "replay")
            # not a failure: the endpoint that processed it, else (not audited) the queue it came from
            replayed_to = pc.if_else(has_endpoint, endpoint, pc.if_else(audited, _NULL, landed.column("queue")))
            address = pc.if_else(failure, pc.if_else(has_failed_queue, failed_queue, _NULL), replayed_to)
            no_endpoint = pc.and_(pc.invert(has_endpoint), audited)
            reason = pc.if_else(
                failure,
                pc.if_else(has_failed_queue, _NULL, NO_FAILED_QUEUE),
                pc.if_else(no_endpoint, NO_ENDPOINT, _NULL),
            )
        table = landed.select(["queue", "seq", "id", "message_id", "message_type", "file", "row_index"])
        table = table.append_column("kind", kind).append_column("address", address)
        table = table.append_column("target", pa.nulls(n, pa.string())).append_column("reason", reason)
        table = table.append_column("sent_to", pa.nulls(n, pa.string()))
        return cls(table.combine_chunks(), {})

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    def resolve(self, conn: Connection, verdicts: Verdicts) -> None:
        """Each distinct address parsed and its table checked once; rows to an undeliverable one get
        its reason. Logs each address not sent to, and the rows that have none."""
        address, reason = self.table.column("address"), self.table.column("reason")
        open_rows = pc.and_(pc.is_null(reason), pc.is_valid(address))
        candidates = self.table.filter(open_rows).select(["address", "kind"])
        # the first row's kind names the header in the reason (FailedQ for a retry), as row order would
        first = candidates.group_by("address", use_threads=False).aggregate([("kind", "first")])
        canonical: dict[str, str | None] = {}
        parsed: dict[str, str | None] = {}
        reasons: dict[str, str | None] = {}
        for name, kind in zip(first.column("address").to_pylist(), first.column("kind_first").to_pylist(), strict=True):
            ref, why = verdicts(conn, name, kind)
            canonical[name] = None if ref is None else ref.canonical
            reasons[name] = why
            queue = ref or verdicts.parsed(name)
            parsed[name] = None if queue is None else queue.canonical
            if ref is not None:
                self.targets[ref.canonical] = ref
        verdicts.say_drained()
        for name in sorted(a for a, why in reasons.items() if why is not None):
            log.warning("replay: not sending to %s", verdicts.cache[name][1])
        missing = int(pc.sum(pc.and_(pc.is_null(address), pc.is_valid(reason))).as_py() or 0)
        if missing:
            log.warning("replay: %d selected row(s) have no destination (no FailedQ / ProcessingEndpoint)", missing)
        names = pa.array(list(canonical), pa.string())
        at = pc.index_in(address, value_set=names)
        target = pc.take(pa.array(list(canonical.values()), pa.string()), at)
        found_reason = pc.take(pa.array(list(reasons.values()), pa.string()), at)
        target = pc.if_else(open_rows, target, _NULL)
        reason = pc.if_else(open_rows, found_reason, reason)
        sent_to = pc.if_else(open_rows, pc.take(pa.array(list(parsed.values()), pa.string()), at), _NULL)
        self._set("target", target)
        self._set("reason", reason)
        self._set("sent_to", sent_to)

    def _set(self, column: str, values: pa.Array | pa.ChunkedArray) -> None:
        self.table = self.table.set_column(self.table.schema.get_field_index(column), column, values)

    def unsendable(self) -> pa.Table:
        """The rows with a reason not to send them."""
        return self.table.filter(pc.is_valid(self.table.column("reason")))

    def positions_of(self, keys: set[RowKey]) -> dict[RowKey, list[int]]:
        """The plan positions of each of ``keys`` that is in the plan (a batch: ``Cut.batch_of``). A
        key's row id tells apart two rows of one (queue, seq): a queue table dropped and re-created
        starts its seqs again, and keyed by (queue, seq) alone one of two such rows was left out at
        random, unsent and unrecorded (two reviews). A key without a row id (a record written
        without it) names every row of its queue and seq."""
        if not keys:
            return {}
        queues, seqs, ids = zip(*keys, strict=True)
        wanted = pa.table(
            {
                "queue": pa.array(queues, pa.string()),
                "seq": pa.array(seqs, pa.int64()),
                "id": pa.array(ids, pa.string()),
            }
        )
        positions = self.table.select(["queue", "seq", "id"]).append_column(
            "position", pa.array(np.arange(self.num_rows, dtype=np.int64))
        )
        exact = wanted.filter(pc.is_valid(wanted["id"])).join(positions, ["queue", "seq", "id"], join_type="inner")
        loose = wanted.filter(pc.is_null(wanted["id"])).select(["queue", "seq"])
        loose = loose.join(positions.drop_columns(["id"]), ["queue", "seq"], join_type="inner")
        found: dict[RowKey, list[int]] = {}
        for table, with_id in ((exact, True), (loose, False)):
            for q, s, i, p in zip(
                table.column("queue").to_pylist(),
                table.column("seq").to_pylist(),
                table.column("id").to_pylist() if with_id else [None] * table.num_rows,
                table.column("position").to_pylist(),
                strict=True,
            ):
                found.setdefault((q, s, i), []).append(p)
        return found

    def exclude(self, keys: set[RowKey]) -> None:
        """Not to be sent: these rows' targets cleared (they were recorded as skipped)."""
        if not keys:
            return
        excluded = self.positions_of(keys)
        mask = np.zeros(self.num_rows, dtype=bool)
        mask[[p for found in excluded.values() for p in found]] = True
        self._set("target", pc.if_else(pa.array(mask), _NULL, self.table.column("target")))
        self._set("sent_to", pc.if_else(pa.array(mask), _NULL, self.table.column("sent_to")))

    def counts(
        self, cut: Cut | None = None, done: Collection[int] = ()
    ) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
        """The plan's rows per destination, and per destination and message type (most first): those of
        the batches ``done`` (in the ledger: an earlier run sent them) where they went (``sent_to``), the
        others where they go. Counted where they go now, the rows a rerun found the destination of gone
        were left out, and the summary planned fewer rows than were sent (a review)."""
        where = self.table.column("target")
        if cut is not None and done:
            where = pc.if_else(pa.array(self._in_batches(cut, done)), self.table.column("sent_to"), where)
        valid = pc.is_valid(where)
        types = pc.fill_null(self.table.column("message_type").filter(valid), "(unknown)")
        grouped = (
            pa.table({"target": where.filter(valid), "type": types})
            .group_by(["target", "type"], use_threads=False)
            .aggregate([([], "count_all")])
        )
        per_type: dict[str, collections.Counter[str]] = {}
        for target, kind, count in zip(
            grouped.column("target").to_pylist(),
            grouped.column("type").to_pylist(),
            grouped.column("count_all").to_pylist(),
            strict=True,
        ):
            per_type.setdefault(target, collections.Counter())[kind] = count
        destinations = collections.Counter({t: sum(c.values()) for t, c in per_type.items()})
        return dict(destinations.most_common()), {t: dict(c.most_common()) for t, c in per_type.items()}

    def rows_left(self, cut: Cut, done: Collection[int]) -> int:
        """The rows to send in the batches not ``done``."""
        valid = pc.is_valid(self.table.column("target")).to_numpy(zero_copy_only=False)
        return int(valid[~self._in_batches(cut, done)].sum()) if done else int(valid.sum())

    def _in_batches(self, cut: Cut, batches: Collection[int]) -> np.ndarray:
        """Each row's position: whether it is in one of ``batches``."""
        mask = np.zeros(self.num_rows, dtype=bool)
        for k in batches:
            if k < cut.batches:
                start, length = cut.bounds(k)
                mask[start : start + length] = True
        return mask

    def slice(self, k: int, cut: Cut) -> pa.Table:
        """Batch k's rows that are sent, as their own compact table (one Spark task's share)."""
        part = self.table.slice(*cut.bounds(k))
        return part.filter(pc.is_valid(part.column("target"))).combine_chunks()

    def sent(self, k: int, cut: Cut) -> pa.Table:
        """Batch k's rows as a run that sent it did (a batch the ledger holds), ``target`` naming where each
        went: a row whose destination cannot take rows now (its table dropped or renamed since) went out
        all the same, unless a run recorded it skipped (``skips.settle_skips`` records a batch's
        undeliverable rows before the batch is sent). From the current verdicts alone, the lineage left
        out every row of a destination gone between a killed run and the next (a review)."""
        part = self.table.slice(*cut.bounds(k))
        part = part.filter(pc.is_valid(part.column("sent_to"))).combine_chunks()
        return part.set_column(part.schema.get_field_index("target"), "target", part.column("sent_to"))

    def batch(self, k: int, cut: Cut) -> list[Row]:
        """Batch k's rows that are sent, as ``Row`` objects."""
        return rows_of(self.slice(k, cut), self.targets)


def rows_of(table: pa.Table, targets: dict[str, TableRef]) -> list[Row]:
    """``Row`` objects of planned rows that are sent (``Planned.slice``)."""
    columns = [_values(table.column(c)) for c in (*_PLAN_COLUMNS, "target")]
    return [
        Row(q, s, i, m, t, kind, address, f, x, target=targets[target])
        for q, s, i, m, t, kind, address, f, x, target in zip(*columns, strict=True)
    ]


def _values(column: pa.ChunkedArray) -> list[Any]:
    """A column's values as Python objects; a dictionary-encoded one (``file``) decoded by Arrow first:
    its own ``to_pylist`` made a scalar per row, 60% of a replay batch's ``Row`` objects' time."""
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    return column.to_pylist()


def _mapped(values: pa.ChunkedArray | pa.Array, function: Callable[[str], str]) -> pa.Array:
    """``function`` of each distinct non-empty value (nulls and empty text as they are)."""
    distinct = [v for v in pc.unique(values).to_pylist() if v]
    if not distinct:
        return values
    at = pc.index_in(values, value_set=pa.array(distinct, pa.string()))
    mapped = pc.take(pa.array([function(v) for v in distinct], pa.string()), at)
    return pc.if_else(pc.is_valid(at), mapped, values)

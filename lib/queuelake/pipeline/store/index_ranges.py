"""The id index's rows (``message_keys``) of the journal rows retention removed, named by seq ranges.

Why not ``erase``'s key filter: that one names every removed seq in an IN-list and reads the index's
whole (queue, seq) columns to intersect them; retention removes millions of rows a run, while the
index keeps a row per journal row and key kind, so an IN-list of every seq would be the size of the
removed rows' keys again, as SQL text. Retention removes, per queue, a time prefix of the journal
(files are written in ``drained_at`` order and seqs grow with it), so the removed seqs of a queue are
nearly always one stretch: ``queue = q AND seq BETWEEN lo AND hi`` names them all.

Exact, not nearly: a stretch may hold rows that stay (an outcome rule keeping quarantined rows
longer; a seq committed out of order), whose index rows must stay. Those "kept" rows are read from
the journal inside each queue's [min, max] of removed seqs only (the journal's row groups hold one
queue's consecutive seqs, so their statistics leave the rest unread), and cut the removed seqs into
runs, maximal stretches with no kept row between them (``runs``). A queue with many runs keeps its
``MAX_RANGES`` widest gaps as gaps and names the kept rows of the others in a ``NOT IN`` list: each
range is evaluated on every index row (the index is sorted by key, so its (queue, seq) statistics
prune nothing), where one IN-list is one hash lookup per row.

Bounded, not always whole: a queue whose removed rows lie scattered among rows that stay (a rule on
expired rows, with every twentieth row expired) would need a NOT IN list as long as the rows that stay,
and deltalake's DELETE crashes the process (a segfault, measured from ~20,000 entries) on such lists.
So the list holds at most ``MAX_LISTED`` seqs; past that, the queue's ``MAX_RANGES`` largest runs are
named with no list, and the removed seqs of its other runs keep their index rows (``left``): a stale
index row is a hint that costs a lookup one file read, never a wrong answer, and the count is reported.

The index rows deleted also have ``upto <= version``, the journal version the kept rows were read
at: an index row written later (a concurrent ``maintain``'s build) may name a row the read did not
see, and stays. A kept row with the very seq of a removed one (a queue table recreated, its seqs
started again) keeps that seq's index rows: a stale index row costs a lookup one file read, a missing
one loses a row from ``find`` and ``where``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from queuelake.lake.deletes import MAX_IN_LIST, RowFilter

MAX_RANGES = 16  # seq ranges per queue; the kept rows of narrower gaps go to the queue's NOT IN list
MAX_LISTED = MAX_IN_LIST  # seqs in the NOT IN lists of the one DELETE (deltalake's crashed on ~20,000)


@dataclass(frozen=True)
class QueueRuns:
    """One queue's removed seqs as ranges, less the kept seqs inside them (``excluded``); ``left``:
    removed seqs no range names (their index rows stay, see the module's docstring)."""

    queue: str
    ranges: list[tuple[int, int]]
    excluded: list[int]
    left: int = 0


def runs(
    removed: np.ndarray, kept: np.ndarray, max_ranges: int | None = None, max_listed: int | None = None
) -> tuple[list[tuple[int, int]], list[int], int]:
    """``removed`` seqs of one queue as at most ``max_ranges`` inclusive ranges, the ``kept`` seqs that
    lie inside them (to exclude, at most ``max_listed``), and how many removed seqs no range names: no
    kept seq is in a range unless excluded, and every removed seq is in one unless the exclusions would
    pass ``max_listed`` (then the largest runs are named, none excluded, the others' seqs counted as
    left). A seq both removed and kept is left out of both (its index rows are the kept row's too)."""
    max_ranges = max_ranges or MAX_RANGES
    max_listed = MAX_LISTED if max_listed is None else max_listed
    r = np.unique(np.asarray(removed, dtype=np.int64))
    k = np.unique(np.asarray(kept, dtype=np.int64))
    r = r[~np.isin(r, k)]
    if r.size == 0:
        return [], [], 0
    k = k[(k > r[0]) & (k < r[-1])]
    gap = np.searchsorted(r, k)  # kept seq k[j] lies between r[gap[j] - 1] and r[gap[j]]
    counts = np.bincount(gap, minlength=r.size)
    gaps = np.flatnonzero(counts)  # gap i: kept rows between r[i - 1] and r[i]
    cuts = gaps
    if gaps.size > max_ranges - 1:  # the widest gaps (most kept rows) stay gaps; the others are bridged
        widest = np.argsort(-counts[gaps], kind="stable")[: max_ranges - 1]
        cuts = np.sort(gaps[widest])
    excluded = k[~np.isin(gap, cuts)]
    if excluded.size > max_listed:  # scattered: the largest natural runs, no list
        starts = np.concatenate([[0], gaps])
        ends = np.concatenate([gaps - 1, [r.size - 1]])
        largest = np.sort(np.argsort(-(ends - starts + 1), kind="stable")[:max_ranges])
        named = int((ends[largest] - starts[largest] + 1).sum())
        chosen = [(int(r[starts[i]]), int(r[ends[i]])) for i in largest]
        return chosen, [], int(r.size) - named
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts - 1, [r.size - 1]])
    return [(int(r[s]), int(r[e])) for s, e in zip(starts, ends, strict=True)], [int(s) for s in excluded], 0


def queue_runs(
    removed: pa.Table, kept: pa.Table, max_ranges: int | None = None, max_listed: int | None = None
) -> list[QueueRuns]:
    """``runs`` per queue: ``removed`` and ``kept`` are (queue, seq) rows (``kept``: at least those
    inside each queue's [min, max] of removed seqs)."""
    out = []
    for queue in sorted(pc.unique(removed["queue"]).to_pylist()):
        gone = removed.filter(pc.equal(removed["queue"], queue))["seq"]
        stay = kept.filter(pc.equal(kept["queue"], queue))["seq"] if kept.num_rows else pa.array([], pa.int64())
        ranges, excluded, left = runs(
            gone.to_numpy(), np.asarray(stay.to_numpy(), dtype=np.int64), max_ranges, max_listed
        )
        if ranges:
            out.append(QueueRuns(queue, ranges, excluded, left))
    # the lists of every queue go into one DELETE: their sum is held to ``MAX_LISTED`` too, the longest
    # lists giving way first (their queues named by their largest runs alone)
    budget = MAX_LISTED if max_listed is None else max_listed
    while sum(len(q.excluded) for q in out) > budget:
        i = max(range(len(out)), key=lambda j: len(out[j].excluded))
        q = out[i]
        gone = removed.filter(pc.equal(removed["queue"], q.queue))["seq"]
        stay = kept.filter(pc.equal(kept["queue"], q.queue))["seq"]
        ranges, excluded, left = runs(gone.to_numpy(), np.asarray(stay.to_numpy(), dtype=np.int64), max_ranges, 0)
        out[i] = QueueRuns(q.queue, ranges, excluded, left)
    return out


def spans(removed: pa.Table) -> RowFilter | None:
    """Each queue's [min, max] of ``removed`` seqs: where the kept rows that could cut them lie."""
    if removed.num_rows == 0:
        return None
    bounds = removed.group_by("queue").aggregate([("seq", "min"), ("seq", "max")])
    terms = [
        _term(q, [(int(lo), int(hi))], [])
        for q, lo, hi in zip(bounds["queue"].to_pylist(), bounds["seq_min"].to_pylist(), bounds["seq_max"].to_pylist())
    ]
    return _any(terms, ("queue", "seq"))


def index_filter(per_queue: list[QueueRuns], upto: int) -> RowFilter | None:
    """The index rows of ``per_queue``'s ranges written for journal versions up to ``upto``."""
    if not per_queue:
        return None
    ranges = _any([_term(q.queue, q.ranges, q.excluded) for q in per_queue], ("queue", "seq"))
    assert ranges is not None
    return RowFilter(
        f'({ranges.sql}) AND "upto" <= {int(upto)}', ranges.arrow & (ds.field("upto") <= upto), ("queue", "seq", "upto")
    )


def _term(queue: str, ranges: list[tuple[int, int]], excluded: list[int]) -> tuple[str, ds.Expression]:
    quoted = "'" + queue.replace("'", "''") + "'"
    sql, arrow = _balanced(
        [(f'"seq" BETWEEN {lo} AND {hi}', (ds.field("seq") >= lo) & (ds.field("seq") <= hi)) for lo, hi in ranges]
    )
    sql = f'"queue" = {quoted} AND {sql}'
    arrow = (ds.field("queue") == queue) & arrow
    if excluded:
        sql += f' AND NOT ("seq" IN ({", ".join(str(s) for s in excluded)}))'
        arrow = arrow & ~ds.field("seq").isin(excluded)
    return f"({sql})", arrow


def _any(terms: list[tuple[str, ds.Expression]], columns: tuple[str, ...]) -> RowFilter | None:
    if not terms:
        return None
    sql, arrow = _balanced(terms)
    return RowFilter(sql, arrow, columns)


def _balanced(terms: list[tuple[str, ds.Expression]]) -> tuple[str, ds.Expression]:
    """``terms`` joined by OR as a balanced tree: a chain of thousands of ORs is as deep as it is long,
    and its planning and evaluation recurse that deep (measured: 1,000 chained ranges took DataFusion
    2.4 s on 200,000 rows, balanced 0.45 s)."""
    if len(terms) == 1:
        return terms[0]
    middle = len(terms) // 2
    (left_sql, left), (right_sql, right) = _balanced(terms[:middle]), _balanced(terms[middle:])
    return f"({left_sql} OR {right_sql})", left | right

"""Recognising rows that are already in the journal: the "Delta committed, DB commit lost" window.

The drain commits the Delta batch first and the DB delete second. If the process dies between the
two, the rows return to the queue with the same (seq, id), and a later claim must not land them
again. Two sources of such rows, two checks:

- rows committed by an earlier run: they are in the journal as of the snapshot taken at run start,
  and their seq is at most the largest seq journalled for the queue then. Only claims reaching down
  to that seq need a look, and file statistics narrow the look to a few files.
- rows committed earlier in this run by another worker whose DB commit then failed: each worker
  registers its batch keys between its Delta commit and its DB commit ("in flight"); keys of a
  worker whose DB commit failed after a successful Delta commit stay registered for the run.
Dropped duplicates are still deleted from the queue by the claiming transaction.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from queuelake.errors import TransportError

Key = tuple[int, str]


class DuplicateGuard:
    """Shared by the workers of one queue in one run."""

    def __init__(self, table_uri: str, queue: str, storage_options: dict[str, str] | None = None) -> None:
        self.queue = queue
        self.table_uri = table_uri.rstrip("/")
        self.storage_options = storage_options
        self.max_seq = -1
        self._files: list[tuple[str, int | None, int | None]] = []
        self._changed = threading.Condition()
        self._in_flight: dict[str, set[Key]] = {}
        self._lost: set[Key] = set()
        self._unknown: set[Key] = set()
        self._snapshot()

    def _snapshot(self) -> None:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            table = DeltaTable(self.table_uri, storage_options=self.storage_options)
        except TableNotFoundError:
            return
        actions = pa.table(table.get_add_actions(flatten=True))
        names = set(actions.column_names)
        q = self.queue
        for row in actions.to_pylist():
            qmin = row.get("min.queue") if "min.queue" in names else None
            qmax = row.get("max.queue") if "max.queue" in names else None
            if (qmin is not None and q < qmin) or (qmax is not None and q > qmax):
                continue  # statistics prove this file holds no row of this queue
            smin = row.get("min.seq") if "min.seq" in names else None
            smax = row.get("max.seq") if "max.seq" in names else None
            self._files.append((row["path"], smin, smax))
            # unknown statistics: every claim needs a look
            self.max_seq = max(self.max_seq, 2**62 if smax is None else smax)

    def _journalled(self, lo: int, hi: int) -> set[Key]:
        """Keys of this queue in the run-start snapshot with lo <= seq <= hi."""
        found: set[Key] = set()
        for path, smin, smax in self._files:
            if (smax is not None and smax < lo) or (smin is not None and smin > hi):
                continue
            uri = path if "://" in path or path.startswith("/") else f"{self.table_uri}/{path}"
            data = pq.read_table(uri, columns=["queue", "seq", "id"])
            mask = pc.and_(
                pc.equal(data["queue"], self.queue),
                pc.and_(pc.greater_equal(data["seq"], lo), pc.less_equal(data["seq"], hi)),
            )
            picked = data.filter(mask)
            found.update(zip(picked["seq"].to_pylist(), picked["id"].to_pylist()))
        return found

    def split(self, received: pa.Table, worker: str) -> tuple[pa.Table, int]:
        """(new rows, number already journalled) of a claimed batch (``RECEIVED_SCHEMA``).

        A key another worker has in flight means that worker's DB session died under it; whether
        the row is a duplicate depends on its Delta commit, so wait for that commit to resolve."""
        if received.num_rows == 0:
            return received, 0
        seqs = received["seq"].to_pylist()
        keys = list(zip(seqs, received["id"].to_pylist()))
        lo = min(seqs)
        known: set[Key] = set()
        if lo <= self.max_seq:
            known |= self._journalled(lo, min(max(seqs), self.max_seq))
        key_set = set(keys)
        with self._changed:
            while any(key_set & flight for w, flight in self._in_flight.items() if w != worker):
                self._changed.wait()
            if key_set & self._unknown:
                raise TransportError(
                    f"{self.queue}: rows came back whose earlier Delta commit has an unknown outcome; "
                    "not landing or dropping them in this run (the next run decides from the journal)"
                )
            known |= key_set & self._lost
        known &= key_set
        if not known:
            return received, 0
        keep = pa.array([k not in known for k in keys], pa.bool_())
        return received.filter(keep), len(known)

    def begin(self, worker: str, received: pa.Table) -> None:
        """Register keys about to be committed to Delta, before their DB delete commits."""
        with self._changed:
            self._in_flight[worker] = set(zip(received["seq"].to_pylist(), received["id"].to_pylist()))

    def end(self, worker: str, delta_committed: bool | None, db_committed: bool) -> None:
        """Resolve a worker's batch. Delta committed but DB not: the rows will come back, so they
        stay known as journalled for the rest of the run. ``None``: nobody knows whether the Delta
        commit landed; a claim meeting those rows must neither land nor drop them."""
        with self._changed:
            keys = self._in_flight.pop(worker, set())
            if delta_committed is None and not db_committed:
                self._unknown |= keys
            elif delta_committed and not db_committed:
                self._lost |= keys
            self._changed.notify_all()

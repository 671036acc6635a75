"""The selected rows: which of them go where (a retry to its FailedQ, a replay to its endpoint or
``--to``) or why not, and their headers and bodies read back from the journal's files by row.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from queuelake.errors import QueuelakeError, ReplayError
from queuelake.lake.round_files import LakeFile, open_file
from queuelake.report import log
from queuelake.transport import schema
from queuelake.transport.database import QueueDatabase
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef

# The selection's small columns (no headers, no bodies): what planning, dry runs and counts need.
KEY_COLUMNS = [
    "queue",
    "seq",
    "id",
    "outcome",
    "error",
    "message_id",
    "message_type",
    "failed_queue",
    "processing_endpoint",
]

# ``file``: the row's data file, dictionary-encoded (a selection spans few files; as text it was the
# largest column of the plan, ~100 bytes a row)
FILE_TYPE = pa.dictionary(pa.int32(), pa.string())
EMPTY_KEYS = pa.schema(
    [(c, pa.int64() if c == "seq" else pa.string()) for c in KEY_COLUMNS]
    + [("is_failure", pa.bool_()), ("is_audit", pa.bool_()), ("file", FILE_TYPE), ("row_index", pa.int64())]
)


@dataclass
class Row:
    """One selected landed row: identity, where it goes (or why not), where its content is."""

    queue: str
    seq: int
    id: str
    message_id: str | None
    message_type: str | None
    kind: str  # retry | redirect | replay
    address: str | None  # the destination as written (FailedQ, endpoint, --to, or the row's queue)
    file: str
    index: int
    target: TableRef | None = None
    reason: str | None = None


class Verdicts:
    """Each address parsed and checked once per run: (queue, None) or (None, reason naming it).

    ``drained``: the ``drain.queues`` entry that drains an address (``config.drained_as``), or None. A
    retry to a FailedQ this job drains goes out and the next drain takes it back into the lake (an
    endpoint that shares the queue with the drain may get it first): it is sent, with a warning naming
    the queue (``--to`` such a queue is refused by the command). Not skipped: the shipped configs drain
    ``Sales``, the queue their failed messages name."""

    def __init__(self, database: QueueDatabase, drained: Callable[[str], str | None] | None = None) -> None:
        self.database = database
        self.drained = drained or (lambda _address: None)
        self.cache: dict[str, tuple[TableRef | None, str | None]] = {}
        self._drained_unsaid: list[str] = []  # addresses found drained, said together (``say_drained``)

    def __call__(self, conn: Connection, address: str, kind: str) -> tuple[TableRef | None, str | None]:
        verdict = self.cache.get(address)
        if verdict is None:
            label = "NServiceBus.FailedQ" if kind == "retry" else "destination"
            try:
                ref = self.database.queue(address)
            except QueuelakeError as exc:
                verdict = (None, f"{label} {address!r} is not a queue address: {exc}")
            else:
                problem = schema.delivery_problem(conn, ref)
                verdict = (ref, None) if problem is None else (None, f"{label} {address!r}: {problem}")
                drained = self.drained(address)
                if problem is None and drained is not None:
                    self._drained_unsaid.append(address)
            self.cache[address] = verdict
        return verdict

    def parsed(self, address: str) -> TableRef | None:
        """The queue an address names, whether or not its table can take rows now (None: no address)."""
        try:
            return self.database.queue(address)
        except QueuelakeError:
            return None

    def say_drained(self) -> None:
        """One warning for the addresses found drained since the last: a retry to 20 endpoints' FailedQs
        said 20 lines alike (a review)."""
        found, self._drained_unsaid = sorted(self._drained_unsaid), []
        if found:
            log.warning(
                "replay: %d destination(s) drained by this job (drain.queues): %s; the next drain takes what is "
                "sent there back into the lake, unless their endpoints receive it first",
                len(found),
                ", ".join(repr(a) for a in found),
            )


# ---------------------------------------------------------------- reading content


HEADERS_TYPE = pa.map_(pa.string(), pa.string())


class Content:
    """Headers and bodies of selected rows, read from the journal's Parquet files of version V by
    (file, row index), a row group at a time: only the groups that hold a batch's rows are read, and the
    last one read stays cached (batches of rows in (queue, seq) order go through the groups in order: the
    next batch starts in the group the last one ended in). Memory holds a batch and two row groups, never
    the selection nor a whole file: after a compaction into one large file, a retry of 39 messages read
    the whole file (1.29 GB: a review); three groups cached held 0.6 GB for 16 retries in delta-spark's
    10,000-row groups (a review)."""

    CACHED_GROUPS = 1
    OPENED_FILES = 64  # footers kept: each a few kB

    def __init__(self, uris: list[str]) -> None:
        self.by_name = {u.rsplit("/", 1)[-1]: u for u in uris}
        self.cache: collections.OrderedDict[tuple[str, int], pa.Table] = collections.OrderedDict()
        self.opened: collections.OrderedDict[str, tuple[LakeFile, np.ndarray]] = collections.OrderedDict()

    def uri(self, spark_path: str) -> str:
        from urllib.parse import unquote

        name = unquote(spark_path.rsplit("/", 1)[-1])
        try:
            return self.by_name[name]
        except KeyError:
            raise ReplayError(f"journal file {name} is not in the planned journal version") from None

    def _open(self, uri: str) -> tuple[LakeFile, np.ndarray]:
        """The file and where each of its row groups starts (row indexes, one more for its end)."""
        found = self.opened.get(uri)
        if found is None:
            opened = open_file(uri)  # with the lake's storage options
            metadata = opened.metadata
            sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
            found = (opened, np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]))
            self.opened[uri] = found
            while len(self.opened) > self.OPENED_FILES:
                self.opened.popitem(last=False)
        self.opened.move_to_end(uri)
        return found

    def _group(self, uri: str, group: int) -> pa.Table:
        table = self.cache.get((uri, group))
        if table is not None:
            self.cache.move_to_end((uri, group))
            return table
        table = self._open(uri)[0].read_row_group(group, columns=["headers", "body"])
        self.cache[(uri, group)] = table
        while len(self.cache) > self.CACHED_GROUPS:
            self.cache.popitem(last=False)
        return table

    def read(self, rows: list[Row]) -> pa.Table:
        """``headers`` and ``body`` of each row, in the order given, as one Arrow table."""
        if not rows:
            return pa.table({"headers": pa.array([], HEADERS_TYPE), "body": pa.array([], pa.binary())})
        by_file: dict[str, list[int]] = {}
        for i, r in enumerate(rows):
            by_file.setdefault(r.file, []).append(i)
        parts: list[pa.Table] = []
        order: list[int] = []
        for file, positions in by_file.items():
            uri = self.uri(file)
            starts = self._open(uri)[1]
            indexes = np.array([rows[i].index for i in positions], dtype=np.int64)
            if len(indexes) and (indexes.min() < 0 or indexes.max() >= starts[-1]):
                raise ReplayError(f"journal file {file} has {starts[-1]} rows, not the row the plan names")
            groups = np.searchsorted(starts, indexes, side="right") - 1
            for group in np.unique(groups).tolist():
                mine = np.flatnonzero(groups == group)
                table = self._group(uri, group)
                parts.append(table.take(pa.array(indexes[mine] - starts[group], pa.int64())))
                order.extend(positions[j] for j in mine.tolist())
        taken = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        if len(parts) > 1:
            taken = taken.take(pa.array(np.argsort(np.array(order), kind="stable")))
        return taken.combine_chunks()

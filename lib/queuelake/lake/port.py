"""The interfaces the pipelines use: ``LakeEngine``, what both engines do (``delta_rs``: deltalake,
``delta_spark``: delta-spark), and ``JournalLake``, the staged writes of the drain's claim protocol, which only
the journal's engine (delta-rs) implements.

This module holds the interface alone and imports neither implementation: ``engines.py`` picks one
(``open_lake``, ``journal_engine``), so the implementations and ``metastore.py`` can name the
interface without a circle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyspark.sql import DataFrame

    from queuelake.lake.deletes import Deleted, Reached, RowFilter
    from queuelake.lake.files import StagedFiles
    from queuelake.lake.increments import Rewrite, Span
    from queuelake.lake.lookup import Lookup, Within


class LakeEngine(Protocol):
    """Tables live at ``<root>/<name>``. Every write is one atomic Delta commit.

    Implementations are thread-safe: one engine may be shared by drain workers. Calls with the same
    (table, app_id) are serialised within a process; different app ids append concurrently. Timestamps
    are stored tz-aware UTC (naive ones are taken as UTC), keeping tables at Delta protocol 1/2.
    """

    name: str  # "delta-rs" or "delta-spark"
    root: str
    storage_options: dict[str, str]  # the object store's settings (lake.storage_options), resolved
    # ``delete_rows`` takes a filter's ``keys`` (``RowFilter.keys``), all of them in one commit: a caller
    # with more values than an IN list holds (``MAX_IN_LIST``) hands them in one filter rather than many
    deletes_by_keys: bool

    def path(self, table: str) -> str: ...

    def exists(self, table: str) -> bool: ...

    def tables(self) -> list[str]:
        """Names of the Delta tables under the root, sorted, on any storage (what ``maintain`` walks)."""

    def written_by(self, table: str) -> str | None:
        """The engine that created the table ("delta-rs", "delta-spark"), None when it has no mark;
        only that engine writes (and maintains) it: the journal is delta-rs under either engine."""

    def schema(self, table: str, version: int | None = None) -> pa.Schema:
        """The table's Arrow schema, of its current version or of ``version``."""

    def added_files(self, table: str, after: int | None, upto: int) -> list[str]:
        """URIs of the data files versions (after, upto] added (``after=None``: the whole table as of
        ``upto``); what transform and publish consume incrementally (``increments.py``)."""

    def rewrite(self, table: str, after: int | None, upto: int) -> Rewrite | None:
        """The data commits of (after, upto] that removed files (an overwrite, MERGE, UPDATE: not a
        delete nor a compaction) and the files of ``after`` the range removed; None without such a
        commit, or for a whole table (``increments.rewrite``)."""

    def added_batches(self, table: str, after: int | None, upto: int) -> list[str] | None:
        """The batch ids of the rows versions (after, upto] added, when the files ``added_files`` names
        also hold earlier rows (a delete rewrote them together); None: every row of those files is new."""

    def slices(self, table: str, after: int | None, upto: int, max_rows: int) -> list[Span]:
        """Versions (after, upto] as consecutive ranges of at most ``max_rows`` new rows each, for the
        stages that take an increment a slice at a time (``increments.slices``)."""

    def slice_input(self, table: str, span: Span) -> tuple[list[str], list[str] | None]:
        """The data files one of ``slices`` reads, and the batch ids to keep of them (None: every row):
        ``added_files`` and ``added_batches`` of its versions, or what a rewritten first run names."""

    def create_table(self, table: str, schema: pa.Schema, partition_by: list[str] | None = None) -> None:
        """Create if missing (idempotent, safe when two creators race); records the engine on the table.
        Raises LakeError when the table exists but was created by the other engine or is partitioned
        differently."""

    def append(self, table: str, data: pa.Table, app_id: str, version: int) -> bool:
        """Append Arrow data from the driver in one commit carrying the application transaction
        (app_id, version). Returns False, writing nothing, when app_id already committed >= version
        (also when a concurrent writer with the same app id won the race). Creates the table from
        data.schema (all columns nullable) when missing. Missing nullable columns are written as null;
        columns the table lacks raise LakeError (call add_columns first)."""

    def append_dataframe(self, table: str, df: DataFrame, app_id: str, version: int) -> bool:
        """Same contract for a Spark DataFrame (executors write files, one commit on the driver). The
        version is checked before the DataFrame is computed, so an already-landed batch costs nothing."""

    def replace_dataframe(self, table: str, df: DataFrame, read_version: int | None = None) -> None:
        """Replace the table's rows and schema with ``df`` in one commit (a column's type changed:
        widened, or made a string). Application transactions committed before stay. Rare and costly:
        every row is rewritten. ``read_version``: the version ``df`` read; a table committed to since is
        not replaced (``LakeError``): the replacement would undo that commit's rows."""

    def last_version(self, table: str, app_id: str) -> int | None:
        """The last version committed for app_id, or None (also when the table does not exist)."""

    def table_version(self, table: str) -> int | None:
        """The table's current Delta version, or None when the table does not exist."""

    def table_id(self, table: str) -> str | None:
        """The table's Delta id (its metadata's, set when the table was created: a table dropped and
        created again, or another lake's table of the same name, has another), or None when the table
        does not exist."""

    def read(self, table: str, version: int | None = None) -> DataFrame:
        """The table (or one version of it) as a Spark DataFrame."""

    def read_arrow(self, table: str, version: int | None = None, columns: list[str] | None = None) -> pa.Table:
        """The table (or one version) as Arrow on the driver; for small tables and tests."""

    def lookup(
        self,
        table: str,
        column: str,
        values: Sequence[str],
        version: int | None = None,
        within: Within | None = None,
        columns: Sequence[str] | None = None,
    ) -> Lookup:
        """The rows (of the current version, or ``version``) whose string ``column`` equals one of
        ``values``, on the driver, without Spark: files the Delta log's statistics exclude are never
        opened, of the rest only ``column`` is read, and only files holding a match are read whole (of
        ``columns``, when given, only those: ``lookup.py``). Only the files the log lists are read, never
        the drain's staged ones. What ``queuelake find`` asks of the journal; the result says what was read
        (files, pruned, rows).
        ``within``: only the files it admits (what an index says may hold the rows, ``Within``)."""

    def add_columns(self, table: str, fields: list[pa.Field]) -> None:
        """Add nullable columns (schema evolution); old rows read them as null."""

    def maintain(self, table: str, retention_hours: float = 168) -> dict[str, Any]:
        """Compact small files and vacuum removed and orphan files older than retention_hours (orphans
        are what a killed writer leaves; keep retention above the longest write). Returns figures for
        the JSON summary."""

    def count_rows(self, table: str, where: RowFilter) -> Reached:
        """What ``where`` reaches in the table's current version: rows, files wholly and partly
        matching (a dry run's figures); nothing read but the filter's columns, nothing written."""

    def matching_rows(self, table: str, where: RowFilter, columns: list[str], version: int | None = None) -> pa.Table:
        """The ``columns`` of the rows ``where`` matches in a version (default: the current one)."""

    def matching_reduced(
        self,
        table: str,
        where: RowFilter,
        columns: list[str],
        reduce: Callable[[pa.Table], pa.Table],
        version: int | None = None,
    ) -> pa.Table:
        """``reduce`` of the ``columns`` of the rows ``where`` matches, applied batch by batch as they are
        read, the results concatenated (``reduce`` of an empty table when none match): memory holds a
        batch and what the reductions keep, however many rows match."""

    def delete_rows(self, table: str, where: RowFilter) -> Deleted:
        """Delete ``where``'s rows in one commit, beside concurrent appends (a conflict is retried from a
        fresh snapshot); the rows removed are those matching in ``Deleted.read_version``. Whole files
        leave the log unread beyond the filter's columns; partly matching ones are rewritten."""

    def purge_removed(self, table: str) -> int:
        """Delete from storage, now, every file the table's log has removed (no retention), and never a
        file the log does not name (the drain's staged files); returns how many. Time travel to versions
        that named them fails afterwards."""


class JournalLake(LakeEngine, Protocol):
    """An engine that also writes by staging: files first, the commit later (or never). Only the journal's
    engine implements it (delta-rs: ``engines.journal_engine``), because the drain's claim protocol
    needs it: a batch's files are written before its rows are deleted from the queue, and committed with
    (app_id, version) after, so that a run killed between the two is resolved by the next one. delta-spark
    has no Python API to commit files written earlier."""

    def stage(self, table: str, data: pa.Table) -> StagedFiles:
        """Write Arrow data as files into the (existing) table's folder without committing them."""

    def discard_staged(self, table: str, staged: StagedFiles) -> None:
        """Delete staged files nobody will commit (best effort; leftovers are orphans for vacuum)."""

    def check_stageable(self, table: str, data: pa.Table) -> None:
        """Raise what ``stage`` would raise because of ``data``'s content (its conversion to the
        table's schema, the Parquet write, the file statistics), without touching the table's storage:
        the files go to a local scratch folder. A drain asks this of parts of a batch whose staging
        failed, to tell a row that cannot be stored from a lake that is down."""

    def commit_staged(self, table: str, staged: StagedFiles, app_id: str, version: int, verify: bool = False) -> bool:
        """Commit staged files in one commit with (app_id, version); False, touching nothing, when
        app_id already committed >= version. With ``verify``, raises LakeError when a staged file is
        missing (resolving a claim another process left)."""

    def commit_staged_group(self, table: str, batches: list[tuple[StagedFiles, str, int]]) -> int:
        """Commit many staged batches, each (files, app_id, version), in one Delta commit carrying each
        app id's highest version; batches whose version is already committed are left out. Returns
        how many batches the commit carried. What the drain's run-wide committer calls: the journal's
        commits per run are bounded by time, not by queues x batches."""

    def check_landed(self, table: str, batches: list[tuple[StagedFiles, str, int]]) -> None:
        """Raise LakeError when a batch (files, app_id, version) whose version the table holds has files
        its log never named and storage still holds: another writer committed that version, and the
        batch's rows would be lost if its claim were cleared."""

    def staged_schema(self, table: str) -> pa.Schema:
        """``schema`` of a table written by staged commits, as current, from the log the staged
        commits follow (a drain run loads its journal once for both)."""

    def finish_staged(self, table: str) -> None:
        """After a run's last staged commit: leave the table as its readers load it fastest (a
        checkpoint of the newest version, where one is due)."""

    def staged_version(self, table: str, app_id: str) -> int | None:
        """``last_version`` of a table written by staged commits (the journal), as current, from its log
        followed since the first question: each call reads only the commits written since the last,
        where ``last_version`` loads the whole table (a drain asks once per queue worker)."""

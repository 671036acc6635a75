"""What both engines share, written once: the root and its storage, table paths, the per-(table, app id)
locks, and everything they read from a table's Delta log with deltalake.

Why: delta-spark has no cheap Python API for a table's metadata (the last version an app id committed,
the creating engine's mark, the schema of one version), so the JVM engine reads the log with deltalake
as the Rust engine does. The two used to carry a copy each of ``exists``, ``tables``, ``written_by``,
``schema``, ``added_files``, ``last_version``, ``table_version`` and ``read_arrow``, and the JVM engine
imported its path helpers from the Rust engine's module. Both engines now subclass ``EngineBase``; what
differs between them (writing, compacting, vacuuming, Spark reads) stays in ``delta_rs`` and ``delta_spark``.
"""

from __future__ import annotations

import os
import re
import threading
from typing import TYPE_CHECKING

import pyarrow as pa

from queuelake.errors import LakeError, describe
from queuelake.lake import reachability, storage
from queuelake.lake.marks import check_writable, engine_of
from queuelake.lake.reading import read_arrow

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from deltalake import DeltaTable
    from pyspark.sql import SparkSession

    from queuelake.lake.deletes import RowFilter
    from queuelake.lake.increments import Rewrite, Span
    from queuelake.lake.lookup import Lookup, Within

DEFAULT_RETENTION_HOURS = 168  # Delta's default delta.deletedFileRetentionDuration (one week)
_TABLE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def normalise_root(root: str) -> str:
    """An absolute local path or a URI, without a trailing slash: deltalake, pyarrow and Spark agree on it."""
    if "://" in root:
        return root.rstrip("/")
    return os.path.abspath(os.path.expanduser(root))


def table_path(root: str, table: str) -> str:
    """``<root>/<table>``; table names are plain folder names (no slashes, no leading ``_`` or ``.``)."""
    if not _TABLE_NAME.match(table or ""):
        raise LakeError(f"lake table name {table!r} is not a plain folder name (letters, digits, _ . -)")
    return f"{root}/{table}"


class EngineBase:
    """The part of ``LakeEngine`` both engines implement the same way (see the module docstring)."""

    name: str
    deletes_by_keys = False

    def __init__(
        self, root: str, spark: SparkSession | None = None, storage_options: dict[str, str] | None = None
    ) -> None:
        self.root = normalise_root(root)
        self.spark = spark
        # object storage credentials (lake.storage_options): on every deltalake call, registered for
        # the root (pyarrow readers, increments) and set on the session for Spark's reads and writes (s3a);
        # on S3 with retry defaults (storage.RETRY_DEFAULTS) where the config sets none
        self.storage_options = storage.lake_options(self.root, storage_options)
        storage.register(self.root, self.storage_options)
        if storage.is_s3(self.root):
            reachability.probe_in_background(self.storage_options)
        if spark is not None:
            storage.configure_spark(spark, self.storage_options)
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_guard = threading.Lock()

    @property
    def started_spark(self) -> SparkSession | None:
        """The engine's session if it has one now, never starting one (``DeltaSparkEngine`` may start its
        own on first use): what an engine built beside it (the journal's) is handed."""
        return self.spark

    # ------------------------------------------------------------ basics

    def path(self, table: str) -> str:
        return table_path(self.root, table)

    def exists(self, table: str) -> bool:
        try:
            return storage.is_delta_table(self.path(table), self.storage_options)
        except OSError as exc:  # object storage unreachable or refusing: say so in one line
            raise storage.storage_error(exc, f"lake table {table} at {self.path(table)}") from None

    def _options(self) -> dict[str, str] | None:
        """For deltalake's ``storage_options=`` (a fresh dict: deltalake may update the one it gets)."""
        return dict(self.storage_options) or None

    def tables(self) -> list[str]:
        """The Delta tables directly under the root, by name, sorted (any storage: local, s3://, ...)."""
        return storage.list_tables(self.root, self.storage_options)

    def written_by(self, table: str) -> str | None:
        """The engine recorded on the table at creation (None: no mark, made outside queuelake)."""
        metadata = self._require(table).metadata()
        return engine_of(metadata.configuration, metadata.description)

    def schema(self, table: str, version: int | None = None) -> pa.Schema:
        """The table's Arrow schema (of one version), from the Delta log."""
        return pa.schema(self._require(table, version).schema().to_arrow())

    def added_files(self, table: str, after: int | None, upto: int) -> list[str]:
        """Data files versions (after, upto] added, read from the Delta log (``increments.py``)."""
        from queuelake.lake.increments import added_files

        return added_files(self.path(table), after, upto, self.storage_options)

    def rewrite(self, table: str, after: int | None, upto: int) -> Rewrite | None:
        """The data commits of (after, upto] that rewrote the table and the files they removed
        (``increments.rewrite``)."""
        from queuelake.lake.increments import rewrite

        return rewrite(self.path(table), after, upto, self.storage_options)

    def added_batches(self, table: str, after: int | None, upto: int) -> list[str] | None:
        from queuelake.lake.increments import added_batches

        return added_batches(self.path(table), after, upto, self.storage_options)

    def slices(self, table: str, after: int | None, upto: int, max_rows: int) -> list[Span]:
        from queuelake.lake.increments import slices

        return slices(self.path(table), after, upto, max_rows, self.storage_options)

    def slice_input(self, table: str, span: Span) -> tuple[list[str], list[str] | None]:
        from queuelake.lake.increments import span_input

        return span_input(self.path(table), span, self.storage_options)

    def matching_reduced(
        self,
        table: str,
        where: RowFilter,
        columns: list[str],
        reduce: Callable[[pa.Table], pa.Table],
        version: int | None = None,
    ) -> pa.Table:
        from queuelake.lake import deletes

        return deletes.matching_reduced(self._load(table, version), where, columns, reduce)

    def _load(self, table: str, version: int | None = None) -> DeltaTable | None:
        """The table's log read with deltalake (of one version), None when there is no table."""
        from deltalake.exceptions import DeltaError, TableNotFoundError

        try:
            return storage.delta_table(self.path(table), version, self._options())
        except TableNotFoundError:
            return None
        except OSError as exc:  # object storage unreachable or refusing: say so in one line
            raise storage.storage_error(exc, f"lake table {table} at {self.path(table)}") from None
        except DeltaError as exc:  # a log deltalake cannot read (a corrupt commit): named (a review: it was not)
            at = "" if version is None else f" (version {version})"
            raise LakeError(f"lake table {table}{at} at {self.path(table)}: {describe(exc)}") from exc

    def _require(self, table: str, version: int | None = None) -> DeltaTable:
        dt = self._load(table, version)
        if dt is None:
            raise LakeError(f"lake table {table!r} does not exist at {self.path(table)}")
        return dt

    def _check_writable(self, table: str, dt: DeltaTable | None = None) -> None:
        """Refuse a table another engine created (``marks.py``); ``dt``: the table already loaded."""
        metadata = (dt if dt is not None else self._require(table)).metadata()
        check_writable(table, self.path(table), engine_of(metadata.configuration, metadata.description), self.name)

    def _lock(self, table: str, app_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault((table, app_id), threading.Lock())

    # ------------------------------------------------------------ versions

    def last_version(self, table: str, app_id: str) -> int | None:
        dt = self._load(table)
        return None if dt is None else dt.transaction_version(app_id)

    def table_version(self, table: str) -> int | None:
        dt = self._load(table)
        return None if dt is None else dt.version()

    def table_id(self, table: str) -> str | None:
        dt = self._load(table)
        return None if dt is None else str(dt.metadata().id)

    # ------------------------------------------------------------ read

    def read_arrow(self, table: str, version: int | None = None, columns: list[str] | None = None) -> pa.Table:
        return read_arrow(self._require(table, version), columns)

    def lookup(
        self,
        table: str,
        column: str,
        values: Sequence[str],
        version: int | None = None,
        within: Within | None = None,
        columns: Sequence[str] | None = None,
    ) -> Lookup:
        """Rows whose ``column`` holds one of ``values``, reading whole rows (or ``columns``) only of files
        that hold one (``lookup.py``); either engine, since both tables are Delta logs deltalake reads."""
        from queuelake.lake.lookup import lookup

        return lookup(self._require(table, version), column, values, within, columns)


def landed(dt: DeltaTable, since: int, key: str, value: str) -> bool:
    """Did one of the commits after version ``since`` carry ``key: value`` in its commit info? How
    either engine tells its own write from none: a write whose (app_id, version) was committed
    meanwhile is skipped without an error (delta-spark), or in a place that cannot return it (the data
    source's ``commit()`` runs in a Python worker)."""
    newer = dt.version() - since
    if newer <= 0:
        return False
    return any(commit.get(key) == value for commit in dt.history(limit=newer))


def check_unchanged(table: str, read_version: int | None, version: int | None) -> None:
    """Refuse to replace ``table`` when it was committed to after its rows were read for the replacement."""
    if read_version is not None and version != read_version:
        raise LakeError(
            f"{table} changed while its rows were rewritten (read at version {read_version}, now {version}): "
            "the rewrite is not committed, so that the newer rows stay; the next run rewrites it again"
        )

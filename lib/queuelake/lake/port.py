"""The interface the pipelines use. Implementations: ``rust.py`` (deltalake), ``jvm.py`` (delta-spark)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from queuelake.config import LakeConfig


class LakeEngine(Protocol):
    """Tables live at ``<root>/<name>``. Every write is one atomic Delta commit."""

    name: str  # "delta-rs" or "delta-spark"
    root: str

    def path(self, table: str) -> str: ...

    def exists(self, table: str) -> bool: ...

    def create_table(self, table: str, schema: pa.Schema, partition_by: list[str] | None = None) -> None:
        """Create if missing (idempotent); records the engine in the table properties."""

    def append(self, table: str, data: pa.Table, app_id: str, version: int) -> bool:
        """Append Arrow data from the driver in one commit carrying the application transaction
        (app_id, version). Returns False, writing nothing, when app_id already committed >= version.
        Creates the table from data.schema when missing."""

    def append_dataframe(self, table: str, df: DataFrame, app_id: str, version: int) -> bool:
        """Same contract for a Spark DataFrame (executors write files, one commit on the driver)."""

    def last_version(self, table: str, app_id: str) -> int | None:
        """The last version committed for app_id, or None."""

    def table_version(self, table: str) -> int | None:
        """The table's current Delta version, or None when the table does not exist."""

    def read(self, table: str, version: int | None = None) -> DataFrame:
        """The table (or one version of it) as a Spark DataFrame."""

    def read_arrow(self, table: str, version: int | None = None, columns: list[str] | None = None) -> pa.Table:
        """The table (or one version) as Arrow on the driver; for small tables and tests."""

    def add_columns(self, table: str, fields: list[pa.Field]) -> None:
        """Add nullable columns (schema evolution); old rows read them as null."""

    def maintain(self, table: str, retention_hours: float = 168) -> dict[str, Any]:
        """Compact small files and vacuum; returns figures for the JSON summary."""


def open_lake(config: LakeConfig, spark: SparkSession | None = None) -> LakeEngine:
    """The engine config asks for; ``auto`` means delta-spark when its JVM classes are present."""
    from queuelake.errors import LakeError

    engine = config.engine
    if engine == "auto":
        from queuelake.spark import has_delta_jvm

        engine = "delta-spark" if spark is not None and has_delta_jvm(spark) else "delta-rs"
    if engine == "delta-spark":
        if spark is None:
            raise LakeError("lake.engine delta-spark needs a Spark session")
        from queuelake.lake.jvm import DeltaSparkEngine

        return DeltaSparkEngine(config.root, spark)
    from queuelake.lake.rust import DeltaRsEngine

    return DeltaRsEngine(config.root, spark)

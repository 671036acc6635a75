"""What a replay selects: the journal rows its ``--where`` matches at one Delta version, as their small
key columns on the driver (in (queue, seq, id) order, each with its data file and row index), split
into the landed rows to plan (the first ``--limit``) and the others, which are skipped.

Why a module of its own: which rows go out is one question, how they go out (ledger, batches,
canary: ``replayer.py``) another. The selection is evaluated without Spark when the predicate allows
(``arrow_predicate``), else in Spark, started only then; which of the two depends on the predicate and
the journal's columns only, so a rerun of a replay selects the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from queuelake.errors import ReplayError
from queuelake.lake.port import JournalLake
from queuelake.pipeline.journal.schema import MESSAGES
from queuelake.pipeline.replay.arrow_predicate import arrow_predicate
from queuelake.pipeline.replay.arrow_selection import select_keys
from queuelake.pipeline.replay.plan import ReplayOptions
from queuelake.pipeline.replay.planned import Planned
from queuelake.pipeline.replay.predicate import validate_against
from queuelake.pipeline.replay.rows import EMPTY_KEYS, KEY_COLUMNS
from queuelake.report import log

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TIME_ZONE = "spark.sql.session.timeZone"


class Selection:
    """One replay run's selection; holds the Spark session once one was needed (or given)."""

    def __init__(
        self,
        journal: JournalLake,
        options: ReplayOptions,
        spark: SparkSession | None,
        start_spark: Callable[[], SparkSession] | None,
        time_zone: str,
    ) -> None:
        """``time_zone``: the configured one (``spark.conf``), used when no session is given."""
        self.journal = journal
        self.options = options
        self.spark = spark
        self.start_spark = start_spark  # when the predicate needs Spark and no session was given
        self.configured_time_zone = time_zone
        self.by = ""  # "arrow" or "spark", once selected
        self._files: list[str] | None = None

    def select(self, version: int) -> pa.Table:
        """The selection's small columns at journal version V, in (queue, seq, id) order, with each row's
        data file and row index, as Arrow on the driver: without Spark when the predicate allows
        (``arrow_predicate``), else in Spark."""
        schema = self.journal.schema(MESSAGES, version)
        predicate = arrow_predicate(self.options.predicate, schema, self.time_zone())
        if predicate is None:
            self.by = "spark"
            keys = self.select_in_spark(version)
        else:
            self.by = "arrow"
            keys, scan = select_keys(self.journal_files(version), schema, predicate)
            log.info(
                "replay: --where evaluated without Spark: %d of %d row group(s) in %d file(s) read, %d row(s); "
                "the others' statistics exclude it",
                scan.row_groups_read,
                scan.row_groups,
                scan.files,
                scan.rows_read,
            )
        # Sorted here, not by Spark: the keys are small, and a Spark sort costs a sampling job and a
        # shuffle of spark.sql.shuffle.partitions tasks. Arrow's sort is stable: rows equal in these
        # (a journal row twice) keep the files' order, the same in every run.
        return keys.sort_by([(c, "ascending") for c in ("queue", "seq", "id", "row_index")])

    def planned(self, keys: pa.Table, endpoint_queue: Callable[[str], str] | None = None) -> tuple[Planned, pa.Table]:
        """(the landed rows to plan, first --limit of them), and the other selected rows.
        ``endpoint_queue``: an endpoint's name as its input queue's address (``Planned.of``)."""
        landed_mask = pc.equal(keys.column("outcome"), "landed")
        if pc.all(landed_mask).as_py() in (True, None):  # a retry's selection, mostly: no copy
            landed, others = keys, keys.slice(0, 0)
        else:
            landed, others = keys.filter(landed_mask), keys.filter(pc.invert(landed_mask))
        if self.options.limit is not None:
            landed = landed.slice(0, self.options.limit)
        return Planned.of(landed, self.options.to, endpoint_queue), others

    def time_zone(self) -> str:
        """The time zone Spark reads a time without one in (the session's, else the configured one)."""
        if self.spark is not None:
            return str(self.spark.conf.get(TIME_ZONE, "UTC"))
        return self.configured_time_zone

    def session(self) -> SparkSession:
        """The Spark session, started if none was given (only when something needs it)."""
        if self.spark is None:
            if self.start_spark is None:
                raise ReplayError(f"--where {self.options.predicate!r} needs Spark, and no session was given")
            self.spark = self.start_spark()
        return self.spark

    def select_in_spark(self, version: int) -> pa.Table:
        from pyspark.sql import functions as F

        self.session()
        df = self.journal.read(MESSAGES, version)
        if not self.journal_files(version):  # an empty journal: no files, no _metadata
            validate_against(df, self.options.predicate)
            return EMPTY_KEYS.empty_table()
        selected = validate_against(df, self.options.predicate)
        failure = F.col("failed_queue").isNotNull() | F.col("exception_type").isNotNull()
        failure = failure | F.col("time_of_failure").isNotNull()
        audit = F.col("processing_started").isNotNull() | F.col("processing_ended").isNotNull()
        keys = selected.select(
            *KEY_COLUMNS,
            failure.alias("is_failure"),
            audit.alias("is_audit"),
            F.col("_metadata.file_path").alias("file"),
            F.col("_metadata.row_index").alias("row_index"),
        )
        arrow = keys.toArrow()
        file_at = arrow.schema.get_field_index("file")
        return arrow.set_column(file_at, "file", pc.dictionary_encode(arrow.column("file")))

    def journal_files(self, version: int) -> list[str]:
        """The journal's data files at ``version`` (read once per run)."""
        if self._files is None:
            # through the lake port: it knows the storage options of the root
            self._files = self.journal.added_files(MESSAGES, None, version)
        return self._files

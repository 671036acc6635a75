"""What the catalogue says of one lake table (``LakeTable``), and the Arrow types every table's
declaration uses.

Why apart: the tables are declared in ``record_tables.py`` and ``stage_tables.py`` and listed in
``catalogue.py``; each of those needs this type, and the listing needs the declarations, so the type
stands below them all.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

UTC_TS = pa.timestamp("us", tz="UTC")

# Tables with ``engine=DELTA_RS`` are delta-rs's under either ``lake.engine``. The journal
# (``messages``): the drain stages a batch's files before the queue's DB commit and commits exactly
# those files afterwards, maybe from another process; deltalake can commit files written earlier,
# delta-spark has no Python API for it (``delta_rs/staging.py``). The records of commands that may run without
# Spark (``runs``, ``replays``, ``replay_skipped``, ``replay_lineage``): drain, purge-expired and replay never start a
# session, and delta-rs is the engine every command has (a record table an older queuelake made with
# delta-spark stays delta-spark's: ``pipeline.runs.record_engine``). All stay plain Delta tables at
# protocol 1/2, which delta-spark, Databricks and every other engine read.
DELTA_RS = "delta-rs"


@dataclass(frozen=True)
class LakeTable:
    """One table (or, with ``{output}`` in its name, one table per publish output)."""

    name: str
    schema: pa.Schema | None  # None: the columns come from the user's transform
    written_by: str  # the command that appends to it
    about: str  # one line for the README and `describe`
    # The engine that creates and writes the table whatever ``lake.engine`` says (None: the lake's own,
    # ``engines.open_lake``). ``engines.table_engine`` reads it; see ``DELTA_RS`` for why a table has one.
    engine: str | None = None
    # Parquet dictionary encoding only for these columns (None: every column). Building a dictionary
    # for a column of unique values (ids, bodies) until Parquet gives up on it was a quarter of the
    # drain's file writing.
    dictionary_columns: tuple[str, ...] | None = None
    # Columns whose Parquet (row group) statistics are not written. The Delta log's file statistics
    # are what readers prune files with; min / max over maps, lists and long texts cost ~10% of the
    # drain's file writing and prune nothing a reader asks for.
    no_parquet_statistics: tuple[str, ...] = ()
    # Columns written without compression: GUIDs as text, which snappy shrinks by a tenth for a fifth
    # of the file's writing time (per 10,000 journal rows: 18.3 ms against 22.4, 4% larger files).
    uncompressed_columns: tuple[str, ...] = ()
    # A table whose rows are derived from journal rows names the columns that key them: ``("queue",
    # "seq")`` and a third holding the row's ``id`` (or, ``"key"``, any of its ids: ``erase.HELD_IN``),
    # since a re-created queue table starts its seqs again: ``queuelake erase`` removes its rows whose
    # key is an erased journal row's (``pipeline/store/erase.py``). Empty: not derived from journal rows
    # row by row. The one place a
    # new derived table declares how its rows are erased (the typed body tables, whose names come from
    # the message types, are found through ``body_schema_changes``: ``pipeline/store/typed.py``).
    erased_by_journal_key: tuple[str, ...] = ()
    # Rows per Parquet row group when ``maintain`` rewrites the table's files (None: the engine's own,
    # a million rows). The journal keeps the drain's 10,000: ``queuelake find`` reads a row group that
    # holds a match whole, and a compacted file of 300,000 rows in one group made a lookup 3-4 times
    # slower than on the drain's files (bench/find.py, README "Find").
    row_group_rows: int | None = None

    @property
    def per_output(self) -> bool:
        return "{output}" in self.name

    def name_for(self, output: str) -> str:
        if not self.per_output:
            raise ValueError(f"{self.name} is not a per-output table")
        return self.name.format(output=output)

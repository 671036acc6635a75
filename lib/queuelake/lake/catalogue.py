"""The table catalogue: every lake table queuelake writes, declared once with its schema, the command
that writes it and, where it is not the lake's own, the engine (``engine``, read by ``engines.py``).

Why: names and schemas used to live where each table was first written (the journal builder,
publish, replay, the quality module) and were spelt again by notebooks, the demo and tests. A new
table is one declaration, in ``record_tables.py`` (the journal and the commands' records, delta-rs's)
or ``stage_tables.py`` (what the stages make from the journal), and its line in ``CATALOGUE`` here;
pipelines, notebooks and tests take the name and schema from the declaration, and docs/lake.md is
checked against this list (``tests/pipeline/test_runs.py``). ``table_entry.py`` holds what an entry
says; this module lists the entries and answers what the writers ask of a table by name.

Per-output tables (``<output>_rejected``) are templates: ``REJECTED.name_for("outbound_x")``.
"""

from __future__ import annotations

from queuelake.lake.record_tables import MESSAGE_KEYS, MESSAGES, REPLAY_LINEAGE, REPLAY_SKIPPED, REPLAYS, RUNS
from queuelake.lake.stage_tables import (
    BODY,
    BODY_INCREMENTS,
    BODY_SCHEMA_CHANGES,
    BODY_UNPARSED,
    ENDPOINT_DAILY,
    ENDPOINT_HEALTH,
    EXPECTATION_RESULTS,
    OUTBOUND,
    REJECTED,
    UNDELIVERABLE,
)
from queuelake.lake.table_entry import LakeTable

CATALOGUE: tuple[LakeTable, ...] = (
    MESSAGES,
    RUNS,
    REPLAYS,
    REPLAY_SKIPPED,
    REPLAY_LINEAGE,
    MESSAGE_KEYS,
    OUTBOUND,
    REJECTED,
    UNDELIVERABLE,
    EXPECTATION_RESULTS,
    BODY,
    BODY_UNPARSED,
    BODY_SCHEMA_CHANGES,
    BODY_INCREMENTS,
    ENDPOINT_HEALTH,
    ENDPOINT_DAILY,
)


def by_name(name: str) -> LakeTable:
    """The catalogue entry of a fixed-name table."""
    for table in CATALOGUE:
        if table.name == name:
            return table
    raise KeyError(f"no lake table {name!r} in the catalogue")


def engine_for(name: str) -> str | None:
    """The engine the catalogue fixes for a table (None: the lake's own, also for tables not catalogued)."""
    for table in CATALOGUE:
        if table.name == name:
            return table.engine
    return None


def statistics_columns(name: str) -> list[str] | None:
    """The columns a table's files write Parquet statistics for (None: all, also for tables not catalogued)."""
    for table in CATALOGUE:
        if table.name == name and table.schema is not None and table.no_parquet_statistics:
            return [f.name for f in table.schema if f.name not in table.no_parquet_statistics]
    return None


def uncompressed_columns(name: str) -> tuple[str, ...]:
    """The columns a table's files leave uncompressed (none for tables not catalogued)."""
    for table in CATALOGUE:
        if table.name == name:
            return table.uncompressed_columns
    return ()


def row_group_rows(name: str) -> int | None:
    """Rows per row group of the files ``maintain`` rewrites (None: the engine's default)."""
    for table in CATALOGUE:
        if table.name == name:
            return table.row_group_rows
    return None


def dictionary_columns(name: str) -> tuple[str, ...] | None:
    """The columns a table's files dictionary-encode (None: all, also for tables not catalogued)."""
    for table in CATALOGUE:
        if table.name == name:
            return table.dictionary_columns
    return None

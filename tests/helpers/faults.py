"""Failures a test puts into the lake's writes: statistics that fail on one value (a row that builds but cannot
be written), and storage that is down (every write under the lake fails)."""

from __future__ import annotations

from pathlib import Path

import pytest


def stats_fail_on(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """The file statistics fail on a column holding ``value``, as they did on a time in the last
    millisecond of 9999: a row that builds but cannot be written."""
    from queuelake.lake import file_stats

    update = file_stats.ColumnStats.update

    def fails_on_value(self: file_stats.ColumnStats, column: object) -> None:
        if value in getattr(column, "to_pylist", list)():
            raise OverflowError("date value out of range")
        update(self, column)  # type: ignore[arg-type]

    monkeypatch.setattr(file_stats.ColumnStats, "update", fails_on_value)


def storage_down(monkeypatch: pytest.MonkeyPatch, lake: Path) -> None:
    """Every write to the lake's storage under ``lake`` fails, while the same rows write fine
    elsewhere (the local scratch folder ``check_stageable`` uses)."""
    from queuelake.lake.delta_rs import engine as rust

    stage_into = rust.DeltaRsEngine._stage_into

    def down(self: rust.DeltaRsEngine, table: str, data: object, folder: str, options: object) -> object:
        if folder.startswith(str(lake)) or folder.startswith("file://"):
            raise OSError("No space left on device")
        return stage_into(self, table, data, folder, options)  # type: ignore[arg-type]

    monkeypatch.setattr(rust.DeltaRsEngine, "_stage_into", down)

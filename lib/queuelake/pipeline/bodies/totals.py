"""What the slices of one ``bodies`` run did, summed per table for its summary and ``runs`` rows.

Why its own module: a run takes the journal a slice at a time (``spark.slice_rows``); each slice reports
per table, and the operator reads one line per table for the whole run.
"""

from __future__ import annotations

from typing import Any

from queuelake.status import Status


class Totals:
    """What the slices of one run did, summed per table for the summary."""

    def __init__(self) -> None:
        self.rows_read = self.written = self.unparsed = self.slices = 0
        self.failed = False
        self.upto: int | None = None  # the last slice committed
        self._tables: dict[str, dict[str, Any]] = {}

    def add(self, part: dict[str, Any]) -> None:
        self.slices += 1
        self.rows_read += part["rows_read"]
        self.written += part["rows_written"]
        self.unparsed += part["unparsed"]
        self.failed = self.failed or part["failed"]
        if not part["failed"]:
            self.upto = part["upto"]
        for result in part["results"]:
            table = self._tables.setdefault(result["table"], {})
            for key, value in result.items():
                if key in ("rows_in", "rows_out", "unparsed", "seconds") and isinstance(value, (int, float)):
                    table[key] = round(table.get(key, 0) + value, 3)
                elif key == "status":
                    table[key] = value if table.get(key, Status.OK) == Status.OK else table[key]
                else:
                    table.setdefault(key, value)

    def tables(self) -> list[dict[str, Any]]:
        return list(self._tables.values())

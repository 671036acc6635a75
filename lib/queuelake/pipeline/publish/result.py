"""One output's publish result: rows, copies, batches, what was rejected or undeliverable, status."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from queuelake.pipeline.runs import PartResult


@dataclass
class OutputResult(PartResult):
    output: str
    rows: int = 0
    rejected: int = 0
    unchanged: int = 0  # rows a rewrite of the table carried over unchanged: sent before, not again
    published: int = 0
    copies: int = 0
    batches: int = 0
    batches_skipped: int = 0
    undeliverable: int = 0
    bad_destinations: list[str] = field(default_factory=list)
    failed_batches: list[str] = field(default_factory=list)
    round: str | None = None
    expectations: int = 0  # user expectations evaluated on the round (0: none configured)
    failed_expectations: list[dict[str, Any]] = field(default_factory=list)  # GX's details, when blocked
    seconds: float = 0.0

    def runs_rows(self) -> list[dict[str, Any]]:
        """One row per output (in the ``table`` column): rows published, copies sent (``fanned_out``),
        copies not deliverable, rows rejected, batches, and the failed expectations (JSON, GX's
        details) of a blocked round."""
        failed = orjson.dumps(self.failed_expectations).decode() if self.failed_expectations else None
        return [
            {
                "table": self.output,
                "published": self.published,
                "fanned_out": self.copies,
                "undeliverable": self.undeliverable,
                "rejected": self.rejected,
                "batches": self.batches,
                "seconds": self.seconds,
                "rate": round(self.published / self.seconds, 1) if self.seconds else 0.0,
                "status": self.status,
                "error": self.error,
                "failed_expectations": failed,
            }
        ]
